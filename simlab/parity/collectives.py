"""Lesson 1's parity: our collectives on real processes against torch's own and against the simulator,
step by step.

`run_collective` launches workers on the simulator's integer inputs, runs our collective and torch's
on each rank, and rebuilds the simulator's view of every step from what the ranks recorded. The
single-process reference is the simulator's exact expected result (`simlab.sim.stepper.expected_final`):

    >>> res = run_collective("ring-all-reduce", world_size=4, numel=10, snapshots=True)
    >>> res["matches_simulator"], res["max_abs_diff_vs_torch"], res["bytes_sent_per_rank"]
    (True, 0.0, [56, 60, 64, 60])
"""
from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist

from .._checks import check_bool, check_int
from ..plan import CollectivePlan, Transfer, chunk_offsets, split_sizes
from ..sim.collectives import canonical, make_inputs, plan_for
from ..sim.stepper import SimStep, expected_final, simulate, steps_match
from ..trace import Recorder, merge
from ..exec.collectives import naive_all_reduce, ring_all_gather, ring_all_reduce, ring_reduce_scatter, tree_broadcast
from ..exec.launch import device, launch
from .common import check_run, max_abs_diff, result


# ---- in the parent: rebuild the simulator's view from what the ranks recorded -----------------

def real_steps(plan: CollectivePlan, per_rank_records) -> list[SimStep]:
    """`SimStep`s from real runs (one `Recorder` per rank), comparable with `steps_match`."""
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
        out.append(SimStep(k, transfers, values, ((None,) * nchunks,) * n, upto("send", k), upto("recv", k)))
    return out


# ---- one whole run for lessons and the CLI: ours vs torch's vs the simulator -------------------

def run_collective(name: str, world_size: int, numel: int, backend: str = "auto", seed: int = 0,
                   snapshots: bool = False, timeout: float = 60.0) -> dict:
    """Launch `world_size` workers on `make_inputs(world_size, numel, seed)` and check everything."""
    name = canonical(name)
    backend = check_run(world_size, backend, timeout, seed)
    plan = plan_for(name, world_size, check_int("numel", numel, 1), 4)
    check_bool("snapshots", snapshots)
    ranks = launch(_worker, world_size, name, numel, seed, snapshots, backend=backend, timeout=timeout)
    recorders = [r["recorder"] for r in ranks]
    inputs = make_inputs(world_size, numel, seed)
    sim = simulate(plan, inputs)
    trace, steps = merge(rec.events for rec in recorders), real_steps(plan, recorders)
    return result(world_size=world_size, backend=ranks[0]["backend"], trace=trace,
                  bytes_sent_per_rank=[rec.bytes_sent for rec in recorders],
                  max_abs_diff_vs_reference=_diff_vs_expected(plan, inputs, [r["ours"] for r in ranks]),
                  max_abs_diff_vs_torch=max(r["max_abs_diff"] for r in ranks),
                  name=name, numel=numel, plan=plan, sim=sim, steps=steps, per_rank=ranks,
                  matches_simulator=trace.signature() == sim.trace.signature()
                  and (not snapshots or all(steps_match(sim.steps, steps))))


def _diff_vs_expected(plan: CollectivePlan, inputs, outputs) -> float:
    """max |ours − the exact sums| wherever the goal says a rank must hold something. A rank's output
    is its whole buffer, or (reduce-scatter) only its own chunk."""
    offsets, worst = chunk_offsets(plan.chunk_sizes), 0.0
    for r, row in enumerate(expected_final(plan, inputs)):
        for c, want in enumerate(row):
            if want is not None:
                got = outputs[r] if outputs[r].size != plan.numel else outputs[r][offsets[c]:offsets[c] + want.size]
                worst = max(worst, float(np.abs(got - want).max(initial=0.0)))
    return worst


def _worker(rank: int, world_size: int, name: str, numel: int, seed: int, snapshots: bool) -> dict:
    # small integers in float32: every sum is exact, so ours and torch's must agree to the bit
    x = torch.tensor(make_inputs(world_size, numel, seed)[rank], dtype=torch.float32, device=device())
    recorder = Recorder(rank, snapshots=snapshots)
    ours, theirs = _ours_and_torchs(name, x, recorder)
    return {"recorder": recorder, "max_abs_diff": max_abs_diff(ours, theirs), "backend": dist.get_backend(), "ours": ours.cpu().numpy()}


def torch_all_gather_uneven(mine: torch.Tensor, sizes, group=None) -> torch.Tensor:
    """torch's all_gather of chunks of `sizes` (this rank brings `mine`): gloo gathers equal sizes
    only, so every chunk is padded to the largest, gathered, then trimmed."""
    rank = dist.get_rank(group)
    padded = [mine.new_zeros(max(sizes)) for _ in sizes]
    padded[rank][:sizes[rank]] = mine
    dist.all_gather(padded, padded[rank].clone(), group=group)
    return torch.cat([p[:s] for p, s in zip(padded, sizes)])


def _ours_and_torchs(name: str, x: torch.Tensor, recorder: Recorder) -> tuple:
    """Our collective and torch's own on the same input `x` (numel,)."""
    sizes, rank = split_sizes(x.numel(), dist.get_world_size()), dist.get_rank()
    if name == "ring-reduce-scatter":
        ours, theirs = x.new_empty(sizes[rank]), x.new_empty(sizes[rank])  # (chunk r,)
        ring_reduce_scatter(ours, x, recorder)
        dist.reduce_scatter(theirs, list(x.split(sizes)))  # the list form accepts uneven chunks
    elif name == "ring-all-gather":
        ours, mine = torch.empty_like(x), x.split(sizes)[rank]  # rank r brings its chunk r
        ring_all_gather(ours, mine, recorder)
        theirs = torch_all_gather_uneven(mine, sizes)
    else:
        ours, theirs = x.clone(), x.clone()
        {"ring-all-reduce": ring_all_reduce, "naive-all-reduce": naive_all_reduce,
         "tree-broadcast": tree_broadcast}[name](ours, recorder=recorder)
        dist.broadcast(theirs, src=0) if name == "tree-broadcast" else dist.all_reduce(theirs)
    return ours, theirs
