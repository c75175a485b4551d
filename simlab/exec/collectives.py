"""Hand-written collectives: the simulator's plans, run on real processes with isend/irecv.

Teaches: a collective is a plan of point-to-point transfers. `run_plan` executes any `CollectivePlan`
step by step on a process group and records one `Event` per send and receive (`simlab.trace.Recorder`),
the same trace the simulator predicts. Ranks in a plan are ranks *in the group*: torch maps them to
global ranks (`group_src`/`group_dst`), so a ring runs the same on WORLD or on a tensor-parallel pair.
Torch-like wrappers (`ring_all_reduce(t, group=g)` acts like `dist.all_reduce(t, group=g)`) sit on top.
`simlab.parity.collectives.run_collective` launches workers and checks them against torch and the simulator.

Speed against gloo: `.venv/bin/python benchmarks/collectives.py`.
"""
from __future__ import annotations

import time

import numpy as np
import torch
import torch.distributed as dist

from .._checks import check_int
from ..plan import CollectivePlan, chunk_offsets
from ..sim.collectives import plan_for
from ..trace import Recorder

LANE_BYTES = 1 << 20  # chunks of 2 x this or more are cut into 2 pipelined lanes (see run_plan)


_SCRATCH: dict = {}  # (dtype, device, lane, slot) -> buffer, reused across calls: no allocation per step


def _scratch(key: tuple, like: torch.Tensor) -> torch.Tensor:
    key = (like.dtype, like.device) + key
    if key not in _SCRATCH or _SCRATCH[key].numel() < like.numel():
        _SCRATCH[key] = torch.empty_like(like)  # grows to the largest chunk seen, then stays
    return _SCRATCH[key][:like.numel()]


def _initially_held(plan: CollectivePlan, rank: int) -> set:
    """Chunks this rank holds before step 0, as the plan's `start` says (the simulator's rule)."""
    every = set(range(len(plan.chunk_sizes)))
    return {"all": every, "own": every & {rank}, "root": every if rank == plan.root else set()}[plan.start]


def _flat(plan: CollectivePlan, tensor: torch.Tensor, group) -> torch.Tensor:
    """The 1-D view run_plan works on; a mismatch is a ValueError, not a hang on another rank."""
    if not tensor.is_contiguous() or tensor.numel() != plan.numel or tensor.element_size() != plan.itemsize:
        raise ValueError(f"tensor: {tensor.numel()} x {tensor.element_size()} B does not fit plan "
                         f"{plan.name!r} ({plan.numel} x {plan.itemsize} B, contiguous)")
    if dist.get_world_size(group) != plan.world_size:
        raise ValueError(f"plan {plan.name!r}: {plan.world_size} ranks, group: {dist.get_world_size(group)}")
    return tensor.view(-1)


def run_plan(plan: CollectivePlan, tensor: torch.Tensor, recorder: Recorder | None = None, group=None,
             lanes: int | None = None) -> None:
    """Execute `plan` on this rank of `group` (default: WORLD), in place on `tensor` (plan.numel elements).

    With a `recorder` (`simlab.trace.Recorder`): one send/recv Event per transfer, timed from a barrier
    all ranks leave together; with `recorder.snapshots`, `recorder.values[k][chunk]` is an int64 copy of
    each held chunk after step k-1 (k=0: before step 0), None where the plan says it is not held yet —
    exact for integer-valued data (what lessons use).
    Each chunk is cut into `lanes` parts; lane j runs the plan on the j-th parts. The lanes take turns,
    so one lane adds while the other's data is on the wire, as gloo pipelines segments. Default: 2 lanes
    for chunks of 2 x LANE_BYTES or more, else 1 (small messages are latency-bound). A transfer is
    still one Event, with all its parts' bytes.
    """
    flat, rank = _flat(plan, tensor, group), dist.get_rank(group)
    if lanes is None:
        lanes = 2 if max(plan.chunk_sizes) * plan.itemsize >= 2 * LANE_BYTES else 1
    snap = recorder is not None and recorder.snapshots
    lanes = [_Lane(plan, flat, rank, j, check_int("lanes", lanes, 1), snap) for j in range(lanes)]
    if recorder is not None:
        dist.barrier(group)  # every rank starts its clock together, so timelines line up
        recorder.restart()
        _record(recorder, rank, -1, lanes)
    for k in range(plan.num_steps + 1):
        for lane in lanes:  # lane 0 ends step k-1 and posts step k while lane 1's step k-1 is in flight
            if k > 0:
                lane.finish(snap)
            if k < plan.num_steps:
                lane.start(plan.steps[k], group)
        if recorder is not None and k > 0:
            _record(recorder, rank, k - 1, lanes)


class _Lane:
    """Part j of every chunk, going through the plan one step at a time."""

    def __init__(self, plan: CollectivePlan, flat: torch.Tensor, rank: int, j: int, lanes: int, snap: bool):
        self.rank, self.tag, self.held = rank, j, _initially_held(plan, rank)  # a tag per lane: no mix-ups
        self.chunks = [flat.narrow(0, o, s).tensor_split(lanes)[j]  # (about size / lanes,) views
                       for o, s in zip(chunk_offsets(plan.chunk_sizes), plan.chunk_sizes)]
        self.parts = self.snapshot() if snap else None

    def start(self, step, group) -> None:
        """Post the step's receives, then its sends, all non-blocking: on a ring every rank sends and
        receives at once, and a blocking send would wait for a receive not yet posted (deadlock)."""
        self.mine = [t for t in step if self.rank in (t.src, t.dst)]
        sent = {t.chunk for t in self.mine if t.src == self.rank}
        self.posted = []  # (index in mine, work, scratch buffer or None, start time)
        for i, t in enumerate(self.mine):
            if t.dst == self.rank:
                # an overwrite may land in place, unless this step still sends that chunk or another
                # receive targets it too; a reduce needs the old value, so it lands in scratch
                direct = ((t.op == "copy" or t.chunk not in self.held) and t.chunk not in sent
                          and sum(u.dst == self.rank and u.chunk == t.chunk for u in self.mine) == 1)
                buf = None if direct else _scratch((self.tag, i), self.chunks[t.chunk])
                into = self.chunks[t.chunk] if direct else buf
                work = dist.irecv(into, group=group, group_src=t.src, tag=self.tag)
                self.posted.append((i, work, buf, time.perf_counter()))
        for i, t in enumerate(self.mine):
            if t.src == self.rank:
                work = dist.isend(self.chunks[t.chunk], group=group, group_dst=t.dst, tag=self.tag)
                self.posted.append((i, work, None, time.perf_counter()))

    def finish(self, snap: bool) -> None:
        """Wait for the step, then apply the receives' ops (only now: the sends read the old values)."""
        self.times = {}
        for i, work, _, start in self.posted:
            work.wait()
            self.times[i] = (start, time.perf_counter())
        for i, _, buf, _ in self.posted:
            t = self.mine[i]
            if buf is not None and t.op == "reduce" and t.chunk in self.held:
                self.chunks[t.chunk].add_(buf)
            elif buf is not None:
                self.chunks[t.chunk].copy_(buf)
            if t.dst == self.rank:
                self.held.add(t.chunk)
        self.done = self.mine  # start() moves on to the next step; _record needs this one
        self.parts = self.snapshot() if snap else None

    def snapshot(self) -> list:
        """This lane's part of every held chunk as an int64 copy (round() copies), else None."""
        return [x.cpu().round().to(torch.int64).numpy() if c in self.held else None
                for c, x in enumerate(self.chunks)]


def _record(recorder: Recorder, rank: int, k: int, lanes) -> None:
    """Step k's events, all lanes as one, in plan order (the simulator's order); then the values."""
    for i, t in enumerate(lanes[0].done if k >= 0 else ()):
        is_send = t.src == rank  # a transfer never goes from a rank to itself
        nbytes = sum(lane.chunks[t.chunk].nbytes for lane in lanes)  # what went on the wire
        start, end = min(lane.times[i][0] for lane in lanes), max(lane.times[i][1] for lane in lanes)
        recorder.record("send" if is_send else "recv", start - recorder.origin, end - recorder.origin,
                        rank=rank, step=k, peer=t.dst if is_send else t.src, chunk=t.chunk, nbytes=nbytes)
    if recorder.snapshots:  # a held chunk = its lanes' parts end to end
        recorder.values.append(tuple(None if part is None else np.concatenate([lane.parts[c] for lane in lanes])
                                     for c, part in enumerate(lanes[0].parts)))


# ---- torch-like API: build the plan from the group and the tensor, then run it -------------------

def _plan_for(name: str, tensor: torch.Tensor, group, root: int = 0) -> CollectivePlan:
    return plan_for(name, dist.get_world_size(group), tensor.numel(), tensor.element_size(), root)


def ring_all_reduce(tensor, recorder=None, group=None) -> None:
    """Like `dist.all_reduce(tensor)` (SUM), in place, over a ring: 2(n-1) steps."""
    run_plan(_plan_for("ring-all-reduce", tensor, group), tensor, recorder, group)


def naive_all_reduce(tensor, root=0, recorder=None, group=None) -> None:
    """Like `dist.all_reduce(tensor)`, but everything goes through `root` (DP style)."""
    run_plan(_plan_for("naive-all-reduce", tensor, group, root), tensor, recorder, group)


def tree_broadcast(tensor, root=0, recorder=None, group=None) -> None:
    """Like `dist.broadcast(tensor, src=root)`, over a binomial tree."""
    run_plan(_plan_for("tree-broadcast", tensor, group, root), tensor, recorder, group)


def ring_reduce_scatter(output, input, recorder=None, group=None) -> None:
    """`output` = chunk `rank` of the sum of every rank's `input` (chunks as in `split_sizes`)."""
    plan, rank = _plan_for("ring-reduce-scatter", input, group), dist.get_rank(group)
    if output.numel() != plan.chunk_sizes[rank]:
        raise ValueError(f"output: {output.numel()} elements, rank {rank}'s chunk has {plan.chunk_sizes[rank]}")
    work = input.detach().reshape(-1).clone()  # the ring sums in place; the caller's input stays intact
    run_plan(plan, work, recorder, group)
    output.view(-1).copy_(work.narrow(0, chunk_offsets(plan.chunk_sizes)[rank], plan.chunk_sizes[rank]))


def ring_all_gather(output, input, recorder=None, group=None) -> None:
    """`output` = every rank's `input`, concatenated in rank order (sizes as in `split_sizes`)."""
    plan, rank = _plan_for("ring-all-gather", output, group), dist.get_rank(group)
    if input.numel() != plan.chunk_sizes[rank]:
        raise ValueError(f"input: {input.numel()} elements, rank {rank}'s chunk has {plan.chunk_sizes[rank]}")
    offset = chunk_offsets(plan.chunk_sizes)[rank]
    output.view(-1).narrow(0, offset, input.numel()).copy_(input.reshape(-1))  # our own chunk first
    run_plan(plan, output, recorder, group)
