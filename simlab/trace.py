"""Traces: what happened, in one event type shared by the simulator and the real executor.

A simulated run and a real run of the same plan produce traces that differ only in timing.
`Trace.signature()` drops the timing, so "simulated == real" is one equality check.
`Recorder` is how every executor records its events (wall time); the simulator builds its `Event`s straight
from the plan in model time (`sim.data_parallel`'s step model alone goes through a `Recorder`, in model time).
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Event:
    """One thing a rank did: sent or received a chunk, computed, or took part in a collective.

    `start`/`end` are seconds: model time in the simulator, wall time (from the run's t0) when real.
    """

    rank: int
    kind: str  # "send" | "recv" (one transfer of a plan) | "compute" | "comm" (a collective) | "cpu" (host work)
    step: int
    peer: int | None = None
    chunk: int | None = None
    nbytes: int = 0
    name: str = ""
    start: float = 0.0
    end: float = 0.0

    def key(self) -> tuple:
        """Everything but the timing: what must match between simulated and real."""
        return (self.step, self.rank, self.kind, self.peer, self.chunk, self.nbytes, self.name)


class Trace(list):
    """A list of `Event`s with the questions lessons ask of it."""

    def signature(self) -> list[tuple]:
        """Timing-free, order-normalised view: equal for a simulated and a real run of one plan."""
        return sorted(e.key() for e in self)

    def steps(self) -> list[int]:
        return sorted({e.step for e in self})

    def at_step(self, step: int) -> "Trace":
        return Trace(e for e in self if e.step == step)

    def for_rank(self, rank: int) -> "Trace":
        return Trace(e for e in self if e.rank == rank)

    def bytes_sent_per_rank(self, world_size: int) -> list[int]:
        sent = [0] * world_size
        for e in self:
            if e.kind == "send":
                sent[e.rank] += e.nbytes
        return sent

    def bytes_received_per_rank(self, world_size: int) -> list[int]:
        recv = [0] * world_size
        for e in self:
            if e.kind == "recv":
                recv[e.rank] += e.nbytes
        return recv

    def matches(self, other: "Trace") -> bool:
        return self.signature() == other.signature()

    def to_chrome(self) -> str:
        """Chrome-trace JSON (open in chrome://tracing or ui.perfetto.dev): one lane per rank."""
        rows = []
        for e in self:
            label = e.name or (f"{e.kind} chunk {e.chunk}" if e.chunk is not None else e.kind)
            args = {"step": e.step, "peer": e.peer, "bytes": e.nbytes}
            rows.append({"name": label, "cat": e.kind, "ph": "X", "pid": 0, "tid": e.rank,
                         "ts": e.start * 1e6, "dur": max(e.end - e.start, 0.0) * 1e6, "args": args})
        # metadata events: Perfetto then labels each lane "rank r" instead of a bare thread id
        names = [{"name": "thread_name", "ph": "M", "pid": 0, "tid": r, "args": {"name": f"rank {r}"}}
                 for r in sorted({e.rank for e in self})]
        return json.dumps({"traceEvents": names + rows})


class Recorder:
    """One rank's events as they happen: every executor records through this (a simulator may too).

    Times are seconds since `origin`, a `clock()` reading (default: when the recorder was made); with
    origin=0.0 they are the clock's own readings, which all processes on one host share
    (`time.perf_counter` is CLOCK_MONOTONIC). A simulator passes model times to `record` itself.
    `step` is the step new events belong to; with `limit`, steps from `limit` on are not kept, so a
    long training run does not grow its trace without bound. `snapshots`/`values`: a collective's
    per-step copies of what the rank held (see `simlab.exec.collectives.run_plan`).

    >>> rec = Recorder(rank=1, origin=0.0, clock=lambda: 5.0)
    >>> rec.timed("compute", "fwd", lambda: 42), rec.events[0].start, rec.events[0].end
    (42, 5.0, 5.0)
    >>> _ = rec.record("send", 5.0, 6.0, peer=2, nbytes=8); rec.bytes_sent
    8
    """

    def __init__(self, rank: int = 0, origin: float | None = None, limit: int | None = None,
                 snapshots: bool = False, clock=time.perf_counter):
        self.rank, self.step, self.limit, self.clock = rank, 0, limit, clock
        self.origin = clock() if origin is None else origin
        self.events, self.snapshots, self.values = Trace(), snapshots, []

    def now(self) -> float:
        return self.clock() - self.origin

    def restart(self) -> None:
        """Times count from now on (e.g. right after a barrier all ranks left together)."""
        self.origin = self.clock()

    def record(self, kind: str, start: float, end: float, name: str = "", **fields) -> Event | None:
        """Append one Event (rank and step default to the recorder's); None if past `limit`."""
        step = fields.pop("step", self.step)
        if self.limit is not None and step >= self.limit:
            return None
        event = Event(fields.pop("rank", self.rank), kind, step, name=name, start=start, end=end, **fields)
        self.events.append(event)
        return event

    def timed(self, kind: str, name: str, fn, **fields):
        """Run `fn()` and record how long it took; returns what `fn` returned."""
        start = self.now()
        out = fn()
        self.record(kind, start, self.now(), name, **fields)
        return out

    @property
    def bytes_sent(self) -> int:
        return sum(e.nbytes for e in self.events if e.kind == "send")

    @property
    def bytes_received(self) -> int:
        return sum(e.nbytes for e in self.events if e.kind == "recv")


def merge(traces) -> Trace:
    """One trace from per-rank traces (as returned by `launch`)."""
    out = Trace()
    for trace in traces:
        out.extend(trace)
    return out
