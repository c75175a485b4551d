"""Traces: what happened, in one event type shared by the simulator and the real executor.

A simulated run and a real run of the same plan produce traces that differ only in timing.
`Trace.signature()` drops the timing, so "simulated == real" is one equality check.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Event:
    """One thing a rank did: sent or received a chunk, or computed.

    `start`/`end` are seconds: model time in the simulator, wall time (from the run's t0) when real.
    """

    rank: int
    kind: str  # "send" | "recv" | "compute"
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

    def to_dicts(self) -> list[dict]:
        return [asdict(e) for e in self]

    @classmethod
    def from_dicts(cls, rows) -> "Trace":
        return cls(Event(**row) for row in rows)

    def to_chrome(self) -> str:
        """Chrome-trace JSON (open in chrome://tracing or ui.perfetto.dev): one lane per rank."""
        rows = []
        for e in self:
            label = e.name or (f"{e.kind} chunk {e.chunk}" if e.chunk is not None else e.kind)
            args = {"step": e.step, "peer": e.peer, "bytes": e.nbytes}
            rows.append({"name": label, "cat": e.kind, "ph": "X", "pid": 0, "tid": e.rank,
                         "ts": e.start * 1e6, "dur": max(e.end - e.start, 0.0) * 1e6, "args": args})
        return json.dumps({"traceEvents": rows})


def merge(traces) -> Trace:
    """One trace from per-rank traces (as returned by `launch`)."""
    out = Trace()
    for trace in traces:
        out.extend(trace)
    return out
