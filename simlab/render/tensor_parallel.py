"""Lesson 5's pictures of tensor parallelism (TP): who holds which slice of a weight, which input
each rank sees, how the pieces combine, and where the f and g collectives sit in a block.

- `draw_split`: X · W = Y for one `split_linear` result, every rank's shard in its own colour. Column
  split: X is whole on every rank (grey), each rank makes a block of Y's columns — concatenated.
  Row split: each rank sees a block of X's columns, makes a whole-size partial Y — summed.
- `draw_mlp_shards`: A and B of GeLU(X·A)·B coloured by the chosen splits (the explorer's picture).
- `draw_tp_steps`: a block's forward (down, left) and backward (up, right) from `block_steps`, f and g
  marked, the collectives in orange; the real run's counted collectives beside the plan's.

Layouts come from `simlab.sim.tensor_parallel` (`shard_plan`, `split_linear`, `block_steps`); this
module only draws them. Each function returns a matplotlib Figure (no pyplot state).

Text goes through `simlab.i18n._` (lesson 5's catalog: simlab/locale/zh/LC_MESSAGES/tensor_parallel.po). The
simulator prints English only, so the words of it this lesson shows — phases, collectives, step descriptions
(`SIM_WORDS`) — are marked here and translated where shown (`shown`); cells' gids stay English.

    >>> shard_owner(shard_plan("row", 2, (4, 6)), 3, 5)  # W[3, 5]: rows 2:4 are rank 1's
    1
"""
from __future__ import annotations

import re

from ..i18n import N_, _
from ..sim.tensor_parallel import COMBINE, shard_plan
from .style import ARROW_GREY, EDGE_GREY, RANK_COLORS, SHARED_COLOR, STEP_COLOR, SUM_COLOR, TAB_GREEN, new_ax

# The simulator's words this module shows, marked for translation here (the sim layer prints English only):
# `shown(text)` looks each up; tests/test_i18n_tensor_parallel.py checks they equal what the sim produces.
SIM_WORDS = (N_("forward"), N_("backward"), N_("all-reduce"), N_("all-gather"), N_("reduce-scatter"), N_("none"),
             N_("local"), N_("column-parallel"), N_("row-parallel"),
             N_("all-gather (concat columns of Y)"), N_("all-reduce (sum of partial Y)"),
             N_("identity: every rank already has X"), N_("identity: dZ is already whole on every rank"))
PARTIAL = re.compile(r"\bpartial\b")  # the sim's "Z_r = … (8, 8) partial", "dX_r = … (partial)": one word each
COUNTS = {"rank": N_("{n} rank{s}"), "process": N_("{n} process{es}"), "collective": N_("{n} collective{s}")}


def shown(text: str) -> str:
    """A word or step description from the simulator, in the language in force ("partial" inside a formula
    is translated as a word; the formula stays)."""
    whole = _(text) if text else text  # gettext maps "" to the catalog's header
    return whole if whole != text else PARTIAL.sub(lambda m: _("partial"), text)


def count_of(count: int, noun: str) -> str:
    """'1 rank', '4 ranks', '2 processes', '1 collective': never '1 ranks' (noun: a key of COUNTS)."""
    return _(COUNTS[noun]).format(n=count, s="" if count == 1 else "s", es="" if count == 1 else "es")


def rank_color(rank: int) -> str:
    return RANK_COLORS[rank % len(RANK_COLORS)]


def owner(ranges, i: int) -> int:
    """The rank whose [start, stop) range holds index i."""
    return next(r for r, (a, b) in enumerate(ranges) if a <= i < b)


def shard_owner(plan, i: int, j: int) -> int:
    """The rank whose slice of W (a `ShardPlan`) holds W[i, j]."""
    return next(r for r, ((r0, r1), (c0, c1)) in enumerate(zip(plan.rows, plan.cols)) if r0 <= i < r1 and c0 <= j < c1)


def _style(r) -> tuple[str, str]:
    """A cell's colour and gid: r is a rank, None (whole on every rank) or "sum" (partials added)."""
    if r is None:
        return SHARED_COLOR, "all"
    return (SUM_COLOR, "sum") if r == "sum" else (rank_color(r), f"rank {r}")


def _grid(ax, x0: float, top: float, shape, who, label: str, cell: float, name: str) -> float:
    """A matrix as cells, coloured by who(i, j) (see `_style`); gid "<name> <owner>" (`name` stays English
    whatever the label's language, so tests and the browser find cells the same way). Returns its right edge."""
    from matplotlib.patches import Rectangle
    rows, cols = shape
    for i in range(rows):
        for j in range(cols):
            color, gid = _style(who(i, j))
            ax.add_patch(Rectangle((x0 + j * cell, top - (i + 1) * cell), cell, cell, facecolor=color,
                                   edgecolor="white", linewidth=0.5, gid=f"{name} {gid}"))
    ax.text(x0 + cols * cell / 2, top + 0.1, label, ha="center", va="bottom", fontsize=10)
    return x0 + cols * cell


def _sign(ax, x: float, y: float, s: str) -> float:
    ax.text(x + 0.25, y, s, ha="center", va="center", fontsize=14)
    return x + 0.5


def _legend(ax, ranks: int, extra: dict) -> None:
    from matplotlib.patches import Patch
    handles = [Patch(facecolor=rank_color(r), label=f"rank {r}") for r in range(ranks)]
    handles += [Patch(facecolor=c, label=_(name)) for name, c in extra.items()]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=min(len(handles), 5),
              fontsize=10, frameon=False)


def draw_split(split, ax=None):
    """X · W = Y of a `split_linear` result: W's shards, the input each rank sees, and the combine step."""
    plan = split.plan
    b, (k, n) = split.inputs[0].shape[0], plan.shape  # X (b, in), W (in, out)
    # inches per cell: X, W and Y side by side (k + n + n cells) within ~6 in, so that the picture, shown in an
    # ~820-px notebook column, is not scaled down below its 10-pt text's 10 px
    cell = min(0.3, 4.0 / max(b, k, n), 6.0 / (k + 2 * n))
    col = plan.kind == "column"
    row_h = max(b, k) * cell
    parts_h = 0 if col else plan.ranks * (b * cell + 0.35)
    ax = new_ax(ax, (1.0 + 1.3 * (k + 2 * n) * cell + 1.0, 1.0 + 1.3 * max(row_h, b * cell + parts_h)))
    x = _grid(ax, 0, 0, (b, k), lambda i, j: None if col else owner(plan.rows, j), "X (b, in)", cell, "X")
    x = _grid(ax, _sign(ax, x, -b * cell / 2, "×"), 0, (k, n),
              lambda i, j: shard_owner(plan, i, j), "W (in, out)", cell, "W")
    x0 = _sign(ax, x, -b * cell / 2, "=")
    _grid(ax, x0, 0, (b, n), lambda i, j: owner(plan.cols, j) if col else "sum",
          _("Y (concat)") if col else _("Y (sum)"), cell, "Y")
    if not col:  # the partials each rank makes, whole-size, that the all-reduce adds
        for r in range(plan.ranks):
            top = -b * cell - 0.35 - r * (b * cell + 0.35)  # stacked under Y
            _grid(ax, x0, top, (b, n), lambda i, j, r=r: r, _("partial {r}").format(r=r), cell, "partial")
            ax.text(x0 - 0.15, top - b * cell / 2, "+" if r else "=", ha="right", va="center", fontsize=11)
    ax.set_xlim(-0.2, x0 + n * cell + 0.2)
    ax.set_ylim(-max(row_h, b * cell + parts_h) - 0.2, 0.6)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(_("{parallel} on {ranks}: combine by {combine}").format(
        parallel=shown(f"{plan.kind}-parallel"), ranks=count_of(plan.ranks, "rank"),
        combine=shown(COMBINE[plan.kind])), fontsize=10)
    _legend(ax, plan.ranks, {N_("every rank"): SHARED_COLOR} if col else {N_("sum of partials"): SUM_COLOR})
    return ax.figure


def by_kind(kind: str) -> str:
    """'by columns' / 'by rows': how a matrix of GeLU(X·A)·B is split (kind: 'column' or 'row')."""
    return _(N_("by columns")) if kind == "column" else _(N_("by rows"))


def draw_mlp_shards(a_split: str, b_split: str, ranks: int, hidden: int, ffn: int, ax=None, title=None,
                    footer: str | None = None):
    """A (hidden, ffn) and B (ffn, hidden) of GeLU(X·A)·B, each cell in the colour of the rank holding it;
    `footer` (e.g. the real run's counts) goes under the legend, in green."""
    plans = [shard_plan(a_split, ranks, (hidden, ffn)), shard_plan(b_split, ranks, (ffn, hidden))]
    cell = min(0.25, 4.0 / max(hidden, ffn))  # inches: the longer matrix side ≤ 4 in (400 px as shown)
    ax = new_ax(ax, (1.6 + (hidden + ffn) * cell + 0.8, 1.5 + max(hidden, ffn) * cell))
    x = _grid(ax, 0.0, 0, plans[0].shape, lambda i, j: shard_owner(plans[0], i, j),
              f"A {by_kind(plans[0].kind)} {plans[0].shape}", cell, "A")
    ax.text(x + 0.6, -min(hidden, ffn) * cell / 2, "GeLU →", ha="center", va="center", fontsize=12)
    x = _grid(ax, x + 1.2, 0, plans[1].shape, lambda i, j: shard_owner(plans[1], i, j),  # 1.2 in: room for "GeLU →"
              f"B {by_kind(plans[1].kind)} {plans[1].shape}", cell, "B")
    ax.set_xlim(-0.2, x + 0.2)
    ax.set_ylim(-max(hidden, ffn) * cell - 0.2, 0.6)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(title or _("GeLU(X·A)·B on {ranks}").format(ranks=count_of(ranks, "rank")), fontsize=10)
    _legend(ax, ranks, {})
    if footer:
        ax.figure.supxlabel(footer, fontsize=10, color=TAB_GREEN, gid="real")  # constrained layout makes room
    return ax.figure


def step_kind(step) -> str:
    """'comm' (runs a collective), 'identity' (f or g in the direction where it does nothing) or 'local'."""
    if step.collective != "none":
        return "comm"
    return "identity" if step.name in ("f", "g") else "local"


def _box_label(step) -> str:
    compute = shown(step.compute)
    what = compute if len(compute) <= 44 else compute[:41] + "…"
    if step.collective != "none":
        return _("{op}: {collective}, {nbytes} B/rank").format(
            op=step.name, collective=shown(step.collective), nbytes=step.bytes_sent[0]) + f"\n{what}"
    return f"{step.name}\n{what}" if step.name in ("f", "g") else what


def draw_tp_steps(steps, current: int | None = None, real: dict | None = None, ax=None, title=None):
    """Forward down the left column, backward up the right (f's and g's two halves face each other).

    `current` outlines one step (the player); `real` (a `run_tp` result) adds its counted collectives.
    """
    from matplotlib.patches import FancyBboxPatch
    fwd = [i for i, s in enumerate(steps) if s.phase == "forward"]
    bwd = [i for i, s in enumerate(steps) if s.phase == "backward"]
    ax = new_ax(ax, (11, 1.0 + 1.0 * max(len(fwd), len(bwd))))
    place = {i: (0.0, -row) for row, i in enumerate(fwd)}  # forward top-down; backward bottom-up beside it
    place |= {i: (6.0, -(len(bwd) - 1 - row)) for row, i in enumerate(bwd)}
    for i, (x, y) in place.items():
        s, kind = steps[i], step_kind(steps[i])
        ax.add_patch(FancyBboxPatch((x, y - 0.35), 5.0, 0.7, boxstyle="round,pad=0.02", gid=f"step-{kind}",
                                    facecolor=STEP_COLOR[kind], edgecolor="black" if i == current else EDGE_GREY,
                                    linewidth=2.5 if i == current else 0.8))
        ax.text(x + 2.5, y, _box_label(s), ha="center", va="center", fontsize=10,
                fontweight="bold" if kind == "comm" else "normal")
    for order, sign in ((fwd, -1), (bwd, 1)):
        for a, b in zip(order, order[1:]):  # the direction the data flows
            (xa, ya), (xb, yb) = place[a], place[b]
            ax.annotate("", xy=(xb + 2.5, yb - sign * 0.36), xytext=(xa + 2.5, ya + sign * 0.36),
                        arrowprops={"arrowstyle": "-|>", "color": ARROW_GREY})
    rows = max(len(fwd), len(bwd))
    ax.text(2.5, 0.55, _("forward ↓"), ha="center", fontsize=10, fontweight="bold")
    ax.text(8.5, 0.55, _("backward ↑"), ha="center", fontsize=10, fontweight="bold")
    if real is not None:  # two lines: the counts, then the bytes (after the first "; " or, in Chinese, "；")
        ax.text(5.5, -rows + 0.2, re.sub(r"(; |；)", r"\1\n", real_counts_line(real), count=1).replace(" \n", "\n"),
                ha="center", va="top",
                fontsize=10, color=TAB_GREEN, gid="real")
    ax.set_xlim(-0.2, 11.2)
    ax.set_ylim(-rows - (0.9 if real is not None else 0.3), 0.9)
    ax.axis("off")
    ax.set_title(title or _("f and g: one all-reduce forward (g), one backward (f)"), fontsize=10)
    return ax.figure


def real_counts_line(real: dict) -> str:
    """The real run's counted all-reduces and bytes beside the plan's (both numbers from `run_tp`)."""
    return _("real run, {processes}: forward all-reduce ×{forward} (plan {plan_forward}), backward ×{backward} "
             "(plan {plan_backward}); bytes sent per rank {sent} (plan {plan_sent})").format(
        processes=count_of(real["world_size"], "process"), forward=real["allreduce_calls_forward"],
        plan_forward=real["plan_allreduce_calls_forward"], backward=real["allreduce_calls_backward"],
        plan_backward=real["plan_allreduce_calls_backward"], sent=real["bytes_sent_per_rank"],
        plan_sent=real["plan_bytes_sent_per_rank"])
