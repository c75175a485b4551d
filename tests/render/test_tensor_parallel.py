"""Lesson 5's TP pictures and widgets: every coloured cell sits where `shard_plan` puts that rank's slice,
the explorer's bytes are the ring closed forms and its errors the engines', the step view is `block_steps`
and its real counts are `run_tp`'s."""
import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

from simlab.parity.tensor_parallel import run_tp  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.tensor_parallel import draw_mlp_shards, draw_split, draw_tp_steps, real_counts_line  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.tensor_parallel_widgets import (  # noqa: E402 — after matplotlib.use("Agg")
    FFN,
    HIDDEN,
    TOKENS,
    mlp_explorer,
    mlp_inputs,
    mlp_split_frame,
    plan_steps,
    split_error,
    step_frame,
    steps_player,
    steps_text,
    sync_rows,
)
from simlab.sim.tensor_parallel import COMBINE, block_steps, bytes_per_rank, count_collectives, shard_plan, split_linear  # noqa: E402 — after matplotlib.use("Agg")

X = np.arange(16).reshape(2, 8)  # (b, in)
W = np.arange(96).reshape(8, 12)  # (in, out)


def cells(fig, gid):
    """(row, col) of every cell with this gid, counted from its matrix's top-left cell."""
    ax = fig.axes[0]
    name = gid.split()[0]
    whole = [p for p in ax.patches if (p.get_gid() or "").split()[:1] == [name]]
    x0, top, size = min(p.get_x() for p in whole), max(p.get_y() for p in whole), whole[0].get_width()
    return {(round((top - p.get_y()) / size), round((p.get_x() - x0) / size))
            for p in whole if p.get_gid() == gid}


def block(rows, cols):
    return {(i, j) for i in range(*rows) for j in range(*cols)}


@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_column_split_colours_w_columns_and_y_columns(ranks):
    split = split_linear("column", ranks, X, W)
    fig = draw_split(split)
    for r in range(ranks):
        assert cells(fig, f"W rank {r}") == block(split.plan.rows[r], split.plan.cols[r])
        assert len(cells(fig, f"W rank {r}")) == split.shards[r].size
        assert cells(fig, f"Y rank {r}") == block((0, 2), split.plan.cols[r])  # concatenated in rank order
    assert cells(fig, "X all") == block((0, 2), (0, 8))  # every rank needs all of X
    assert COMBINE["column"] in fig.axes[0].get_title()


@pytest.mark.parametrize("ranks", [2, 4])
def test_row_split_colours_x_columns_w_rows_and_sums_partials(ranks):
    split = split_linear("row", ranks, X, W)
    fig = draw_split(split)
    for r in range(ranks):
        assert cells(fig, f"W rank {r}") == block(split.plan.rows[r], (0, 12))
        assert cells(fig, f"X rank {r}") == block((0, 2), split.plan.rows[r])  # X's matching column block
        assert len(cells(fig, f"X rank {r}")) == split.inputs[r].size
        assert len([p for p in fig.axes[0].patches if p.get_gid() == f"partial rank {r}"]) == split.partials[r].size
    assert cells(fig, "Y sum") == block((0, 2), (0, 12))
    assert COMBINE["row"] in fig.axes[0].get_title()


@pytest.mark.parametrize("a_split", ["column", "row"])
@pytest.mark.parametrize("b_split", ["column", "row"])
def test_mlp_shards_follow_shard_plan(a_split, b_split):
    fig = draw_mlp_shards(a_split, b_split, 4, HIDDEN, FFN)
    for name, kind, shape in (("A", a_split, (HIDDEN, FFN)), ("B", b_split, (FFN, HIDDEN))):
        plan = shard_plan(kind, 4, shape)
        for r in range(4):
            assert cells(fig, f"{name} rank {r}") == block(plan.rows[r], plan.cols[r])


@pytest.mark.parametrize("ranks", [1, 2, 4, 8])
def test_megatron_choice_is_exact_with_one_all_reduce_of_the_closed_form(ranks):
    rows = sync_rows("column", "row", ranks)
    assert [r["collective"] for r in rows] == ["all-reduce"]
    ring = 2 * (ranks - 1) * TOKENS * HIDDEN * 4 // ranks  # 2(N-1)/N of (t, h) fp32
    forward = [s for s in block_steps("mlp", ranks, TOKENS, HIDDEN, FFN) if s.phase == "forward"]
    assert rows[0]["bytes/rank"] == ring == bytes_per_rank(forward)[0]
    _, text = mlp_split_frame("column", "row", ranks, figure=False)
    assert "exact" in text and "Megatron" in text and "WRONG" not in text


@pytest.mark.parametrize("ranks", [2, 4, 8])
def test_other_choices_cost_more_and_row_a_is_wrong(ranks):
    col_col = sync_rows("column", "column", ranks)
    assert [r["bytes/rank"] for r in col_col] == [(ranks - 1) * TOKENS * FFN * 4 // ranks,  # all-gather (t, f)
                                                   (ranks - 1) * TOKENS * HIDDEN * 4 // ranks]
    assert "exact" in mlp_split_frame("column", "column", ranks, figure=False)[1]
    megatron = sync_rows("column", "row", ranks)[0]["bytes/rank"]
    for b_split in ("column", "row"):
        error = split_error("row", b_split, ranks, *mlp_inputs())
        assert error > 0.1  # GeLU of partial sums: far off, not rounding
        rows = sync_rows("row", b_split, ranks)
        # B by rows only needs its own column block of GeLU(X·A): a reduce-scatter; B by columns all of it
        want = {"row": ("reduce-scatter", (ranks - 1) * TOKENS * FFN * 4 // ranks),
                "column": ("all-reduce", 2 * (ranks - 1) * TOKENS * FFN * 4 // ranks)}[b_split]
        assert (rows[0]["where"], rows[0]["collective"], rows[0]["bytes/rank"]) == ("before GeLU", *want)
        assert sum(r["bytes/rank"] for r in rows) > megatron
        text = mlp_split_frame("row", b_split, ranks, figure=False)[1]
        assert f"WRONG without summing X·A before GeLU: max error {error:.3g}" in text


def test_one_rank_is_always_exact():
    for a_split in ("column", "row"):
        assert "exact" in mlp_split_frame(a_split, "column", 1, figure=False)[1]


@pytest.mark.parametrize("bad", [dict(a_split="diag"), dict(b_split="rows"), dict(ranks=3)])
def test_explorer_rejects_bad_knobs(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        mlp_split_frame(**bad)


def test_explorer_widget_redraws_on_a_knob():
    box = mlp_explorer()
    chart, text = box.children[2:4]
    before = chart.scene
    assert before["marks"] and "exact" in text.value
    box.children[0].children[0].value = "row"  # A by rows
    assert "WRONG" in text.value and chart.scene != before and "WRONG" in chart.alt


def test_steps_text_and_figure_are_block_steps():
    steps = block_steps("mlp", 4, TOKENS, HIDDEN, 16)
    lines = steps_text(steps).splitlines()
    assert len(lines) == 1 + len(steps)
    assert [line.split()[2] for line in lines[1:]] == [s.name for s in steps]
    fig = draw_tp_steps(steps, current=3)
    boxes = [p for p in fig.axes[0].patches if (p.get_gid() or "").startswith("step-")]
    kinds = [p.get_gid() for p in boxes]
    assert kinds.count("step-comm") == count_collectives(steps, "forward") + count_collectives(steps, "backward") == 2
    assert kinds.count("step-identity") == 2  # f forward and g backward do nothing
    assert [p.get_linewidth() for p in boxes].count(2.5) == 1  # only the current step is outlined
    assert "all-reduce, 384 B sent per rank" in step_frame(3, steps)
    assert "no communication" in step_frame(0, steps)
    with pytest.raises(ValueError, match="k="):
        step_frame(len(steps), steps)


def test_real_run_counts_sit_beside_the_plan():
    real = run_tp(2, "mlp", compare_torch=False)
    steps = plan_steps(real)
    assert steps == block_steps("mlp", 2, 8, 8, 16, itemsize=4)  # run_tp's shapes: (2·4) tokens, h 8, ffn 16
    line = real_counts_line(real)
    assert "forward all-reduce ×1 (plan 1), backward ×1 (plan 1)" in line
    assert f"bytes sent per rank {real['bytes_sent_per_rank']} (plan {real['plan_bytes_sent_per_rank']})" in line
    assert steps_text(steps, real).endswith(line)
    assert "real run: forward all-reduce ×1" in step_frame(3, steps, real)
    texts = [t.get_text() for t in draw_tp_steps(steps, real=real).axes[0].texts]
    assert line.replace("; ", ";\n", 1) in texts  # two lines: 10 pt text fits the figure's width
    player = steps_player(steps, real)
    player.value = 7
    assert "backward" in player.captions[player.value] and len(player.frames) == len(steps)


# ---------------------------------------------------------------- the lesson's text agrees with its numbers

def lesson_cells():
    import json
    from pathlib import Path
    nb = json.loads((Path(__file__).resolve().parents[2] / "notebooks" / "05_tensor_parallel.ipynb").read_text())
    return {c["id"]: c for c in nb["cells"]}


def test_tp_or_zero3_text_states_what_the_cell_computes():
    import re

    from simlab.sim.tensor_parallel_choices import tp_or_zero3
    cells = lesson_cells()
    text, code = "".join(cells["ed936032"]["source"]), cells["l5-tp-or-zero3"]
    kwargs = {k: int(v) for k, v in re.findall(r"(hidden|seq|ranks|microbatch)=(\d+)", "".join(code["source"]))}
    assert kwargs == {"hidden": 25600, "seq": 2048, "ranks": 8, "microbatch": 1} and "$h$ = 25600" in text
    got, n = tp_or_zero3(**kwargs), kwargs["ranks"]
    assert f"needs {got['whole'] / 1e9:.0f} GB" in text  # "one MLP alone needs 84 GB"
    assert text.count(f"{got['tp_state'] / 1e9:.1f} GB") == 2  # stored state, and the transient gather
    assert f"{got['zero3_state'] / 1e9:.1f}" == f"{got['tp_state'] / 1e9:.1f}" == f"{got['zero3_gather'] / 1e9:.1f}"
    assert f"TP = {n} and ZeRO-3 over {n} GPUs" in text and f"cut {n} ways" in text
    assert got["zero3_activations"] == n * got["tp_activations"]  # "cut 8 ways"
    assert f"{n} GPUs mean a global batch of at least {n} sequences" in text
    assert "twice per MLP per sample" in text and got["tp_sent_per_sample"] == 2 * (
        2 * (n - 1) * kwargs["seq"] * kwargs["hidden"] * 2 // n)
    question = " ".join("".join(cells["l5-predict-zero3"]["source"]).split())
    assert f"sequences of {kwargs['seq']} tokens, {n} GPUs" in question and "($b$ = 1;" in question
    printed = "".join(code["outputs"][0]["text"])
    assert f"{got['zero3_gather'] / 1e9:.2f} GB" in printed
    assert f"b = 1   {got['tp_sent_per_sample'] / 1e9:.2f} GB   {got['zero3_sent_per_sample'] / 1e9:.2f} GB" in printed
    assert f"sends {got['zero3_sent_per_sample'] / got['tp_sent_per_sample']:.1f}× TP's bytes" in printed


def test_zero3_is_charged_per_micro_batch_in_text_and_output():
    """N1 of issue 23: ZeRO-3 gathers and reduces once per micro-batch (lesson 3, sim.hybrid_time), not once per
    step; the break-even is a micro-batch size, printed, and the prose types none of the printed numbers."""
    from simlab.sim.tensor_parallel_choices import tp_or_zero3
    cells = lesson_cells()
    bullets = " ".join("".join(cells["ed936032"]["source"]).split())
    verdict = " ".join("".join(cells["l5-fit-verdict"]["source"]).split())
    assert "whatever the batch" not in bullets + verdict and "once per **micro-batch**" in bullets
    got = tp_or_zero3(hidden=25600, seq=2048, ranks=8)
    printed = "".join(cells["l5-zero3-microbatch"]["outputs"][0]["text"])
    assert got["break_even_microbatch"] == 6 * 25600 / (8 * 2048)  # b·s = 6h/N, as the verdict says
    assert f"once b > {got['break_even_microbatch']:.3g} sequences" in printed and "$6h/N$" in verdict
    assert f"6h/N = {6 * 25600 // 8:,} tokens" in printed
    for b in (1, 2, 4, 8, 16, 32):  # each row: ZeRO-3's bytes per sequence fall as 1/b, TP's stay
        at = tp_or_zero3(hidden=25600, seq=2048, ranks=8, microbatch=b)
        assert f"{b:<25}{at['zero3_sent_per_sample'] / 1e9:.2f} GB" in printed
    assert f"{got['zero3_kept_state'] / 1e9:.2f} GB of state per GPU, ZeRO-1's" in printed
    assert "ZeRO-1's memory (printed above)" in verdict and "(printed above)" in verdict
    for typed in (f"{got['break_even_microbatch']:.3g}", "75", f"{got['zero3_kept_state'] / 1e9:.1f}",
                  f"{got['zero3_sent_per_sample'] / got['tp_sent_per_sample']:.1f}"):
        assert typed not in verdict, typed


def test_the_lesson_states_its_prerequisites_predicts_and_links_on():
    cells = lesson_cells()
    title = "".join(cells["5f0e2589"]["source"])
    assert "**Before you start.**" in title and "`torch.autograd.Function`" in title
    prompts = [c for c in cells.values() if "".join(c["source"]).startswith("**Predict, then run.**")]
    assert len(prompts) >= 2
    order = list(cells)
    assert order.index("l5-predict-torch") + 1 == order.index("20103c53")  # asked right before the run
    assert order.index("l5-predict-zero3") + 1 == order.index("l5-tp-or-zero3")
    verdict = "".join(cells["l5-fit-verdict"]["source"])
    assert "**Next:** [Lesson 6 — Choosing a strategy](06_choosing_a_strategy.ipynb)" in verdict
    assert "(../exercises/05_tensor_parallel.ipynb)" in verdict


def test_the_lesson_names_the_pre_activation_gradient_as_the_plan_does():
    cells = lesson_cells()
    text = "".join(cells["c18b8c37"]["source"])
    assert "$U_r = X·A_r$" in text and "$dU_r = (dZ·B_r^T)⊙\\mathrm{GeLU}'(U_r)$" in text
    printed = "".join(cells["a032af59"]["outputs"][0]["text"])
    assert printed.strip() == steps_text(block_steps("mlp", 4, tokens=8, hidden=8, inner=16, itemsize=4)).strip()
    assert "dY_r" not in json_dump(cells)


def json_dump(cells) -> str:
    import json
    return json.dumps(cells, ensure_ascii=False)


def test_the_primer_paragraph_matches_the_split_choices():
    """'no concat between A and B' for Megatron's pair; the column-column choice is the one that concatenates."""
    text = " ".join("".join(lesson_cells()["c3981c71"]["source"]).split())  # line breaks are not the claim
    assert "concatenated, then redistributed" in text and "never concatenated" in text
    assert [r["collective"] for r in sync_rows("column", "row", 4)] == ["all-reduce"]
    assert sync_rows("column", "column", 4)[0]["where"] == "between A and B"
    assert sync_rows("column", "column", 4)[0]["collective"] == "all-gather"


def test_the_shortcut_errors_the_text_compares_are_the_printed_ones():
    """'It is not the 12 printed above': the broken MLP's error as printed, and the table's shortcut errors
    differ from it, as the sentence says (each choice keeps another part of the partial sums)."""
    from simlab.sim.tensor_parallel import broken_mlp
    from simlab.sim.tensor_parallel_choices import mlp_inputs, split_error
    cells = lesson_cells()
    inputs = mlp_inputs(seed=0)
    broken = f"{broken_mlp(4, *inputs).error:.3g}"
    printed = "".join(cells["2a2189cc"]["outputs"][0]["text"])
    assert f"max |split - unsplit| = {broken}\n" in printed
    text = " ".join("".join(cells["30473691"]["source"]).split())
    assert f"It is not the {broken} printed above" in text
    table = "".join(cells["d4abf418"]["outputs"][0]["text"])
    for b_split in ("row", "column"):
        shortcut = f"{split_error('row', b_split, 4, *inputs):.3g}"
        assert shortcut != broken and f"max error {shortcut} " in table
