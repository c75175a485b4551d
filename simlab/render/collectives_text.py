"""Lesson 1's text pictures of a collective: who holds what after each step, as fixed-width tables.

Draws, for one step of a simulated (or real) run: a table with one row per rank and one column per
chunk, then the transfers that produced this state and the bytes each rank has moved so far.
A cell shows *whose inputs are summed in* (``0+2``, ``Σ0..2`` when every rank is in) or the values
themselves (``[13 12]``); ``·`` means the rank does not hold that chunk. The output has no timings
and no object ids, so notebooks can compare it character for character (nbval). Words go through `_()`
(simlab.i18n), and columns are padded by *display* width (`render.style.display_width`), so a table with
Chinese headers (two terminal columns per character) still lines up.

    >>> from simlab.sim.collectives import ring_all_reduce
    >>> from simlab.sim.collectives_stepper import simulate
    >>> plan = ring_all_reduce(world_size=3, numel=6)
    >>> print(step_text(simulate(plan).steps[1], plan))
    step 1/4 of ring_all_reduce (n=3, 24 B): reduce-scatter
        chunk 0  chunk 1  chunk 2  sent  recv
    r0  0        0+2      0        8 B   8 B
    r1  1        1        0+1      8 B   8 B
    r2  1+2      2        2        8 B   8 B
    transfers (sender → receiver; += adds, = overwrites):
      r0 → r1 (+=) chunk 2 (8 B)
      r1 → r2 (+=) chunk 0 (8 B)
      r2 → r0 (+=) chunk 1 (8 B)
    cells: ranks whose inputs are summed in; Σ0..2 = all 3 ranks; · = not held
"""
from __future__ import annotations

from collections import Counter

from ..i18n import N_, _
from .style import align, display_width, pad

NOT_HELD = "·"
MATCH = {True: N_("match ✓"), False: N_("match ✗")}  # shown through _(): `match_text`
# What a step's transfers do, by op; ring plans call their two halves by the collective's name.
_PHASES_RING = {"reduce": N_("reduce-scatter"), "copy": N_("all-gather")}
_PHASES_OTHER = {"reduce": N_("reduce"), "copy": N_("broadcast")}
PHASE_WORDS = (N_("start"), N_("idle"))  # the other phase names `phase_name` gives


def match_text(match: bool) -> str:
    """'match ✓' or 'match ✗', in the language in force."""
    return _(MATCH[bool(match)])


def contributors(ranks, world_size: int) -> str:
    """Short name for a set of ranks: {0, 2} -> '0+2', all of 0..7 -> 'Σ0..7', runs -> '0..3+6'."""
    ranks = sorted(ranks)
    if world_size > 1 and len(ranks) == world_size:
        return f"Σ0..{world_size - 1}"  # Σ marks the finished sum: the cell a collective aims for
    parts, i = [], 0
    while i < len(ranks):  # group consecutive ranks; runs of 3+ print as a..b to stay narrow
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        if j - i >= 2:
            parts.append(f"{ranks[i]}..{ranks[j]}")
        else:
            parts.extend(str(r) for r in ranks[i:j + 1])
        i = j + 1
    return "+".join(parts)


def _number(x) -> str:
    """An element as text: whole numbers without '.0' (real runs may hold floats)."""
    x = x.item() if hasattr(x, "item") else x
    if isinstance(x, float):
        return str(int(x)) if x.is_integer() else f"{x:.4g}"
    return str(x)


def format_values(values, max_items: int = 4) -> str:
    """'[13 12]'; longer arrays keep their first items and end with '…'."""
    items = [_number(v) for v in list(values)[:max_items + 1]]
    if len(items) > max_items:
        items = items[:max_items - 1] + ["…"]
    return "[" + " ".join(items) + "]"


def cell(step, rank: int, chunk: int, show: str = "sources") -> str:
    """What one table cell shows. A real run knows values but not sources: then values it is."""
    value = step.values[rank][chunk]
    if value is None:
        return NOT_HELD
    source = step.sources[rank][chunk] if step.sources is not None else None
    if show == "sources" and source is not None:
        return contributors(source, len(step.values))
    return format_values(value)


def phase_name(step, plan) -> str:
    """The phase a step belongs to: from `plan.meta['phases']` if given, else from its transfers' ops."""
    if step.index == 0:
        return _("start")
    phases = plan.meta.get("phases")
    if phases and step.index - 1 < len(phases):
        return _(phases[step.index - 1])  # a plan's own phase names: translated where the catalog has them
    ring = plan.name.startswith("ring") or plan.meta.get("goal") in ("all_gather", "reduce_scatter")
    names = _PHASES_RING if ring else _PHASES_OTHER
    ops = sorted({t.op for t in step.transfers})
    return " + ".join(_(names[op]) for op in ops) or _("idle")


def header(step, plan) -> str:
    return _("step {index}/{steps} of {name} (n={n}, {nbytes} B): {phase}").format(
        index=step.index, steps=plan.num_steps, name=plan.name, n=plan.world_size, nbytes=plan.nbytes,
        phase=phase_name(step, plan))


# `Transfer.template` (base never translates, so its catalog entry is marked here)
TRANSFER = N_("r{src} → r{dst} {sign} chunk {chunk} ({nbytes} B)")


def transfer_line(t) -> str:
    """'r0 → r1 (+=) chunk 2 (8 B)': in English `Transfer`'s own text, so a transfer reads the same
    everywhere; in another language the same notation with the word 'chunk' translated (`_` says a Transfer
    as it says a simulator's Message: its template, then its fields)."""
    return _(t)


def _block(step, plan, show: str) -> list[str]:
    """Grid (rank x chunk, then cumulative bytes) and the transfers that led here."""
    chunks = range(len(plan.chunk_sizes))
    rows = [[""] + [_("chunk {c}").format(c=c) for c in chunks] + [_("sent"), _("recv")]]
    for r in range(plan.world_size):
        rows.append([f"r{r}"] + [cell(step, r, c, show) for c in chunks]
                    + [f"{step.bytes_sent[r]} B", f"{step.bytes_received[r]} B"])
    lines = align(rows)
    if step.transfers:
        lines.append(_("transfers (sender → receiver; += adds, = overwrites):"))
        lines += ["  " + transfer_line(t) for t in step.transfers]
    else:
        lines.append(_("transfers: none yet (the starting state)"))
    return lines


def _legend(step, plan, show: str) -> str:
    """One line saying what the cells mean; a real step without sources shows values only."""
    if show == "sources" and any(src is not None for row in (step.sources or ()) for src in row):
        return _("cells: ranks whose inputs are summed in; Σ0..{last} = all {n} ranks; {not_held} = not held").format(
            last=plan.world_size - 1, n=plan.world_size, not_held=NOT_HELD)
    return _("cells: values held; {not_held} = not held").format(not_held=NOT_HELD)


def step_text(step, plan, show: str = "sources") -> str:
    """One step as a table: rows are ranks, columns chunks (`show` = 'sources' or 'values')."""
    if show not in ("sources", "values"):
        raise ValueError(f"show={show!r}: must be 'sources' or 'values'")
    return "\n".join([header(step, plan), *_block(step, plan, show), _legend(step, plan, show)])


def side_by_side_text(sim_step, real_step, plan, match: bool, show: str = "values") -> str:
    """The simulated step (left) next to the real one (right), with the verdict in the header.

    `match` comes from the engine (`simlab.sim.collectives_stepper.step_matches`); this only prints it.
    Values are the default because that is what a real buffer can show.
    """
    left = [_("simulated"), *_block(sim_step, plan, show)]
    right = [_("real"), *(_block(real_step, plan, show) if real_step is not None else [_("(no such step)")])]
    width = max(display_width(line) for line in left)
    height = max(len(left), len(right))
    left += [""] * (height - len(left))
    right += [""] * (height - len(right))
    body = [f"{pad(a, width)}  │  {b}".rstrip() for a, b in zip(left, right)]
    return "\n".join([f"{header(sim_step, plan)}  {match_text(match)}", *body, _legend(sim_step, plan, show)])


def _event_line(src: int, dst: int, chunk, nbytes: int, name: str = "", note: str = "") -> str:
    what = _("chunk {c}").format(c=chunk) if chunk is not None else _("buffer")
    extra = "".join(f"  {x}" for x in (name, note) if x)
    return f"r{src} → r{dst} {what} ({nbytes} B){extra}"  # a wire carries no op: no (+=) here


def _step_lines(events) -> list[str]:
    """Pair each send with its receive; what has no partner is flagged, never hidden."""
    recvs = Counter((e.peer, e.rank, e.chunk, e.nbytes) for e in events if e.kind == "recv")
    rows = []  # (sort key, line): ranks sort as numbers, so r10 comes after r2
    for e in events:
        if e.kind == "send":
            key = (e.rank, e.peer, e.chunk, e.nbytes)
            note = "" if recvs[key] > 0 else _("[no matching recv]")
            recvs[key] -= 1
            rows.append(((e.rank, e.peer, str(e.chunk)), _event_line(*key, e.name, note)))
        elif e.kind != "recv":
            rows.append(((e.rank, -1, e.name), f"r{e.rank} {e.kind} {e.name}".rstrip()))
    for (src, dst, chunk, nbytes), left in recvs.items():
        rows += [((src, dst, str(chunk)), _event_line(src, dst, chunk, nbytes, note=_("[recv only]")))] * max(left, 0)
    return [line for _key, line in sorted(rows)]


def trace_table(trace, world_size: int) -> str:
    """A Trace step by step, timing left out: the same text for a simulated and a real run."""
    lines = [_("trace: {events} events on {n} ranks (timing left out)").format(events=len(trace), n=world_size)]
    for k in trace.steps():
        events = sorted(trace.at_step(k), key=lambda e: e.key())  # real runs record in any order
        lines.append(_("step {k}").format(k=k))
        lines += ["  " + line for line in _step_lines(events)]
    sent = trace.bytes_sent_per_rank(world_size)
    lines.append(_("bytes sent:") + " " + "  ".join(f"r{r} {b} B" for r, b in enumerate(sent)))
    return "\n".join(lines)


def bytes_table(per_rank, optimum: int | None = None) -> str:
    """Bytes sent per rank, and how each compares with `optimum` (e.g. 2(n-1)/n · buffer)."""
    rows = [[_("rank"), _("bytes sent")] + ([_("/ optimum")] if optimum else [])]
    for r, b in enumerate(per_rank):
        rows.append([f"r{r}", f"{b} B"] + ([f"{b / optimum:.2f}x"] if optimum else []))
    rows.append([_("total"), f"{sum(per_rank)} B"] + ([""] if optimum else []))
    lines = align(rows)
    if optimum is not None:
        lines.append(_("optimum per rank: {optimum} B").format(optimum=optimum))
    return "\n".join(lines)
