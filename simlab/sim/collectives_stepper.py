"""Lesson 1's stepper: step through any collective plan with exact integers, who holds what after every step.

Each `SimStep` shows, for every rank and chunk, the values held (an int64 array, or None if the
rank does not hold that chunk yet) and whose contributions were summed into them, plus the bytes
each rank has sent and received so far. A plan that sends a chunk its sender does not hold, or
whose byte counts disagree with its chunk sizes, raises `PlanError` naming the step and rank.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._checks import check_bool, check_int, check_number, check_positive
from ..plan import CollectivePlan, chunk_offsets
from ..trace import Event, Trace
from .collectives import input_pieces, make_inputs
from .cost import DEFAULT_ALPHA, DEFAULT_BANDWIDTH, CostEstimate, alpha_beta


class PlanError(ValueError):
    """The plan cannot run: it names the step, rank and chunk at fault."""


@dataclass(frozen=True, eq=False)
class SimStep:
    index: int  # 0 = before any transfer; k = after step k-1 ran
    transfers: tuple  # the Transfers that produced this state (empty for index 0)
    values: tuple  # values[rank][chunk]: np.ndarray (int64) or None
    sources: tuple  # sources[rank][chunk]: frozenset of ranks summed in, or None
    bytes_sent: tuple  # cumulative, per rank
    bytes_received: tuple


@dataclass(frozen=True, eq=False)
class SimResult:
    plan: CollectivePlan
    inputs: list  # one int64 array per rank
    steps: list  # SimStep, len == plan.num_steps + 1
    trace: Trace
    cost: CostEstimate
    expected: tuple | None  # expected[rank][chunk] values at the end (None: symbolic run)
    final_ok: bool


def _initial(plan: CollectivePlan, inputs) -> tuple[list, list]:
    """Who holds which chunk before step 0, according to `plan.start`."""
    offsets, n = chunk_offsets(plan.chunk_sizes), plan.world_size
    def piece(r, c):
        return inputs[r][offsets[c]:offsets[c] + plan.chunk_sizes[c]].copy()
    holds = {"all": lambda r, c: True, "own": lambda r, c: c == r, "root": lambda r, c: r == plan.root}
    if plan.start not in holds:
        raise PlanError(f"start={plan.start!r}: must be one of {', '.join(holds)}")
    values = [[piece(r, c) if holds[plan.start](r, c) else None for c in range(len(plan.chunk_sizes))]
              for r in range(n)]
    sources = [[frozenset([r]) if v is not None else None for v in row] for r, row in enumerate(values)]
    return values, sources


def _apply(plan, step_index, transfers, values, sources):
    """Run one step: every send reads the state from *before* the step (they are concurrent)."""
    new_values = [list(row) for row in values]
    new_sources = [list(row) for row in sources]
    for t in transfers:
        where = f"step {step_index}: rank {t.src} -> rank {t.dst}, chunk {t.chunk}"
        if not (0 <= t.src < plan.world_size and 0 <= t.dst < plan.world_size) or t.src == t.dst:
            raise PlanError(f"{where}: src and dst must be two different ranks in [0, {plan.world_size})")
        if not 0 <= t.chunk < len(plan.chunk_sizes):
            raise PlanError(f"{where}: there are only {len(plan.chunk_sizes)} chunks")
        if t.nbytes != plan.chunk_sizes[t.chunk] * plan.itemsize:
            raise PlanError(f"{where}: nbytes={t.nbytes} but the chunk has "
                            f"{plan.chunk_sizes[t.chunk] * plan.itemsize} bytes")
        sent, src_from = values[t.src][t.chunk], sources[t.src][t.chunk]
        if sent is None:
            raise PlanError(f"{where}: rank {t.src} does not hold chunk {t.chunk} yet")
        mine = new_values[t.dst][t.chunk]
        if t.op == "reduce" and mine is not None:
            new_values[t.dst][t.chunk] = mine + sent
            new_sources[t.dst][t.chunk] = new_sources[t.dst][t.chunk] | src_from
        else:
            new_values[t.dst][t.chunk], new_sources[t.dst][t.chunk] = sent.copy(), src_from
    return new_values, new_sources


def expected_sources(plan: CollectivePlan) -> tuple:
    """Whose contributions each rank must hold per chunk at the end (None = no requirement)."""
    n, everyone = plan.world_size, frozenset(range(plan.world_size))
    rule = {
        "all_reduce": lambda r, c: everyone,
        "reduce_scatter": lambda r, c: everyone if c == r else None,
        "all_gather": lambda r, c: frozenset([c]),
        "broadcast": lambda r, c: frozenset([plan.root]),
        "reduce": lambda r, c: everyone if r == plan.root else None,
    }
    goal = plan.meta.get("goal")
    if goal not in rule:
        raise PlanError(f"goal={goal!r}: plan.meta['goal'] must be one of {', '.join(rule)}")
    return tuple(tuple(rule[goal](r, c) for c in range(len(plan.chunk_sizes))) for r in range(n))


def expected_final(plan: CollectivePlan, inputs) -> tuple:
    """The values each rank must hold at the end: the sum of the inputs of `expected_sources`."""
    offsets = chunk_offsets(plan.chunk_sizes)
    def value(srcs, c):
        if srcs is None:
            return None
        return sum(inputs[r][offsets[c]:offsets[c] + plan.chunk_sizes[c]] for r in sorted(srcs))
    return tuple(tuple(value(srcs, c) for c, srcs in enumerate(row)) for row in expected_sources(plan))


def expected_pieces(plan: CollectivePlan, rank: int, seed: int = 0, kind: str = "random"):
    """`expected_final(plan, make_inputs(n, numel, seed))[rank]` (kind "powers-of-two": of `power_inputs`),
    a piece at a time and never whole: yields (offset in the buffer, int64 array) for every element the
    rank must end with."""
    need, offsets = expected_sources(plan)[rank], chunk_offsets(plan.chunk_sizes)
    spans = [(offsets[c], offsets[c] + plan.chunk_sizes[c], sorted(srcs)) for c, srcs in enumerate(need) if srcs]
    if not spans:
        return
    ranks = sorted(set().union(*(srcs for _, _, srcs in spans)))
    for offset, parts in input_pieces(plan.world_size, plan.numel, seed, ranks, spans[0][0], spans[-1][1],
                                      kind):
        end = offset + len(parts[ranks[0]])
        for lo, hi, srcs in spans:  # a piece may straddle chunks with other sources
            lo, hi = max(lo, offset), min(hi, end)
            if lo < hi:
                yield lo, sum(parts[r][lo - offset:hi - offset] for r in srcs)


def _matches(held, expected) -> bool:
    """Equal wherever `expected` requires something (works for value arrays and source sets)."""
    return all(want is None or (got is not None and np.array_equal(got, want))
               for got_row, want_row in zip(held, expected) for got, want in zip(got_row, want_row))


def _trace(plan: CollectivePlan, cost: CostEstimate) -> Trace:
    """Send/recv events, timed by the α-β model: step k spans [t_k, t_k + step_seconds[k])."""
    trace, t0 = Trace(), 0.0
    for k, (step, seconds) in enumerate(zip(plan.steps, cost.step_seconds)):
        for t in step:
            trace.append(Event(t.src, "send", k, t.dst, t.chunk, t.nbytes, start=t0, end=t0 + seconds))
            trace.append(Event(t.dst, "recv", k, t.src, t.chunk, t.nbytes, start=t0, end=t0 + seconds))
        t0 += seconds
    return trace


SYMBOLIC_ABOVE = 1 << 24  # elements over all ranks: beyond this, track who contributed, not values


def simulate(plan: CollectivePlan, inputs=None, seed: int = 0, alpha: float = DEFAULT_ALPHA,
             bandwidth: float = DEFAULT_BANDWIDTH, symbolic: bool | None = None) -> SimResult:
    """Run `plan` step by step on `inputs` (default: `make_inputs(n, numel, seed)`).

    Huge buffers (over SYMBOLIC_ABOVE elements in all), or any with `symbolic=True`, are simulated
    symbolically: each chunk is a zero-length array and correctness is proven on the contribution
    sets alone, which is exact because a held value is by construction the sum of the inputs of its
    sources (`expected_pieces` streams those sums when the values themselves must be checked).
    """
    if not isinstance(plan, CollectivePlan):
        raise ValueError(f"plan={plan!r}: must be a CollectivePlan (make_plan, ring_all_reduce, ...)")
    check_int("seed", seed, 0)
    check_number("alpha", alpha)
    check_positive("bandwidth", bandwidth)
    if inputs is not None and (not isinstance(inputs, (list, tuple)) or any(
            np.asarray(x).dtype.kind not in "iu" for x in inputs)):  # floats would be truncated silently
        raise PlanError(f"inputs: need {plan.world_size} buffers of {plan.numel} integers")
    n = plan.world_size
    if symbolic is None:
        symbolic = inputs is None and n * plan.numel > SYMBOLIC_ABOVE
    if check_bool("symbolic", symbolic) and inputs is not None:
        raise ValueError("symbolic=True: simulates without values, so it takes no inputs")
    if symbolic:
        inputs = [np.zeros(0, np.int64)] * n
        plan_for_values = plan.__class__(plan.name, n, (0,) * len(plan.chunk_sizes), plan.itemsize,
                                         plan.start, (), plan.root, plan.meta)
    elif inputs is None:
        inputs = make_inputs(n, plan.numel, seed)
    else:
        inputs = [np.asarray(x, np.int64) for x in inputs]
    if not symbolic and (len(inputs) != n or any(x.shape != (plan.numel,) for x in inputs)):
        raise PlanError(f"inputs: need {n} buffers of {plan.numel} elements")
    values, sources = _initial(plan_for_values if symbolic else plan, inputs)
    sent, recv = [0] * n, [0] * n
    steps = [SimStep(0, (), _freeze(values), _freeze(sources), tuple(sent), tuple(recv))]
    for k, transfers in enumerate(plan.steps):
        values, sources = _apply(plan, k, transfers, values, sources)
        for t in transfers:
            sent[t.src] += t.nbytes
            recv[t.dst] += t.nbytes
        steps.append(SimStep(k + 1, tuple(transfers), _freeze(values), _freeze(sources), tuple(sent), tuple(recv)))
    cost = alpha_beta(plan, alpha, bandwidth)
    expected = None if symbolic else expected_final(plan, inputs)
    ok = _matches(sources, expected_sources(plan)) and (symbolic or _matches(values, expected))
    return SimResult(plan, inputs, steps, _trace(plan, cost), cost, expected, ok)


def _freeze(rows):
    return tuple(tuple(row) for row in rows)


def _transfer_key(t):
    return (t.src, t.dst, t.chunk, t.nbytes, t.op)


def step_matches(sim: SimStep, real: SimStep) -> bool:
    """Does a real run's step agree with the simulated one?

    Same transfers (as a set: they are concurrent), same cumulative bytes per rank, and the same
    values wherever the simulator says a rank holds a chunk (a real buffer also has stale memory).
    """
    if sorted(map(_transfer_key, sim.transfers)) != sorted(map(_transfer_key, real.transfers)):
        return False
    if sim.bytes_sent != real.bytes_sent or sim.bytes_received != real.bytes_received:
        return False
    return _matches(real.values, sim.values)


def steps_match(sim_steps, real_steps) -> list[bool]:
    """One verdict per step; a missing step counts as a mismatch."""
    verdicts = [step_matches(s, r) for s, r in zip(sim_steps, real_steps)]
    return verdicts + [False] * abs(len(sim_steps) - len(real_steps))
