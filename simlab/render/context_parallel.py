"""Lesson 7's pictures of context parallelism (CP): the online softmax step by step, the work each rank does
under a causal mask (contiguous blocks vs zig-zag), the three ways of moving K,V and what each costs, and a
real run's verdict. Text first (what nbval compares), then figures.

- `ring_text(run, rank)`: one rank of a `sim.context_parallel_online.RingRun`, one line per ring step: which
  K,V block arrives (from which rank, which tokens), whether the block beat the running max, the rescale factor
  e^(m − m'), the running sum l and one entry of the un-normalised output O — the numbers the engine kept.
- `work_text(world_size, seq)`: (query, key) pairs per rank, contiguous vs zig-zag, the busiest over the mean.
- `variants_text(rows)`: `sim.context_parallel_costs.compare`'s rows as a table (bytes and K,V buffers).
- `run_text(result)`: a `parity.context_parallel.run_context_parallel` result in a few lines.
- `draw_work_bars(world_size, seq)`: the per-rank work of both layouts side by side.

Every number comes from the simulator (`work_per_rank`, `imbalance`, `tile`, `costs`) or the run; this module
only lays it out. Text goes through `simlab.i18n._` (simlab/locale/zh/LC_MESSAGES/context_parallel.po).

    >>> print(work_text(4, 16).splitlines()[-1])
    zig-zag: busiest / mean = 1.00 (every rank scores 34 pairs)
"""
from __future__ import annotations

import numpy as np

from ..i18n import N_, _
from ..sim.context_parallel import check_layout, chunks_of, imbalance, num_chunks, tile, work_per_rank
from .style import BLUE, GREY, INK, MIN_FONT, RANK_COLORS, new_ax, rows_table
from .tensor_parallel import count_of

LAYOUT_NAME = {"zigzag": N_("zig-zag"), "contiguous": N_("contiguous")}
LAYOUT_COLOR = {"contiguous": GREY, "zigzag": BLUE}  # zig-zag is the one the lesson recommends: the loud colour
TILE_WORD = {"full": N_("full"), "diagonal": N_("half"), "skip": N_("skip")}  # `sim.context_parallel.tile`'s kinds


def layout_name(layout: str) -> str:
    return _(LAYOUT_NAME[layout])


def token_ranges(tokens) -> str:
    """Token positions as runs: [0, 1, 14, 15] → '0–1, 14–15'."""
    tokens, runs = [int(t) for t in tokens], []
    for t in tokens:
        if runs and t == runs[-1][1] + 1:
            runs[-1][1] = t
        else:
            runs.append([t, t])
    return ", ".join(str(a) if a == b else f"{a}–{b}" for a, b in runs)


def _row_state(step, row: int):
    """(m, l, O[.., 0]) of one local query row (the first head, where there are heads)."""
    m, l, o = (np.asarray(x) for x in (step.m, step.l, step.o))  # noqa: E741 — the papers' names
    rows = m.shape[-1]
    return float(m.reshape(-1, rows)[0, row]), float(l.reshape(-1, rows)[0, row]), \
        float(o.reshape(-1, rows, o.shape[-1])[0, row, 0])


def _num(x: float) -> str:
    return "−∞" if x == -np.inf else f"{x:.4g}"


def ring_text(run, rank: int, row: int = -1) -> str:
    """One rank's online softmax, step by step, for one of its query rows (default its last: the latest token,
    which meets the most keys). Only what the run kept is printed: a block's max is known exactly where it
    raised the running max m; otherwise it was ≤ m and the rescale factor is 1."""
    n = run.world_size
    if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < n:
        raise ValueError(f"rank={rank!r}: must be between 0 and {n - 1}")
    held = run.positions[rank]
    if not isinstance(row, int) or isinstance(row, bool) or not -len(held) <= row < len(held):
        raise ValueError(f"row={row!r}: must be between {-len(held)} and {len(held) - 1} (rank {rank} holds "
                         f"{len(held)} queries)")
    row %= len(held)
    lines = [_("rank {rank} holds tokens {tokens} ({layout}); query row {row} is token {token}").format(
        rank=rank, tokens=token_ranges(held), layout=layout_name(run.layout), row=row, token=int(held[row]))]
    m_old, l_old, o_old = -np.inf, 0.0, 0.0
    for i in range(n):
        s = run.steps[i][rank]
        m, l, o = _row_state(s, row)  # noqa: E741 — the paper's names (m, l, O)
        head = _("step {i}: K,V of rank {src} (tokens {tokens}), {pairs} pairs scored").format(
            i=i, src=s.kv_from, tokens=token_ranges(run.positions[s.kv_from]), pairs=s.pairs)
        if m == m_old and l == l_old:  # the row met no key in this block: the causal mask hid all of it
            lines.append(head + _("; token {token} sees none of it: m, l, O unchanged").format(token=int(held[row])))
        else:
            scale = float(np.exp(m_old - m)) if np.isfinite(m_old) else 0.0
            beat = (_("block max {max} > m {old}: m ← {max}").format(max=_num(m), old=_num(m_old)) if m > m_old
                    else _("block max ≤ m = {m}: m stays").format(m=_num(m)))
            lines.append(head + "\n    " + beat + _("; rescale e^(m − m') = {scale}; l {l_old} → {l}; "
                                                      "O[0] {o_old} → {o}").format(
                scale=f"{scale:.4g}", l_old=_num(l_old), l=_num(l), o_old=_num(o_old), o=_num(o)))
        m_old, l_old, o_old = m, l, o
    lines.append(_("output = O / l = {o} / {l} = {out}; logsumexp = m + log l = {lse}").format(
        o=_num(o_old), l=_num(l_old), out=_num(o_old / l_old), lse=_num(m_old + np.log(l_old))))
    return "\n".join(lines)


def ring_step_text(run, step: int) -> str:
    """What every rank does at ring step `step`: whose K,V block it holds, the pairs it scores, m and l of its
    latest query; and what it sends next (the player's caption and the scene's text alternative)."""
    n = run.world_size
    lines = [_("step {step} of {steps}: rank r holds the K,V of rank (r − {step}) mod {n}").format(
        step=step, steps=n, n=n)]
    for s in run.steps[step]:
        m, l, _o = _row_state(s, -1)  # noqa: E741 — the papers' names
        lines.append(_("  rank {rank}: K,V of rank {src}, {pairs} pairs; token {token}: m = {m}, l = {l}").format(
            rank=s.rank, src=s.kv_from, pairs=s.pairs, token=int(run.positions[s.rank][-1]), m=_num(m), l=_num(l)))
    lines.append(_("then each rank sends that block on to rank r + 1") if step < n - 1 else
                 _("last step: every rank has met every block; output = O / l"))
    return "\n".join(lines)


def busy_steps_of(world_size: int, layout: str) -> list[int]:
    """Ring steps in which each rank computes a tile that is not skipped (from `tile`: chunk numbers only)."""
    chunks = [chunks_of(r, world_size, layout) for r in range(world_size)]
    return [sum(any(tile(q, k, True) != "skip" for q in chunks[r] for k in chunks[(r - i) % world_size])
                for i in range(world_size)) for r in range(world_size)]


def layouts_for(world_size: int, seq: int) -> tuple[str, ...]:
    """The layouts `seq` splits into (zig-zag needs 2N equal chunks); the contiguous one's refusal if none does."""
    fits = tuple(x for x in ("contiguous", "zigzag") if seq % num_chunks(world_size, x) == 0) \
        if isinstance(world_size, int) and isinstance(seq, int) and world_size >= 1 else ()
    if not fits:
        check_layout(world_size, seq, "contiguous")  # names what is wrong, in one line
    return fits


def work_text(world_size: int, seq: int) -> str:
    """Causal attention's (query, key) pairs per rank with contiguous blocks and with zig-zag (where `seq` splits
    into 2N chunks), the ring steps in which each rank computes, and each layout's imbalance (the step waits for
    the busiest rank)."""
    layouts = layouts_for(world_size, seq)
    work = {x: work_per_rank(world_size, seq, x) for x in layouts}  # refuses bad input first
    busy = {x: busy_steps_of(world_size, x) for x in layouts}
    rows = []
    for r in range(world_size):
        row = {_("rank"): f"r{r}"}
        for x in layouts:
            row |= {_("{layout} pairs").format(layout=layout_name(x)): work[x][r],
                    _("busy steps ({layout})").format(layout=layout_name(x)): f"{busy[x][r]}/{world_size}"}
        rows.append(row)
    head = _("causal attention over {seq} tokens on {ranks}: (query, key) pairs each rank scores").format(
        seq=seq, ranks=count_of(world_size, "rank"))
    lines = [head, rows_table(rows)]
    c = work["contiguous"]
    lines.append(_("contiguous: busiest / mean = {ratio} (rank {last} scores {most} pairs, rank 0 {least})").format(
        ratio=f"{imbalance(c):.2f}", last=world_size - 1, most=f"{c[-1]:,}", least=f"{c[0]:,}"))
    if "zigzag" in work:
        lines.append(_("zig-zag: busiest / mean = {ratio} (every rank scores {pairs} pairs)").format(
            ratio=f"{imbalance(work['zigzag']):.2f}", pairs=f"{work['zigzag'][0]:,}"))
    else:
        lines.append(_("zig-zag: {seq} tokens do not split into {chunks} equal chunks").format(
            seq=seq, chunks=2 * world_size))
    return "\n".join(lines)


def _bytes(n: int) -> str:
    """Bytes as a table shows them: exact below 1 MiB, else in MiB or GiB."""
    if n < 2**20:
        return f"{n:,} B"
    return f"{n / 2**20:,.1f} MiB" if n < 2**30 else f"{n / 2**30:,.2f} GiB"


def variants_text(rows: dict) -> str:
    """`compare`'s {variant: CPCost or None} as a table: bytes each rank sends forward, backward and in all, and
    the K,V buffers it holds beyond its own shard while attention runs."""
    table = []
    for variant, c in rows.items():
        cells = ([c.forward_bytes, c.backward_bytes, c.bytes_sent, c.kv_buffer_bytes] if c is not None else None)
        table.append({_("variant"): variant} | dict(zip(
            (_("forward sends"), _("backward sends"), _("in all"), _("K,V buffers")),
            [_bytes(x) for x in cells] if cells else ["—"] * 3 + [_("heads do not divide over the CP size")])))
    return _("per rank, one attention layer:") + "\n" + rows_table(table)


def run_text(result: dict) -> str:
    """A real run in a few lines: what ran, its error against one process (and torch's ring), bytes and the
    trace against the plan, and the pairs each rank scored against the simulator's."""
    r, ok = result, {True: "✓", False: "✗"}
    diff = r["max_abs_diff_vs_reference"]
    lines = [_("{variant}, {layout}, {ranks} ({backend}): {seq} tokens, {heads} heads ({kv_heads} K,V), head_dim "
               "{head_dim}").format(variant=r["variant"], layout=layout_name(r["layout"]),
                                    ranks=count_of(r["world_size"], "rank"), backend=r["backend"], seq=r["seq"],
                                    heads=r["heads"], kv_heads=r["kv_heads"], head_dim=r["head_dim"]),
             _("{ok} output and dQ, dK, dV vs one process: max |diff| {diff}").format(ok=ok[diff <= 1e-5],
                                                                                    diff=f"{diff:.1g}")]
    if r["max_abs_diff_vs_torch"] is not None:
        lines.append(_("{ok} vs torch's ring attention: max |diff| {diff}").format(
            ok=ok[r["max_abs_diff_vs_torch"] <= 1e-5], diff=f"{r['max_abs_diff_vs_torch']:.1g}"))
    else:
        lines.append(_("no torch comparison: {why}").format(why=_(r["why_no_torch"])))
    sent, plan = r["bytes_sent_per_rank"], r["plan_bytes_sent_per_rank"]
    lines += [_("{ok} bytes sent per rank {sent}, the closed form says {plan}").format(
                  ok=ok[sent == plan], sent=", ".join(f"{b:,}" for b in sent), plan=", ".join(f"{b:,}" for b in plan)),
              _("{ok} every send, receive and compute at the plan's step").format(ok=ok[bool(r["matches_plan"])]),
              _("{ok} (query, key) pairs per rank {work}, simulated {sim}").format(
                  ok=ok[r["work_per_rank"] == r["plan_work_per_rank"]], work=r["work_per_rank"],
                  sim=r["plan_work_per_rank"])]
    return "\n".join(lines)


# ---------------------------------------------------------------- figures

def draw_work_bars(world_size: int, seq: int, ax=None):
    """Each rank's causal (query, key) pairs, contiguous and zig-zag side by side, each layout's mean dashed.
    Returns the Figure."""
    work = {layout: work_per_rank(world_size, seq, layout) for layout in ("contiguous", "zigzag")}
    ax = new_ax(ax, (max(4.0, 0.9 * world_size + 2), 3.2))
    x, width = np.arange(world_size), 0.38
    for k, (layout, pairs) in enumerate(work.items()):
        shift = (k - 0.5) * width
        ax.bar(x + shift, pairs, width, color=LAYOUT_COLOR[layout], label=_("{layout} (busiest / mean {ratio})").format(
            layout=layout_name(layout), ratio=f"{imbalance(pairs):.2f}"))
        ax.hlines(np.mean(pairs), -0.5, world_size - 0.5, colors=LAYOUT_COLOR[layout], linestyles="dashed", lw=1)
    ax.set_xticks(x, [f"r{r}" for r in range(world_size)], fontsize=MIN_FONT)
    ax.tick_params(axis="y", labelsize=MIN_FONT)
    ax.set_xlim(-0.5, world_size - 0.5)
    ax.set_ylabel(_("(query, key) pairs"), fontsize=MIN_FONT)
    ax.set_title(_("causal attention, {seq} tokens on {ranks}").format(seq=seq, ranks=count_of(world_size, "rank")),
                 fontsize=MIN_FONT + 1, loc="left")
    ax.legend(fontsize=MIN_FONT, loc="upper left", frameon=False)
    return ax.figure


def draw_tiles(world_size: int, layout: str, ax=None):
    """The (query chunk, key chunk) grid of the whole sequence: each tile coloured by the rank that computes it,
    full, half (the diagonal's triangle) or skipped under the causal mask. Returns the Figure."""
    parts = num_chunks(world_size, layout)
    owner = {q: r for r in range(world_size) for q in chunks_of(r, world_size, layout)}
    ax = new_ax(ax, (4.2, 4.2))
    for q in range(parts):
        for k in range(parts):
            kind = tile(q, k, True)
            color = RANK_COLORS[owner[q] % len(RANK_COLORS)]
            if kind == "full":
                ax.add_patch(_square(k, q, color))
            elif kind == "diagonal":  # the lower-left triangle: keys at or before each query
                ax.fill([k, k, k + 1], [q, q + 1, q + 1], color=color, lw=0)
    ax.set_xlim(0, parts)
    ax.set_ylim(parts, 0)
    ax.set_aspect("equal")
    ticks = np.arange(parts) + 0.5
    ax.set_xticks(ticks, [str(c) for c in range(parts)], fontsize=MIN_FONT)
    ax.set_yticks(ticks, [f"{c} (r{owner[c]})" for c in range(parts)], fontsize=MIN_FONT)
    ax.set_xlabel(_("key chunk"), fontsize=MIN_FONT)
    ax.set_ylabel(_("query chunk (its rank)"), fontsize=MIN_FONT)
    ax.set_title(_("{layout}: who computes which tile").format(layout=layout_name(layout)), fontsize=MIN_FONT + 1,
                 loc="left", color=INK)
    ax.grid(False)
    return ax.figure


def _square(x: float, y: float, color: str):
    from matplotlib.patches import Rectangle
    return Rectangle((x, y), 1, 1, color=color, lw=0)


__all__ = ["ring_text", "ring_step_text", "work_text", "variants_text", "run_text", "draw_work_bars", "draw_tiles", "token_ranges",
           "layout_name", "busy_steps_of", "layouts_for", "LAYOUT_COLOR", "TILE_WORD"]
