"""Lesson 2's explorer: knobs that start exactly on the lesson's values, readable readouts, no false
winner, and a run button that really runs the shown configuration and draws it over the simulation."""
import json
import pathlib
import re

import matplotlib
import pytest

matplotlib.use("Agg")

from simlab.parity.data_parallel import run_dp_and_ddp  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.chart import Chart  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.controls import Panel  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.data_parallel import BANDWIDTH_GBPS, BUCKET_CAP_MB, MODEL_MPARAMS, dp_ddp_explorer, explorer_frame  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.data_parallel_timeline import ddp_title, dp_title  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.style import fmt, time_unit  # noqa: E402 — after matplotlib.use("Agg")
from simlab.sim.data_parallel import (  # noqa: E402 — after matplotlib.use("Agg")
    compare,
    scaled_workload,
    simulate_ddp,
    simulate_dp,
    workload_from_layers,
)

NOTEBOOK = pathlib.Path(__file__).parents[2] / "notebooks/02_data_parallel.ipynb"


def test_every_knob_starts_on_its_grid_at_the_lessons_default_scene():
    panel = dp_ddp_explorer()
    assert isinstance(panel, Panel) and repr(panel) == "▶ run this cell to get the DP vs DDP explorer"
    knobs = panel.knobs
    for name, grid in (("model_mparams", MODEL_MPARAMS), ("bucket_cap_mb", BUCKET_CAP_MB),
                       ("bandwidth_gbps", BANDWIDTH_GBPS)):
        slider = knobs[name]
        # a SelectionSlider cannot leave its options: the browser shows exactly this value
        assert slider.value in grid and slider.value == [v for _, v in slider.options][slider.index]
    assert knobs["world_size"].min <= knobs["world_size"].value <= knobs["world_size"].max
    scene = workload_from_layers()  # the lesson's default scene, printed in its first tables
    assert knobs["world_size"].value == scene.world_size
    assert knobs["bucket_cap_mb"].value == scene.bucket_cap_mb
    assert knobs["bandwidth_gbps"].value * 1e9 == scene.bandwidth
    assert [label for label, v in knobs["model_mparams"].options if v == knobs["model_mparams"].value] == ["14.7 M"]
    # the explorer shows the very step times the lesson printed, and its text says so
    c = compare(scene)
    assert fmt(c["dp_step_seconds"]) in panel.summary.value and fmt(c["ddp_step_seconds"]) in panel.summary.value
    prose = " ".join("".join(cell["source"]) for cell in json.loads(NOTEBOOK.read_text())["cells"])
    assert f"DP {fmt(c['dp_step_seconds'])}, DDP {fmt(c['ddp_step_seconds'])}" in " ".join(prose.split())


def test_a_start_off_the_grid_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"^model_mparams=14.7: must be one of"):
        dp_ddp_explorer(model_mparams=14.7)  # the browser would have moved it to its grid


def test_readout_is_a_table_that_does_not_wrap_and_a_tie_is_a_tie():
    panel = dp_ddp_explorer()
    html = panel.summary.value
    assert html.startswith("<table") and "white-space:nowrap" in html
    assert "_" not in re.sub(r"<[^>]+>", "", html)  # no raw key names such as ddp_hidden_seconds
    panel.knobs["world_size"].value = 1  # one device: nothing to exchange, equal steps
    assert "faster: tie" in panel.summary.value and "faster: DP" not in panel.summary.value
    assert "faster: DDP" in explorer_frame(4, MODEL_MPARAMS[4], 25.0, 10.0)[2]


def test_moving_a_knob_redraws_the_picture_and_the_simulated_trace_link():
    panel = dp_ddp_explorer()
    before, link = panel.picture.scene, panel.sim_link.children[0].value
    assert isinstance(panel.picture, Chart) and before["panels"]  # drawn in the browser from this scene
    assert "ddp_simulated.json" in link and "ui.perfetto.dev" in link
    panel.knobs["bucket_cap_mb"].value = 1000.0
    assert panel.picture.scene != before and panel.sim_link.children[0].value != link  # one bucket now


def assert_scene_is_the_engines(scene, w):
    """The two panels are the engine's two timelines: a bar per event where the trace puts it, device rows,
    the time axis as long as the slower step, the titles with the engine's numbers, the readout as alt."""
    dp, ddp = simulate_dp(w), simulate_ddp(w)
    span = max(dp.step_seconds, ddp.step_seconds)
    scale, _unit = time_unit(span)
    assert [p["title"] for p in scene["panels"]] == [dp_title(dp), ddp_title(ddp)]
    for p, result in zip(scene["panels"], (dp, ddp)):
        bars = [m for m in p["marks"] if m["kind"] == "rect"]
        events = sorted(result.trace, key=lambda e: (e.rank, e.start, e.end))
        assert len(bars) == len(events) and p["x"]["max"] == pytest.approx(span * scale)
        for bar, e in zip(bars, events):
            assert bar["x0"] == pytest.approx((e.start - min(x.start for x in events)) * scale)
            if e.end - e.start >= span * 0.002:  # shorter ones are drawn as a sliver
                assert bar["x1"] - bar["x0"] == pytest.approx((e.end - e.start) * scale)
            assert e.rank - 0.5 < bar["y0"] < bar["y1"] < e.rank + 0.5  # in its device's row
        assert len(p["y"]["ticks"]) == 2 * w.world_size and p["y"]["invert"]  # device 0 on top
    rows = compare(w)
    assert fmt(rows["dp_step_seconds"]) in scene["alt"] and fmt(rows["ddp_step_seconds"]) in scene["alt"]


@pytest.mark.parametrize("knob, value", [("world_size", 1), ("world_size", 7), ("model_mparams", MODEL_MPARAMS[0]),
                                         ("bucket_cap_mb", 1.0), ("bucket_cap_mb", 1000.0),
                                         ("bandwidth_gbps", 0.1), ("bandwidth_gbps", 300.0)])
def test_each_knob_changes_the_scene_as_the_engine_says(knob, value):
    panel = dp_ddp_explorer()
    before = panel.picture.scene
    panel.knobs[knob].value = value
    values = {name: k.value for name, k in panel.knobs.items()}
    w = scaled_workload(**values)
    assert panel.picture.scene != before and panel.picture.scene == explorer_frame(**values)[0]
    assert_scene_is_the_engines(panel.picture.scene, w)
    if knob == "bucket_cap_mb":  # the number of buckets the engine builds is the one the title gives
        n = len(simulate_ddp(w).buckets)
        assert f" in {n} bucket{'' if n == 1 else 's'}:" in panel.picture.scene["panels"][1]["title"]


def test_run_button_runs_the_shown_configuration_for_real_and_draws_it():
    calls = []

    def run(world_size, bucket_cap_mb, model_bytes):
        calls.append((world_size, bucket_cap_mb, model_bytes))
        return run_dp_and_ddp(world_size, bucket_cap_mb, model_bytes, steps=2)

    panel = dp_ddp_explorer(run=run)
    panel.knobs["world_size"].value = 2
    control = panel.run_control
    assert control.image.layout.display == "none"  # nothing drawn before a run
    result = control.run_now()
    assert control.error is None and calls == [(2, 25.0, workload_from_layers().model_bytes)]
    assert control.image.value and control.image.layout.display is None  # the sim-vs-real picture
    ddp = result["ddp"]
    text = control.readout.value
    assert f"{ddp['bytes_sent_per_rank'][0]:,}" in text and str(ddp["buckets"]) in text  # the real numbers
    assert "the simulator builds the same" in text and "parity:" in text and "measured" in text
    assert ddp["max_abs_diff_vs_reference"] <= 1e-5 and ddp["max_abs_diff_vs_torch"] <= 1e-5
    assert any("ddp_real_2ranks.json" in getattr(w, "value", "") for w in control.extra.children)
    panel.knobs["world_size"].value = 8  # more than this machine runs: one line, no traceback
    assert control.run_now() is None
    assert "real run failed: ValueError: world_size=8" in control.readout.value
    assert "Traceback" not in control.readout.value
