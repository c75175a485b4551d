"""Lesson 1's figures: right number of nodes, chunk boxes and arrows; headless; no pyplot state."""
import dataclasses
import pathlib
import subprocess
import sys

import matplotlib
import pytest

matplotlib.use("Agg")

from matplotlib.collections import PolyCollection  # noqa: E402 — after matplotlib.use("Agg")
from matplotlib.colors import to_hex  # noqa: E402 — after matplotlib.use("Agg")
from matplotlib.figure import Figure  # noqa: E402 — after matplotlib.use("Agg")
from matplotlib.patches import Circle, FancyArrowPatch, Rectangle  # noqa: E402 — after matplotlib.use("Agg")

from simlab.render.collectives_figures import draw_bytes, draw_ring_step, draw_timeline, rank_position  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.style import NOT_HELD_COLOR, UNKNOWN_COLOR  # noqa: E402 — after matplotlib.use("Agg")
from simlab.sim.collectives import naive_all_reduce, ring_all_reduce, tree_broadcast  # noqa: E402 — after matplotlib.use("Agg")
from simlab.sim.collectives_stepper import simulate  # noqa: E402 — after matplotlib.use("Agg")
from simlab.trace import Event, Trace  # noqa: E402 — after matplotlib.use("Agg")


def patches(fig, kind, gid=None):
    ax = fig.axes[0]
    return [p for p in ax.patches if isinstance(p, kind) and (gid is None or p.get_gid() == gid)]


@pytest.mark.parametrize("n", [1, 2, 4, 8, 16, 64])
def test_ring_step_nodes_boxes_and_arrows(n):
    plan = ring_all_reduce(n, 2 * n)
    steps = simulate(plan).steps
    step = steps[min(1, len(steps) - 1)]
    fig = draw_ring_step(step, plan)
    assert isinstance(fig, Figure)
    assert len(patches(fig, Circle, "rank")) == n
    assert len(patches(fig, FancyArrowPatch)) == len(step.transfers) == (n if n > 1 else 0)
    assert len(patches(fig, Rectangle, "chunk")) == (n * n if n <= 16 else 0)  # hidden past 16


def test_every_step_of_ring_n4_draws_and_colours_the_finish():
    plan = ring_all_reduce(4, 8)
    steps = simulate(plan).steps
    for step in steps:
        draw_ring_step(step, plan)
    last = draw_ring_step(steps[-1], plan)
    colours = {to_hex(p.get_facecolor()) for p in patches(last, Rectangle, "chunk")}
    assert len(colours) == 1  # every chunk everywhere is the same "all 4 summed" shade
    first = {to_hex(p.get_facecolor()) for p in patches(draw_ring_step(steps[0], plan), Rectangle, "chunk")}
    assert colours != first


def test_arrow_styles_and_non_neighbour_transfers():
    plan = naive_all_reduce(4, 8)
    steps = simulate(plan).steps
    gather = patches(draw_ring_step(steps[1], plan), FancyArrowPatch)
    scatter = patches(draw_ring_step(steps[2], plan), FancyArrowPatch)
    assert len(gather) == len(scatter) == 3
    assert {a.get_linestyle() for a in gather} != {a.get_linestyle() for a in scatter}  # += vs =
    tree = tree_broadcast(8, 4)
    fig = draw_ring_step(simulate(tree).steps[3], tree)  # 0->4, 1->5, ...: across the circle
    assert len(patches(fig, FancyArrowPatch)) == 4


def test_not_held_and_unknown_sources_have_their_own_colours():
    plan = tree_broadcast(4, 2)
    start = simulate(plan).steps[0]  # only the root holds the buffer
    boxes = patches(draw_ring_step(start, plan), Rectangle, "chunk")
    assert [to_hex(b.get_facecolor()) == to_hex(NOT_HELD_COLOR) for b in boxes] == [False, True, True, True]
    real = dataclasses.replace(start, sources=((None,),) * 4)
    boxes = patches(draw_ring_step(real, plan), Rectangle, "chunk")
    assert to_hex(boxes[0].get_facecolor()) == to_hex(UNKNOWN_COLOR)


def test_draws_into_a_given_axes_and_positions_are_clockwise():
    fig = Figure()
    ax1, ax2 = fig.subplots(1, 2)
    plan = ring_all_reduce(4, 8)
    steps = simulate(plan).steps
    assert draw_ring_step(steps[1], plan, ax=ax2, title="real") is fig
    assert ax2.get_title() == "real" and not ax1.patches
    assert rank_position(0, 4) == pytest.approx((0, 1)) and rank_position(1, 4) == pytest.approx((1, 0))


def test_bytes_bars_and_optimum():
    ring = list(simulate(ring_all_reduce(4, 8)).steps[-1].bytes_sent)
    naive = list(simulate(naive_all_reduce(4, 8)).steps[-1].bytes_sent)
    fig = draw_bytes({"ring": ring, "naive": naive}, optimum=48)
    ax = fig.axes[0]
    heights = [p.get_height() for p in ax.patches if isinstance(p, Rectangle)]
    assert heights == ring + naive
    assert any(line.get_label().startswith("optimum") for line in ax.get_lines())


def test_timeline_for_simulated_and_real_traces():
    trace = simulate(ring_all_reduce(4, 8)).trace
    fig = draw_timeline(trace, 4)
    bars = [c for c in fig.axes[0].collections if isinstance(c, PolyCollection)]
    assert len(bars) == 8  # a send lane and a recv lane on each of 4 ranks
    assert fig.axes[0].get_xlabel() == "time (µs)"
    # a real trace: wall-clock seconds, an instant event and named compute, in any order
    real = Trace([Event(1, "compute", 0, name="0F0", start=0.5, end=1.5),
                  Event(0, "send", 0, 1, 0, 8, start=0.0, end=0.0),
                  Event(1, "recv", 0, 0, 0, 8, start=0.1, end=0.3)])
    ax = draw_timeline(real, 2).axes[0]
    assert ax.get_xlabel() == "time (s)" and "0F0" in [t.get_text() for t in ax.texts]
    draw_timeline(Trace(), 3)  # an empty trace draws empty lanes, no crash


def test_figures_save_headless_and_no_pyplot_or_torch():
    code = ("import sys; from simlab.render import collectives, collectives_figures as figures, collectives_text;"
            "assert 'matplotlib' not in sys.modules and 'ipywidgets' not in sys.modules;"
            "from simlab.sim.collectives import ring_all_reduce; from simlab.sim.collectives_stepper import simulate;"
            "p = ring_all_reduce(4, 8); r = simulate(p); import io;"
            "figures.draw_ring_step(r.steps[2], p).savefig(io.BytesIO(), format='png');"
            "figures.draw_timeline(r.trace, 4).savefig(io.BytesIO(), format='png');"
            "assert 'matplotlib.pyplot' not in sys.modules and 'torch' not in sys.modules")
    root = pathlib.Path(__file__).parents[2]  # so `simlab` imports from this checkout
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120, cwd=root)


def _font_sizes(fig):
    texts = [t for ax in fig.axes for t in ax.texts + [ax.title, ax.xaxis.label, ax.yaxis.label]
             + ax.get_xticklabels() + ax.get_yticklabels() if t.get_text()]
    texts += [t for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
    return [t.get_fontsize() for t in texts]


@pytest.mark.parametrize("n", [2, 4, 6, 8, 16])
def test_ring_figure_fits_a_screen_and_every_word_is_at_least_10_pt(n):
    from simlab.render.picture import figure_png, png_size
    plan = ring_all_reduce(n, 2 * n)
    fig = draw_ring_step(simulate(plan).steps[1], plan)
    assert min(_font_sizes(fig)) >= 10  # shown at 100 px per inch: 10 pt = 14 px
    width, height = png_size(figure_png(fig))
    assert width / 2 <= 500 and height / 2 <= 700  # drawn at 2x for HiDPI, shown at half
    # where a digit would not fit its box, the boxes go unlabelled instead of overflowing
    labelled = [t for t in fig.axes[0].texts if t.get_text().isdigit()]
    assert (len(labelled) == n * n) == (n <= 6)
    names = [t.get_text() for t in fig.axes[0].texts if t.get_text().startswith("r")]
    assert names[0] == "r0" and len(names) == min(n, 8)  # past 8 ranks every other name, never crowded


def test_bytes_axis_speaks_in_kib_or_mib_and_the_optimum_is_rounded():
    ring8, naive8 = ring_all_reduce(8, 1 << 20), naive_all_reduce(8, 1 << 20)
    fig = draw_bytes({"ring": ring8.bytes_sent_per_rank(), "naive": naive8.bytes_sent_per_rank()},
                     optimum=2 * 7 * (4 << 20) // 8)
    ax = fig.axes[0]
    assert ax.get_ylabel() == "bytes sent (MiB)"
    assert [line.get_label() for line in ax.get_lines()] == ["optimum (7 MiB)"]  # 2·7/8 · 4 MiB
    assert max(p.get_height() for p in ax.patches) == 28  # the naive root: 7 buffers of 4 MiB
    assert min(_font_sizes(fig)) >= 10
