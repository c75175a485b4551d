"""Lesson 7's pictures of expert parallelism (EP): where a mixture of experts sends its tokens, how many each
expert keeps, what the all-to-all moves, which ranks sum which gradients, and what a real run measured.

Text first (what nbval compares):
- `routing_text(routing, ep=1)`: per token its top-k experts and weights (✗: dropped), per expert its demand,
  capacity, kept and dropped choices, then the drops and the imbalance.
- `dispatch_text(plan)`: the send matrix S (token rows rank i → rank j) and each rank's bytes: dispatch, combine,
  the counts, and a forward + backward.
- `layout_text(layout)`: expert-data parallel — which ranks hold which experts, which ranks sum expert gradients
  and which the dense ones (Megatron's groups), and the bytes of each all-reduce.
- `run_text(result)`: a real run (`parity.expert_parallel.run_expert_parallel`) against one process and the plan.
Figures (matplotlib, no pyplot state): `draw_load(routing, ep=1)` (tokens per expert, the capacity line, the
dropped part hatched red, each expert in the colour of the rank that holds it) and `draw_dispatch(plan)` (S as a
heat map; its diagonal stays on the rank).

What is drawn comes from the simulator (`sim.expert_parallel`, `sim.expert_parallel_dispatch`,
`sim.expert_parallel_layout`); this module only lays it out. Text goes through `simlab.i18n._` (lesson 7's
catalog simlab/locale/zh/LC_MESSAGES/expert_parallel.po).

    >>> from simlab.sim.expert_parallel import balanced_logits, route
    >>> print(routing_text(route(balanced_logits(4, 4, 1), 1, 1.0), ep=2, show=0).splitlines()[-1])
    dropped: 0 of 4 choices; tokens with no expert (the residual path only): 0; imbalance max/mean load = 1.00
"""
from __future__ import annotations

import functools

import numpy as np

from .._checks import MAX_RANKS, check_divisible, check_int, check_number
from ..i18n import N_, _
from ..sim.expert_parallel import Routing, random_logits, route
from ..sim.expert_parallel_dispatch import owner
from .style import EDGE_GREY, INK, MATCH_COLOR, MIN_FONT, PAPER, PAPER_GREY, new_ax, rows_table
from .tensor_parallel import count_of, rank_color

DROPPED_COLOR = MATCH_COLOR[False]  # a choice an expert had no room for
HEAT = "Blues"  # the send matrix's shades: more rows, darker
TOKENS = N_("{n} token{s}")
TOLERANCE = 1e-5  # fp32: a sum of a few products, added in another order on the ranks
MAX_CHOICES, MAX_EXPERTS = 1 << 16, 256  # tokens·ep·top_k routed, experts: a picture's worth, routed in milliseconds


def tokens_of(n: int) -> str:
    """'1 token', '16 tokens' (`tensor_parallel.count_of` counts ranks and processes)."""
    return _(TOKENS).format(n=n, s="" if n == 1 else "s")


MAX_CAPACITY = 1000.0


def capacity_factor(capacity: float) -> float | None:
    """The course's capacity knob (`hybrid.Plan.capacity`: 0 = dropless) as `sim.expert_parallel.route` takes it."""
    # at a factor of E/k an expert may keep every token; 1000 is past that for any MoE the course draws or runs
    return None if check_number("capacity", capacity, 0.0, MAX_CAPACITY) == 0 else capacity


def ep_routings(tokens: int, experts: int, top_k: int, capacity: float, ep: int, seed: int = 0,
                skew: float = 0.0) -> list:
    """One `Routing` per rank of an expert-parallel group of `ep`: one draw of ep·tokens router logits
    (`random_logits(…, seed, skew)`), rank r routing rows [r·tokens, (r+1)·tokens) as its own group (capacity
    counts per rank's tokens, as GShard's groups and Megatron's local tokens). `capacity` 0 is dropless."""
    check_int("tokens", tokens, 1)
    check_int("ep", ep, 1, MAX_RANKS)
    check_divisible("experts", check_int("experts", experts, 1, MAX_EXPERTS), "ep", ep)
    check_int("top_k", top_k, 1, experts)
    if tokens * ep * top_k > MAX_CHOICES:  # the drop rule is a loop over every choice
        raise ValueError(f"tokens={tokens}: tokens × ep × top_k = {tokens * ep * top_k:,} choices to route; at most "
                         f"{MAX_CHOICES:,} here")
    factor = capacity_factor(capacity)
    logits = random_logits(tokens * ep, experts, seed, skew)  # (ep·T, E)
    return [route(logits[r * tokens:(r + 1) * tokens], top_k, factor) for r in range(ep)]


def merged(routings) -> Routing:
    """The group's routings as one (their tokens one after another): its load is what each expert computes."""
    return Routing(np.concatenate([r.experts for r in routings]), np.concatenate([r.weights for r in routings]),
                   np.concatenate([r.kept for r in routings]), routings[0].num_experts, routings[0].capacity)


def _choice(routing, t: int, c: int) -> str:
    mark = "" if routing.kept[t, c] else " ✗"
    return f"e{routing.experts[t, c]} {routing.weights[t, c]:.2f}{mark}"


def routing_summary(routing) -> str:
    """One line: choices dropped, tokens left with no expert, the imbalance."""
    return _("dropped: {dropped} of {choices} choices; tokens with no expert (the residual path only): {tokens}; "
             "imbalance max/mean load = {imbalance}").format(
        dropped=routing.dropped, choices=routing.tokens * routing.top_k, tokens=routing.tokens_dropped,
        imbalance=f"{routing.imbalance:.2f}")


def routing_head(routings, ep: int = 1) -> str:
    """What was routed: tokens, top-k of E, the capacity (of one group, or of each rank's tokens)."""
    routing, ep, _cap = group_load(routings, ep)
    if isinstance(routings, Routing):
        return _("{tokens}, top-{top_k} of {experts} experts: {capacity}").format(
            tokens=tokens_of(routing.tokens), top_k=routing.top_k, experts=routing.num_experts,
            capacity=_("no capacity limit (dropless)") if routing.capacity is None else
            _("an expert keeps at most {capacity} of them").format(capacity=routing.capacity))
    return _("{ranks} × {tokens} each, top-{top_k} of {experts} experts: {capacity}").format(
        ranks=count_of(ep, "rank"), tokens=tokens_of(routing.tokens // ep), top_k=routing.top_k,
        experts=routing.num_experts, capacity=_("no capacity limit (dropless)") if routing.capacity is None else
        _("an expert keeps at most {capacity} of each rank's tokens").format(capacity=routing.capacity))


def routing_text(routings, ep: int = 1, show: int = 8) -> str:
    """The routing of one group (a `Routing`) or of an EP group's ranks (a list, `ep_routings`): the first `show`
    tokens' choices (expert and router weight, ✗ where dropped), every expert's demand, capacity (ep · C for a
    list), kept and dropped choices and the EP rank holding it, then `routing_summary`."""
    routing, ep, cap = group_load(routings, ep)
    lines = [routing_head(routings, ep)]
    if show > 0:
        rows = [{_("token"): str(t), _("experts, weights (✗ dropped)"): ", ".join(
            _choice(routing, t, c) for c in range(routing.top_k))} for t in range(min(show, routing.tokens))]
        lines.append(rows_table(rows))
        if routing.tokens > show:
            more = routing.tokens - show
            lines.append(_("… and {n} more token{s}").format(n=more, s="" if more == 1 else "s"))
    demand, load = routing.demand, routing.load
    lines.append(rows_table([{_("expert"): f"e{e}", _("on rank"): str(owner(e, routing.num_experts, ep)),
                              _("demand"): int(demand[e]), _("capacity"): "—" if cap is None else str(cap),
                              _("kept"): int(load[e]), _("dropped"): int(demand[e] - load[e])}
                             for e in range(routing.num_experts)]))
    lines.append(routing_summary(routing))
    return "\n".join(lines)


def matrix_rows(matrix, corner: str) -> list[dict]:
    """An N×N matrix as table rows: "r{i}" down the side, "→ r{j}" across."""
    return [{corner: f"r{i}", **{f"→ r{j}": int(v) for j, v in enumerate(row)}} for i, row in enumerate(matrix)]


def dispatch_text(plan) -> str:
    """The all-to-all of one MoE layer: S (rows rank i sends rank j; the diagonal stays on the rank), then per rank
    its experts, the rows its experts compute and the bytes it sends in each exchange."""
    local = plan.experts // plan.ep
    head = _("send matrix S on {ranks} (token rows from rank i to rank j; the diagonal stays on the rank), "
             "{hidden} values of {itemsize} B per row").format(ranks=count_of(plan.ep, "rank"), hidden=plan.hidden,
                                                             itemsize=plan.itemsize)
    rows = [{_("rank"): f"r{i}", _("experts"): f"e{i * local}–e{(i + 1) * local - 1}",
             _("rows computed"): plan.received_rows[i], _("dispatch B"): plan.dispatch_bytes[i],
             _("combine B"): plan.combine_bytes[i], _("counts B"): plan.counts_bytes[i],
             _("forward + backward B"): plan.bytes_sent_per_rank[i]} for i in range(plan.ep)]
    tail = _("dispatch sends row i of S off the diagonal, combine column i; the backward sends both again the "
             "other way: 2 × (dispatch + combine) + counts")
    return "\n".join([head, rows_table(matrix_rows(plan.send_counts, "S")), rows_table(rows), tail])


def _per_rank(nbytes: list[int]) -> str:
    """One number when every rank sends the same, else the list (a ring's chunks can be uneven)."""
    return f"{nbytes[0]:,}" if len(set(nbytes)) == 1 else str(nbytes)


def layout_text(layout) -> str:
    """Expert-data parallel on `layout.mesh`: every rank's experts and groups (`EDPLayout.lines`), then the
    groups as Megatron names them and the bytes each gradient all-reduce sends per rank."""
    m = layout.mesh
    head = _("{experts} experts on {ranks}: ep = {ep} (experts split), dp = {dp} (replicas)").format(
        experts=layout.experts, ranks=count_of(m.world_size, "rank"), ep=m.ep, dp=m.dp)
    groups = [_("all-to-all (expert-parallel) groups: {groups}").format(groups=layout.ep_groups),
              _("expert gradients: all-reduce over the expert-data-parallel groups {groups}, {nbytes} B per "
                "rank").format(groups=layout.expert_groups, nbytes=_per_rank(layout.expert_allreduce_bytes)),
              _("dense gradients: all-reduce over the data-parallel groups {groups}, {nbytes} B per rank").format(
                  groups=layout.dense_groups, nbytes=_per_rank(layout.dense_allreduce_bytes))]
    return "\n".join([head] + [_(line) for line in layout.lines()] + groups)


def _tick(ok: bool) -> str:
    return "✓" if ok else "✗"


def run_text(result: dict, tolerance: float = TOLERANCE) -> str:
    """A real run beside one process, torch's all-to-all and the simulator's plan: the verdicts (within
    `tolerance`, so the text is the same on every machine; the differences themselves are in `result`), the
    bytes, the routing and the drops."""
    r = result
    close = lambda key: _tick(r[key] is not None and r[key] <= tolerance)  # noqa: E731 — one verdict per key
    return "\n".join([
        _("real run on {processes} ({backend}): ep = {ep}, dp = {dp}, {experts} experts, top-{top_k}, capacity "
          "{capacity}").format(processes=count_of(r["world_size"], "process"), backend=r["backend"], ep=r["ep"],
                               dp=r["dp"], experts=r["experts"], top_k=r["top_k"],
                               capacity="—" if r["capacity"] is None else r["capacity"]),
        _("outputs and every gradient within {tolerance} of one process {ref}, and of torch's all-to-all "
          "{torch}").format(tolerance=f"{tolerance:g}", ref=close("max_abs_diff_vs_reference"),
                            torch=close("max_abs_diff_vs_torch")),
        _("bytes sent per rank: {real} real, {plan} planned {tick}").format(
            real=r["bytes_sent_per_rank"], plan=r["plan_bytes_sent_per_rank"],
            tick=_tick(r["bytes_sent_per_rank"] == r["plan_bytes_sent_per_rank"])),
        _("routing as the simulator's {routing}; trace as the plan's {trace}").format(
            routing=_tick(r["routing_matches_simulator"]), trace=_tick(r["trace_matches_plan"])),
        _("choices dropped per rank {dropped}; tokens with no expert per rank {tokens}").format(
            dropped=r["dropped_per_rank"], tokens=r["tokens_dropped_per_rank"])])


# ---------------------------------------------------------------- figures

def group_load(routings, ep: int = 1) -> tuple[Routing, int, int | None]:
    """(the routing whose load is drawn, the EP size colouring its experts, the capacity line): one `Routing` as
    it is; a list (one per rank of the EP group, `ep_routings`) merged, its line at ep · C — each rank's tokens
    may fill C places of an expert, so ep · C in all (a rank can still drop below the line: capacity counts
    per rank)."""
    if isinstance(routings, Routing):
        return routings, ep, routings.capacity
    routings = list(routings)
    cap = routings[0].capacity
    return merged(routings), len(routings), None if cap is None else cap * len(routings)


def load_bars(routing, ep: int = 1) -> list[tuple[int, int, int, str]]:
    """(expert, kept, dropped, colour of the rank holding it) for each expert: what `draw_load` and
    `expert_parallel_scene.moe_scene` draw."""
    demand, load = routing.demand, routing.load
    return [(e, int(load[e]), int(demand[e] - load[e]), rank_color(owner(e, routing.num_experts, ep)))
            for e in range(routing.num_experts)]


def load_title(imbalance: float, dropped: int) -> str:
    """The load picture's title: the imbalance and the choices dropped."""
    return _("imbalance {imbalance}, {dropped} choices dropped").format(imbalance=f"{imbalance:.2f}", dropped=dropped)


def draw_load(routings, ep: int = 1, ax=None, title: str | None = None):
    """Tokens per expert as bars in the colour of the EP rank holding the expert, the choices it dropped stacked on
    top (hatched red), the capacity as a dashed line: the load imbalance made visible. `routings`: one group's
    `Routing`, or the EP group's list (`group_load`). Returns the Figure."""
    from matplotlib.patches import Patch
    routing, ep, cap = group_load(routings, ep)
    ax = new_ax(ax, (min(9.0, max(4.5, 0.45 * routing.num_experts + 1.5)), 3.6))
    for e, kept, dropped, colour in load_bars(routing, ep):
        ax.bar(e, kept, color=colour, edgecolor=PAPER, width=0.8)
        if dropped:
            ax.bar(e, dropped, bottom=kept, color=PAPER, edgecolor=DROPPED_COLOR, hatch="///", width=0.8)
    handles = [Patch(color=rank_color(r), label=_("experts on rank {rank}").format(rank=r)) for r in range(ep)]
    handles.append(Patch(facecolor=PAPER, edgecolor=DROPPED_COLOR, hatch="///", label=_("dropped")))
    if cap is not None:
        ax.axhline(cap, color=INK, linestyle="--", linewidth=1.2)
        ax.text(routing.num_experts - 0.5, cap, _("capacity {capacity}").format(capacity=cap), ha="right",
                va="bottom", fontsize=MIN_FONT, color=INK)
    every = -(-routing.num_experts // 16)  # at most 16 labels along the axis
    ax.set_xticks(range(0, routing.num_experts, every), [f"e{e}" for e in range(0, routing.num_experts, every)],
                  fontsize=MIN_FONT)
    ax.tick_params(axis="y", labelsize=MIN_FONT)
    ax.set_xlabel(_("expert"), fontsize=MIN_FONT)
    ax.set_ylabel(_("tokens (choices)"), fontsize=MIN_FONT)
    ax.set_title(title or load_title(routing.imbalance, routing.dropped), fontsize=MIN_FONT + 1, loc="left")
    ax.figure.legend(handles=handles, fontsize=MIN_FONT, frameon=False, loc="outside lower center",
                     ncol=min(len(handles), 4))
    ax.set_ylim(0, max(max(routing.demand), cap or 0) * 1.15 + 1)
    return ax.figure


@functools.lru_cache(maxsize=256)
def shade(fraction: float) -> str:
    """The heat map's colour for `fraction` (0 … 1) of the busiest cell, as "#rrggbb" (once per shade: matplotlib
    rebuilds a colormap on every lookup)."""
    import matplotlib
    from matplotlib.colors import to_hex
    return to_hex(matplotlib.colormaps[HEAT](0.1 + 0.8 * fraction))


def heat_cells(plan) -> list[tuple[int, int, int, str, str]]:
    """(i, j, rows, fill, text colour) for every cell of S: off the diagonal a shade of the busiest cell, the
    diagonal (it stays on the rank, no link) pale grey."""
    s = plan.send_counts
    off = [int(s[i, j]) for i in range(plan.ep) for j in range(plan.ep) if i != j]
    most = max(off, default=0) or 1
    cells = []
    for i in range(plan.ep):
        for j in range(plan.ep):
            frac = int(s[i, j]) / most
            fill = PAPER_GREY if i == j else shade(round(frac, 2))
            cells.append((i, j, int(s[i, j]), fill, PAPER if i != j and frac > 0.6 else INK))
    return cells


def draw_dispatch(plan, ax=None, title: str | None = None):
    """The send matrix S as a heat map: row i is what rank i sends, column j what rank j's experts receive; each
    cell says its token rows; the diagonal stays on the rank (grey, dashed). Returns the Figure."""
    n = plan.ep
    ax = new_ax(ax, (max(3.6, 0.7 * n + 2.2), max(3.0, 0.6 * n + 1.8)))
    from matplotlib.patches import Rectangle
    for i, j, rows, fill, ink in heat_cells(plan):
        ax.add_patch(Rectangle((j, i), 1, 1, facecolor=fill, edgecolor=EDGE_GREY if i == j else PAPER,
                               linestyle="--" if i == j else "-"))
        ax.text(j + 0.5, i + 0.5, str(rows), ha="center", va="center", fontsize=MIN_FONT, color=ink)
    ax.set_xlim(0, n)
    ax.set_ylim(n, 0)  # rank 0 on top, as the text table
    ax.set_xticks([j + 0.5 for j in range(n)], [f"r{j}" for j in range(n)], fontsize=MIN_FONT)
    ax.set_yticks([i + 0.5 for i in range(n)], [f"r{i}" for i in range(n)], fontsize=MIN_FONT)
    ax.set_xlabel(_("to rank (its experts)"), fontsize=MIN_FONT)
    ax.set_ylabel(_("from rank (its tokens)"), fontsize=MIN_FONT)
    ax.set_aspect("equal")
    ax.set_title(title or _("dispatch: token rows rank i → rank j"), fontsize=MIN_FONT + 1, loc="left")
    return ax.figure
