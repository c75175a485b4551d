"""Data parallelism, one training step at a time: DP (`nn.DataParallel`) versus DDP on N devices.

Teaches:
- **DP** is one process driving N devices with threads: one machine only, and the threads share
  Python's GIL (left out of this model). Every step device 0 scatters the inputs, copies the whole
  model to every other device, gathers the outputs, computes the loss, scatters the output gradients
  and sums every gradient back: device 0 moves (N-1)× what any other device moves. (A star with
  device 0 at the centre and a link per device: the course's model, not how CUDA routes the copies.)
- **DDP** runs one process per device (no shared GIL). Each rank keeps its own copy of the model,
  so the only exchange is one all-reduce of the gradients. It is cut into buckets that start while
  backward is still running, so part of the communication is *hidden* behind compute.
- DDP is usually faster, but not always. Each bucket's ring all-reduce pays 2(N-1) latencies, so
  a high-latency link with many small buckets lets DP win. On a slow link, overlap cannot hide the
  all-reduce: most of it is *exposed*.

Times come from the α-β model of `simlab.sim.cost`; a step is a `Trace` the renderers draw.

    >>> w = workload_from_layers([1 << 20] * 4, world_size=4)   # 4 Mi params = 16 MiB
    >>> dp, ddp = simulate_dp(w), simulate_ddp(w)
    >>> dp.bytes_sent[0] == 3 * dp.bytes_received[1]   # device 0 feeds the 3 others
    True
    >>> ddp.bytes_sent == (24 << 20,) * 4               # 2(N-1)/N · 16 MiB on every rank
    True
"""
from __future__ import annotations

import dataclasses
import math

from ..plan import Transfer
from ..trace import Recorder, Trace
from .collectives import plan_for
from .cost import busiest_link_bytes, ring_all_reduce_seconds
from .data_parallel_buckets import BucketReadiness, assign_buckets
from .data_parallel_workload import (
    DEFAULT_LAYERS,
    DEFAULT_MPARAMS,
    MIB,
    TIE_TOLERANCE,
    Workload,
    scaled_workload,
    workload_from_layers,
)

# lesson 2 imports the step model and its workload from here
__all__ = ["DEFAULT_LAYERS", "DEFAULT_MPARAMS", "Phase", "StepResult", "Workload", "compare", "scaled_workload",
           "simulate_ddp", "simulate_dp", "workload_from_layers"]

@dataclasses.dataclass(frozen=True)
class Phase:
    """One thing that happens in a step, on one or more devices (per-device bytes and timing)."""

    name: str
    kind: str  # "compute" | "comm"
    start: float
    end: float
    bytes_sent: tuple  # per device
    bytes_received: tuple

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclasses.dataclass(frozen=True, eq=False)
class StepResult:
    strategy: str  # "dp" | "ddp"
    workload: Workload
    trace: Trace  # Events: kind "compute" or "comm", times in model seconds, rank = device
    phases: tuple  # Phase, sorted by start: step through them one by one
    bytes_sent: tuple  # per device, over the whole step
    bytes_received: tuple
    compute_seconds: tuple  # per device
    step_seconds: float
    comm_seconds: float  # time spent communicating (DP: device 0's link; DDP: the comm lane)
    hidden_seconds: float  # communication that ran while backward was still computing
    exposed_seconds: float  # communication nothing overlapped: the step waited for it
    buckets: tuple = ()  # DDP: parameter (layer) indices per bucket, in launch order


class _Phases:
    """Collects phases and their per-device events (a `Recorder` in model time); at the end, sorts the
    phases by start and sets each Event's `step` to its phase's index."""

    def __init__(self, w: Workload):
        self.w, self.n, self.items = w, w.world_size, []

    def _phase(self, phase: Phase, record) -> None:
        rec = Recorder(origin=0.0)  # model seconds: the times are given, not read off a clock
        record(rec)
        self.items.append((phase, rec.events))

    def compute(self, name: str, start: float, seconds: dict) -> float:
        """Devices in `seconds` (device -> seconds) compute from `start`; returns when all are done."""
        end = start + max(seconds.values())
        self._phase(Phase(name, "compute", start, end, (0,) * self.n, (0,) * self.n), lambda rec: [
            rec.record("compute", start, start + s, name, rank=r) for r, s in seconds.items()])
        return end

    def comm(self, name: str, start: float, seconds: float, sent, recv, hub: int | None) -> float:
        """A transfer phase; an Event's nbytes is its device's busier direction (what sets the time)."""
        end, moved = start + seconds, [max(s, v) for s, v in zip(sent, recv)]
        if any(moved):  # a lone device has nothing to send
            self._phase(Phase(name, "comm", start, end, tuple(sent), tuple(recv)), lambda rec: [
                rec.record("comm", start, end, name, rank=r, peer=None if r == hub else hub, nbytes=b)
                for r, b in enumerate(moved) if b])
        return end

    def result(self, strategy: str, hidden: float = 0.0, buckets=()) -> StepResult:
        self.items.sort(key=lambda item: (item[0].start, item[0].kind != "compute"))
        trace = Trace(dataclasses.replace(e, step=k) for k, (_, evs) in enumerate(self.items) for e in evs)
        phases, ranks = tuple(phase for phase, _ in self.items), range(self.n)
        sent = tuple(sum(p.bytes_sent[r] for p in phases) for r in ranks)
        recv = tuple(sum(p.bytes_received[r] for p in phases) for r in ranks)
        compute = tuple(sum(e.end - e.start for e in trace.for_rank(r) if e.kind == "compute")
                        for r in ranks)
        comm = sum(p.seconds for p in phases if p.kind == "comm")
        step = max((e.end for e in trace), default=0.0)
        return StepResult(strategy, self.w, trace, phases, sent, recv, compute, step, comm, hidden,
                          comm - hidden, tuple(tuple(b) for b in buckets))


def _hub(rec: _Phases, name: str, start: float, piece: int, to_hub: bool) -> float:
    """Device 0 sends `piece` bytes to (or gets them from) every other device, all at once.
    The α-β busiest-link rule: device 0's link carries N-1 pieces, so it sets the time."""
    w, op = rec.w, "reduce" if name == "reduce grads" else "copy"
    transfers = [Transfer(0, r, 0, 0, piece, op) if to_hub else Transfer(0, 0, r, 0, piece)
                 for r in range(1, w.world_size)]
    sent = [sum(t.nbytes for t in transfers if t.src == r) for r in range(w.world_size)]
    recv = [sum(t.nbytes for t in transfers if t.dst == r) for r in range(w.world_size)]
    seconds = w.alpha + busiest_link_bytes(transfers, w.world_size) / w.bandwidth if transfers else 0.0
    return rec.comm(name, start, seconds, sent, recv, hub=0)


def _check_workload(w) -> None:
    if not isinstance(w, Workload):
        raise ValueError(f"w={w!r}: must be a Workload (workload_from_layers, scaled_workload)")


def simulate_dp(w: Workload) -> StepResult:
    """One `nn.DataParallel` step in the course's star model: nine phases in a row, each transfer between
    device 0 and another device (the GIL and per-step Python work are left out)."""
    _check_workload(w)
    rec, m, everyone = _Phases(w), w.micro_batch, range(w.world_size)
    t = _hub(rec, "scatter inputs", 0.0, m * w.input_bytes, to_hub=False)
    t = _hub(rec, "replicate", t, w.model_bytes, to_hub=False)  # every step: only device 0 updates
    t = rec.compute("fwd", t, {r: m * sum(w.fwd_seconds) for r in everyone})
    t = _hub(rec, "gather outputs", t, m * w.output_bytes, to_hub=True)
    t = rec.compute("loss", t, {0: w.global_batch * w.loss_seconds})  # the whole batch, on device 0
    t = _hub(rec, "scatter grads", t, m * w.output_bytes, to_hub=False)
    t = rec.compute("bwd", t, {r: m * sum(w.bwd_seconds) for r in everyone})
    t = _hub(rec, "reduce grads", t, w.model_bytes, to_hub=True)
    t = rec.compute("update", t, {0: w.update_seconds})  # only device 0 holds the real model
    return rec.result("dp")  # nothing overlaps: every transfer waits for the phase before it


def simulate_ddp(w: Workload) -> StepResult:
    """One DDP step: forward, backward from the last layer with bucketed all-reduces under it, update."""
    _check_workload(w)
    rec, m, n = _Phases(w), w.micro_batch, w.world_size
    everyone = range(n)  # every rank does the same work on its own samples
    t = rec.compute("fwd", 0.0, {r: m * sum(w.fwd_seconds) for r in everyone})
    t = rec.compute("loss", t, {r: m * w.loss_seconds for r in everyone})  # each rank, its own samples
    buckets = assign_buckets(w.param_bytes, max(1, int(w.bucket_cap_mb * MIB)))
    readiness, ready_at = BucketReadiness(buckets), [0.0] * len(buckets)
    for layer in reversed(range(len(w.layer_params))):  # gradients appear from the last layer
        t = rec.compute(f"bwd L{layer}", t, {r: m * w.bwd_seconds[layer] for r in everyone})
        for b in readiness.mark_ready(layer):  # in bucket order, as every rank must agree
            ready_at[b] = t
    bwd_end, lane, hidden = t, 0.0, 0.0
    for b, params in enumerate(buckets):
        nbytes = sum(w.param_bytes[p] for p in params)
        plan = plan_for("ring-all-reduce", n, nbytes // w.bytes_per_param, w.bytes_per_param)
        seconds = ring_all_reduce_seconds(n, nbytes, w.alpha, w.bandwidth)
        start = max(ready_at[b], lane)  # one all-reduce at a time on the comm lane
        lane = rec.comm(f"all-reduce b{b}", start, seconds, plan.bytes_sent_per_rank(),
                        plan.bytes_received_per_rank(), hub=None)
        hidden += max(0.0, min(lane, bwd_end) - start)  # the part that ran during backward
    rec.compute("update", max(bwd_end, lane), {r: w.update_seconds for r in everyone})
    return rec.result("ddp", hidden, buckets)


def _faster(dp_seconds: float, ddp_seconds: float) -> str:
    """'DP', 'DDP' or 'tie': one device, or equal to the precision shown, has no winner."""
    tie = math.isclose(dp_seconds, ddp_seconds, rel_tol=TIE_TOLERANCE)
    return "tie" if tie else "DDP" if ddp_seconds < dp_seconds else "DP"


def compare(w: Workload) -> dict:
    """The numbers a lesson widget shows: step times, device 0's traffic, DDP's overlap."""
    _check_workload(w)
    dp, ddp = simulate_dp(w), simulate_ddp(w)
    moved = [s + r for s, r in zip(dp.bytes_sent, dp.bytes_received)]
    return {"world_size": w.world_size, "model_bytes": w.model_bytes,
            "dp_step_seconds": dp.step_seconds, "ddp_step_seconds": ddp.step_seconds,
            "speedup": dp.step_seconds / ddp.step_seconds if ddp.step_seconds else 1.0,
            "faster": _faster(dp.step_seconds, ddp.step_seconds),
            "dp_device0_bytes": moved[0], "dp_max_other_bytes": max(moved[1:], default=0),
            "ddp_max_rank_bytes": max(s + r for s, r in zip(ddp.bytes_sent, ddp.bytes_received)),
            "ddp_buckets": len(ddp.buckets), "ddp_comm_seconds": ddp.comm_seconds,
            "ddp_hidden_seconds": ddp.hidden_seconds, "ddp_exposed_seconds": ddp.exposed_seconds}
