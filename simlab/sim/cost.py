"""The α-β cost model: a step costs α (latency) + β·bytes (bytes over bandwidth).

A step's time is set by its busiest link: the rank that sends or receives the most bytes in that
step. That single rule explains why the ring is bandwidth-optimal (every step moves one chunk per
rank) and why the naive reduce-to-root is not (the root receives n-1 whole buffers at once).
`fit_alpha_beta` goes the other way: α and the bandwidth from measured all-reduces (lesson 2 fits a
real DDP run with it, lesson 6 this machine's links).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._checks import MAX_COUNT, check_choice, check_int, check_number, check_positive, check_ranks
from ..plan import CollectivePlan
from .collectives import naive_all_reduce, ring_all_reduce

DEFAULT_ALPHA = 10e-6  # seconds of latency per step (a typical network message)
DEFAULT_BANDWIDTH = 10e9  # bytes per second per link (roughly 100 Gb/s Ethernet / PCIe)


@dataclass(frozen=True)
class CostEstimate:
    alpha: float
    bandwidth: float
    step_seconds: tuple  # one per step
    latency_seconds: float  # steps * alpha
    bandwidth_seconds: float  # sum over steps of busiest-link bytes / bandwidth

    @property
    def seconds(self) -> float:
        return self.latency_seconds + self.bandwidth_seconds


def busiest_link_bytes(step, world_size: int) -> int:
    """Max over ranks of bytes sent or bytes received in one step."""
    check_int("world_size", world_size, 1)
    sent, recv = [0] * world_size, [0] * world_size
    for t in step:
        sent[t.src] += t.nbytes
        recv[t.dst] += t.nbytes
    return max(sent + recv, default=0)


def _check_link(alpha, bandwidth) -> None:
    """α and bandwidth are finite: a nan or inf would turn every time into nan or inf."""
    check_number("alpha", alpha)
    check_positive("bandwidth", bandwidth)


def alpha_beta(plan, alpha: float = DEFAULT_ALPHA, bandwidth: float = DEFAULT_BANDWIDTH) -> CostEstimate:
    if not isinstance(plan, CollectivePlan):
        raise ValueError(f"plan={plan!r}: must be a CollectivePlan (make_plan, ring_all_reduce, ...)")
    _check_link(alpha, bandwidth)
    busy = [busiest_link_bytes(step, plan.world_size) for step in plan.steps]
    step_seconds = tuple(alpha + b / bandwidth for b in busy)
    return CostEstimate(alpha, bandwidth, step_seconds, alpha * len(busy), sum(busy) / bandwidth)


def _check_closed_form(n, nbytes, alpha, bandwidth) -> None:
    check_int("n", n, 1, MAX_COUNT)
    check_number("nbytes", nbytes)
    _check_link(alpha, bandwidth)


def ring_all_reduce_seconds(n: int, nbytes: float, alpha: float = DEFAULT_ALPHA,
                            bandwidth: float = DEFAULT_BANDWIDTH) -> float:
    """Closed form: 2(n-1)·α + 2(n-1)/n · S/B."""
    _check_closed_form(n, nbytes, alpha, bandwidth)
    return 2 * (n - 1) * alpha + 2 * (n - 1) / n * nbytes / bandwidth


def naive_all_reduce_seconds(n: int, nbytes: float, alpha: float = DEFAULT_ALPHA,
                             bandwidth: float = DEFAULT_BANDWIDTH) -> float:
    """Closed form: the root receives then sends (n-1)·S, in 2 steps: 2α + 2(n-1)·S/B."""
    _check_closed_form(n, nbytes, alpha, bandwidth)
    return 0.0 if n == 1 else 2 * alpha + 2 * (n - 1) * nbytes / bandwidth


def optimal_bytes_per_rank(goal: str, n: int, nbytes: int) -> int:
    """Lower bound on what the busiest rank must send (Patarasuk & Yuan for all-reduce).

    All-reduce: every rank must send 2(n-1)/n of the buffer; reduce-scatter, all-gather and
    broadcast: (n-1)/n. Rounded up to whole bytes, since sizes that n does not divide leave a
    remainder some rank must carry.
    """
    factor = {"all_reduce": 2, "reduce_scatter": 1, "all_gather": 1, "broadcast": 1, "reduce": 1}
    check_choice("goal", goal, tuple(factor))  # a tuple: `in` a dict would fail on a list
    check_int("n", n, 1)
    check_int("nbytes", nbytes, 0)
    return -(-factor[goal] * (n - 1) * nbytes // n)  # ceil without floats


def compare_all_reduce(world_sizes, nbytes: int, alpha: float = DEFAULT_ALPHA,
                       bandwidth: float = DEFAULT_BANDWIDTH) -> list[dict]:
    """Ring vs naive (reduce-to-root + broadcast) all-reduce of `nbytes` for several world sizes."""
    if not isinstance(world_sizes, (list, tuple, range)):
        raise ValueError(f"world_sizes={world_sizes!r}: must be a list of world sizes")
    for i, n in enumerate(world_sizes):
        check_ranks(f"world_sizes[{i}]", n)
    check_int("nbytes", nbytes, 1)
    _check_link(alpha, bandwidth)
    rows = []
    for n in world_sizes:
        ring, naive = ring_all_reduce(n, nbytes, itemsize=1), naive_all_reduce(n, nbytes, itemsize=1)
        rows.append({"ranks": n, "ring_steps": ring.num_steps, "naive_steps": naive.num_steps,
                     "ring_max_bytes": max(ring.bytes_sent_per_rank()),
                     "naive_root_bytes": naive.bytes_sent_per_rank()[naive.root],
                     "optimal_bytes": optimal_bytes_per_rank("all_reduce", n, nbytes),
                     "ring_seconds": alpha_beta(ring, alpha, bandwidth).seconds,
                     "naive_seconds": alpha_beta(naive, alpha, bandwidth).seconds})
    return rows


def _numbers(name: str, values) -> np.ndarray:
    """A non-empty list of finite numbers >= 0 (a nan would make the least-squares fit fail)."""
    values = values.tolist() if isinstance(values, np.ndarray) else values
    if not isinstance(values, (list, tuple)) or not values:
        raise ValueError(f"{name}={values!r}: must be a non-empty list, one entry per all-reduce")
    return np.array([check_number(f"{name}[{i}]", x) for i, x in enumerate(values)])


def fit_alpha_beta(durations, nbytes, world_size: int) -> tuple[float, float]:
    """(alpha seconds, bandwidth bytes/s) from ring all-reduce durations and per-rank bytes, by least
    squares on the α-β law of a ring all-reduce,  d = 2(n-1)·α + bytes_per_rank / B.

    Tiny buffers leave the bandwidth undetermined (or fit a negative slope): then the link is taken
    as infinitely fast and the whole duration is latency.
    """
    check_int("world_size", world_size, 1, MAX_COUNT)
    d, b = _numbers("durations", durations), _numbers("nbytes", nbytes)
    if len(b) != len(d):
        raise ValueError(f"nbytes: has {len(b)} entries, durations has {len(d)}: one each per all-reduce")
    steps = 2 * (world_size - 1)
    if steps == 0:
        return 0.0, float("inf")
    if len(set(b.tolist())) > 1:
        slope, intercept = np.polyfit(b, d, 1)  # d ≈ slope·bytes + intercept
        if slope > 0 and intercept >= 0:
            return float(intercept / steps), float(1 / slope)
    return float(d.mean() / steps), float("inf")
