"""Lesson 4's Gantt charts and explorer: every box is a simulated action, every number the engine's."""
import ipywidgets as w
import matplotlib
import pytest

matplotlib.use("Agg")

from simlab.sim.pipeline import bubble_fraction, makespan, simulate  # noqa: E402
from simlab.sim.pipeline import explore as explorer_run  # noqa: E402
from simlab.sim.schedules import make_schedule, nearest_valid as fitted  # noqa: E402
from simlab.parity.pipeline import run_pipeline  # noqa: E402
from simlab.render.pipeline import OP_COLOR, draw_gantt, draw_sim_vs_real, gantt_text  # noqa: E402
from simlab.render.pipeline_widgets import (explorer_frame, real_frame,  # noqa: E402
                                            schedule_explorer)
from simlab.trace import Event, Trace  # noqa: E402


def boxes(ax):
    return [p for p in ax.patches if p.get_facecolor() != (0, 0, 0, 0)]


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
    assert len(ax.patches) == sum(len(r) for r in plan) == 4 * 8 * 3
    colours = {matplotlib.colors.to_hex(p.get_facecolor()) for p in ax.patches}
    assert colours == {OP_COLOR[op] for op in "FIW"}
    ys = sorted({round(p.get_y() + p.get_height() / 2) for p in ax.patches})
    assert ys == [0, 1, 2, 3]  # one row per rank


def test_until_draws_only_what_has_started_and_clips_it():
    trace = simulate(make_schedule("gpipe", 2, 2))  # F 0-1, 1-2 on rank 0; rank 1 F0 at 1-2
    ax = draw_gantt(trace, 2, until=1.5).axes[0]
    assert len(ax.patches) == 3  # 0F0, 0F1 (clipped), 1F0 (clipped)
    assert max(p.get_x() + p.get_width() for p in ax.patches) == pytest.approx(1.5)


def test_idle_time_in_the_picture_is_the_bubble():
    trace = simulate(make_schedule("1f1b", 4, 8))
    ax = draw_gantt(trace, 4).axes[0]
    busy = sum(p.get_width() for p in ax.patches)
    assert 1 - busy / (4 * makespan(trace)) == pytest.approx(bubble_fraction(trace, 4))


def test_sim_vs_real_share_one_time_axis():
    sim = simulate(make_schedule("gpipe", 2, 1), t_f=0.001, t_b=0.002)
    real = Trace(Event(e.rank, "compute", e.step, name=e.name, start=e.start * 1.5, end=e.end * 1.5) for e in sim)
    fig = draw_sim_vs_real(sim, real, 2)
    top, bottom = fig.axes[:2]
    assert top.get_xlim() == bottom.get_xlim() and len(top.patches) == len(bottom.patches) == 4


def test_fitted_moves_impossible_knobs():
    assert fitted("naive", 4, 8, 3) == (1, 1)
    assert fitted("interleaved", 4, 6, 2) == (8, 2)
    assert fitted("1f1b", 4, 6, 3) == (6, 1)


def test_explorer_readout_is_the_engines():
    plan, trace, readout = explorer_run("1f1b", 4, 8, 1, 2.0)
    assert readout["bubble_fraction"] == bubble_fraction(trace, 4) == pytest.approx(3 / 11)
    assert readout["peak_activations"] == [4, 3, 2, 1]
    fig, text = explorer_frame("interleaved", 4, 8, 2, 2.0, until=3.0)
    assert "bubble 15.8 %" in text and fig.axes[0].lines  # the cursor


def test_explorer_widget_builds_and_reacts():
    box = schedule_explorer("gpipe", 2, 4)
    assert isinstance(box, w.VBox)
    knobs = {c.description: c for row in box.children if isinstance(row, w.HBox) for c in row.children
             if hasattr(c, "description")}
    image, text = box.children[3], box.children[4]
    before = text.value
    knobs["stages p"].value = 4
    assert text.value != before and "p=4" in text.value and image.value


def test_real_frame_runs_the_knobs_schedule_beside_its_simulation():
    fig, text = real_frame(run_pipeline, "interleaved", 2, 3, 2)  # m rounded up to 4
    assert text.startswith("interleaved on 2 processes: loss and grads vs one process ✓")
    top, bottom = fig.axes[:2]
    assert len(top.patches) == len(bottom.patches) == 2 * 2 * 2 * 4  # p·v stages × F, B × m


def test_real_run_button_fills_its_image(monkeypatch):
    import simlab.render.pipeline_widgets as PW
    calls = []
    def fake_real_frame(*knobs):  # no processes in this test: the frame itself is tested above
        calls.append(knobs)
        return draw_gantt(simulate(make_schedule("gpipe", 2, 4)), 2), "summary"
    monkeypatch.setattr(PW, "real_frame", fake_real_frame)
    box = schedule_explorer("gpipe", 2, 4, chunks=1, run=run_pipeline)
    button, image, text = box.children[5:8]
    button.click()
    assert calls == [(run_pipeline, "gpipe", 2, 4, 1)] and image.value and "summary" in text.value
    assert not button.disabled


def test_without_a_run_there_is_no_button():
    box = schedule_explorer("gpipe", 2, 4, chunks=1)  # renderers start no processes of their own
    assert len(box.children) == 5 and not any(isinstance(c, w.Button) for c in box.children)


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
    assert "chunk units, 1/v each" in explorer_frame("interleaved", 4, 6, 2)[1]


def test_real_run_button_reports_a_failure_and_comes_back(monkeypatch):
    import simlab.render.pipeline_widgets as PW
    from simlab.exec.launch import LaunchTimeout
    def hanging(*knobs):
        raise LaunchTimeout("ranks [0, 1] did not finish within 60 s\nsecond line")
    monkeypatch.setattr(PW, "real_frame", hanging)
    box = schedule_explorer("gpipe", 2, 4, chunks=1, run=run_pipeline)
    button, image, text = box.children[5:8]
    button.click()
    assert text.value == "<pre>real run failed: LaunchTimeout: ranks [0, 1] did not finish within 60 s</pre>"
    assert not button.disabled and not image.value


def test_a_knob_change_simulates_once(monkeypatch):
    import simlab.render.pipeline_widgets as PW
    box = schedule_explorer("gpipe", 2, 4, chunks=1)
    calls = []
    real = PW.explore
    monkeypatch.setattr(PW, "explore", lambda *a: calls.append(a) or real(*a))
    knobs = {c.description: c for row in box.children if isinstance(row, w.HBox) for c in row.children
             if hasattr(c, "description")}
    knobs["micro-b. m"].value = 6
    assert calls == [("gpipe", 2, 6, 1, 2.0)]
    knobs["time"].value = 3  # the slider redraws the same simulation
    assert len(calls) == 1 and "m=6" in box.children[4].value
