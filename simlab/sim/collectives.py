"""Collectives as plans, and a step-by-step simulation of any plan with exact integers.

Teaches: the ring reduce-scatter / all-gather / all-reduce, a binomial-tree broadcast, and the naive
"DP-style" reduce-to-root + broadcast, whose root carries all the traffic.

    >>> from simlab.sim.stepper import simulate
    >>> res = simulate(ring_all_reduce(world_size=4, numel=8))
    >>> res.plan.num_steps, res.final_ok, res.steps[-1].bytes_sent  # 2(n-1)/n * 32 bytes
    (6, True, (48, 48, 48, 48))
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from .._checks import check_choice, check_int, check_ranks
from ..plan import CollectivePlan, Transfer, split_sizes

GOALS = ("reduce_scatter", "all_gather", "all_reduce", "broadcast", "reduce")


def _check(world_size: int, numel: int, itemsize: int) -> None:
    check_ranks("world_size", world_size)
    check_int("numel", numel, 1)
    check_int("itemsize", itemsize, 1)


def _ring_steps(n: int, sizes, itemsize: int, first_step: int, op: str, offset: int):
    """n-1 ring steps: at step s rank r sends chunk (r - s + offset) % n to rank r+1."""
    steps = []
    for s in range(n - 1):
        chunks = [(r - s + offset) % n for r in range(n)]
        steps.append(tuple(Transfer(first_step + s, r, (r + 1) % n, c, sizes[c] * itemsize, op)
                           for r, c in enumerate(chunks)))
    return steps


def ring_reduce_scatter(world_size: int, numel: int, itemsize: int = 4) -> CollectivePlan:
    """Each rank ends with one fully reduced chunk: rank r holds chunk r (as in torch)."""
    _check(world_size, numel, itemsize)
    sizes = split_sizes(numel, world_size)
    # offset -1: rank r starts by sending chunk r-1, so the last chunk to reach rank r is chunk r
    steps = _ring_steps(world_size, sizes, itemsize, 0, "reduce", -1)
    return CollectivePlan("ring_reduce_scatter", world_size, sizes, itemsize, "all", tuple(steps),
                          meta={"goal": "reduce_scatter"})


def ring_all_gather(world_size: int, numel: int, itemsize: int = 4) -> CollectivePlan:
    """Rank r starts with chunk r; after n-1 steps every rank holds every chunk."""
    _check(world_size, numel, itemsize)
    sizes = split_sizes(numel, world_size)
    steps = _ring_steps(world_size, sizes, itemsize, 0, "copy", 0)
    return CollectivePlan("ring_all_gather", world_size, sizes, itemsize, "own", tuple(steps),
                          meta={"goal": "all_gather"})


def ring_all_reduce(world_size: int, numel: int, itemsize: int = 4) -> CollectivePlan:
    """Reduce-scatter then all-gather: 2(n-1) steps, each rank sends 2(n-1)/n of the buffer."""
    _check(world_size, numel, itemsize)
    n, sizes = world_size, split_sizes(numel, world_size)
    steps = _ring_steps(n, sizes, itemsize, 0, "reduce", -1) + _ring_steps(n, sizes, itemsize, n - 1, "copy", 0)
    return CollectivePlan("ring_all_reduce", n, sizes, itemsize, "all", tuple(steps),
                          meta={"goal": "all_reduce"})


def tree_broadcast(world_size: int, numel: int, root: int = 0, itemsize: int = 4) -> CollectivePlan:
    """Binomial tree: the set of ranks holding the data doubles each step, ceil(log2 n) steps."""
    _check(world_size, numel, itemsize)
    check_int("root", root, 0, world_size - 1)
    n, steps, have = world_size, [], 1
    while have < n:  # relative ranks [0, have) hold the buffer; each sends to rel + have
        step = len(steps)
        steps.append(tuple(Transfer(step, (rel + root) % n, (rel + have + root) % n, 0, numel * itemsize)
                           for rel in range(min(have, n - have))))
        have *= 2
    return CollectivePlan("tree_broadcast", n, (numel,), itemsize, "root", tuple(steps), root=root,
                          meta={"goal": "broadcast"})


def naive_all_reduce(world_size: int, numel: int, root: int = 0, itemsize: int = 4) -> CollectivePlan:
    """DP style: everyone sends the whole buffer to the root, which sums and sends it back to all."""
    _check(world_size, numel, itemsize)
    check_int("root", root, 0, world_size - 1)
    others = [r for r in range(world_size) if r != root]
    nbytes = numel * itemsize
    gather = tuple(Transfer(0, r, root, 0, nbytes, "reduce") for r in others)
    scatter = tuple(Transfer(1, root, r, 0, nbytes, "copy") for r in others)
    steps = (gather, scatter) if others else ()
    return CollectivePlan("naive_all_reduce", world_size, (numel,), itemsize, "all", steps, root=root,
                          meta={"goal": "all_reduce"})


# One name per collective everywhere: algorithm-goal, the function's name with hyphens ("ring" is how,
# "all-reduce" is what). The CLI, `make_plan` and the executor's `run_collective` all use these keys.
PLANS = {"ring-all-reduce": ring_all_reduce, "ring-reduce-scatter": ring_reduce_scatter,
         "ring-all-gather": ring_all_gather, "tree-broadcast": tree_broadcast,
         "naive-all-reduce": naive_all_reduce}
ALIASES = {"ring-allreduce": "ring-all-reduce", "broadcast": "tree-broadcast",  # spellings before 0.2,
           "naive-allreduce": "naive-all-reduce"}  # still accepted for one release


def canonical(name: str) -> str:
    """A collective's one name: 'ring-allreduce' (an old spelling) → 'ring-all-reduce'."""
    name = ALIASES.get(name, name)
    return check_choice("collective", name, tuple(PLANS))


def make_plan(name: str, world_size: int, numel: int, itemsize: int = 4, root: int = 0) -> CollectivePlan:
    name = canonical(name)
    kwargs = {"root": root} if name in ("tree-broadcast", "naive-all-reduce") else {}
    return PLANS[name](world_size, numel, itemsize=itemsize, **kwargs)


@lru_cache(maxsize=512)
def plan_for(name: str, world_size: int, numel: int, itemsize: int = 4, root: int = 0) -> CollectivePlan:
    """`make_plan`, built once per shape: plans are immutable, and the executor (every ring it runs),
    the TP byte counts and the DDP step model ask for the same shapes again and again."""
    return make_plan(name, world_size, numel, itemsize, root)


RING_GOALS = ("all-reduce", "reduce-scatter", "all-gather")  # what a ring can do: plan "ring-<goal>"


def ring_bytes_sent(goal: str, world_size: int, numel: int, itemsize: int = 4) -> list[int]:
    """Bytes each rank sends when `goal` on `numel` elements runs as our ring: the ring accounting that
    TP, ZeRO and DDP byte counts use (for all-gather, `numel` is the gathered size).
    >>> ring_bytes_sent("reduce-scatter", 4, 8)  # each rank sends 3 chunks of 2 float32
    [24, 24, 24, 24]
    """
    return plan_for(f"ring-{check_choice('goal', goal, RING_GOALS)}", world_size, numel,
                    itemsize).bytes_sent_per_rank()


def make_inputs(world_size: int, numel: int, seed: int = 0) -> list[np.ndarray]:
    """Small deterministic integers, one buffer per rank: sums stay exact even in float32."""
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 10, size=numel, dtype=np.int64) for _ in range(world_size)]
