"""Lesson 7's expert-parallel pictures as scenes the browser draws (`render.chart`): the load per expert of a
mixture of experts (the explorer's MoE half) and the all-to-all of one layer, step by step.

- `moe_scene(tokens, experts, top_k, capacity, ep, seed)`: each of `ep` ranks routes its own `tokens` tokens
  (`expert_parallel.ep_routings`); a bar per expert — what it computes, in the colour of the EP rank holding it —
  the choices it dropped stacked on top (hatched red), the capacity line at ep · C; the readout (`alt`) says the
  drops, the imbalance and the rows each rank's experts compute. The picture `draw_load` draws, as data.
- `dispatch_scene(plan, step)`: one step of `DispatchPlan.steps()`: every rank's tokens above, its experts
  below, arrows for the rows an exchange moves (as thick as their count; a dashed one stays on the rank) or, for
  a rank's own work, a bar as long as its share of the busiest rank's (the experts' imbalance as idle time).

Everything drawn is the simulator's answer (`sim.expert_parallel`, `sim.expert_parallel_dispatch`); this module
only places it. One data unit is one expert (moe_scene) or one rank (dispatch_scene).

    >>> s = moe_scene(16, 8, 2, 1.0, 2, 0)
    >>> [m["tip"] for m in s["marks"] if m["kind"] == "rect"][:2]
    ['e0 (rank 0): 8 kept, 2 dropped', 'e0: 2 dropped']
"""
from __future__ import annotations

from ..i18n import N_, _
from ..sim.expert_parallel_dispatch import STEPS, dispatch_plan, owner
from .chart import arrow, axis, line, rect, scene, text
from .expert_parallel import (
    DROPPED_COLOR,
    ep_routings,
    group_load,
    load_bars,
    load_title,
    routing_head,
    routing_summary,
)
from .style import INK, PAPER, PAPER_GREY
from .tensor_parallel import count_of, rank_color

WIDTH, HEIGHT = 640, 280
BOX = 0.34  # half a rank's box, in ranks
LABELS_UP_TO = 4  # ranks: with more, the arrows' counts would overlap (the readout has S)
# the simulator's step names and phases (`STEPS`, `EPStep.phase`), marked here: sim/ never translates
STEP_WORDS = (N_("route"), N_("counts"), N_("dispatch"), N_("experts"), N_("combine"), N_("weighted sum"),
              N_("combine backward"), N_("dispatch backward"), N_("forward"), N_("backward"))


def _ticks(n: int) -> list[tuple[int, str]]:
    every = max(1, -(-n // 16))  # at most 16 labels along the axis
    return [(e, f"e{e}") for e in range(0, n, every)]


def rows_line(plan) -> str:
    """The rows each rank's experts compute (S's column sums) and how uneven they are."""
    rows = plan.received_rows
    mean = sum(rows) / len(rows)
    return _("rows each rank's experts compute: {rows} (busiest / mean = {ratio})").format(
        rows=rows, ratio=f"{max(rows) / mean:.2f}" if mean else "—")


def moe_scene(tokens: int, experts: int, top_k: int, capacity: float, ep: int, seed: int = 0, *,
              skew: float = 0.0, title: str | None = None) -> dict:
    """The explorer's MoE half: load per expert with the capacity line and the drops, experts coloured by the EP
    rank holding them; `capacity` is the factor (0: dropless), `tokens` each rank's own. The `alt` (readout):
    what was routed, the drops and imbalance, and the rows each rank's experts compute."""
    routings = ep_routings(tokens, experts, top_k, capacity, ep, seed, skew)
    routing, ep, cap = group_load(routings)
    marks = []
    for e, kept, dropped, colour in load_bars(routing, ep):
        holder = owner(e, experts, ep)
        marks.append(rect(e - 0.4, e + 0.4, 0, kept, colour, stroke=PAPER, width=0.5,
                          tip=_("e{expert} (rank {rank}): {kept} kept, {dropped} dropped").format(
                              expert=e, rank=holder, kept=kept, dropped=dropped)))
        if dropped:
            marks.append(rect(e - 0.4, e + 0.4, kept, kept + dropped, PAPER, stroke=DROPPED_COLOR, width=1.0,
                              hatch=DROPPED_COLOR, tip=_("e{expert}: {dropped} dropped").format(
                                  expert=e, dropped=dropped)))
    top = max(max(int(d) for d in routing.demand), cap or 0) * 1.3 + 1
    if cap is not None:
        marks += [line([-0.5, experts - 0.5], [cap, cap], INK, dash=True, width=1.2),
                  text(experts - 0.5, cap, _("capacity {capacity}").format(capacity=cap), anchor="end",
                       baseline="bottom", dy=2)]
    plan = dispatch_plan(routings, hidden=1)
    alt = "\n".join([routing_head(routings), routing_summary(routing), rows_line(plan)])
    legend = [[_("experts on rank {rank}").format(rank=r), rank_color(r)] for r in range(ep)]
    legend.append([_("dropped"), DROPPED_COLOR, "hatch"])
    return scene(marks, width=WIDTH, height=HEIGHT, alt=alt,
                 title=title or load_title(routing.imbalance, routing.dropped),
                 x=axis(-0.6, experts - 0.4, _("expert"), _ticks(experts)),
                 y=axis(0, top, _("tokens (choices)")), legend=legend)


# ---------------------------------------------------------------- the all-to-all, step by step

TOKENS_Y, EXPERTS_Y = 1.0, 0.0  # rows of the picture: each rank's tokens above, its experts below
DOWN = ("counts", "dispatch", "combine backward")  # exchanges from the tokens' side to the experts'
UP = ("combine", "dispatch backward")  # and back


WORK = {"route": N_("rank {rank}: {work} tokens routed"), "experts": N_("rank {rank}: {work} rows through its experts"),
        "weighted sum": N_("rank {rank}: {work} tokens summed")}  # a local step's work, as its tip says it


def _boxes(plan, step) -> list[dict]:
    local = plan.experts // plan.ep
    marks = []
    for r in range(plan.ep):
        marks.append(rect(r - BOX, r + BOX, TOKENS_Y - 0.13, TOKENS_Y + 0.13, PAPER_GREY, stroke=rank_color(r),
                          width=1.5, label=[_("tokens r{rank}").format(rank=r), f"r{r}"],
                          tip=_("rank {rank}: its {tokens} tokens").format(rank=r, tokens=plan.routings[r].tokens)))
        marks.append(rect(r - BOX, r + BOX, EXPERTS_Y - 0.13, EXPERTS_Y + 0.13, rank_color(r), label_color=PAPER,
                          label=[f"e{r * local}–e{(r + 1) * local - 1}", f"e{r * local}…"],
                          tip=_("rank {rank}: experts {first}–{last}").format(
                              rank=r, first=r * local, last=(r + 1) * local - 1)))
    return marks


def _work(plan, step) -> list[dict]:
    """A rank's own work as a bar beside its box, as long as its share of the busiest rank's."""
    y = EXPERTS_Y - 0.22 if step.name == "experts" else TOKENS_Y + 0.22
    most = max(max(step.work), 1)
    marks = []
    for r, work in enumerate(step.work):
        marks.append(rect(r - BOX, r - BOX + 2 * BOX * work / most, y - 0.05, y + 0.05, rank_color(r),
                          tip=_(WORK[step.name]).format(rank=r, work=work)))
        marks.append(text(r + BOX, y, str(work), anchor="end", baseline="middle", dy=-14 if y < 0.5 else 14,
                          size=12))
    return marks


def _slot(rank: int, other: int, n: int) -> float:
    """Where the arrow between `rank` and `other` meets `rank`'s box: the box split into n slots, one per peer,
    so the fan of arrows out of (or into) a box never starts at one point."""
    return rank - BOX + (other + 0.5) * 2 * BOX / n


def _arrows(plan, step) -> list[dict]:
    """One arrow per (sender, receiver) with rows, as thick as their count; a dashed one stays on the rank."""
    rows, n = step.rows, plan.ep
    most = max(int(rows.max()), 1)
    down = step.name in DOWN
    marks = []
    for a in range(n):
        for b in range(n):
            if not rows[a, b]:
                continue
            y0, y1 = (TOKENS_Y - 0.15, EXPERTS_Y + 0.15) if down else (EXPERTS_Y + 0.15, TOKENS_Y - 0.15)
            x0, x1 = _slot(a, b, n), _slot(b, a, n)
            width = 0.8 + 5.0 * int(rows[a, b]) / most
            marks.append(arrow(x0, y0, x1, y1, rank_color(a), width=width, dash=a == b))
            if n <= LABELS_UP_TO:  # the count near the sender, where the fan has not crossed yet
                marks.append(text(x0 + 0.2 * (x1 - x0), y0 + 0.2 * (y1 - y0), str(int(rows[a, b])), size=12,
                                  halo=True, bold=True))
    return marks


def step_caption(plan, k: int) -> str:
    """Step k's words: its number, phase and name, what it does, and the bytes each rank sends."""
    step = plan.steps()[k]
    head = _("step {k}/{last} ({phase}) {name}: {what}").format(
        k=k, last=len(STEPS) - 1, phase=_(step.phase), name=_(step.name), what=_(step.text()))
    if step.rows is None:
        return head + "\n" + _("work per rank: {work}").format(work=list(step.work))
    return head + "\n" + _("bytes sent per rank: {sent}").format(sent=list(step.bytes_sent))


def dispatch_scene(plan, step: int) -> dict:
    """Step `step` (0 … 7, `STEPS`) of `plan`'s layer: the ranks' tokens and experts, the arrows or bars of this
    step; the `alt` is `step_caption`."""
    steps = plan.steps()
    if not isinstance(step, int) or isinstance(step, bool) or not 0 <= step < len(steps):
        raise ValueError(f"step={step!r}: must be an integer from 0 to {len(steps) - 1}")
    s = steps[step]
    marks = _boxes(plan, s) + (_work(plan, s) if s.rows is None else _arrows(plan, s))
    n = plan.ep
    return scene(marks, width=max(360, min(WIDTH, 150 * n)), height=HEIGHT, alt=step_caption(plan, step),
                 title=_("{ranks}: {name}").format(ranks=count_of(n, "rank"), name=_(s.name)),
                 x=axis(-0.5, n - 0.5, hidden=True), y=axis(-0.45, 1.45, hidden=True),
                 legend=[[f"rank {r}", rank_color(r)] for r in range(n)])
