"""Pipeline schedules as data: who runs which forward/backward of which micro-batch, in what order.

A schedule is ``list[list[Action]]``: one list per rank, in execution order. ``Action(2, "F", 0)``
prints as ``2F0``: stage 2 runs the forward (F) of micro-batch 0; B is a full backward, I the
input-gradient half and W the weight-gradient half of a split backward. Stages are numbered
globally; with v chunks per rank, rank r holds stages r, r+p, r+2p, … ("looped" placement).

What each schedule teaches:
  naive        one batch, one stage busy at a time: the bubble is (p-1)/p.
  gpipe        m micro-batches: all forwards, then all backwards; bubble (p-1)/(m+p-1), m activations held.
  1f1b         same bubble, but a backward as soon as possible: rank r holds at most p-r activations.
  interleaved  v smaller chunks per rank shrink the bubble v times: (p-1)/(v·m+p-1).
  zero-bubble  split backward (I, W); W fills the tail bubble at 1F1B's peak memory.

    python -c "from simlab.sim.pipeline_schedules import *; print(format_grid(one_f_one_b(4, 6)))"
"""
from __future__ import annotations

from .._checks import check_choice, check_int
from ..plan import Action


def _check_sizes(stages, microbatches=1, chunks=1) -> tuple[int, int, int]:
    """Every builder's sizes are whole numbers >= 1: 0 stages would return an empty schedule."""
    return (check_int("stages", stages, 1), check_int("microbatches", microbatches, 1),
            check_int("chunks", chunks, 1))


def naive(stages: int) -> list[list[Action]]:
    """No micro-batching: each rank runs its stage's forward, then its backward, on the whole batch.

    >>> [[str(a) for a in rank] for rank in naive(2)]
    [['0F0', '0B0'], ['1F0', '1B0']]
    """
    _check_sizes(stages)
    return [[Action(s, "F", 0), Action(s, "B", 0)] for s in range(stages)]


def gpipe(stages: int, microbatches: int) -> list[list[Action]]:
    """GPipe (Huang et al., 2019): every forward in micro-batch order, then every backward."""
    _check_sizes(stages, microbatches)
    mbs = range(microbatches)
    return [[Action(r, "F", j) for j in mbs] + [Action(r, "B", j) for j in mbs] for r in range(stages)]


def _warmup_steady_cooldown(forwards: list, backwards: list, warmup: int) -> list[Action]:
    """Megatron's loop over virtual micro-batches k: `warmup` forwards, then forward k+warmup paired
    with backward k, then the backwards that are left."""
    steady = len(forwards) - warmup
    pairs = [a for pair in zip(forwards[warmup:], backwards[:steady]) for a in pair]
    return forwards[:warmup] + pairs + backwards[steady:]


def one_f_one_b(stages: int, microbatches: int) -> list[list[Action]]:
    """1F1B / PipeDream-flush, in Megatron-LM's order (`forward_backward_pipelining_without_interleaving`).

    Rank r runs min(p-r-1, m) warm-up forwards, then one forward + one backward, then the cool-down.
    >>> [" ".join(map(str, rank)) for rank in one_f_one_b(2, 3)]
    ['0F0 0F1 0B0 0F2 0B1 0B2', '1F0 1B0 1F1 1B1 1F2 1B2']
    """
    p, m, _ = _check_sizes(stages, microbatches)
    return [_warmup_steady_cooldown([Action(r, "F", j) for j in range(m)], [Action(r, "B", j) for j in range(m)],
                                    min(p - r - 1, m)) for r in range(p)]


def interleaved(stages: int, microbatches: int, chunks: int) -> list[list[Action]]:
    """Megatron-LM's interleaved 1F1B (`forward_backward_pipelining_with_interleaving`), p ranks, v chunks.

    `stages` is the number of ranks p; there are p·v global stages and rank r holds r, r+p, …
    Virtual micro-batch k (0 ≤ k < v·m) walks micro-batches in groups of p per chunk (Megatron's
    `get_schedule_table` with `microbatch_group_size_per_vp_stage = p`); backwards visit chunks in
    reverse. Warm-up: (p-r-1)·2 + (v-1)·p forwards, capped at v·m (`get_pp_rank_microbatches`).
    >>> " ".join(map(str, interleaved(2, 2, 2)[1]))
    '1F0 1F1 3F0 3B0 3F1 3B1 1B0 1B1'
    """
    p, m, v = _check_sizes(stages, microbatches, chunks)
    if m % p:
        raise ValueError(f"microbatches={m}: interleaved needs a multiple of stages={p}")
    # virtual micro-batch k → (chunk, micro-batch): groups of p micro-batches, chunk by chunk
    table = [(c, g + j) for g in range(0, m, p) for c in range(v) for j in range(p)]
    out = []
    for r in range(p):
        forwards = [Action(c * p + r, "F", j) for c, j in table]
        backwards = [Action((v - 1 - c) * p + r, "B", j) for c, j in table]  # chunks in reverse
        out.append(_warmup_steady_cooldown(forwards, backwards, min(2 * (p - r - 1) + (v - 1) * p, m * v)))
    return out


def zero_bubble(stages: int, microbatches: int) -> list[list[Action]]:
    """ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", 2023): 1F1B with the backward split.

    Rank r runs min(p-r-1, m) warm-up forwards as in 1F1B, then F, I pairs; after I of micro-batch
    k it runs W of micro-batch k-r (rank r defers r weight-gradients), and the deferred Ws close
    the list, where they fill the tail bubble that 1F1B leaves on later ranks.
    This is exactly the order of torch's `ScheduleInterleavedZeroBubble` (its ZB1P) with one chunk
    per rank (`_get_1f1b_rank_ops(..., num_1f1b_microbatches=rank, enable_zero_bubble=True)`), the
    test compares the two; no rank ever holds more than p activations, 1F1B's peak on rank 0.
    >>> [" ".join(map(str, rank)) for rank in zero_bubble(2, 2)]
    ['0F0 0F1 0I0 0W0 0I1 0W1', '1F0 1I0 1F1 1I1 1W0 1W1']
    """
    p, m, _ = _check_sizes(stages, microbatches)
    out = []
    for r in range(p):
        warm = min(p - r - 1, m)
        ops = [Action(r, "F", j) for j in range(warm)]
        for k in range(m):
            ops += [Action(r, "F", warm + k)] if warm + k < m else []
            ops += [Action(r, "I", k)] + ([Action(r, "W", k - r)] if k >= r else [])
        out.append(ops + [Action(r, "W", j) for j in range(max(m - r, 0), m)])
    return out


SCHEDULES = {"naive": naive, "gpipe": gpipe, "1f1b": one_f_one_b, "interleaved": interleaved,
             "zero-bubble": zero_bubble}


def make_schedule(name: str, stages: int, microbatches: int = 1, chunks: int = 1) -> list[list[Action]]:
    """The schedule `name` for `stages` ranks, after one-line checks that name the bad parameter.

    >>> make_schedule("interleaved", 4, 3, 2)
    Traceback (most recent call last):
    ValueError: microbatches=3: interleaved needs a multiple of stages=4
    """
    check_choice("name", name, tuple(SCHEDULES))
    _check_sizes(stages, microbatches, chunks)
    if name != "interleaved" and chunks != 1:
        raise ValueError(f"chunks={chunks}: only interleaved has more than one chunk per rank")
    if name == "naive":
        if microbatches != 1:
            raise ValueError(f"microbatches={microbatches}: naive runs the whole batch (needs 1)")
        return naive(stages)
    if name == "interleaved":
        return interleaved(stages, microbatches, chunks)  # checks that p divides m
    return SCHEDULES[name](stages, microbatches)


def nearest_valid(name: str, stages: int, microbatches: int, chunks: int) -> tuple[int, int]:
    """(m, v) closest to what an explorer's knobs ask for that schedule `name` can run: naive runs one
    micro-batch, interleaved needs m a multiple of p (rounded up), only interleaved uses chunks.

    >>> nearest_valid("interleaved", 4, 6, 2), nearest_valid("1f1b", 4, 6, 2), nearest_valid("naive", 4, 6, 2)
    ((8, 2), (6, 1), (1, 1))
    """
    check_choice("name", name, tuple(SCHEDULES))
    _check_sizes(stages, microbatches, chunks)
    if name == "naive":
        return 1, 1
    if name == "interleaved":
        return -(-microbatches // stages) * stages, chunks
    return microbatches, 1


def format_grid(schedule: list[list[Action]]) -> str:
    """One row per rank, actions in execution order, in aligned columns (what the CLI prints).

    >>> print(format_grid(gpipe(2, 2)))
    rank 0: 0F0 0F1 0B0 0B1
    rank 1: 1F0 1F1 1B0 1B1
    """
    if not isinstance(schedule, (list, tuple)) or not all(isinstance(r, (list, tuple)) for r in schedule):
        raise ValueError(f"schedule={schedule!r}: must be a list with one list of actions per rank")
    width = max((len(str(a)) for rank in schedule for a in rank), default=0)
    label = len(str(len(schedule) - 1))
    rows = [f"rank {r:>{label}}: " + " ".join(f"{str(a):<{width}}" for a in acts)
            for r, acts in enumerate(schedule)]
    return "\n".join(row.rstrip() for row in rows)
