"""Lesson 5's widgets through their own API: the split explorer (a Panel with a hint, its picture a scene drawn
in the browser and redrawn by each knob as shard_plan lays the shards out, a Perfetto link of the simulated
trace, knobs whose defaults are the lesson's), its real-run control (run_tp_split on gloo: the real collectives,
bytes and errors land beside the simulated ones), the real split run itself against the simulator, the step
player (frames drawn once), and text ≥ 10 pt in every figure."""
import base64
import html
import json

import matplotlib
import pytest

matplotlib.use("Agg")

from simlab.parity.tensor_parallel import run_tp, run_tp_split  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.chart import Chart  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.player import FramePlayer  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.tensor_parallel import draw_mlp_shards, draw_split, draw_tp_steps  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.tensor_parallel_widgets import (  # noqa: E402 — after matplotlib.use("Agg")
    TP_SIZES,
    mlp_explorer,
    mlp_scene_of,
    mlp_split_frame,
    plan_steps,
    real_split_line,
    real_split_rows,
    step_frame,
    steps_player,
)
from simlab.sim.tensor_parallel import block_steps, shard_plan, split_linear  # noqa: E402 — after matplotlib.use("Agg")
from simlab.sim.tensor_parallel_choices import (  # noqa: E402 — after matplotlib.use("Agg")
    FFN,
    HIDDEN,
    mlp_inputs,
    split_error,
    split_trace,
    sync_rows,
)

CHOICES = [(a, b) for a in ("column", "row") for b in ("column", "row")]


def knobs(panel):
    (a, b), ranks = panel.children[0].children, panel.children[1]
    return a, b, ranks


def linked_trace(html_widget) -> list[dict]:
    data = html_widget.value.split("base64,")[1].split("'")[0]
    return json.loads(base64.b64decode(data))["traceEvents"]


def test_explorer_is_a_panel_with_the_lessons_defaults():
    panel = mlp_explorer()
    assert repr(panel) == "▶ run this cell to get the split explorer"
    a, b, ranks = knobs(panel)
    # the lesson's text works at TP size 4 with Megatron's split: the defaults are those, and on the knobs' options
    assert (a.value, b.value, ranks.value) == ("column", "row", 4) and ranks.value in ranks.options == TP_SIZES
    chart, text = panel.children[2:4]
    assert chart is panel.chart and isinstance(chart, Chart) and text is panel.readout
    assert chart.scene == mlp_scene_of("column", "row", 4, mlp_split_frame("column", "row", 4, figure=False)[1])
    assert chart.scene["width"] < 800 and repr(chart) == "▶ run this cell to get the split explorer"
    assert "white-space:pre" in text.value and "Megatron" in text.value
    assert chart.alt == html.unescape(text.value.split(">", 1)[1].rsplit("<", 1)[0])  # the readout, as its alt
    assert len(panel.children) == 5  # no run given: no button


@pytest.mark.parametrize("knob, value", [("a_split", "row"), ("b_split", "column"), ("ranks", 8), ("ranks", 1)])
def test_each_knob_redraws_the_shards_as_shard_plan_lays_them_out(knob, value):
    panel = mlp_explorer()
    panel.knobs[knob].value = value
    c = {k: w.value for k, w in panel.knobs.items()}
    summary = mlp_split_frame(**c, figure=False)[1]
    assert panel.chart.scene == mlp_scene_of(c["a_split"], c["b_split"], c["ranks"], summary)
    owners = {}  # matrix → rank → cells, read off the scene's tips
    for m in panel.chart.scene["marks"]:
        if m["kind"] == "rect":
            name, rank = m["tip"][0], int(m["tip"].rsplit(" ", 1)[1])
            owners.setdefault(name, {}).setdefault(rank, 0)
            owners[name][rank] += 1
    for name, kind, shape in (("A", c["a_split"], (HIDDEN, FFN)), ("B", c["b_split"], (FFN, HIDDEN))):
        plan = shard_plan(kind, c["ranks"], shape)
        assert owners[name] == {r: (r1 - r0) * (c1 - c0) for r, ((r0, r1), (c0, c1)) in
                                enumerate(zip(plan.rows, plan.cols))}
    assert summary.splitlines()[0] in html.unescape(panel.readout.value)


def test_explorer_links_the_simulated_trace_of_the_shown_choice():
    panel = mlp_explorer()
    knobs(panel)[0].value = "row"
    events = [e for e in linked_trace(panel.children[4].children[0]) if e["ph"] == "X"]
    want = split_trace("row", "row", 4)
    assert len(events) == len(want) and sum(e["args"]["bytes"] for e in events) == sum(e.nbytes for e in want)
    assert sum(e.nbytes for e in want) == 4 * sum(r["bytes/rank"] for r in sync_rows("row", "row", 4))


@pytest.mark.parametrize("a_split, b_split", CHOICES)
@pytest.mark.parametrize("world_size", [2, 4])
def test_real_split_run_equals_one_process_and_the_simulator(a_split, b_split, world_size):
    real = run_tp_split(a_split, b_split, world_size, timeout=60)
    assert real["collectives"] == real["plan_collectives"] and len(real["collectives"]) == len(
        sync_rows(a_split, b_split, world_size))
    assert real["bytes_sent_per_rank"] == real["plan_bytes_sent_per_rank"] == [
        sum(r["bytes/rank"] for r in sync_rows(a_split, b_split, world_size))] * world_size
    assert real["max_abs_diff_vs_reference"] < 1e-4 and real["max_abs_diff_vs_simulation"] < 1e-4  # fp32
    sim = split_error(a_split, b_split, world_size, *mlp_inputs())
    assert abs(real["shortcut_error"] - sim) < 1e-4 and (sim > 0.1) == (a_split == "row")
    assert len(real["shortcut_collectives"]) == len(real["collectives"]) - (a_split == "row")


@pytest.mark.parametrize("bad, message", [(dict(a_split="diag"), "a_split="), (dict(world_size=3), "world_size=3"),
                                          (dict(world_size=0), "world_size=0")])
def test_real_split_run_refuses_bad_input_in_one_line(bad, message):
    with pytest.raises(ValueError, match=message):
        run_tp_split(**{"a_split": "column", "b_split": "row", "world_size": 2} | bad)


def test_run_control_overlays_the_real_run_on_the_simulation():
    panel = mlp_explorer(run=run_tp_split)
    a, b, ranks = knobs(panel)
    a.value, b.value, ranks.value = "row", "row", 2
    control = panel.children[-1]
    assert control.image.layout.display == "none" and control.readout.value == ""  # nothing until it runs
    real = control.run_now()
    assert control.error is None and real["world_size"] == 2 and (real["a_split"], real["b_split"]) == ("row", "row")
    assert control.image.value[:4] == b"\x89PNG" and control.image.layout.display is None
    readout = control.readout.value
    for row in real_split_rows(real):
        assert row["real run"] in readout.replace("&lt;", "<") and row["simulated"] in readout.replace("&lt;", "<")
    assert f"{real['shortcut_error']:.3g}" in readout and f"{real['bytes_sent_per_rank'][0]:,}" in readout
    assert "before GeLU reduce-scatter, after B all-reduce" in readout
    real_events = [e for e in linked_trace(control.extra.children[0]) if e["ph"] == "X"]
    assert len(real_events) == len(real["trace"]) == 2 * 2  # two collectives on each of 2 ranks
    b.value = "column"  # another choice: the old result must not stay on screen as if it were this one's
    assert control.readout.value == "" and control.image.layout.display == "none" and not control.extra.children


def test_run_control_shows_a_failure_in_one_line():
    def broken(**_):
        raise RuntimeError("gloo went away\nTraceback (most recent call last): …")
    control = mlp_explorer(run=broken).children[-1]
    assert control.run_now() is None
    assert "real run failed: RuntimeError: gloo went away" in control.readout.value
    assert "Traceback" not in control.readout.value


def test_step_player_frames_are_drawn_once_with_captions():
    real = run_tp(2, "mlp", compare_torch=False)
    steps = plan_steps(real)
    player = steps_player(steps, real)
    assert isinstance(player, FramePlayer) and repr(player) == "▶ run this cell to get the step player"
    assert player.count == len(player.frames) == len(player.captions) == len(steps) and player.value == 0
    for k in range(len(steps)):
        assert html.escape(step_frame(k, steps, real).splitlines()[0]) in player.captions[k]
    player.value = 99  # clamped to the last frame
    assert player.value == len(steps) - 1 and "real run: backward all-reduce ×1" in player.captions[-1]


def test_no_one_ranks_or_one_processes():
    assert "on 1 rank " in mlp_split_frame("column", "row", 1, figure=False)[1]
    assert "1 collective," in mlp_split_frame("column", "row", 1, figure=False)[1]
    assert "1 rank:" in draw_split(split_linear("row", 1, [[1, 2]], [[1], [2]])).axes[0].get_title()
    assert "on 1 rank" in draw_mlp_shards("column", "row", 1, 8, 32).axes[0].get_title()
    assert real_split_line(run_tp_split("column", "row", 1)).startswith("real run, 1 process: 1 collective (")
    assert real_split_line(run_tp_split("column", "column", 2)).startswith("real run, 2 processes: 2 collectives (")


def all_texts(fig):
    for ax in fig.axes:
        yield from ax.texts
        yield ax.title
        if ax.get_legend():
            yield from ax.get_legend().get_texts()
    yield from fig.texts


@pytest.mark.parametrize("make", [
    lambda: draw_split(split_linear("column", 4, [[1] * 8] * 2, [[1] * 12] * 8)),
    lambda: draw_split(split_linear("row", 4, [[1] * 8] * 2, [[1] * 12] * 8)),
    lambda: draw_mlp_shards("row", "column", 8, 8, 32, footer="real run, 8 processes"),
    lambda: mlp_split_frame("column", "row", 4)[0],
    lambda: draw_tp_steps(block_steps("mlp", 4, 8, 8, 16), current=3),
])
def test_figure_text_is_at_least_10_points(make):
    fig = make()
    sizes = [t.get_fontsize() for t in all_texts(fig) if t.get_text()]
    assert sizes and min(sizes) >= 10
