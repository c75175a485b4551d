"""Lesson 2's two-lane timelines: one bar per event in the right lane, shared time axis, stable text."""
import dataclasses
import io

import matplotlib
import pytest

matplotlib.use("Agg")

from matplotlib.colors import to_hex  # noqa: E402 — after matplotlib.use("Agg")
from matplotlib.figure import Figure  # noqa: E402 — after matplotlib.use("Agg")
from matplotlib.patches import Rectangle  # noqa: E402 — after matplotlib.use("Agg")

from simlab.render.data_parallel_timeline import (  # noqa: E402 — after matplotlib.use("Agg")
    BAR_LABEL,
    draw_dp_vs_ddp,
    draw_lanes,
    draw_lanes_sim_vs_real,
    lanes_text,
    thin_labels,
)
from simlab.render.style import ALL_REDUCE_SHADES, KIND_COLOR, PHASE_COLOR  # noqa: E402 — after matplotlib.use("Agg")
from simlab.sim.data_parallel import simulate_ddp, simulate_dp, workload_from_layers  # noqa: E402 — after matplotlib.use("Agg")
from simlab.trace import Event, Trace  # noqa: E402 — after matplotlib.use("Agg")

W = workload_from_layers()  # 5 layers, 4 devices, 3 buckets


def bars(ax, gid):
    return [p for p in ax.patches if isinstance(p, Rectangle) and p.get_gid() == gid]


def test_one_bar_per_event_in_its_lane():
    dp, ddp = simulate_dp(W), simulate_ddp(W)
    ax_dp, ax_ddp = draw_lanes(dp.trace, 4).axes[0], draw_lanes(ddp.trace, 4).axes[0]
    # DP: device 0 also computes the loss and the update; every device takes part in 5 transfers
    assert len(bars(ax_dp, "r0 compute")) == 4 and len(bars(ax_dp, "r1 compute")) == 2
    assert [len(bars(ax_dp, f"r{r} comm")) for r in range(4)] == [5] * 4
    # DDP: fwd, loss, one bar per layer's backward, update; one all-reduce per bucket
    for r in range(4):
        assert len(bars(ax_ddp, f"r{r} compute")) == 3 + len(W.layer_params)
        assert len(bars(ax_ddp, f"r{r} comm")) == len(ddp.buckets) == 3


def test_lanes_sit_compute_above_comm_and_device0_on_top():
    ax = draw_lanes(simulate_ddp(W).trace, 4).axes[0]
    top = {gid: bars(ax, gid)[0].get_y() for gid in ("r0 compute", "r0 comm", "r1 compute")}
    assert top["r0 compute"] < top["r0 comm"] < top["r1 compute"]
    assert ax.get_ylim()[0] > ax.get_ylim()[1]  # inverted: smaller y is drawn higher
    assert [t.get_text() for t in ax.get_yticklabels()][:2] == ["r0 compute", "r0 comm"]


def test_bars_span_event_times_and_colour_by_name():
    ddp = simulate_ddp(W)
    ax = draw_lanes(ddp.trace, 4).axes[0]
    assert ax.get_xlabel() == "time (ms)"
    first = min(bars(ax, "r2 comm"), key=lambda b: b.get_x())
    event = min((e for e in ddp.trace if e.rank == 2 and e.kind == "comm"), key=lambda e: e.start)
    assert first.get_x() == pytest.approx(event.start * 1e3)
    assert first.get_width() == pytest.approx((event.end - event.start) * 1e3)
    shades = [to_hex(b.get_facecolor()) for b in sorted(bars(ax, "r2 comm"), key=lambda b: b.get_x())]
    assert shades == [ALL_REDUCE_SHADES[0], ALL_REDUCE_SHADES[1], ALL_REDUCE_SHADES[0]]
    compute = {to_hex(b.get_facecolor()) for b in bars(ax, "r2 compute")}
    assert {PHASE_COLOR["fwd"], PHASE_COLOR["bwd"]} <= compute


def test_wide_bars_get_labels_narrow_ones_do_not():
    ax = draw_lanes(simulate_dp(W).trace, 4).axes[0]
    labels = [t.get_text() for t in ax.texts]
    assert labels.count("replicate") == labels.count("reduce grads") == 4
    assert "scatter inputs" not in labels and "loss" not in labels  # far too short to hold text


def test_real_trace_sends_and_receives_go_to_the_comm_lane():
    real = Trace([Event(0, "send", 0, peer=1, chunk=0, nbytes=8, start=10.0, end=10.5),
                  Event(1, "recv", 0, peer=0, chunk=0, nbytes=8, start=10.1, end=10.5),
                  Event(1, "compute", 1, name="2F0", start=10.5, end=11.0)])
    ax = draw_lanes(real, 2).axes[0]
    assert [len(bars(ax, g)) for g in ("r0 compute", "r0 comm", "r1 compute", "r1 comm")] == [0, 1, 1, 1]
    assert min(p.get_x() for p in ax.patches) == 0.0  # wall time starts at the run's first event
    assert to_hex(bars(ax, "r0 comm")[0].get_facecolor()) == KIND_COLOR["send"]
    draw_lanes(Trace(), 3)  # an empty trace draws empty lanes, no crash


def test_dp_vs_ddp_share_one_time_axis():
    dp, ddp = simulate_dp(W), simulate_ddp(W)
    fig = draw_dp_vs_ddp(dp, ddp)
    assert isinstance(fig, Figure)
    ax_dp, ax_ddp = fig.axes
    assert ax_dp.get_xlim() == ax_ddp.get_xlim() == pytest.approx((0, dp.step_seconds * 1e3))
    assert "52.40 ms" in ax_dp.get_title(loc="left") and "360.1 MiB" in ax_dp.get_title(loc="left")
    assert "3 buckets" in ax_ddp.get_title(loc="left") and "exposed" in ax_ddp.get_title(loc="left")
    assert len(bars(ax_ddp, "r3 comm")) == 3 and len(bars(ax_dp, "r3 comm")) == 5
    fig.savefig(io.BytesIO(), format="png")  # renders headless


def test_lanes_text_fixed_width_and_stable_under_float_noise():
    ddp = simulate_ddp(W)
    text = lanes_text(ddp.trace, 4, width=60)
    lines = text.splitlines()
    assert len(lines) == 1 + 2 * 4 + 1
    assert {len(line) for line in lines[1:-1]} == {len("r0 compute |") + 60 + 1}
    assert lines[0] == "time 0 .. 17.79 ms, one column = 0.296 ms"
    wobble = 1 + 1e-13  # the last bits of a float, as a different summation order would give
    noisy = Trace(dataclasses.replace(e, start=e.start * wobble, end=e.end * wobble) for e in ddp.trace)
    assert lanes_text(noisy, 4, width=60) == text == lanes_text(simulate_ddp(W).trace, 4, width=60)


def test_lanes_text_shows_overlap_and_the_hub():
    ddp_rows = lanes_text(simulate_ddp(W).trace, 4).splitlines()
    compute, comm = ddp_rows[1].split("|")[1], ddp_rows[2].split("|")[1]
    assert comm.index("0") < compute.rindex("B")  # bucket 0 starts while backward still runs
    assert "".join(c for c in dict.fromkeys(comm) if c != ".") == "012"  # buckets in launch order
    dp_rows = lanes_text(simulate_dp(W).trace, 4).splitlines()
    assert "L" in dp_rows[1] and "U" in dp_rows[1]  # loss and update: device 0 only
    assert "L" not in dp_rows[3] and "U" not in dp_rows[3]
    assert dp_rows[-1].startswith("R replicate model  F fwd")


def test_lanes_text_golden_for_a_small_trace():
    trace = Trace([Event(0, "compute", 0, name="bwd L1", start=0.0, end=0.003),
                   Event(0, "comm", 1, name="all-reduce b0", start=0.002, end=0.004),
                   Event(1, "compute", 0, name="update", start=0.003, end=0.004)])
    assert lanes_text(trace, 2, width=8) == "\n".join([
        "time 0 .. 4.00 ms, one column = 0.500 ms",
        "r0 compute |BBBBBB..|",
        "r0 comm    |....0000|",
        "r1 compute |......UU|",
        "r1 comm    |........|",
        "B bwd  0-9 all-reduce bucket  U update"])
    # an edge a hair past a column boundary (float noise) must not spill into the next column
    noisy = Trace([dataclasses.replace(trace[0], end=0.003 + 1e-16), *trace[1:]])
    assert lanes_text(noisy, 2, width=8) == lanes_text(trace, 2, width=8)


def test_sim_vs_real_draws_four_rows_for_one_rank():
    import dataclasses

    from simlab.sim.data_parallel import simulate_ddp, workload_from_layers

    sim = simulate_ddp(workload_from_layers([1 << 16] * 3, world_size=2, global_batch=4, bucket_cap_mb=0.3))
    real = [dataclasses.replace(e, step=1) for e in sim.trace]  # stands in for a measured step
    fig = draw_lanes_sim_vs_real(sim.trace, real, rank=1, step=1)
    gids = [p.get_gid() for p in fig.axes[0].patches]
    mine = [e for e in sim.trace if e.rank == 1]
    assert gids.count("simulated comm") == gids.count("real comm") == sum(e.kind == "comm" for e in mine)
    assert gids.count("simulated compute") == gids.count("real compute") == sum(e.kind == "compute" for e in mine)
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == [
        "simulated compute", "real compute", "simulated comm", "real comm"]


def _texts(fig):
    """Every piece of text matplotlib will draw: titles, tick labels, axis labels, legends, bar labels."""
    from matplotlib.text import Text
    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text()]


def test_every_text_is_at_least_10_points_and_the_legend_sits_beside_the_bars():
    dp, ddp = simulate_dp(W), simulate_ddp(W)
    real = [dataclasses.replace(e, step=1) for e in ddp.trace]
    for fig in (draw_dp_vs_ddp(dp, ddp), draw_lanes(ddp.trace, 4), draw_lanes_sim_vs_real(ddp.trace, real)):
        fig.canvas.draw()
        small = [(t.get_text(), t.get_fontsize()) for t in _texts(fig) if t.get_fontsize() < 10]
        assert small == []  # shown at 100 px per inch, 10 pt is ~14 px
        for ax in fig.axes:
            legend = ax.get_legend()
            if legend is not None:  # a legend over the axes would cover bars and their labels
                box, axes_box = legend.get_window_extent(), ax.get_window_extent()
                assert box.x0 >= axes_box.x1 - 1


def test_both_dp_ddp_panels_show_their_times_and_counts_are_singular_when_one():
    fig = draw_dp_vs_ddp(simulate_dp(W), simulate_ddp(W))
    fig.canvas.draw()
    for ax in fig.axes:  # sharex hid the upper panel's numbers: ticks without labels read as no scale
        labels = [t.get_text() for t in ax.get_xticklabels() if t.get_visible() and t.get_text()]
        assert len(labels) >= 3
    one = W.replace(bucket_cap_mb=1000.0)
    title = draw_dp_vs_ddp(simulate_dp(one), simulate_ddp(one)).axes[1].get_title(loc="left")
    assert "in 1 bucket:" in title and "1 buckets" not in title
    assert "star model" in fig.axes[0].get_title(loc="left")  # the course's model, labelled as such


# ---- labels that never collide ----------------------------------------------------------------------------

def crowded_trace(steps: int = 5):
    """What a real DDP run records: each rank's buckets, several steps of them, overlapping one another (an
    all-reduce is timed from its launch to its wait) and of uneven lengths; lesson 2's stored chart of such a run
    had its "b0 b1 …" labels written over one another."""
    events = []
    for r in range(4):
        for step in range(steps):
            t = step * 18.0 + r
            events.append(Event(r, "compute", step, name="fwd", start=t / 1e3, end=(t + 0.4) / 1e3))
            for b in range(5):
                start = t + 1 + 1.7 * b + 0.3 * r
                events.append(Event(r, "comm", step, name=f"all-reduce b{b}", start=start / 1e3,
                                    end=(start + 3.5 + 2.5 * ((b + r) % 3)) / 1e3))
    return Trace(events)


def shown_labels(fig):
    """The window extent of every bar label that will be drawn, by axes, after layout."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    renderer = (fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)).get_renderer()
    fig.draw_without_rendering()
    return [[t.get_window_extent(renderer) for t in ax.texts if t.get_gid() == BAR_LABEL and t.get_visible()]
            for ax in fig.axes]


def overlapping(boxes) -> int:
    return sum(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])


def test_no_two_bar_labels_overlap_as_drawn():
    trace = crowded_trace()
    for fig in (draw_lanes(trace, 4), draw_dp_vs_ddp(simulate_dp(W), simulate_ddp(W)),
                draw_lanes(simulate_ddp(W).trace, 4)):
        for boxes in shown_labels(fig):
            assert overlapping(boxes) == 0
    assert len(shown_labels(draw_lanes(trace, 4))[0]) >= 20  # thinned, not emptied: most buckets keep a label


def test_the_overlap_check_fails_without_thinning(monkeypatch):
    """The check above can fail: with thin_labels a no-op, the crowded run's labels collide."""
    import simlab.render.data_parallel_timeline as timeline
    monkeypatch.setattr(timeline, "thin_labels", lambda fig: None)
    assert overlapping(shown_labels(draw_lanes(crowded_trace(), 4))[0]) > 10
    fig = draw_lanes(crowded_trace(), 4)
    thin_labels(fig)  # and thinning afterwards repairs it
    assert overlapping(shown_labels(fig)[0]) == 0
