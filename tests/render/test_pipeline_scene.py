"""Lesson 4's Gantt chart as a scene for the browser: one box per simulated action where the trace says it ran,
coloured by op, labelled with its micro-batch where a label fits; the white space between boxes is the bubble
the engine computes; `until` shows only what has started. No matplotlib here: the scene is data."""
import json

import pytest

from simlab.plan import Action
from simlab.render.pipeline import gantt_text
from simlab.render.pipeline_scene import gantt_scene, time_label
from simlab.render.style import INK, OP_COLOR, PAPER, TAB_RED
from simlab.sim.pipeline import bubble_fraction, explore, makespan, simulate
from simlab.sim.pipeline_schedules import make_schedule
from simlab.trace import Event, Trace

pytestmark = pytest.mark.usefixtures("english_afterwards")  # tests/conftest.py: English again after each test


def boxes(s: dict) -> list[dict]:
    return [m for m in s["marks"] if m["kind"] == "rect"]


def row(box: dict) -> int:
    """The rank a box is drawn on (rows are 1 apart, rank 0 on top)."""
    return round((box["y0"] + box["y1"]) / 2)


@pytest.mark.parametrize("name, stages, m, chunks", [("1f1b", 4, 8, 1), ("zero-bubble", 4, 8, 1),
                                                     ("interleaved", 4, 8, 2), ("gpipe", 2, 3, 1)])
def test_one_box_per_action_where_and_when_the_trace_says(name, stages, m, chunks):
    _plan, trace, _readout = explore(name, stages, m, chunks, 2.0)
    s = gantt_scene(trace, stages)
    drawn = sorted((b["tip"], row(b), b["x0"], b["x1"]) for b in boxes(s))
    assert drawn == sorted((e.name, e.rank, pytest.approx(e.start), pytest.approx(e.end)) for e in trace)
    fills = {b["tip"]: b["fill"] for b in boxes(s)}
    for e in trace:  # coloured by op; a later chunk of an interleaved rank in a lighter shade of it
        a = Action.parse(e.name)
        assert (fills[e.name] == OP_COLOR[a.op]) == (a.stage < stages)
    assert s["x"]["min"] == 0 and s["x"]["max"] == pytest.approx(makespan(trace))
    assert s["y"]["invert"] and [t[1] for t in s["y"]["ticks"]] == [f"rank {r}" for r in range(stages)]


@pytest.mark.parametrize("name, kwargs", [("1f1b", {}), ("gpipe", dict(t_b=1.5)), ("zero-bubble", dict(t_w=0.5))])
def test_the_white_space_is_the_engines_bubble(name, kwargs):
    """Idle time read off the boxes = the simulator's bubble fraction: nothing dropped, nothing hidden."""
    trace = simulate(make_schedule(name, 4, 6), **kwargs)
    s = gantt_scene(trace, 4)
    busy = sum(b["x1"] - b["x0"] for b in boxes(s))
    span = s["x"]["max"] - s["x"]["min"]
    assert 1 - busy / (4 * span) == pytest.approx(bubble_fraction(trace, 4))


def test_each_box_is_labelled_with_its_micro_batch_in_a_readable_ink():
    trace = simulate(make_schedule("1f1b", 4, 8))
    drawn = boxes(gantt_scene(trace, 4))
    assert len(drawn) == 64 and all(b["label"] == b["tip"][2:] for b in drawn)  # "2F5" → "5"
    assert {b["label_color"] for b in drawn} == {PAPER} and {b["stroke"] for b in drawn} == {PAPER}
    lighter = boxes(gantt_scene(explore("interleaved", 2, 4, 2)[1], 2))  # stage ≥ p: a later chunk, drawn lighter
    assert {b["label_color"] for b in lighter if int(b["tip"][0]) >= 2 and "label" in b} == {INK}


def test_labels_are_sent_only_where_they_can_fit():
    crowded = boxes(gantt_scene(explore("interleaved", 8, 32, 4)[1], 8))
    assert len(crowded) == 2048 and not any("label" in b for b in crowded)  # 2,048 boxes of a few pixels
    assert not any("stroke" in b for b in crowded)  # too thin for a white gap to show
    wide = boxes(gantt_scene(explore("interleaved", 4, 8, 2)[1], 4))  # forwards 0.5 units: no room for a digit
    assert {b["tip"][1] for b in wide if "label" in b} == {"B"}


def test_until_draws_only_what_has_started_clips_it_and_marks_the_moment():
    trace = simulate(make_schedule("gpipe", 2, 2))  # F 0-1, 1-2 on rank 0; rank 1 F0 at 1-2
    s = gantt_scene(trace, 2, until=1.5)
    assert sorted((b["tip"], b["x1"]) for b in boxes(s)) == [("0F0", 1.0), ("0F1", 1.5), ("1F0", 1.5)]
    assert [b.get("label") for b in boxes(s) if b["x1"] == 1.5] == [None, None]  # a cut box keeps no label
    (cursor,) = [m for m in s["marks"] if m["kind"] == "line"]
    assert cursor["x"] == [1.5, 1.5] and cursor["stroke"] == TAB_RED


def test_the_legend_names_the_ops_used_and_the_lighter_chunks():
    assert [e[0] for e in gantt_scene(explore("zero-bubble", 2, 2)[1], 2)["legend"]] == [
        "forward", "backward-input", "backward-weight"]
    legend = gantt_scene(explore("interleaved", 2, 4, 2)[1], 2)["legend"]
    assert legend[-1][0] == "lighter: later chunk" and legend[0] == ["forward", OP_COLOR["F"]]


def test_seconds_get_a_unit_and_model_time_none():
    seconds = simulate(make_schedule("gpipe", 2, 2), t_f=0.001, t_b=0.002)
    s = gantt_scene(seconds, 2)
    assert s["x"]["label"] == "time (ms)" and s["x"]["max"] == pytest.approx(makespan(seconds) * 1e3)
    assert gantt_scene(simulate(make_schedule("gpipe", 2, 2)), 2)["x"]["label"] == time_label(9, "s") == "time"


def test_the_text_alternative_is_the_same_chart_as_text():
    trace = simulate(make_schedule("1f1b", 2, 3))
    assert gantt_scene(trace, 2)["alt"] == gantt_text(trace, 2)
    window = gantt_scene(trace, 2, until=2.5)["alt"]  # only the actions started by t = 2.5
    assert window == gantt_text(Trace([e for e in trace if e.start < 2.5]), 2)
    assert gantt_scene(Trace([Event(0, "compute", 0, name="0F0", start=0, end=1)]), 1, alt="one")["alt"] == "one"


def test_the_scene_is_plain_json_and_small_for_a_big_schedule():
    s = gantt_scene(explore("interleaved", 8, 32, 4)[1], 8)
    assert json.loads(json.dumps(s)) == s
    assert len(json.dumps(s)) < 250_000  # 2,048 boxes: what one knob change sends at most
