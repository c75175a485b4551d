"""Expert parallelism's all-to-all, as a plan: which tokens travel to which rank, and back, step by step.

N ranks (the expert-parallel group) each hold E/N experts, contiguous — rank j holds experts
[j·E/N, (j+1)·E/N), Megatron-LM's local experts — and each routes its own T tokens (`expert_parallel.route`).
A step of the layer, forward then backward:

    route              each rank: router logits, top-k, capacity, drops (its own tokens)
    counts             all-to-all of E/N int64 counts per peer: how many rows of each of my experts you will get
    dispatch           all-to-all: every kept choice's token row (h values) to the rank holding that expert
    experts            each rank runs its experts on the rows it received (its load: a column sum of S)
    combine            all-to-all back: each result row to the rank that owns the token (S transposed)
    weighted sum       each rank: out[t] = Σ over t's kept choices of weight · expert output
    combine backward   the output gradients' rows travel as dispatch did (S)
    dispatch backward  the input gradients' rows travel back as combine did (Sᵀ)

S (N×N) is the send-count matrix: S[i, j] = rows rank i sends rank j in dispatch. Its diagonal stays on the
rank (a copy, no link), so a rank's bytes are its off-diagonal rows × h × bytes per element: dispatch sends
row i of S, combine sends column i. Backward moves the same rows the other way, so a forward + backward
sends 2 · (dispatch + combine) + counts per rank.

Balanced (every expert gets T·k/E choices from every rank, none dropped): S[i, j] = T·k/N everywhere, so each
rank sends T·k·(N−1)/N · h · bytes in each direction (`balanced_bytes`). Otherwise S is counted exactly.

    >>> from simlab.sim.expert_parallel import balanced_logits, route
    >>> plan = dispatch_plan([route(balanced_logits(4, 4, 2), 2, 1.0)] * 2, hidden=8, itemsize=4)
    >>> plan.send_counts.tolist(), plan.dispatch_bytes, balanced_bytes(4, 2, 2, 8, 4)
    ([[4, 4], [4, 4]], [128, 128], 128)
    >>> plan.bytes_sent_per_rank  # counts: 2 experts × 8 bytes to the one peer; then 2 × (128 + 128)
    [528, 528]
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .._checks import check_divisible, check_int, check_ranks
from ..trace import Event, Trace
from .expert_parallel import Routing
from .message import Message

COUNT_ITEMSIZE = 8  # the counts travel as int64
STEPS = ("route", "counts", "dispatch", "experts", "combine", "weighted sum", "combine backward",
         "dispatch backward")  # a step's index here is its Event.step, in the simulator and the executor
WHAT = {  # what each step does, as the lesson says it: a Message from the step's fields (`EPStep.fields`)
    "route": lambda f: (Message("each rank routes its {tokens} tokens: top-{top_k} of {experts} experts, "
                                "an expert keeps at most {capacity} of them", **f) if f["capacity"] is not None else
                        Message("each rank routes its {tokens} tokens: top-{top_k} of {experts} experts, "
                                "no capacity limit (dropless)", **f)),
    "counts": lambda f: Message("all-to-all of counts: each rank tells each peer how many rows of its {local} "
                                "experts to expect", **f),
    "dispatch": lambda f: Message("all-to-all: each kept choice's token ({hidden} values) goes to the rank holding "
                                  "its expert", **f),
    "experts": lambda f: Message("each rank runs its {local} experts on the rows it received", **f),
    "combine": lambda f: Message("all-to-all back: each expert output returns to the rank that owns the token"),
    "weighted sum": lambda f: Message("each rank adds its tokens' expert outputs, weighted by the router's "
                                      "probabilities"),
    "combine backward": lambda f: Message("backward: the output gradients travel to the experts, as dispatch did"),
    "dispatch backward": lambda f: Message("backward: the input gradients travel back to the tokens' ranks, "
                                           "as combine did"),
}


def owner(expert: int, experts: int, ep: int) -> int:
    """The rank holding `expert` when `experts` are spread over `ep` ranks, E/N consecutive ones each."""
    return expert // (experts // ep)


@dataclass(frozen=True, eq=False)  # holds arrays: == would be ambiguous, so identity
class EPStep:
    """One step of the plan: its name, phase, the rows each rank sends each peer (None for local work),
    the bytes each rank sends (off the diagonal) and each rank's work (rows computed)."""

    name: str
    phase: str  # "forward" | "backward"
    rows: np.ndarray | None  # (N, N): rows[i, j] sent from rank i to rank j, or None
    bytes_sent: tuple[int, ...]  # per rank
    work: tuple[int, ...]  # per rank: tokens routed, rows through its experts, or tokens summed; 0 for exchanges
    fields: dict = field(default_factory=dict)

    def text(self) -> Message:
        """What the step does: English as a string; `simlab.i18n._` says it in the learner's language."""
        return WHAT[self.name](self.fields)


@dataclass(frozen=True, eq=False)  # holds arrays: == would be ambiguous, so identity
class DispatchPlan:
    """The all-to-alls of one MoE layer on an expert-parallel group of N = len(routings) ranks."""

    routings: tuple[Routing, ...]  # one per rank of the group, in group order
    hidden: int
    itemsize: int

    @property
    def ep(self) -> int:
        return len(self.routings)

    @property
    def experts(self) -> int:
        return self.routings[0].num_experts

    @property
    def expert_counts(self) -> np.ndarray:
        """(N, E): [i, e] the choices of rank i's tokens that expert e kept: what the counts step exchanges."""
        return np.stack([r.load for r in self.routings])

    @property
    def send_counts(self) -> np.ndarray:
        """(N, N): [i, j] token rows rank i sends rank j in dispatch (the sum of its counts for j's experts)."""
        return self.expert_counts.reshape(self.ep, self.ep, -1).sum(axis=2)

    def _off_diagonal(self, rows: np.ndarray, itemsize: int, width: int) -> list[int]:
        off = rows * (1 - np.eye(self.ep, dtype=np.int64))  # the diagonal stays on the rank
        return [int(n) * width * itemsize for n in off.sum(axis=1)]

    @property
    def dispatch_bytes(self) -> list[int]:
        """Bytes each rank sends in dispatch: row i of S without S[i, i], times hidden · itemsize."""
        return self._off_diagonal(self.send_counts, self.itemsize, self.hidden)

    @property
    def combine_bytes(self) -> list[int]:
        """Bytes each rank sends in combine: column i of S (the rows it computed for others)."""
        return self._off_diagonal(self.send_counts.T, self.itemsize, self.hidden)

    @property
    def counts_bytes(self) -> list[int]:
        """Bytes each rank sends in the counts step: E/N int64 counts to each of its N − 1 peers."""
        return [(self.ep - 1) * (self.experts // self.ep) * COUNT_ITEMSIZE] * self.ep

    @property
    def bytes_sent_per_rank(self) -> list[int]:
        """Forward + backward: counts, then dispatch and combine once each way."""
        return [c + 2 * (d + b) for c, d, b in zip(self.counts_bytes, self.dispatch_bytes, self.combine_bytes)]

    @property
    def received_rows(self) -> list[int]:
        """Rows each rank's experts compute: the column sums of S (its experts' loads added up)."""
        return [int(n) for n in self.send_counts.sum(axis=0)]

    def steps(self) -> list[EPStep]:
        """The layer's forward and backward, one `EPStep` per name in STEPS."""
        n, s, r0 = self.ep, self.send_counts, self.routings[0]
        counts_rows = np.full((n, n), self.experts // n) * (1 - np.eye(n, dtype=np.int64))
        tokens = tuple(r.tokens for r in self.routings)
        zero = (0,) * n
        fields = {"route": dict(tokens=r0.tokens, top_k=r0.top_k, experts=self.experts, capacity=r0.capacity),
                  "counts": dict(local=self.experts // n), "dispatch": dict(hidden=self.hidden),
                  "experts": dict(local=self.experts // n)}
        rows = {"counts": counts_rows, "dispatch": s, "combine": s.T, "combine backward": s, "dispatch backward": s.T}
        sent = {"counts": self.counts_bytes, "dispatch": self.dispatch_bytes, "combine": self.combine_bytes,
                "combine backward": self.dispatch_bytes, "dispatch backward": self.combine_bytes}
        work = {"route": tokens, "experts": tuple(self.received_rows), "weighted sum": tokens}
        return [EPStep(name, "backward" if "backward" in name else "forward", rows.get(name),
                       tuple(sent.get(name, zero)), work.get(name, zero), fields.get(name, {})) for name in STEPS]

    def to_trace(self, ranks: tuple[int, ...] | None = None) -> Trace:
        """The plan's events, what the executor records: per exchange one "send" and one "recv" per peer
        with rows (diagonal and empty ones left out), per local step one "compute". `ranks`: the global
        rank of each group member (default 0 … N−1); events and peers carry those.

        Model time: step k fills [k, k+1); within it a rank's bar is its share of the busiest rank's work or
        bytes, so the expert step shows the load imbalance as idle time."""
        ranks = tuple(range(self.ep)) if ranks is None else tuple(ranks)
        trace = Trace()
        for k, step in enumerate(self.steps()):
            if step.rows is None:  # local work: one compute event per rank
                most = max(max(step.work), 1)
                trace.extend(Event(ranks[i], "compute", k, name=step.name, start=float(k),
                                   end=k + step.work[i] / most) for i in range(self.ep))
                continue
            width = COUNT_ITEMSIZE if step.name == "counts" else self.itemsize * self.hidden
            nbytes = step.rows * width * (1 - np.eye(self.ep, dtype=np.int64))  # (N, N), the diagonal stays
            most = max(int(nbytes.sum(axis=1).max()), 1)
            for i in range(self.ep):
                for j in range(self.ep):
                    if nbytes[i, j]:
                        end = k + int(nbytes[i].sum()) / most
                        trace.append(Event(ranks[i], "send", k, peer=ranks[j], nbytes=int(nbytes[i, j]),
                                           name=step.name, start=float(k), end=end))
                        trace.append(Event(ranks[j], "recv", k, peer=ranks[i], nbytes=int(nbytes[i, j]),
                                           name=step.name, start=float(k), end=end))
        return trace


def dispatch_plan(routings, hidden: int, itemsize: int = 4) -> DispatchPlan:
    """The plan for an expert-parallel group whose rank i routed its tokens as `routings[i]`."""
    routings = tuple(routings)
    if not routings or not all(isinstance(r, Routing) for r in routings):
        raise ValueError("routings: must be one Routing per rank of the group (at least one)")
    check_ranks("ep", len(routings))
    experts = routings[0].num_experts
    if any(r.num_experts != experts for r in routings):
        raise ValueError("routings: every rank must route over the same number of experts")
    check_divisible("experts", experts, "ep", len(routings))
    return DispatchPlan(routings, check_int("hidden", hidden, 1), check_int("itemsize", itemsize, 1))


def balanced_bytes(tokens: int, top_k: int, ep: int, hidden: int, itemsize: int = 4) -> int:
    """Closed form: bytes each rank sends in dispatch (and again in combine) when routing is perfectly even
    and nothing is dropped: T·k·(N−1)/N rows of h values. tokens · top_k must divide by ep."""
    for name, value in (("tokens", tokens), ("top_k", top_k), ("hidden", hidden), ("itemsize", itemsize)):
        check_int(name, value, 1)
    check_ranks("ep", ep)
    check_divisible("tokens*top_k", tokens * top_k, "ep", ep)
    return tokens * top_k * (ep - 1) // ep * hidden * itemsize
