"""Lesson 3's ZeRO pictures: the bars show per_gpu_bytes, the grid shows the walkthrough's holdings."""
import matplotlib
import pytest

matplotlib.use("Agg")

from simlab.render.zero import (  # noqa: E402 — after matplotlib.use("Agg")
    calculator_rows,
    calculator_table,
    calculator_title,
    draw_memory_bars,
    draw_memory_curve,
    draw_zero_step,
    gb,
)
from simlab.sim.memory import per_gpu_bytes  # noqa: E402 — after matplotlib.use("Agg")
from simlab.sim.zero import walkthrough  # noqa: E402 — after matplotlib.use("Agg")

PSI, N = 7_500_000_000, 64
PAPER_GB = ["120", "31.4", "16.6", "1.88"]  # ZeRO paper, Figure 1 (120, 31.4, 16.6, 1.9 GB), 3 digits


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


@pytest.mark.parametrize("nbytes, label", [(120e9, "120"), (31.40625e9, "31.4"), (1.875e9, "1.88"),
                                           (0.234375e9, "0.234"), (1120e9, "1120"), (0, "0"), (1e5, "<0.001")])
def test_gb_labels_have_meaningful_digits(nbytes, label):
    assert gb(nbytes) == label


def calculator_figure(params, gpus, precision="mixed", offload=False):
    """The memory calculator's picture, as `render.zero_widgets.memory_calculator` draws it."""
    return draw_memory_bars(calculator_rows(params, gpus, precision, offload),
                            title=calculator_title(params, gpus, precision))


def test_calculator_shows_the_papers_numbers():
    table = calculator_table(calculator_rows(7.5e9, 64, "mixed"))
    assert [row["GPU total"] for row in table] == PAPER_GB
    assert len(bars(calculator_figure(7.5e9, 64), "params")) == 4


def test_calculator_offload_only_on_stages_2_and_3():
    rows = list(calculator_rows(7.5e9, 64, "mixed", offload=True).values())
    assert [r["cpu"] > 0 for r in rows] == [False, False, True, True]
    assert rows[2] == per_gpu_bytes(PSI, N, 2, offload=True, precision="mixed")
    fig = calculator_figure(7.5e9, 64, "mixed", offload=True)
    assert [b.get_height() for b in bars(fig, "cpu")] == pytest.approx([r["cpu"] / 1e9 for r in rows])


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
        assert st.name in ax.get_title() and st.description == " ".join(ax.get_title().split("\n")[1:])


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


def test_offload_timeline_draws_every_copy_and_the_cpu_step():
    from simlab.render.zero import draw_offload_timeline
    from simlab.sim.zero import walkthrough

    steps = walkthrough(2, offload=True)
    ax = draw_offload_timeline(steps).axes[0]
    copies = [s for s in steps if s.name.startswith(("to-cpu", "to-gpu"))]
    assert sum(a.get_gid() == "copy" for a in ax.texts + ax.patches + list(ax.get_children())) >= len(copies) > 0
    assert [p.get_gid() for p in ax.patches].count("cpu") == sum(s.kind == "cpu" for s in steps)


def _lesson_cells():
    import json
    from pathlib import Path
    nb = json.loads((Path(__file__).parents[2] / "notebooks" / "03_zero.ipynb").read_text())
    return {c["id"]: c for c in nb["cells"]}


def test_lesson_explains_the_peaks_it_prints():
    """The sentence about the walkthrough's peaks uses the numbers the model and the printed table give."""
    from simlab.sim.zero import peak_bytes
    cells = _lesson_cells()
    text = "".join(cells["l3-peak-why"]["source"])
    printed = "".join("".join(o.get("text", [])) for o in cells["94997e7d"]["outputs"])
    between = [per_gpu_bytes([3] * 3, 3, s, precision="mixed")["total"] for s in range(4)]
    peak = [peak_bytes(walkthrough(s))[0] for s in range(4)]
    grads, gathered = peak[2] - between[2], peak[3] - between[3] - (peak[2] - between[2])  # one layer's extras
    assert f"= {between[3]};" in text and f"= {between[2]}." in text and f"+{grads}, so stage 2 peaks at {peak[2]}" in text
    assert f"(+{gathered}): {between[3]} + {grads} + {gathered} = {peak[3]}" in text
    assert f"{peak[0]} and {peak[1]}" in text
    for s in range(4):  # the stored output shows the same numbers
        assert printed.splitlines()[1 + s].split()[2:] == [str(between[s]), str(peak[s]), str(peak[s])]


def test_lesson_calculator_starts_where_the_paper_table_ends():
    cells = _lesson_cells()
    printed = "".join("".join(o.get("text", [])) for o in cells["24f717fe"]["outputs"])
    assert "7.5 B" in "".join(cells["dab555a7"]["source"]) and "64 GPUs" in "".join(cells["dab555a7"]["source"])
    assert "".join(cells["e823e5cb"]["source"]) == "memory_calculator()"  # its defaults: tests/render/test_zero_widgets.py
    assert [row.split()[-1] for row in printed.splitlines()[1:5]] == PAPER_GB


def test_lesson_explains_the_offload_bytes_it_prints():
    """'each host holds 3 blocks × (4 + 12) = 48 bytes while the GPU keeps only the 18 bytes': the model's
    numbers, and the rows the cell printed."""
    from simlab.sim.memory import CPU_GRAD_BYTES, HOST_ADAM_BYTES
    cells = _lesson_cells()
    text = " ".join("".join(cells["b904f4d7"]["source"]).split())
    mem = per_gpu_bytes([3] * 3, 3, 2, offload=True, precision="mixed")
    assert f"3 blocks × ({CPU_GRAD_BYTES} + {HOST_ADAM_BYTES}) = {mem['cpu']} bytes" in text
    assert f"only the {mem['params']} bytes of 16-bit parameters" in text and mem["params"] == 9 * 2
    printed = "".join("".join(o.get("text", [])) for o in cells["3511dac8"]["outputs"]).splitlines()
    assert [r.split()[-1] for r in printed if r.startswith(("GPU", "CPU"))] == [str(mem["params"])] * 3 + [str(mem["cpu"])] * 3


def test_lesson_states_which_layers_get_padded():
    """The comment on the real runs' MLP says which buffers are padded at N = 3: check it against the sizes."""
    src = "".join(_lesson_cells()["a7f1e862"]["source"])
    layers = [(a + 1) * b for a, b in zip((5, 7, 3, 4), (7, 3, 4))]
    assert "SIZES = (5, 7, 3, 4)" in src and f"{layers[0]}, {layers[1]} and {layers[2]} parameters" in src
    padded = [p for p in layers + [sum(layers)] if p % 3]  # per layer (stages 2, 3) and stage 1's one bucket
    assert padded == [16, 82] and "the 16 and the 82 of a stage-1 bucket are padded" in src
