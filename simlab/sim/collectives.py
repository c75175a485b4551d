"""Collectives as plans, and a step-by-step simulation of any plan with exact integers.

Teaches: the ring reduce-scatter / all-gather / all-reduce, a binomial-tree broadcast, and the naive
"DP-style" reduce-to-root + broadcast, whose root carries all the traffic.

    >>> from simlab.sim.collectives_stepper import simulate
    >>> res = simulate(ring_all_reduce(world_size=4, numel=8))
    >>> res.plan.num_steps, res.final_ok, res.steps[-1].bytes_sent  # 2(n-1)/n * 32 bytes
    (6, True, (48, 48, 48, 48))
"""
from __future__ import annotations

import copy
from functools import lru_cache
from typing import Callable, NamedTuple

import numpy as np

from .._checks import check_choice, check_int, check_ranks
from ..plan import CollectivePlan, Transfer, split_sizes


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


class Collective(NamedTuple):
    """One of lesson 1's collectives: the simulator's plan (the executor, `simlab.exec.collectives`, runs it
    as a function of the same name) and the spellings from before 0.2, still accepted for one release."""

    plan: Callable[..., CollectivePlan]
    rooted: bool = False  # the plan takes root=
    old_names: tuple[str, ...] = ()  # the plan's names before 0.2: `make_plan`, `run_collective`, `simlab collective`
    old_run_names: tuple[str, ...] = ()  # `simlab run`'s targets before 0.2 (it takes `old_names` too)


# The one registry of the collectives' names. One name per collective everywhere: algorithm-goal, the
# function's name with hyphens ("ring" is how, "all-reduce" is what). PLANS, ALIASES, `make_plan`, the CLI's
# choices and aliases (`simlab.cli.collectives`) and the executor function `run_collective` calls derive from it.
COLLECTIVES = {c.plan.__name__.replace("_", "-"): c for c in (
    Collective(ring_all_reduce, old_names=("ring-allreduce",), old_run_names=("allreduce",)),
    Collective(ring_reduce_scatter, old_run_names=("reducescatter",)),
    Collective(ring_all_gather, old_run_names=("allgather",)),
    Collective(tree_broadcast, rooted=True, old_names=("broadcast",), old_run_names=("broadcast",)),
    Collective(naive_all_reduce, rooted=True, old_names=("naive-allreduce",), old_run_names=("naive-allreduce",)),
)}
PLANS = {name: c.plan for name, c in COLLECTIVES.items()}
ALIASES = {old: name for name, c in COLLECTIVES.items() for old in c.old_names}  # old spelling -> name


def run_aliases(name: str) -> list[str]:
    """What `simlab run` also accepts for `name`: its own old targets, then the plan's old names.
    >>> run_aliases("ring-all-reduce")
    ['allreduce', 'ring-allreduce']
    """
    c = COLLECTIVES[name]
    return list(dict.fromkeys(c.old_run_names + c.old_names))


def canonical(name: str) -> str:
    """A collective's one name: 'ring-allreduce' (an old spelling) → 'ring-all-reduce'."""
    name = ALIASES.get(name, name) if isinstance(name, str) else name  # a list would not hash
    return check_choice("collective", name, tuple(PLANS))


def make_plan(name: str, world_size: int, numel: int, itemsize: int = 4, root: int = 0) -> CollectivePlan:
    name = canonical(name)
    kwargs = {"root": root} if COLLECTIVES[name].rooted else {}
    return PLANS[name](world_size, numel, itemsize=itemsize, **kwargs)


def plan_for(name: str, world_size: int, numel: int, itemsize: int = 4, root: int = 0) -> CollectivePlan:
    """`make_plan`, built once per shape: plans are immutable, and the executor (every ring it runs),
    the TP byte counts and the DDP step model ask for the same shapes again and again."""
    name = canonical(name)
    for arg, value in (("world_size", world_size), ("numel", numel), ("itemsize", itemsize), ("root", root)):
        check_int(arg, value)  # before the cache, which takes 4.0 or True for 4 or 1 and cannot hash a list
    return _cached_plan(name, world_size, numel, itemsize, root)


@lru_cache(maxsize=512)
def _cached_plan(name: str, world_size: int, numel: int, itemsize: int, root: int) -> CollectivePlan:
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


def _draw(rng, count: int) -> np.ndarray:
    return rng.integers(0, 10, size=count, dtype=np.int64)


def make_inputs(world_size: int, numel: int, seed: int = 0) -> list[np.ndarray]:
    """Small deterministic integers, one buffer per rank: sums stay exact even in float32."""
    check_int("world_size", world_size, 1)
    check_int("numel", numel, 0)
    check_int("seed", seed, 0)  # None would draw different inputs every time
    rng = np.random.default_rng(seed)
    return [_draw(rng, numel) for _ in range(world_size)]


# Elements per piece when inputs are streamed: 128 KiB of int64 per rank. Bigger pieces leave more freed
# but kept heap behind: a 16 MiB real run peaked 6 MB higher with pieces 4x as big.
PIECE = 1 << 14


INPUT_KINDS = ("random", "powers-of-two")
MAX_POWER_RANKS = 24  # sums of distinct 2**r below 2**24 are exact in float32, what the real runs use


def power_inputs(world_size: int, numel: int) -> list[np.ndarray]:
    """Rank r's buffer holds 2**r in every element, so any sum of distinct ranks' inputs is a bitmask of
    whose inputs it holds: a real buffer, which knows only values, then says whose inputs are in it.
    >>> [int(x[0]) for x in power_inputs(3, 2)], power_sources(np.array([5, 5]), 3)
    ([1, 2, 4], frozenset({0, 2}))
    """
    check_int("world_size", world_size, 1, MAX_POWER_RANKS)
    check_int("numel", numel, 0)
    return [np.full(numel, 1 << r, np.int64) for r in range(world_size)]


def power_sources(values, world_size: int) -> frozenset | None:
    """Whose inputs a chunk of `power_inputs` sums holds: the bits of its value. None when it is no such
    sum (elements differ, or out of range), or is empty. A rank added twice would read as another rank
    (1 + 1 = 2): the runs' verdicts compare values with the simulator's, which catches that."""
    values = np.asarray(values)
    if values.size == 0 or not np.all(values == values.flat[0]):
        return None
    value = int(values.flat[0])
    if not 0 < value < 1 << world_size:
        return None
    return frozenset(r for r in range(world_size) if value >> r & 1)


def input_pieces(world_size: int, numel: int, seed: int = 0, ranks=None, start: int = 0, stop: int | None = None,
                 kind: str = "random"):
    """`make_inputs(world_size, numel, seed)[r][start:stop]` (or, kind "powers-of-two", `power_inputs`'s)
    for each r in `ranks` (default: all), a piece at a time: yields (offset in the buffer,
    {rank: int64 array of up to PIECE elements}).

    Memory stays at one piece per rank however big the buffers. The values are make_inputs' own: the
    generator draws rank 0's buffer, then rank 1's, ..., and drawing k then m values gives the same
    numbers as drawing k + m at once, so we walk the stream once, keep a generator at each wanted
    rank's `start`, then advance them side by side.
    >>> make_inputs(2, 3)[1][1:], list(input_pieces(2, 3, ranks=[1], start=1))
    (array([3, 0]), [(1, {1: array([3, 0])})])
    """
    stop = numel if stop is None else stop
    ranks = sorted(range(world_size) if ranks is None else ranks)
    if check_choice("kind", kind, INPUT_KINDS) == "powers-of-two":
        for offset in range(start, stop, PIECE):
            yield offset, {r: np.full(min(PIECE, stop - offset), 1 << r, np.int64) for r in ranks}
        return
    rng, position, at = np.random.default_rng(seed), 0, {}
    for r in ranks:
        while position < r * numel + start:  # skip what nobody wants, a piece at a time
            position += _draw(rng, min(PIECE, r * numel + start - position)).size
        at[r] = copy.deepcopy(rng)  # the bit generator's state, carried-over half-draws included
    for offset in range(start, stop, PIECE):
        count = min(PIECE, stop - offset)
        yield offset, {r: _draw(at[r], count) for r in ranks}
