"""Lesson 7's context-parallel pictures as scenes the browser draws (`render.chart.Chart`): a knob or a player
step sends a few KB of JSON, never a figure.

- `ring_scene(run, step)`: one ring step of a `RingRun`. The ring unrolled left to right, one column per rank:
  the tokens of its queries, the tiles it computes with the K,V block it holds this step (full, half — the
  causal triangle of a chunk with itself — or skipped), whose block that is and the arrow it came along, the
  pairs scored, and the running max m and sum l of the rank's latest query. The ring's wrap-around (last rank
  → rank 0) runs under the columns.
- `work_scene(world_size, seq, layout)`: which rank computes which (query chunk, key chunk) tile of the whole
  causal square, and every rank's (query, key) pairs for this layout beside the other's outline.
- `variants_scene(rows, chosen)`: the three ways' bytes per rank (forward, backward) and K,V buffers.

Tiles come from `sim.context_parallel.tile`, pairs from `work_per_rank`, bytes from `costs`: this module only
places them. One data unit is one CSS pixel in `ring_scene`.

    >>> import numpy as np
    >>> from simlab.sim.context_parallel_online import ring_attention
    >>> q = k = v = np.eye(8, 2)
    >>> s = ring_scene(ring_attention(q, k, v, world_size=2), step=1)
    >>> [m["text"] for m in s["marks"] if m["kind"] == "text"][:2]
    ['rank 0', 'Q: 0–1, 6–7']
"""
from __future__ import annotations

import numpy as np

from ..i18n import _
from ..sim.context_parallel import chunks_of, imbalance, num_chunks, tile, work_per_rank
from .chart import arrow, axis, line, panel, rect, scene, text
from .context_parallel import LAYOUT_COLOR, TILE_WORD, _row_state, layout_name, ring_step_text, token_ranges
from .style import ARROW_GREY, EDGE_GREY, INK, MEMORY_COLOR, PAPER, PAPER_GREY, PHASE_COLOR, RANK_COLORS, SOFT_INK
from .tensor_parallel import count_of

COL, CELL, HEIGHT, MARGIN = 180, 34, 300, 20  # px: a rank's column, a tile, the picture, around it
LABEL_PX = 14  # px: the figures' 10-point text (style.MIN_FONT) as the browser shows it


def rank_color(rank: int) -> str:
    return RANK_COLORS[rank % len(RANK_COLORS)]


def _tile_mark(x0, y_top, kind: str, color: str, tip: str) -> dict:
    """One tile, CELL px square, its top-left corner at (x0, y_top): full in the rank's colour, half hatched,
    skipped as a dashed empty box."""
    y0, y1, x1 = y_top - CELL, y_top, x0 + CELL
    if kind == "full":
        return rect(x0, x1, y0, y1, color, stroke=PAPER, tip=tip)
    if kind == "diagonal":
        return rect(x0, x1, y0, y1, PAPER, hatch=color, stroke=color, width=1, tip=tip)
    return rect(x0, x1, y0, y1, PAPER_GREY, stroke=EDGE_GREY, dash=True, width=1, tip=tip)


def tile_legend() -> list:
    return [[_("full tile"), EDGE_GREY], [_("half tile (the diagonal)"), EDGE_GREY, "hatch"],
            [_("skipped (every key after every query)"), PAPER_GREY, "dashed-box"]]


def ring_scene(run, step: int) -> dict:
    """Ring step `step` of `run` (a `sim.context_parallel_online.RingRun`); its alt is `ring_step_text`."""
    n = run.world_size
    if not isinstance(step, int) or isinstance(step, bool) or not 0 <= step < n:
        raise ValueError(f"step={step!r}: must be between 0 and {n - 1}")
    marks, top = [], HEIGHT - MARGIN
    for r in range(n):
        s, x = run.steps[step][r], MARGIN + r * COL
        color, mine, theirs = rank_color(r), chunks_of(r, n, run.layout), chunks_of(s.kv_from, n, run.layout)
        marks += [text(x, top, f"rank {r}", anchor="start", bold=True, color=color,
                       baseline="top", size=LABEL_PX + 1),
                  text(x, top - 20, _("Q: {tokens}").format(tokens=token_ranges(run.positions[r])),
                       anchor="start", baseline="top", size=LABEL_PX)]
        grid_x, grid_top = x + 40, top - 62  # room for the query chunks' names left and the key chunks' above
        for j, k in enumerate(theirs):
            marks.append(text(grid_x + (j + 0.5) * CELL, grid_top + 4, f"k{k}", baseline="bottom", size=LABEL_PX,
                              color=rank_color(s.kv_from)))
        for i, q in enumerate(mine):
            marks.append(text(grid_x - 4, grid_top - (i + 0.5) * CELL, f"q{q}", anchor="end", size=LABEL_PX))
            for j, k in enumerate(theirs):
                kind = tile(q, k, run.causal)
                marks.append(_tile_mark(grid_x + j * CELL, grid_top - i * CELL, kind, color,
                                        _("query chunk {q} × key chunk {k}: {kind}").format(q=q, k=k,
                                                                                          kind=_(TILE_WORD[kind]))))
        y = grid_top - 2 * CELL - 12
        m, l, _o = _row_state(s, -1)  # noqa: E741 — the papers' names
        marks += [text(x, y, _("K,V of rank {src}").format(src=s.kv_from), anchor="start", baseline="top",
                       size=LABEL_PX, color=rank_color(s.kv_from), bold=True),
                  text(x, y - 18, _("{pairs} pairs scored").format(pairs=s.pairs), anchor="start", baseline="top",
                       size=LABEL_PX),
                  text(x, y - 36, _("token {token}:").format(token=int(run.positions[r][-1])), anchor="start",
                       baseline="top", size=LABEL_PX, color=SOFT_INK),
                  text(x, y - 54, "m = {m}, l = {l}".format(m="−∞" if m == -np.inf else f"{m:.3g}", l=f"{l:.3g}"),
                       anchor="start", baseline="top", size=LABEL_PX, color=SOFT_INK)]
    if step > 0 and n > 1:  # the blocks held now arrived from the left neighbour; the last rank's went to rank 0
        y = top - 8
        for r in range(n - 1):
            marks.append(arrow(MARGIN + r * COL + 70, y, MARGIN + (r + 1) * COL - 8, y, ARROW_GREY))
        low, right = MARGIN + 4, MARGIN + n * COL - 10  # round the right edge, under every column, up to rank 0
        marks += [line([MARGIN + (n - 1) * COL + 70, right, right, MARGIN + 20], [y, y, low, low], ARROW_GREY),
                  arrow(MARGIN + 20, low, MARGIN + 20, low + 20, ARROW_GREY),
                  text((MARGIN + right) / 2, low + 2, _("the ring closes: rank {last} → rank 0").format(last=n - 1),
                       baseline="bottom", size=LABEL_PX, color=SOFT_INK)]
    width = 2 * MARGIN + n * COL
    title = _("ring attention, step {step} of {steps}: {layout}, {ranks}").format(
        step=step, steps=n, layout=layout_name(run.layout), ranks=count_of(n, "rank"))
    return scene(marks, width=width, height=HEIGHT, title=title, x=axis(0, width, hidden=True),
                 y=axis(0, HEIGHT, hidden=True), legend=tile_legend(), alt=ring_step_text(run, step))


def tiles_panel(world_size: int, layout: str, width: int = 300) -> dict:
    """The whole causal square in chunks: row q (queries), column k (keys); a tile in the colour of the rank
    holding query chunk q — full, hatched on the diagonal, absent where masked."""
    parts = num_chunks(world_size, layout)
    owner = {q: r for r in range(world_size) for q in chunks_of(r, world_size, layout)}
    marks = []
    for q in range(parts):
        for k in range(q + 1):  # k > q: every key after every query, nothing to draw
            kind = tile(q, k, True)
            tip = _("query chunk {q} × key chunk {k}: {kind}").format(q=q, k=k, kind=_(TILE_WORD[kind])) + \
                _(", rank {rank}").format(rank=owner[q])
            marks.append(rect(k, k + 1, q, q + 1, rank_color(owner[q]) if kind == "full" else PAPER, stroke=PAPER,
                              hatch=None if kind == "full" else rank_color(owner[q]), tip=tip))
    ticks = [(c + 0.5, f"{c}") for c in range(parts)] if parts <= 8 else None
    return panel(marks, x=axis(0, parts, _("key chunk"), ticks), aspect="equal", width=width, height=width,
                 y=axis(0, parts, _("query chunk"), [(c + 0.5, f"{c} r{owner[c]}") for c in range(parts)], invert=True),
                 title=_("{layout}: who computes which tile").format(layout=layout_name(layout)))


def work_panel(world_size: int, seq: int, layout: str, width: int = 340) -> dict:
    """Each rank's (query, key) pairs under this layout, the other layout dashed behind, the mean a dashed line."""
    other = "contiguous" if layout == "zigzag" else "zigzag"
    work, ghost = work_per_rank(world_size, seq, layout), work_per_rank(world_size, seq, other)
    marks = []
    for r in range(world_size):
        marks += [rect(r - 0.4, r + 0.4, 0, ghost[r], "none", stroke=LAYOUT_COLOR[other], dash=True, width=1.2,
                       tip=_("{layout}: {pairs} pairs").format(layout=layout_name(other), pairs=f"{ghost[r]:,}")),
                  rect(r - 0.3, r + 0.3, 0, work[r], LAYOUT_COLOR[layout],
                       tip=_("{layout}: {pairs} pairs").format(layout=layout_name(layout), pairs=f"{work[r]:,}"))]
    mean = float(np.mean(work))
    marks.append(line([-0.5, world_size - 0.5], [mean, mean], INK, dash=True, width=1))
    return panel(marks, x=axis(-0.5, world_size - 0.5, ticks=[(r, f"r{r}") for r in range(world_size)]),
                 y=axis(0, max(max(work), max(ghost)) * 1.08, _("(query, key) pairs")), width=width, height=260,
                 title=_("{layout}: busiest / mean = {ratio}").format(layout=layout_name(layout),
                                                                     ratio=f"{imbalance(work):.2f}"))


def work_scene(world_size: int, seq: int, layout: str = "zigzag", alt: str = "") -> dict:
    """The tiles and the pairs per rank side by side; `alt` (default: the pairs per rank) for screen readers."""
    work = work_per_rank(world_size, seq, layout)  # refuses bad input in one line, first
    other = "contiguous" if layout == "zigzag" else "zigzag"
    return scene(panels=[tiles_panel(world_size, layout), work_panel(world_size, seq, layout)], columns=2,
                 title=_("causal attention, {seq} tokens on {ranks}").format(seq=seq,
                                                                             ranks=count_of(world_size, "rank")),
                 legend=[[layout_name(layout), LAYOUT_COLOR[layout]], [layout_name(other), LAYOUT_COLOR[other],
                                                                       "dashed-box"]],
                 alt=alt or _("{layout}: (query, key) pairs per rank {work}").format(layout=layout_name(layout),
                                                                                     work=list(work)))



def variants_scene(rows: dict, chosen: str = "ring", alt: str = "", width: int = 640) -> dict:
    """`compare`'s rows as two panels: bytes each rank sends (forward then backward, stacked) and the K,V buffers
    it holds beyond its shard, in MiB; the chosen variant's name in bold; a variant that cannot run is named so."""
    names = list(rows)
    sent, held = [], []
    for y, name in enumerate(names):
        c = rows[name]
        if c is None:
            note = _("{variant}: heads do not divide over the CP size").format(variant=name)
            sent.append(text(0, y, note, anchor="start", size=LABEL_PX, color=SOFT_INK))
            continue
        fwd, bwd, kv = (x / 2**20 for x in (c.forward_bytes, c.backward_bytes, c.kv_buffer_bytes))
        sent += [rect(0, fwd, y - 0.3, y + 0.3, PHASE_COLOR["fwd"], tip=_("{variant}, forward: {mib} MiB").format(
                     variant=name, mib=f"{fwd:,.3g}")),
                 rect(fwd, fwd + bwd, y - 0.3, y + 0.3, PHASE_COLOR["bwd"], tip=_("{variant}, backward: {mib} MiB")
                      .format(variant=name, mib=f"{bwd:,.3g}"))]
        held.append(rect(0, kv, y - 0.3, y + 0.3, MEMORY_COLOR["activations"],
                         tip=_("{variant}: {mib} MiB of K,V buffers").format(variant=name, mib=f"{kv:,.3g}")))
    most = max([m["x1"] for m in sent if m["kind"] == "rect"] or [1.0]) * 1.05 or 1.0
    most_kv = max([m["x1"] for m in held] or [1.0]) * 1.05 or 1.0
    ticks = [(y, f"▶ {n}" if n == chosen else n) for y, n in enumerate(names)]
    y = axis(-0.6, len(names) - 0.4, ticks=ticks, invert=True)
    return scene(panels=[panel(sent, x=axis(0, most, _("MiB sent per rank")), y=y, width=width * 0.6, height=150,
                               title=_("bytes per rank, one layer")),
                         panel(held, x=axis(0, most_kv, "MiB"), y=y, width=width * 0.4, height=150,
                               title=_("K,V buffers per rank"))], columns=2,
                 legend=[[_("forward"), PHASE_COLOR["fwd"]], [_("backward"), PHASE_COLOR["bwd"]],
                         [_("K,V buffers"), MEMORY_COLOR["activations"]]], alt=alt or _("{variant} chosen").format(
                             variant=chosen))
