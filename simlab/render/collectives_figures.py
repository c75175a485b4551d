"""Lesson 1's figures: the ring, the bytes each rank sends, and a timeline of a collective.

- `draw_ring_step`: ranks on a circle (rank 0 on top, clockwise). Each rank shows a row of chunk
  boxes, darker the more ranks' inputs are summed into that chunk (grey: not held yet), and arrows
  for the transfers that produced this step (solid red: the receiver adds; dashed blue: it copies).
- `draw_bytes`: bytes sent per rank, grouped bars for several algorithms (ring vs naive).
- `draw_timeline`: a Gantt chart, one lane per rank, from any `Trace` (model time or wall time).

Every function draws into `ax` if given, else into a fresh `matplotlib.figure.Figure` (no pyplot
state, so it works headless), and returns the Figure. Nothing here computes what an engine owns; the
colours are `render.style`'s.
"""
from __future__ import annotations

import math
import re

from ..i18n import _
from .collectives_text import header
from .style import (
    FAINT_GREY,
    INK,
    KIND_COLOR,
    MIN_FONT,
    NOT_HELD_COLOR,
    SOFT_INK,
    TRANSFER_COLOR,
    UNKNOWN_COLOR,
    new_ax,
    time_unit,
)

OP_STYLE = {"reduce": dict(color=TRANSFER_COLOR["reduce"], linestyle="-"),   # receiver adds the chunk in
            "copy": dict(color=TRANSFER_COLOR["copy"], linestyle="--")}      # receiver overwrites with it
LANES = {"send": (0.0, 0.4), "recv": (0.4, 0.4), "compute": (0.0, 0.8)}  # draw_timeline: (top, height) in a lane
MAX_CHUNK_BOXES = 16  # beyond this the boxes are too small to read: only the nodes are drawn
RADIUS = 1.0
RING_FIGSIZE = (4.6, 5.2)  # inches: 460 x 520 px as shown, legend included; two side by side fit a page
LABELLED_RANKS = 8  # more ranks than this: only every k-th node is named, so names never collide
ARROW_BEND = 0.15  # a transfer's arrow bends by this (matplotlib arc3's rad): a -> b and b -> a stay apart


def outward(rank: int, n: int) -> tuple[float, float]:
    """Unit vector from the centre towards rank's place: rank 0 at the top, then clockwise."""
    angle = math.pi / 2 - 2 * math.pi * rank / n
    return math.cos(angle), math.sin(angle)


def rank_position(rank: int, n: int) -> tuple[float, float]:
    """Where a rank's node sits; a single rank sits in the middle."""
    ux, uy = outward(rank, n)
    radius = RADIUS if n > 1 else 0.0
    return radius * ux, radius * uy


def contribution_color(count: int | None, n: int, held: bool = True):
    """Grey if not held; light to dark blue-green as 1..n ranks' inputs are summed in."""
    import matplotlib
    if not held:
        return NOT_HELD_COLOR
    if count is None:
        return UNKNOWN_COLOR
    frac = 1.0 if n == 1 else (count - 1) / (n - 1)
    return matplotlib.colormaps["YlGnBu"](0.15 + 0.85 * frac)


def _sizes(n: int, chunks: int) -> dict:
    """Node radius, chunk box size and font size that fit n ranks on the circle. The font never drops
    below MIN_FONT: where words would not fit, fewer are written (`named`, `box_labels`) instead."""
    chord = 2.0 if n == 1 else 2 * RADIUS * math.sin(math.pi / n)  # distance between neighbours
    node = min(0.16, 0.25 * chord)  # small enough to leave room for the arrows between nodes
    box = min(0.12, 0.85 * chord / max(chunks, 1))
    return dict(node=node, box_w=box, box_h=min(0.12, max(box, 0.04)), font=11 if n <= 8 else MIN_FONT,
                named=max(1, math.ceil(n / LABELLED_RANKS)),  # name rank r when r % named == 0
                box_labels=box >= 0.11)  # a digit at MIN_FONT needs a box this wide (n <= 6 ranks)


def chunk_row(step, rank: int, n: int, s) -> tuple[float, float, float]:
    """(left, bottom, reach): where the rank's row of chunk boxes starts, just outside its node, and how far
    from the node's centre the row reaches. The figure and the browser's chart (`render.collectives`) share it."""
    (x, y), (ux, uy) = rank_position(rank, n), outward(rank, n)
    width = len(step.values[rank]) * s["box_w"]
    # push the row out far enough that neither its ends nor its edges touch the node
    reach = s["node"] + 0.04 + abs(ux) * width / 2 + abs(uy) * s["box_h"] / 2
    return x + ux * reach - width / 2, y + uy * reach - s["box_h"] / 2, reach + max(width, s["box_h"]) / 2


def _draw_chunks(ax, step, rank, n, s):
    """The rank's chunks as a row of boxes, placed just outside its node (away from the arrows)."""
    from matplotlib.patches import Rectangle
    count = len(step.values[rank])
    left, bottom, reach = chunk_row(step, rank, n, s)
    for c in range(count):
        value = step.values[rank][c]
        sources = step.sources[rank][c] if step.sources is not None else None
        color = contribution_color(len(sources) if sources is not None else None, n, value is not None)
        ax.add_patch(Rectangle((left + c * s["box_w"], bottom), s["box_w"], s["box_h"],
                               facecolor=color, edgecolor=SOFT_INK, linewidth=0.6, gid="chunk"))
        if s["box_labels"]:  # the chunk index links a box to the arrow labels
            dark = sources is not None and len(sources) > n / 2
            ax.text(left + (c + 0.5) * s["box_w"], bottom + s["box_h"] / 2, str(c), ha="center",
                    va="center", fontsize=MIN_FONT, color="white" if dark else INK)
    return reach


def arrow_path(t, n: int, s) -> tuple[tuple, tuple, tuple]:
    """(start, end, middle) of a transfer's arrow, src -> dst, from rim to rim; it bends by ARROW_BEND (arc3's
    rad) so that a -> b and b -> a do not overlap, and `middle` is where the curve passes half-way."""
    (x1, y1), (x2, y2) = rank_position(t.src, n), rank_position(t.dst, n)
    dist = math.hypot(x2 - x1, y2 - y1)
    ux, uy = (x2 - x1) / dist, (y2 - y1) / dist
    start = (x1 + ux * s["node"], y1 + uy * s["node"])  # leave from the node's rim, not its centre
    end = (x2 - ux * s["node"], y2 - uy * s["node"])
    dx, dy = end[0] - start[0], end[1] - start[1]  # the midpoint of arc3's Bezier curve: half-way to its control point
    return start, end, ((start[0] + end[0]) / 2 + ARROW_BEND / 2 * dy, (start[1] + end[1]) / 2 - ARROW_BEND / 2 * dx)


def _draw_arrow(ax, t, n, s, label: str | None):
    """One transfer, src -> dst, bent a little so that a -> b and b -> a do not overlap."""
    from matplotlib.patches import FancyArrowPatch
    start, end, (mx, my) = arrow_path(t, n, s)
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", connectionstyle=f"arc3,rad={ARROW_BEND}",
                                 mutation_scale=max(6, 14 - n / 4), linewidth=1.4, gid="transfer",
                                 shrinkA=0, shrinkB=0, **OP_STYLE[t.op]))
    if label:
        ax.text(mx, my, label, ha="center", va="center", fontsize=MIN_FONT,
                color=OP_STYLE[t.op]["color"],
                bbox=dict(boxstyle="round,pad=0.15", facecolor="white", edgecolor="none", alpha=0.85))


def ring_legend(steps, n: int) -> list[tuple]:
    """(label, colour, "box" or "line" or "dash") for the shades and arrow styles the given steps use (one
    legend can serve a simulated and a real panel side by side; a real step without sources shows "unknown").
    `ring_legend_handles` makes them matplotlib's; the browser's chart (`render.collectives`) takes them as they are."""
    cells = [(v, src) for step in steps for vrow, srow in zip(step.values, step.sources or [None] * n)
             for v, src in zip(vrow, srow or [None] * len(vrow))]
    entries = [(_("not held"), NOT_HELD_COLOR, "box")]
    if any(src is not None for _v, src in cells):
        entries.append((_("1 rank's input"), contribution_color(1, n), "box"))
        # every shade for small rings; for big ones, one "partial" shade stands for them all
        middle = range(2, n) if n <= 4 else [(n + 1) // 2]
        entries += [(_("{k} summed").format(k=k) if n <= 4 else _("partial sum"), contribution_color(k, n), "box")
                    for k in middle]
        if n > 1:
            entries.append((_("all {n} summed").format(n=n), contribution_color(n, n), "box"))
    if any(v is not None and src is None for v, src in cells):
        entries.append((_("held (whose inputs: unknown)"), UNKNOWN_COLOR, "box"))
    names = {"reduce": _("send, receiver adds (+=)"), "copy": _("send, receiver copies (=)")}
    ops = sorted({t.op for step in steps for t in step.transfers})
    return entries + [(names[op], OP_STYLE[op]["color"], "line" if op == "reduce" else "dash") for op in ops]


def ring_legend_handles(steps, n: int) -> list:
    """`ring_legend` as matplotlib legend handles."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    return [Patch(facecolor=color, edgecolor=SOFT_INK, label=label) if style == "box" else
            Line2D([], [], label=label, linewidth=1.4, color=color, linestyle="-" if style == "line" else "--")
            for label, color, style in ring_legend(steps, n)]


def _ring_legend(ax, step, n):
    """Under the ring: two columns, so it is no wider than the ring itself."""
    ax.legend(handles=ring_legend_handles([step], n), loc="upper center", bbox_to_anchor=(0.5, 0.0),
              ncol=2, fontsize=MIN_FONT, frameon=False, handlelength=1.6, columnspacing=1.0)


def draw_ring_step(step, plan, ax=None, title=None, legend: bool = True):
    """Ranks on a circle with their chunks and this step's transfers; returns the Figure.
    `legend=False` leaves the legend to the caller (one `ring_legend_handles` legend for two panels)."""
    from matplotlib.patches import Circle
    ax = new_ax(ax, RING_FIGSIZE)
    n = plan.world_size
    chunks = len(plan.chunk_sizes)
    s = _sizes(n, chunks)
    ring = RADIUS if n > 1 else 0.0  # a lone rank sits in the middle
    extent = ring + s["node"]
    for r in range(n):
        x, y = rank_position(r, n)
        ax.add_patch(Circle((x, y), s["node"], facecolor="white", edgecolor=INK,
                            linewidth=1.2, zorder=3, gid="rank"))
        if r % s["named"] == 0:
            ax.text(x, y, f"r{r}", ha="center", va="center", fontsize=s["font"], zorder=4)
        if chunks <= MAX_CHUNK_BOXES:
            extent = max(extent, ring + _draw_chunks(ax, step, r, n, s))
    for t in step.transfers:
        # name the chunk (or, with one chunk, the bytes) while labels are still legible
        label = (f"c{t.chunk}" if chunks > 1 else f"{t.nbytes} B") if n <= 12 else None
        _draw_arrow(ax, t, n, s, label)
    if chunks > MAX_CHUNK_BOXES:
        ax.text(0, 0, _("{chunks} chunks per rank:\nboxes hidden").format(chunks=chunks), ha="center", va="center",
                fontsize=MIN_FONT, color=FAINT_GREY)
    ax.set_xlim(-extent - 0.05, extent + 0.05)
    ax.set_ylim(-extent - 0.05, extent + 0.05)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(title if title is not None else ring_title(step, plan), fontsize=11)
    if legend:
        _ring_legend(ax, step, n)
    return ax.figure


def ring_title(step, plan) -> str:
    """The table's header on two lines (broken after its colon, ':' or Chinese '：'), so the title is no
    wider than the ring."""
    return re.sub(r": |：", lambda m: m.group().strip() + "\n", header(step, plan), count=1)


def draw_bytes(per_rank_lists: dict, ax=None, optimum: float | None = None):
    """Grouped bars: bytes sent by each rank, one colour per algorithm; optional optimum line."""
    ax = new_ax(ax, (7, 3.6))
    names = list(per_rank_lists)
    n = max((len(v) for v in per_rank_lists.values()), default=0)
    width = 0.8 / max(len(names), 1)
    top = max([v for vs in per_rank_lists.values() for v in vs] + [optimum or 0])
    scale, unit = next((1 << k, u) for k, u in ((20, "MiB"), (10, "KiB"), (0, "B")) if top >= 1 << k or not k)
    for i, name in enumerate(names):  # in KiB or MiB: no "1e7" over the axis, no 7-digit labels
        values = [v / scale for v in per_rank_lists[name]]
        ax.bar([r - 0.4 + (i + 0.5) * width for r in range(len(values))], values, width=width, label=name)
    if optimum is not None:
        ax.axhline(optimum / scale, color="black", linestyle=":", linewidth=1.2,
                   label=_("optimum ({value} {unit})").format(value=f"{optimum / scale:.3g}", unit=unit))
    every = max(1, math.ceil(n / 16))  # at most ~16 tick labels, so they stay legible
    ax.set_xticks(range(0, n, every), [f"r{r}" for r in range(0, n, every)])
    ax.set_xlabel(_("rank"))
    ax.set_ylabel(_("bytes sent ({unit})").format(unit=unit))
    ax.legend(fontsize=MIN_FONT, frameon=False)
    ax.spines[["top", "right"]].set_visible(False)
    return ax.figure


def _bar_label(e) -> str:
    """'c2→r1' on a send, 'c1←r3' on a receive, the action name ('2F0') on compute."""
    chunk = f"c{e.chunk}" if e.chunk is not None else ""
    if e.kind == "send":
        return e.name or f"{chunk}→r{e.peer}"
    if e.kind == "recv":
        return e.name or f"{chunk}←r{e.peer}"
    return e.name


def draw_timeline(trace, world_size: int, ax=None, title: str | None = None):
    """Gantt chart: one lane per rank (rank 0 on top); sends in the upper half of a lane,
    receives in the lower half (they overlap in time on a ring), compute across the whole lane."""
    from matplotlib.patches import Patch
    ax = new_ax(ax, (8, 1 + 0.45 * world_size))
    t0 = min((e.start for e in trace), default=0.0)
    span = max((e.end for e in trace), default=0.0) - t0
    scale, unit = time_unit(span or 1.0)
    min_width = 0.004 * (span or 1.0)  # an instant event still shows as a sliver
    for rank in range(world_size):
        for kind in LANES:
            bars = [((e.start - t0) * scale, max(e.end - e.start, min_width) * scale)
                    for e in trace if e.rank == rank and e.kind == kind]
            if bars:
                top, height = LANES[kind]
                ax.broken_barh(bars, (rank - 0.4 + top, height), facecolors=KIND_COLOR[kind],
                               edgecolor="white", linewidth=0.5)
    if len(trace) <= 200:  # write on bars wide enough to hold a label: chunk and peer, or 2F0
        for e in trace:
            if span and e.end - e.start >= span / 13:  # about the width of "c2→r1" at MIN_FONT
                top, height = LANES.get(e.kind, LANES["compute"])
                ax.text((e.start - t0 + (e.end - e.start) / 2) * scale, e.rank - 0.4 + top + height / 2,
                        _bar_label(e), ha="center", va="center", fontsize=MIN_FONT, color="white")
    ax.set_yticks(range(world_size), [f"r{r}" for r in range(world_size)])
    ax.set_ylim(world_size - 0.5, -0.5)  # rank 0 on top, as in the tables
    ax.set_xlabel(_("time ({unit})").format(unit=unit))
    kinds = [k for k in LANES if any(e.kind == k for e in trace)]  # an event's kind, said in the reader's language
    ax.legend(handles=[Patch(color=KIND_COLOR[k], label=_(k)) for k in kinds], fontsize=MIN_FONT,
              loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    ax.spines[["top", "right"]].set_visible(False)
    if title:
        ax.set_title(title, fontsize=10)
    return ax.figure
