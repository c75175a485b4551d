"""Lesson 3's ZeRO pictures: the bars show per_gpu_bytes, the grid shows the walkthrough's holdings."""
import ipywidgets as w
import matplotlib
import pytest

matplotlib.use("Agg")

from simlab.sim.memory import per_gpu_bytes  # noqa: E402
from simlab.sim.zero import holdings_text, walkthrough  # noqa: E402
from simlab.render.zero import (calculator_frame, calculator_rows, draw_memory_bars,  # noqa: E402
                                     draw_memory_curve, draw_zero_step, memory_calculator,
                                     walkthrough_frame, walkthrough_player)

PSI, N = 7_500_000_000, 64
PAPER_GB = ["120", "31.40625", "16.640625", "1.875"]  # ZeRO paper, Figure 1


def bars(fig, gid):
    return [p for p in fig.axes[0].patches if p.get_gid() == gid]


def test_bar_heights_are_per_gpu_bytes():
    rows = {f"stage {s}": per_gpu_bytes(PSI, N, s, precision="mixed") for s in range(4)}
    fig = draw_memory_bars(rows)
    for part in ("params", "grads", "optimizer"):
        assert [b.get_height() for b in bars(fig, part)] == pytest.approx(
            [r[part] / 1e9 for r in rows.values()])
    tops = [b.get_y() + b.get_height() for b in bars(fig, "optimizer")]
    assert tops == pytest.approx([120, 31.40625, 16.640625, 1.875])
    labels = [t.get_text() for t in fig.axes[0].texts]
    assert labels == PAPER_GB
    assert bars(fig, "cpu") == []  # no host bar without offload


def test_calculator_frame_shows_the_papers_numbers():
    fig, text = calculator_frame(7.5e9, 64, "mixed")
    for number in PAPER_GB:
        assert number in text
    assert len(bars(fig, "params")) == 4


def test_calculator_offload_only_on_stages_2_and_3():
    rows = list(calculator_rows(7.5e9, 64, "mixed", offload=True).values())
    assert [r["cpu"] > 0 for r in rows] == [False, False, True, True]
    assert rows[2] == per_gpu_bytes(PSI, N, 2, offload=True, precision="mixed")
    fig, _ = calculator_frame(7.5e9, 64, "mixed", offload=True)
    assert [b.get_height() for b in bars(fig, "cpu")] == pytest.approx([r["cpu"] / 1e9 for r in rows])


def test_calculator_widget_builds():
    box = memory_calculator()
    assert isinstance(box, w.VBox)
    image, table = box.children[2:]
    assert image.value[:4] == b"\x89PNG" and "31.40625" in table.value


@pytest.mark.parametrize("stage,offload", [(0, False), (1, False), (2, False), (3, False), (2, True), (3, True)])
def test_zero_step_grid_has_one_box_per_held_block(stage, offload):
    steps = walkthrough(stage, offload=offload)
    for st in steps:
        fig = draw_zero_step(st, 3)
        ax = fig.axes[0]
        has_cpu = any(h["grads"] or h["optim"] for h in st.cpu)
        assert len([p for p in ax.patches if p.get_gid() == "cell"]) == 3 * (6 if has_cpu else 3)
        held = sorted(b for h in st.holdings + (st.cpu if has_cpu else ()) for s in h.values() for b in s)
        assert len([p for p in ax.patches if p.get_gid() == "block"]) == len(held)
        names = sorted(t.get_text() for t in ax.texts if t.get_text()[:1] in "abc" and t.get_text()[1:].isdigit())
        assert names == held
        assert st.name in ax.get_title() and st.description in ax.get_title()


def test_seed_scene_stage3_gather():
    st = walkthrough(3)[1]  # all-gather La: every GPU holds a0 a1 a2 and its own b, c
    ax = draw_zero_step(st, 3).axes[0]
    blocks = [p for p in ax.patches if p.get_gid() == "block"]
    assert len(blocks) == 3 * (5 + 3 + 3)
    owned = [p for p in blocks if p.get_linestyle() == "-"]
    assert len(owned) == 3 * 9  # 3 own params + 3 grads + 3 optim per GPU; the gathered 2 are dashed


def test_memory_curve_lines():
    steps = walkthrough(2, offload=True)
    ax = draw_memory_curve(steps, 3).axes[0]
    assert len(ax.lines) == 6  # 3 GPUs + 3 hosts
    assert list(ax.lines[0].get_ydata()) == [st.gpu_bytes[0] for st in steps]
    assert len(draw_memory_curve(walkthrough(1), 3).axes[0].lines) == 3


@pytest.mark.parametrize("mode", ["text", "plot"])
def test_walkthrough_player(mode):
    steps = walkthrough(3)
    box = walkthrough_player(steps, 3, mode=mode)
    (play, slider), view = box.children[0].children, box.children[1]
    assert isinstance(play, w.Play) and slider.max == play.max == len(steps) - 1
    slider.value = 4
    if mode == "text":
        assert view.value.startswith("<pre") and "step 4: " + steps[4].name in view.value
    else:
        assert view.value[:4] == b"\x89PNG"


def test_walkthrough_frame_is_holdings_text():
    steps = walkthrough(2, offload=True)
    assert [walkthrough_frame(k, steps) for k in range(len(steps))] == [holdings_text(s) for s in steps]


def test_player_rejects_unknown_mode():
    with pytest.raises(ValueError, match="mode"):
        walkthrough_player(walkthrough(0), 3, mode="video")


def test_offload_timeline_draws_every_copy_and_the_cpu_step():
    from simlab.render.zero import draw_offload_timeline
    from simlab.sim.zero import walkthrough

    steps = walkthrough(2, offload=True)
    ax = draw_offload_timeline(steps).axes[0]
    copies = [s for s in steps if s.name.startswith(("to-cpu", "to-gpu"))]
    assert sum(a.get_gid() == "copy" for a in ax.texts + ax.patches + list(ax.get_children())) >= len(copies) > 0
    assert [p.get_gid() for p in ax.patches].count("cpu") == sum(s.kind == "cpu" for s in steps)
