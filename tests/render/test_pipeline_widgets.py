"""Lesson 4's explorer, built through its own API: knobs on their grids at the lesson's values, one
simulation and one scene per change (each knob redraws the chart the engine simulates, with no matplotlib),
a timeline player over that chart that plays in the browser in about ten seconds, readouts as tables,
trace links, and a real-run control that really runs (gloo, CPU) and shows what it measured."""
import base64
import json
import re

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

from matplotlib.font_manager import FontProperties  # noqa: E402 — after matplotlib.use("Agg")
from matplotlib.textpath import TextPath  # noqa: E402 — after matplotlib.use("Agg")

from simlab.exec.launch import LaunchTimeout  # noqa: E402 — after matplotlib.use("Agg")
from simlab.parity.pipeline import run_pipeline  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render import pipeline_widgets as PW  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.pipeline import draw_gantt, draw_gantt_sim_vs_real  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.pipeline_scene import GanttTimeline, gantt_scene, time_scale  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.style import MIN_FONT  # noqa: E402 — after matplotlib.use("Agg")
from simlab.sim.pipeline import explore, makespan, simulate  # noqa: E402 — after matplotlib.use("Agg")
from simlab.sim.pipeline_schedules import make_schedule  # noqa: E402 — after matplotlib.use("Agg")

LESSON = dict(name="1f1b", stages=4, microbatches=8, chunks=2, ratio=2.0)  # section 7's call


@pytest.fixture(scope="module")
def explorer():
    return PW.schedule_explorer(**LESSON)


def test_a_saved_notebook_shows_a_hint_not_the_widget_tree(explorer):
    assert repr(explorer) == "▶ run this cell to get the schedule explorer"
    assert repr(explorer.player) == "▶ run this cell to get the timeline player"


def test_every_knob_starts_on_its_grid_at_the_lessons_value(explorer):
    k = explorer.knobs
    assert (k["name"].value, k["stages"].value, k["microbatches"].value, k["chunks"].value, k["ratio"].value) == \
        ("1f1b", 4, 8, 2, 2.0)
    assert k["ratio"].value in [v for _, v in k["ratio"].options] and k["ratio"].label == "2"
    for key in ("stages", "microbatches", "chunks"):  # IntSliders: step 1, so on grid iff within range
        assert k[key].min <= k[key].value <= k[key].max and k[key].step == 1


@pytest.mark.parametrize("kwargs, message", [
    (dict(ratio=2.2), "ratio=2.2: must be one of 0.5, 1, 1.5, 2, 2.5, 3, 4"),
    (dict(stages=9), "stages=9: must be between 1 and 8"),
    (dict(microbatches=0), "microbatches=0: must be between 1 and 32"),
    (dict(name="2f2b"), "name='2f2b'"),
])
def test_a_knob_off_its_grid_is_refused_in_one_line(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        PW.schedule_explorer(**(LESSON | kwargs))


def test_the_readout_is_a_table_of_the_engines_numbers(explorer):
    html = explorer.readout.value
    assert html.startswith("<table") and "bubble (idle / total)" in html and "ratio (idle / ideal)" in html
    readout = explore("1f1b", 4, 8, 2, 2.0)[2]
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", html)
    assert cells[:8] == ["1f1b", "4", "8", "1", "33", "0.2727", "0.375", "[4, 3, 2, 1]"]
    assert float(cells[5]) == pytest.approx(readout["bubble_fraction"], abs=5e-5)  # (p-1)/(m+p-1) = 3/11
    assert float(cells[6]) == pytest.approx(readout["bubble_ratio"], abs=5e-4)  # (p-1)/m = 3/8


def test_the_player_reveals_one_chart_and_plays_in_about_ten_seconds(explorer):
    player = explorer.player
    assert isinstance(player, GanttTimeline)  # one scene, greyed out in the browser tick by tick
    times, captions = PW.timeline_ticks(simulate(make_schedule("1f1b", 4, 8)))
    assert player.count == len(times) and player.value == player.count - 1  # starts on the whole chart
    assert player.reveal == pytest.approx(times)  # model time: one data unit per time unit
    assert (player.count - 1) * player.interval_ms / 1000 == pytest.approx(10, rel=0.05)
    assert player.reveal == sorted(player.reveal) and player.reveal[-1] == player.scene["x"]["max"] == 33
    assert player.captions == captions and player.captions[-1] == "time 33 of 33: 64 of 64 actions done"
    player.value = 999  # clamped, as the browser's slider would be
    assert player.value == player.count - 1


def test_the_ticks_are_in_the_charts_unit_when_the_trace_is_in_seconds():
    trace = simulate(make_schedule("gpipe", 2, 2), t_f=0.001, t_b=0.002)
    timeline = GanttTimeline()
    times, captions = PW.timeline_ticks(trace)
    timeline.set_reveal(gantt_scene(trace, 2), [x * time_scale(trace) for x in times], captions)
    assert timeline.scene["x"]["label"] == "time (ms)" and timeline.reveal[-1] == pytest.approx(
        timeline.scene["x"]["max"]) and timeline.reveal[1] == pytest.approx(1.0)  # the first F ends at 1 ms
    with pytest.raises(ValueError, match="reveal"):
        timeline.set_reveal(gantt_scene(trace, 2), [], [])
    with pytest.raises(Exception, match="reveal"):
        timeline.reveal = [float("nan")]


def test_the_ticks_are_action_ends_capped_for_big_schedules():
    trace = simulate(make_schedule("1f1b", 2, 2))  # F 0-1, 1-2; 1B0 2-4; 0B0 4-6; …
    times, captions = PW.timeline_ticks(trace)
    assert times[0] == 0 and times[-1] == makespan(trace) and captions[0] == "time 0 of 9: 0 of 8 actions done"
    big = explore("interleaved", 8, 32, 4)[1]
    times, captions = PW.timeline_ticks(big)
    assert len(times) == len(captions) == PW.MAX_FRAMES and times[-1] == pytest.approx(makespan(big))


def test_a_knob_change_simulates_once_and_replaces_the_scene_without_matplotlib(monkeypatch):
    panel = PW.schedule_explorer(**(LESSON | dict(name="gpipe", stages=2, microbatches=4)))
    calls, real = [], PW.explore
    monkeypatch.setattr(PW, "explore", lambda *a: calls.append(a) or real(*a))

    def no_matplotlib(*args, **kwargs):
        raise AssertionError("a knob drew a matplotlib figure")
    from matplotlib.figure import Figure
    monkeypatch.setattr(Figure, "__init__", no_matplotlib)  # no figure, whoever would make it
    before = panel.player.scene
    panel.knobs["microbatches"].value = 6
    assert calls == [("gpipe", 2, 6, 2, 2.0)] and panel.player.scene != before
    assert "<td style='padding:0 8px;white-space:nowrap'>6</td>" in panel.readout.value


@pytest.mark.parametrize("knob, value", [("name", "zero-bubble"), ("name", "interleaved"), ("ratio", 1.0),
                                         ("stages", 6), ("microbatches", 3), ("chunks", 3)])
def test_each_knob_redraws_the_chart_the_engine_simulates(knob, value):
    panel = PW.schedule_explorer(**(LESSON | dict(name="interleaved") if knob == "chunks" else LESSON))
    panel.knobs[knob].value = value
    k = {key: w.value for key, w in panel.knobs.items()}
    sim = explore(k["name"], k["stages"], k["microbatches"], k["chunks"], k["ratio"])
    shown = panel.player.scene
    assert shown == gantt_scene(sim[1], k["stages"], title=PW.chart_title(sim[2], k["ratio"]),
                                alt=PW.readout_text(sim[2]))
    boxes = [m for m in shown["marks"] if m["kind"] == "rect"]
    assert sorted(b["tip"] for b in boxes) == sorted(e.name for e in sim[1])  # every simulated action, once
    assert shown["x"]["max"] == pytest.approx(sim[2]["makespan"]) and len(shown["y"]["ticks"]) == k["stages"]
    assert shown["alt"] == PW.readout_text(sim[2]) and f"p={k['stages']}, m={sim[2]['microbatches']}" in \
        shown["title"]
    assert panel.player.reveal[-1] == pytest.approx(sim[2]["makespan"])


def test_the_simulated_trace_link_holds_the_shown_trace(explorer):
    href = re.search(r"href='data:application/json;base64,([^']+)'", explorer.sim_link.value)[1]
    events = [e for e in json.loads(base64.b64decode(href))["traceEvents"] if e["ph"] == "X"]
    assert len(events) == 2 * 4 * 8 and "pipeline_simulated_1f1b_p4_m8.json" in explorer.sim_link.value


def test_every_word_on_the_figures_is_at_least_ten_points():
    fig = draw_gantt(explore("zero-bubble", 4, 8)[1], 4, title="t")
    sim = simulate(make_schedule("gpipe", 2, 2), t_f=0.001, t_b=0.002)
    for f in (fig, draw_gantt_sim_vs_real(sim, sim, 2)):
        texts = [t for t in f.findobj(matplotlib.text.Text) if t.get_text()]
        assert texts and min(t.get_fontsize() for t in texts) >= MIN_FONT
    # the box labels are outlines, not Text: as tall as a MIN_FONT digit drawn by matplotlib
    heights = {np.ptp(path.vertices[:, 1]) for *_, path in labels(fig)}
    assert heights and min(heights) >= np.ptp(outline("1")[:, 1]) - 1e-9


def labels(fig) -> list[tuple[float, int, str, object]]:
    """(x, rank, colour, glyph outline) of every box label: one collection of outlines in points."""
    found = [c for c in fig.axes[0].collections if c.get_gid() == "labels"]
    if not found:
        return []
    (glyphs,) = found
    return [(x, round(y), matplotlib.colors.to_hex(c), path) for (x, y), c, path in
            zip(glyphs.get_offsets(), glyphs.get_facecolors(), glyphs.get_paths(), strict=True)]


def outline(text: str):
    """`text` at MIN_FONT as matplotlib itself draws it, centred: what a box label must look like."""
    path = TextPath((0, 0), text, prop=FontProperties(size=MIN_FONT))
    box = path.get_extents()
    return path.vertices - [(box.x0 + box.x1) / 2, (box.y0 + box.y1) / 2]


def test_each_box_is_labelled_with_its_micro_batch_at_ten_points():
    trace = simulate(make_schedule("1f1b", 4, 8))
    shown = labels(draw_gantt(trace, 4))
    assert len(shown) == 64  # 10 inches for 33 units: every F (1 unit) and B (2) fits its digit
    for x, rank, colour, path in shown:  # the label sits in its action's box and names its micro-batch
        (event,) = [e for e in trace if e.rank == rank and e.start < x < e.end]
        assert x == pytest.approx((event.start + event.end) / 2) and colour == "#ffffff"
        assert path.vertices == pytest.approx(outline(event.name[2:]))  # the micro-batch, at MIN_FONT


def test_box_labels_are_drawn_only_where_they_fit():
    crowded = draw_gantt(explore("interleaved", 8, 32, 4)[1], 8)
    assert labels(crowded) == []  # 2,048 boxes of 0.03 inch: no digit fits
    wide = draw_gantt(explore("interleaved", 4, 8, 2)[1], 4)  # forwards 0.5 units (0.12 in): no label
    assert {e.name[1] for e in explore("interleaved", 4, 8, 2)[1]
            for x, rank, _, _ in labels(wide) if e.rank == rank and e.start < x < e.end} == {"B"}


def test_the_largest_knobs_send_a_scene_without_labels_that_cannot_fit():
    """p=8, m=32, v=4: 2,048 boxes of a few pixels. The scene carries no label and no outline for them, so a
    knob sends a couple of hundred KB however big the schedule (the browser draws it)."""
    panel = PW.schedule_explorer("interleaved", 8, 32, 4, 2.0)
    boxes = [m for m in panel.player.scene["marks"] if m["kind"] == "rect"]
    assert len(boxes) == 2048 and not any("label" in b or "stroke" in b for b in boxes)
    assert len(json.dumps(panel.player.scene)) < 250_000


# ---------------------------------------------------------------- the real run

def test_run_for_real_shows_the_real_timeline_and_numbers():
    panel = PW.schedule_explorer(**(LESSON | dict(name="gpipe", stages=2, microbatches=4)), run=run_pipeline)
    control = panel.run_control
    assert control.image.layout.display == "none" and not control.image.value  # no broken picture before
    assert control.button.description == "run for real"
    res = control.run_now()
    assert control.error is None and res["schedule_name"] == "gpipe" and res["world_size"] == 2
    assert control.image.layout.display is None and control.image.value  # the picture appeared
    text = control.readout.value
    assert "gpipe on 2 processes, m=4: loss and grads = one process ✓" in text
    assert f"bubble measured {res['measured_bubble_fraction']:.3f} (ratio {res['measured_bubble_ratio']:.2f})" in text
    assert "activations held per rank: measured [4, 4], simulated [4, 4]" in text  # the executor's own count
    (link,) = control.extra.children
    assert "pipeline_real_gpipe_p2_m4.json" in link.value
    assert not control.button.disabled


def test_real_view_draws_the_simulation_above_the_real_run():
    res = PW.real_run(run_pipeline, "interleaved", 2, 3, 2)  # m rounded up to 4
    fig, text, (link,) = PW.real_view(res)
    top, bottom = fig.axes[:2]
    n = 2 * 2 * 2 * 4  # p·v stages × F, B × m
    drawn = [sum(len(path.to_polygons()) for c in ax.collections if c.get_gid() == "actions" for path in c.get_paths())
             for ax in (top, bottom)]  # one closed rectangle per action
    assert drawn == [n, n]
    assert text.startswith("interleaved on 2 processes, m=4: loss and grads = one process ✓")
    assert bottom.get_title(loc="left") == "real, 2 processes"


def test_one_process_is_singular():
    res = PW.real_run(run_pipeline, "gpipe", 1, 2, 1)
    fig, text, _ = PW.real_view(res)
    assert text.startswith("gpipe on 1 process, m=2") and fig.axes[1].get_title(loc="left") == "real, 1 process"


def test_a_failed_run_is_one_line_and_the_button_comes_back():
    def hanging(*args, **kwargs):
        raise LaunchTimeout("ranks [0, 1] did not finish within 60 s\nsecond line")
    panel = PW.schedule_explorer(**LESSON, run=hanging)
    assert panel.run_control.run_now() is None
    assert "real run failed: LaunchTimeout: ranks [0, 1] did not finish within 60 s<" in panel.run_control.readout.value
    assert panel.run_control.image.layout.display == "none" and not panel.run_control.button.disabled


def test_without_a_run_there_is_no_button():
    panel = PW.schedule_explorer(**LESSON)  # renderers start no processes of their own
    assert panel.run_control is None and len(panel.children) == 5


def test_the_chunks_knob_is_live_only_for_interleaving():
    from simlab.render.pipeline_widgets import schedule_explorer
    panel = schedule_explorer("1f1b", stages=4, microbatches=8, chunks=2)
    knobs = {c.description: c for box in panel.children if hasattr(box, "children") for c in box.children
             if hasattr(c, "description")}
    chunks = next(k for name, k in knobs.items() if name.startswith("chunks"))
    schedule = next(k for k in knobs.values() if getattr(k, "options", None) and "interleaved" in k.options)
    assert chunks.disabled  # 1F1B has one chunk per rank: the knob would change nothing
    schedule.value = "interleaved"
    assert not chunks.disabled
