"""Lesson 1's parity: our collectives on real processes against torch's own and against the simulator,
step by step.

`run_collective` launches workers on the simulator's integer inputs, runs our collective and torch's
on each rank, and rebuilds the simulator's view of every step from what the ranks recorded. The
single-process reference is the simulator's exact expected result (`simlab.sim.collectives_stepper.expected_final`).
Memory stays proportional to the buffer: each rank builds only its own input and checks its own output
against the exact sums streamed a piece at a time (`expected_pieces`), and the parent simulates values
only when the ranks recorded them (`snapshots`), else symbolically (who contributed, no arrays):

    >>> res = run_collective("ring-all-reduce", world_size=4, numel=10, snapshots=True)
    >>> res["matches_simulator"], res["max_abs_diff_vs_torch"], res["bytes_sent_per_rank"]
    (True, 0.0, [56, 60, 64, 60])

With `inputs="powers-of-two"` rank r brings 2**r in every element, so each value a real rank held
decodes to whose inputs were in it (`power_sources`): the real steps then show reduction progress too.
"""
from __future__ import annotations

import resource

import torch
import torch.distributed as dist

from .._checks import check_bool, check_choice, check_int
from ..exec import collectives as executor
from ..exec.launch import device, launch
from ..plan import CollectivePlan, Transfer, chunk_offsets
from ..sim.collectives import (
    INPUT_KINDS,
    MAX_POWER_RANKS,
    PIECE,
    PLANS,
    canonical,
    input_pieces,
    make_inputs,
    plan_for,
    power_inputs,
    power_sources,
)
from ..sim.collectives_stepper import SimStep, expected_pieces, simulate, steps_match
from ..trace import Recorder, merge
from .common import check_run, max_abs_diff, result

# ---- in the parent: rebuild the simulator's view from what the ranks recorded -----------------

def real_steps(plan: CollectivePlan, per_rank_records, kind: str = "random") -> list[SimStep]:
    """`SimStep`s from real runs (one `Recorder` per rank), comparable with `steps_match`. A buffer knows
    its values only; with kind "powers-of-two" inputs the values also say whose inputs they hold."""
    ops = {(t.step, t.src, t.dst, t.chunk): t.op for t in plan.transfers()}  # a wire carries no op
    n, nchunks = plan.world_size, len(plan.chunk_sizes)
    events = [e for rec in per_rank_records for e in rec.events]
    def upto(kind, k):  # cumulative bytes per rank over steps 0..k-1
        return tuple(sum(e.nbytes for e in events if e.kind == kind and e.rank == r and e.step < k)
                     for r in range(n))
    out = []
    for k in range(plan.num_steps + 1):
        transfers = tuple(Transfer(k - 1, e.rank, e.peer, e.chunk, e.nbytes,
                                   ops.get((k - 1, e.rank, e.peer, e.chunk), "copy"))
                          for e in events if e.kind == "send" and e.step == k - 1)
        values = tuple(rec.values[k] if k < len(rec.values) else (None,) * nchunks for rec in per_rank_records)
        sources = tuple(tuple(power_sources(v, n) if v is not None and kind == "powers-of-two" else None
                              for v in row) for row in values)
        out.append(SimStep(k, transfers, values, sources, upto("send", k), upto("recv", k)))
    return out


# ---- one whole run for lessons and the CLI: ours vs torch's vs the simulator -------------------

def run_collective(name: str, world_size: int, numel: int, backend: str = "auto", seed: int = 0,
                   snapshots: bool = False, timeout: float = 60.0, inputs: str = "random") -> dict:
    """Launch `world_size` workers on `make_inputs(world_size, numel, seed)` (`inputs="powers-of-two"`:
    on `power_inputs`, up to MAX_POWER_RANKS ranks) and check everything.

    `per_rank[r]` holds rank r's recorder, its max diffs, and its peak RSS (`peak_rss_bytes`) next to its
    RSS when it started (`start_rss_bytes`). `snapshots=True` records every step's values (an int64 copy
    of each held chunk per step): for lessons' small buffers, not for big ones."""
    name = canonical(name)
    backend = check_run(world_size, backend, timeout, seed)
    plan = plan_for(name, world_size, check_int("numel", numel, 1), 4)
    check_bool("snapshots", snapshots)
    if check_choice("inputs", inputs, INPUT_KINDS) == "powers-of-two" and world_size > MAX_POWER_RANKS:
        raise ValueError(f"world_size={world_size}: inputs='powers-of-two' takes at most {MAX_POWER_RANKS} "
                         f"ranks (sums of 2**rank stay exact in float32 below 2**{MAX_POWER_RANKS})")
    ranks = launch(_worker, world_size, name, numel, seed, snapshots, inputs, backend=backend, timeout=timeout)
    recorders = [r["recorder"] for r in ranks]
    # values per step are compared only where the ranks recorded theirs; else the trace is compared
    # with a symbolic simulation, which needs no copy of anyone's buffer however big
    if snapshots:  # only then are every rank's inputs built here: a big buffer must not sit N times in the parent
        given = power_inputs(world_size, numel) if inputs == "powers-of-two" else make_inputs(world_size, numel, seed)
        sim = simulate(plan, given)
    else:
        sim = simulate(plan, symbolic=True)
    trace, steps = merge(rec.events for rec in recorders), real_steps(plan, recorders, inputs)
    return result(world_size=world_size, backend=ranks[0]["backend"], trace=trace,
                  bytes_sent_per_rank=[rec.bytes_sent for rec in recorders],
                  max_abs_diff_vs_reference=max(r["max_abs_diff_vs_reference"] for r in ranks),
                  max_abs_diff_vs_torch=max(r["max_abs_diff"] for r in ranks),
                  name=name, numel=numel, inputs=inputs, plan=plan, sim=sim, steps=steps, per_rank=ranks,
                  matches_simulator=trace.signature() == sim.trace.signature()
                  and (not snapshots or all(steps_match(sim.steps, steps))))


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # the high-water mark; Linux counts KiB


def _warm_up(name: str, world_size: int, rank: int) -> None:
    """The whole check once on a tiny buffer: the first call of a collective touches pages of torch's and
    gloo's code (tens of MB of shared library, more where the page cache uses huge pages), which is not
    memory this run's buffer needs and must not count as such."""
    tiny = plan_for(name, world_size, world_size, 4)
    x = _own_input(tiny, name, rank, 0, "random")
    _diff_vs_torch(name, x, _ours(name, x, Recorder(rank), tiny), tiny, 0, "random")


def _worker(rank: int, world_size: int, name: str, numel: int, seed: int, snapshots: bool, kind: str) -> dict:
    _warm_up(name, world_size, rank)
    start_rss, plan = _peak_rss(), plan_for(name, world_size, numel, 4)
    x = _own_input(plan, name, rank, seed, kind)
    recorder = Recorder(rank, snapshots=snapshots)
    ours = _ours(name, x, recorder, plan)
    return {"recorder": recorder, "max_abs_diff": _diff_vs_torch(name, x, ours, plan, seed, kind),
            "max_abs_diff_vs_reference": _diff_vs_expected(plan, rank, seed, ours, kind),
            "backend": dist.get_backend(),
            "start_rss_bytes": start_rss, "peak_rss_bytes": _peak_rss()}


def _own_input(plan: CollectivePlan, name: str, rank: int, seed: int, kind: str = "random") -> torch.Tensor:
    """This rank's `make_inputs(...)[rank]`, or (all-gather) only its chunk of it, built a piece at a time:
    no rank ever materialises another's input. Small integers in float32: every sum is exact, so ours and
    torch's must agree to the bit."""
    lo, hi = 0, plan.numel
    if name == "ring-all-gather":  # rank r brings only its chunk r
        lo = chunk_offsets(plan.chunk_sizes)[rank]
        hi = lo + plan.chunk_sizes[rank]
    x = torch.empty(hi - lo, dtype=torch.float32, device=device())
    for offset, parts in input_pieces(plan.world_size, plan.numel, seed, [rank], lo, hi, kind):
        x[offset - lo:offset - lo + parts[rank].size].copy_(torch.from_numpy(parts[rank]))
    return x


def _ours(name: str, x: torch.Tensor, recorder: Recorder, plan: CollectivePlan) -> torch.Tensor:
    """Our collective on what this rank brings, `x`: (numel,), or (all-gather) its chunk. The in-place
    ones run on `x` itself: one buffer less to hold. The executor's function has the plan's name."""
    run, goal = getattr(executor, PLANS[name].__name__), plan.meta["goal"]
    if goal == "reduce_scatter":
        ours = x.new_empty(plan.chunk_sizes[dist.get_rank()])  # (chunk r,)
    elif goal == "all_gather":
        ours = x.new_empty(plan.numel)
    else:
        run(x, recorder=recorder)
        return x
    run(ours, x, recorder)
    return ours


def _diff_vs_torch(name: str, x: torch.Tensor, ours: torch.Tensor, plan: CollectivePlan, seed: int,
                   kind: str) -> float:
    """max |ours − torch's own collective on the same inputs|. Torch's runs a piece at a time (every rank
    on the same pieces), so its result never sits whole beside ours: small integers sum exactly, whatever
    algorithm gloo picks for a piece's size."""
    rank, sizes, offsets, worst = dist.get_rank(), plan.chunk_sizes, chunk_offsets(plan.chunk_sizes), 0.0
    if name in ("ring-reduce-scatter", "ring-all-gather"):  # `x` is intact: piece `lo` of every chunk
        for lo in range(0, max(sizes), PIECE):
            counts = [min(max(size - lo, 0), PIECE) for size in sizes]  # some may be empty
            if name == "ring-reduce-scatter":
                theirs, got = x.new_empty(counts[rank]), ours[lo:lo + counts[rank]]
                dist.reduce_scatter(theirs, [x[o + lo:o + lo + k] for o, k in zip(offsets, counts)])
            else:
                theirs = torch_all_gather_uneven(x[lo:lo + counts[rank]], counts)
                got = torch.cat([ours[o + lo:o + lo + k] for o, k in zip(offsets, counts)])
            worst = max(worst, max_abs_diff(got, theirs))
        return worst
    for offset, parts in input_pieces(plan.world_size, plan.numel, seed, [rank], kind=kind):  # `x` is ours now
        theirs = torch.from_numpy(parts[rank]).to(ours)  # float32, on our device
        dist.broadcast(theirs, src=0) if name == "tree-broadcast" else dist.all_reduce(theirs)
        worst = max(worst, max_abs_diff(ours[offset:offset + theirs.numel()], theirs))
    return worst


def _diff_vs_expected(plan: CollectivePlan, rank: int, seed: int, ours: torch.Tensor, kind: str) -> float:
    """max |ours − the exact sums| wherever the goal says this rank must hold something. `ours` is the
    whole buffer, or (reduce-scatter) only this rank's chunk."""
    base = 0 if ours.numel() == plan.numel else chunk_offsets(plan.chunk_sizes)[rank]
    return max((max_abs_diff(ours[o - base:o - base + want.size], torch.from_numpy(want))
                for o, want in expected_pieces(plan, rank, seed, kind)), default=0.0)


def torch_all_gather_uneven(mine: torch.Tensor, sizes, group=None) -> torch.Tensor:
    """torch's all_gather of chunks of `sizes` (this rank brings `mine`): gloo gathers equal sizes
    only, so every chunk is padded to the largest, gathered, then trimmed."""
    rank = dist.get_rank(group)
    padded = [mine.new_zeros(max(sizes)) for _ in sizes]
    padded[rank][:sizes[rank]] = mine
    dist.all_gather(padded, padded[rank].clone(), group=group)
    return torch.cat([p[:s] for p, s in zip(padded, sizes)])
