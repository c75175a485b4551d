"""Lesson 4's Gantt charts and explorer: every box is a simulated action, every number the engine's."""
import matplotlib
import pytest

matplotlib.use("Agg")

from simlab.render.pipeline import draw_gantt, draw_gantt_sim_vs_real, gantt_text  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.pipeline_widgets import explorer_frame  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.style import OP_COLOR  # noqa: E402 — after matplotlib.use("Agg")
from simlab.sim.pipeline import bubble_fraction, makespan, simulate  # noqa: E402 — after matplotlib.use("Agg")
from simlab.sim.pipeline import explore as explorer_run  # noqa: E402 — after matplotlib.use("Agg")
from simlab.sim.pipeline_schedules import make_schedule  # noqa: E402 — after matplotlib.use("Agg")
from simlab.sim.pipeline_schedules import nearest_valid as fitted
from simlab.trace import Event, Trace  # noqa: E402 — after matplotlib.use("Agg")


def boxes(ax) -> list[tuple[float, float, float, float, str]]:
    """(x, y, width, height, colour) of every action box: all of them live in one collection, one
    compound path per colour, each box a closed rectangle of its own."""
    (actions,) = [c for c in ax.collections if c.get_gid() == "actions"]
    colours = [matplotlib.colors.to_hex(c) for c in actions.get_facecolors()]
    out = []
    for path, colour in zip(actions.get_paths(), colours, strict=True):
        for corners in path.to_polygons(closed_only=True):  # one polygon per box
            (x0, y0), (x1, y1) = corners.min(axis=0), corners.max(axis=0)
            out.append((x0, y0, x1 - x0, y1 - y0, colour))
    return out


def test_gantt_text_of_1f1b_by_hand():
    # p=2, m=2, F=1, B=2: rank 0 F0 F1 waits for 1B0 (ends at 4), B0 at 4-6, B1 waits for 1B1 (ends 7)
    text = gantt_text(simulate(make_schedule("1f1b", 2, 2)), 2)
    assert text.splitlines()[:2] == ["rank 0 |F0 F1 .  .  B0 == .  B1 == |",
                                     "rank 1 |.  F0 B0 == F1 B1 == .  .  |"]


def test_gantt_text_names_stages_when_a_rank_holds_several():
    text = gantt_text(simulate(make_schedule("interleaved", 2, 2, 2), t_f=0.5, t_b=1.0), 2)
    assert text.startswith("rank 0 |0F0 0F1 2F0 2F1") and "labels = stage, op, micro-batch" in text


def test_one_box_per_action_coloured_by_op():
    plan = make_schedule("zero-bubble", 4, 8)
    trace = simulate(plan, t_w=1.0)
    ax = draw_gantt(trace, 4).axes[0]
    drawn = boxes(ax)
    assert len(drawn) == sum(len(r) for r in plan) == 4 * 8 * 3
    assert {b[4] for b in drawn} == {OP_COLOR[op] for op in "FIW"}
    ys = sorted({round(b[1] + b[3] / 2) for b in drawn})
    assert ys == [0, 1, 2, 3]  # one row per rank


def test_until_draws_only_what_has_started_and_clips_it():
    trace = simulate(make_schedule("gpipe", 2, 2))  # F 0-1, 1-2 on rank 0; rank 1 F0 at 1-2
    ax = draw_gantt(trace, 2, until=1.5).axes[0]
    assert len(boxes(ax)) == 3  # 0F0, 0F1 (clipped), 1F0 (clipped)
    assert max(b[0] + b[2] for b in boxes(ax)) == pytest.approx(1.5)


def test_idle_time_in_the_picture_is_the_bubble():
    trace = simulate(make_schedule("1f1b", 4, 8))
    ax = draw_gantt(trace, 4).axes[0]
    busy = sum(b[2] for b in boxes(ax))
    assert 1 - busy / (4 * makespan(trace)) == pytest.approx(bubble_fraction(trace, 4))


def test_sim_vs_real_share_one_time_axis():
    sim = simulate(make_schedule("gpipe", 2, 1), t_f=0.001, t_b=0.002)
    real = Trace(Event(e.rank, "compute", e.step, name=e.name, start=e.start * 1.5, end=e.end * 1.5) for e in sim)
    fig = draw_gantt_sim_vs_real(sim, real, 2)
    top, bottom = fig.axes[:2]
    assert top.get_xlim() == bottom.get_xlim() and len(boxes(top)) == len(boxes(bottom)) == 4
    # the shared time axis is labelled once, on the panel that shows its tick labels
    assert top.get_xlabel() == "" and bottom.get_xlabel().startswith("time")


def test_fitted_moves_impossible_knobs():
    assert fitted("naive", 4, 8, 3) == (1, 1)
    assert fitted("interleaved", 4, 6, 2) == (8, 2)
    assert fitted("1f1b", 4, 6, 3) == (6, 1)


def test_explorer_readout_is_the_engines():
    plan, trace, readout = explorer_run("1f1b", 4, 8, 1, 2.0)
    assert readout["bubble_fraction"] == bubble_fraction(trace, 4) == pytest.approx(3 / 11)
    assert readout["peak_activations"] == [4, 3, 2, 1]
    fig, text = explorer_frame("interleaved", 4, 8, 2, 2.0, until=3.0)
    assert "bubble 15.8 % (ratio 0.188)" in text and fig.axes[0].lines  # the cursor; (p-1)/(vm) = 3/16


# ---------------------------------------------------------------- review: nothing dropped, nothing hidden

def shown(text: str) -> list[str]:
    """The action labels a text Gantt shows, row by row."""
    rows = [line.split("|")[1] for line in text.splitlines() if line.startswith("rank ")]
    return [label for row in rows for label in row.split() if label[0] not in ".="]


@pytest.mark.parametrize("name, kwargs", [("1f1b", dict(t_b=1.5)), ("zero-bubble", dict(t_w=0.0)),
                                          ("zero-bubble", dict(t_b=1.5, t_w=0.25)), ("gpipe", dict(t_f=0.3))])
def test_gantt_text_shows_every_action(name, kwargs):
    trace = simulate(make_schedule(name, 2, 3), **kwargs)
    labels = shown(gantt_text(trace, 2))
    assert sorted(labels) == sorted(e.name[1:] for e in trace)  # stage dropped: rank r runs stage r


def test_gantt_text_rounds_start_down_and_end_up():
    # 1F1 runs 3.5–4.5 with t_b = 1.5 (the CLI case that used to lose it): columns 3 and 4
    text = gantt_text(simulate(make_schedule("1f1b", 2, 3), t_b=1.5), 2)
    assert text.splitlines()[1] == "rank 1 |.  F0 B0 == F1 B1 F2 B2 == .  |"


def test_gantt_text_says_when_it_is_cut():
    text = gantt_text(simulate(make_schedule("gpipe", 2, 8)), 2, max_columns=10)
    lines = text.splitlines()
    assert all(len(line) == len(lines[0]) for line in lines[:2])
    assert lines[2] == "… truncated at 10 of 27 columns"  # (m + p - 1)(t_f + t_b) = 9 × 3
    assert "truncated" not in gantt_text(simulate(make_schedule("gpipe", 2, 8)), 2)


@pytest.mark.parametrize("m", [1, 4, 8])
def test_explorer_does_the_same_batch_whatever_the_schedule(m):
    # naive runs one micro-batch m times as big: with no overlap its makespan is p·(t_F + t_B)·m
    naive = explorer_run("naive", 4, m, 1, 2.0)[2]
    assert naive["makespan"] == pytest.approx(4 * 3 * m)
    gp = explorer_run("gpipe", 4, m, 1, 2.0)[2]  # (m + p - 1)(t_F + t_B), t_F = 1
    assert gp["makespan"] == pytest.approx((m + 3) * 3) and gp["makespan"] <= naive["makespan"]


def test_explorer_interleaved_rounding_keeps_the_batch():
    # m=6 rounded up to 8 micro-batches 6/8 as big; v=2 chunks half a stage: t_F = 6 / (8·2)
    _, trace, readout = explorer_run("interleaved", 4, 6, 2, 2.0)
    assert readout["microbatches"] == 8 and min(e.end - e.start for e in trace) == pytest.approx(6 / 16)
    assert explorer_frame("interleaved", 4, 6, 2)[1].startswith("interleaved: p=4 m=8 v=2")  # m as run
