"""Lesson 6's explorer and real-run views: the frame is the advisor's answer and its pictures (drawn in the
browser from scenes), each knob redraws them as the advisor answers the new question, the button runs the
scaled-down winner, and the run's text marks exactly what agrees."""
import ipywidgets as w
import matplotlib
import pytest

matplotlib.use("Agg")

from simlab.render import hybrid_widgets as HW  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.chart import Chart  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.hybrid_advisor import advisor_text  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.hybrid_run import TOLERANCE, draw_predicted_vs_real, run_text, time_text  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.hybrid_scene import GANTT_ACTIONS, SHOWN, strategy_scenes  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.hybrid_widgets import scaled_down, strategy_explorer, strategy_frame  # noqa: E402 — after matplotlib.use("Agg")
from simlab.sim.advisor import family, search  # noqa: E402 — after matplotlib.use("Agg")
from simlab.sim.hardware import cluster  # noqa: E402 — after matplotlib.use("Agg")
from simlab.sim.hybrid_scenarios import BY_KEY, SCENARIOS  # noqa: E402 — after matplotlib.use("Agg")
from simlab.sim.model import PRESETS  # noqa: E402 — after matplotlib.use("Agg")
from simlab.trace import Event, Trace  # noqa: E402 — after matplotlib.use("Agg")


def children(widget):
    out = [widget]
    for child in getattr(widget, "children", ()):
        out += children(child)
    return out


@pytest.mark.parametrize("s", SCENARIOS, ids=lambda s: s.key)
def test_a_scenarios_frame_is_the_primer_then_the_advisors_answer(s):
    _, text = strategy_frame(s.key, figure=False)
    result = search(s.model, s.cluster(), s.global_batch, top=5)
    assert text.splitlines()[:3] == [s.title(), f"primer ({s.where}): {s.primer}", f"  {s.english}"]
    assert text.split("\n", 3)[3] == advisor_text(result, top=5)


def test_the_figure_sets_the_winner_beside_the_scenarios_rivals_and_draws_its_pipeline():
    s = BY_KEY["nodes-slow"]
    fig, _ = strategy_frame(s.key)
    memory, time, gantt = fig.axes[:3]
    best = family(search(s.model, s.cluster(), s.global_batch)["best"]["config"])
    labels = [t.get_text() for t in memory.get_xticklabels()]
    assert labels == [f"best: {best}", *s.rivals][:SHOWN]
    assert [t.get_text().split("\n")[0] for t in time.get_yticklabels()] == labels
    assert gantt.get_title(loc="left").startswith("the best plan's pipeline: 1f1b, p=16")
    assert f"first {GANTT_ACTIONS} of" in gantt.get_title(loc="left")  # 16 × 192 × 2 actions: a window


def test_a_learners_own_question_uses_its_knobs():
    fig, text = strategy_frame(model="llama2-70b", gpus=64, gpus_per_node=8, inter_node_gbps=100, global_batch=512,
                               layers=40)
    model = PRESETS["llama2-70b"].with_(layers=40)
    c = cluster("a100-80gb", gpus=64, gpus_per_node=8, inter_node_gbps=100)
    assert text.splitlines()[0].startswith(f"{model.name} ({model.params / 1e9:.3g}B parameters) on 64 × a100-80gb")
    assert text.split("\n", 1)[1] == advisor_text(search(model, c, 512, top=5), top=5)
    assert len(fig.axes) >= 3


def test_no_pipeline_and_nothing_fits_are_said():
    fig, _ = strategy_frame("node-fits")
    assert len(fig.axes) == 2 and fig.get_suptitle() == "no pipeline in the best plan (pp = 1)"
    fig, text = strategy_frame(model="megatron-1t", gpus=8, global_batch=8)
    assert "no plan fits" in text and fig.get_suptitle() == "nothing fits"
    assert all(t.get_text().endswith("(does not fit)") for t in fig.axes[0].get_xticklabels())  # the rivals, all red


@pytest.mark.parametrize("kwargs, message", [(dict(scenario="moon"), "scenario="), (dict(model="gpt-5"), "model="),
                                             (dict(gpus=0), "gpus="), (dict(gpus_per_node=0), "gpus_per_node="),
                                             (dict(inter_node_gbps=float("nan")), "inter_node_gbps="),
                                             (dict(layers=-1), "layers="), (dict(global_batch=0), "global_batch=")])
def test_bad_knobs_are_one_line(kwargs, message):
    with pytest.raises(ValueError, match=message):
        strategy_frame(**kwargs, figure=False)


@pytest.mark.parametrize("config, small", [
    ({"tp": 8, "pp": 16, "dp": 8, "zero": 1, "schedule": "1f1b", "chunks": 1},
     {"dp": 2, "pp": 2, "tp": 2, "zero": 1, "schedule": "1f1b", "chunks": 1}),
    ({"tp": 1, "pp": 1, "dp": 8, "zero": 3, "schedule": "1f1b", "chunks": 1},
     {"dp": 2, "pp": 1, "tp": 1, "zero": 1, "schedule": "1f1b", "chunks": 1}),
    ({"tp": 4, "pp": 8, "dp": 1, "zero": 0, "schedule": "gpipe", "chunks": 1},
     {"dp": 1, "pp": 2, "tp": 2, "zero": 0, "schedule": "1f1b", "chunks": 1}),
    ({"tp": 1, "pp": 4, "dp": 2, "zero": 2, "schedule": "interleaved", "chunks": 4},
     {"dp": 2, "pp": 2, "tp": 1, "zero": 1, "schedule": "interleaved", "chunks": 2})])
def test_scaled_down_keeps_the_plans_shape_on_at_most_8_processes(config, small):
    assert scaled_down(config) == small


def test_the_explorer_reacts_to_a_scenario_and_runs_the_winner_scaled_down():
    calls = []

    def fake_run(dp, pp, tp, **kw):
        calls.append((dp, pp, tp, kw))
        return FAKE

    ui = strategy_explorer("node-fits", run=fake_run, predict=lambda r: FAKE["trace"])
    assert repr(ui).startswith("▶ run this cell to get the strategy explorer")  # what a saved notebook shows
    assert "<table" in ui.verdict.value and ("DDP" in ui.verdict.value or "DP+ZeRO" in ui.verdict.value)
    charts = ui.charts
    assert all(isinstance(c, Chart) for c in charts.values()) and charts["memory"].scene["marks"]
    assert [c.layout.display for c in charts.values()] == [None, None, "none"]  # no pipeline: no Gantt chart …
    assert "no pipeline in the best plan (pp = 1)" in ui.note.value  # … and the line that says so
    assert "scaled down for this machine: dp=2 × pp=1 × tp=1 = 2 processes" in ui.small.value
    ui.scenario.value = "nodes-slow"
    assert ui.knobs["gpus"].value == 1024 and ui.knobs["inter_node_gbps"].value == 25.0
    assert "TP+PP+DP+ZeRO-1" in ui.verdict.value
    assert charts["gantt"].layout.display is None and ui.note.value == ""
    assert charts["gantt"].scene["title"].startswith("the best plan's pipeline: 1f1b, p=16")
    assert "dp=2 × pp=2 × tp=2 = 8 processes, 1f1b, ZeRO-1" in ui.small.value
    control = ui.run_control
    assert control.image.layout.display == "none"  # nothing drawn before a run
    control.run_now()  # what a click does
    assert calls == [(2, 2, 2, {"zero": 1, "schedule": "1f1b", "chunks": 1})]
    assert "dp=2 × pp=2 × tp=2" in control.readout.value and "step time: predicted" in control.readout.value
    assert control.image.value and control.image.layout.display is None  # the timelines were drawn
    assert "hybrid_run.json" in control.extra.children[0].value  # the real trace, for Perfetto


@pytest.mark.slow
@pytest.mark.parametrize("s", SCENARIOS, ids=lambda s: s.key)
def test_every_scenario_puts_the_sliders_on_their_grids(s):
    ui = strategy_explorer(s.key)
    for name in ("gpus", "gpus_per_node", "inter_node_gbps"):
        slider = ui.knobs[name]
        assert isinstance(slider, w.SelectionSlider) and slider.value in [v for _, v in slider.options], name
    assert ui.knobs["gpus"].value == s.gpus and ui.knobs["model"].value == s.model.name


def test_a_value_off_the_grid_is_refused_in_one_line():
    from simlab.render.hybrid_widgets import _slider
    with pytest.raises(ValueError, match=r"^gpus=3: must be one of 1, 2, 4"):
        _slider("gpus", (1, 2, 4), 3, "GPUs", str)
    with pytest.raises(ValueError, match="scenario="):
        strategy_explorer("moon")


def test_a_failing_run_is_one_line_in_the_explorer():
    def broken(*a, **k):
        raise RuntimeError("rank 3 failed: ZeroDivisionError: division by zero\nTraceback …")

    ui = strategy_explorer("nodes-slow", run=broken)
    ui.run_control.run_now()
    assert "real run failed: RuntimeError: rank 3 failed: ZeroDivisionError: division by zero" in \
        ui.run_control.readout.value
    assert "Traceback" not in ui.run_control.readout.value and ui.run_control.error is not None


def test_a_bad_knob_in_the_explorer_is_said_not_raised():
    ui = strategy_explorer("node-fits")
    before = {name: c.scene for name, c in ui.charts.items()}
    ui.knobs["heads"].value = 7  # hidden 2304 is not 7 heads' worth
    text = ui.verdict.value
    assert "hidden=2304" in text and "heads=7" in text and text.count("<pre") == 1 and "\n" not in text
    assert {name: c.scene for name, c in ui.charts.items()} == before  # the last picture stays


def engine_answer(ui) -> tuple[dict, dict]:
    """What the advisor says for the explorer's knobs as they are: (its result, the scenes of that answer)."""
    values = {k: knob.value for k, knob in ui.knobs.items()}
    q = HW._question(None, **{k: v for k, v in values.items() if k not in ("layers", "hidden", "heads")},
                     sizes={k: values[k] for k in ("layers", "hidden", "heads")})
    result = search(q.model, q.cluster(), q.global_batch, top=5)
    return result, strategy_scenes(q, q.cluster(), result)


@pytest.mark.parametrize("knob, value", [("gpus", 2048), ("gpus_per_node", 4), ("inter_node_gbps", 400.0),
                                         ("gpu", "h100-80gb"), ("model", "llama2-70b"), ("global_batch", 3072),
                                         ("layers", 48)])
def test_each_knob_redraws_the_advisors_answer_for_the_new_question(knob, value):
    ui = strategy_explorer("nodes-slow")
    before = {name: c.scene for name, c in ui.charts.items()}
    ui.knobs[knob].value = value
    result, scenes = engine_answer(ui)
    assert {name: ui.charts[name].scene for name in ("memory", "time")} == {"memory": scenes["memory"],
                                                                             "time": scenes["time"]}
    if scenes["gantt"] is not None:
        assert ui.charts["gantt"].scene == scenes["gantt"] and ui.charts["gantt"].layout.display is None
    else:
        assert ui.charts["gantt"].layout.display == "none" and scenes["note"] in ui.note.value
    assert {name: c.scene for name, c in ui.charts.items()} != before  # the question changed, so did the picture
    rows = HW.explorer_rows(result)
    assert all(f">{row['s/step']}<" in ui.verdict.value for row in rows)  # the table is the advisor's top plans


def test_going_back_to_a_setting_answers_from_memory_without_searching_again(monkeypatch):
    ui = strategy_explorer("nodes-slow")
    ui.knobs["gpus"].value = 512
    calls, real = [], HW.search
    monkeypatch.setattr(HW, "search", lambda *a, **k: calls.append(a) or real(*a, **k))
    shown = ui.charts["memory"].scene
    ui.knobs["gpus"].value = 1024
    ui.knobs["gpus"].value = 512
    assert calls == [] and ui.charts["memory"].scene == shown  # both answered before: the same scenes, no search
    ui.knobs["gpus"].value = 256
    assert len(calls) == 1


def test_the_explorer_without_a_run_has_no_button():
    ui = strategy_explorer("node-fits")
    assert ui.run_control is None and not [c for c in children(ui) if isinstance(c, w.Button)]


# ---- the real run's text --------------------------------------------------------------------------------

FAKE = {"config": {"tp": 2, "pp": 2, "dp": 2, "zero": 1, "schedule": "1f1b", "chunks": 1, "microbatch": 2},
        "world_size": 8, "backend": "gloo",
        "groups": {"tp": [[0, 1], [2, 3], [4, 5], [6, 7]], "dp": [[0, 2], [1, 3], [4, 6], [5, 7]],
                   "pp": [[0, 4], [1, 5], [2, 6], [3, 7]]},
        "losses": [3.58371, 3.3378], "reference_losses": [3.58372, 3.3378], "max_abs_diff_vs_reference": 2e-7,
        "bytes_sent_per_group": {"tp": [10] * 8, "dp": [20] * 8, "pp": [30] * 8},
        "predicted_bytes_per_group": {"tp": [10] * 8, "dp": [20] * 8, "pp": [30] * 8},
        "measured_memory_per_rank": [{"params": 4, "grads": 4, "optimizer": 4}] * 8,
        "predicted_memory_per_rank": [{"params": 4, "grads": 4, "optimizer": 4}] * 8,
        "predicted_step_seconds": 0.1, "measured_step_seconds": 0.125,
        "trace": Trace([Event(r, "compute", 0, name=f"{r // 4}F0", start=0.0, end=1.0) for r in range(8)])}


def test_run_text_marks_what_agrees_and_only_that():
    lines = run_text(FAKE).splitlines()
    assert lines[0] == "dp=2 × pp=2 × tp=2 = 8 processes (gloo), 1F1B, ZeRO-1 on"
    assert lines[1:4] == ["  tp groups: [0 1] [2 3] [4 5] [6 7]", "  dp groups: [0 2] [1 3] [4 6] [5 7]",
                          "  pp groups: [0 4] [1 5] [2 6] [3 7]"]
    assert lines[4] == "loss per step, mean over replicas: 3.5837, 3.3378   one process: 3.5837, 3.3378"
    assert lines[5].endswith(f"within {TOLERANCE:g} of one process: ✓")
    assert sum(line.endswith("✓") for line in lines) == 1 + 8 + 8
    off = FAKE | {"max_abs_diff_vs_reference": 2e-5,
                  "bytes_sent_per_group": FAKE["bytes_sent_per_group"] | {"pp": [30] * 7 + [31]},
                  "predicted_memory_per_rank": [{"params": 4, "grads": 4, "optimizer": 2}] + [
                      {"params": 4, "grads": 4, "optimizer": 4}] * 7}
    bad = [line for line in run_text(off).splitlines() if line.endswith("✗")]
    assert len(bad) == 3 and bad[1].startswith("7 ") and bad[2].startswith("0 ")


def test_time_text_and_the_timelines():
    assert time_text(FAKE) == ("step time: predicted 100.0 ms, measured 125.0 ms (median of the steps after the "
                               "first), predicted / measured = 0.80")
    parts = FAKE | {"predicted_breakdown": {"compute": 0.06, "tp_comm": 0.03, "pp_bubble": 0.01, "offload": 0.0}}
    assert time_text(parts).splitlines()[1] == "predicted: compute 60.0 ms, tp_comm 30.0 ms, pp_bubble 10.0 ms"
    fig = draw_predicted_vs_real(FAKE["trace"], FAKE)
    assert len(fig.axes) == 2 and fig.axes[0].get_title(loc="left").startswith("predicted")
