"""One-line input checks shared by the simulator, the executor, the parity runs and the CLI.

Each raises `ValueError` naming the parameter and what is allowed, before any process starts. The
CLI rewrites a parameter's name into the flag the user typed (`world_size=` → `--world-size=`), so
every rule lives here, or in its lesson's `sim/` module, exactly once.
"""
from __future__ import annotations

import math

MAX_RANKS = 64  # the simulator's range; real runs are limited by the machine instead
MAX_COUNT = 1 << 40  # ranks in a closed form: beyond any machine, yet small enough for float arithmetic


def check_int(name: str, value, low: int | None = None, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name}={value!r}: must be an integer")
    if low is not None and value < low:
        allowed = f"between {low} and {high}" if high is not None else f">= {low}"
        raise ValueError(f"{name}={value}: must be {allowed}")
    if high is not None and value > high:
        raise ValueError(f"{name}={value}: must be between {low} and {high}")
    return value


def check_ranks(name: str, value) -> int:
    return check_int(name, value, 1, MAX_RANKS)


def check_choice(name: str, value, allowed) -> str:
    if value not in allowed:
        raise ValueError(f"{name}={value!r}: must be one of {', '.join(map(str, allowed))}")
    return value


def check_bool(name: str, value) -> bool:
    if value is not True and value is not False:
        raise ValueError(f"{name}={value!r}: must be True or False")
    return value


def _finite(value) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float (10**400): no float arithmetic can use it
        return False


def check_positive(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name}={value!r}: must be a positive number")
    if not _finite(value):  # nan, ±inf: no time, size or bandwidth is infinite (and JSON has no inf)
        raise ValueError(f"{name}={value!r}: must be a finite number")
    if not value > 0:
        raise ValueError(f"{name}={value!r}: must be a positive number")
    return float(value)


def check_divisible(name: str, value: int, by_name: str, by: int) -> int:
    """`value` must split into `by` equal parts (Megatron's shards, a batch over ranks, …)."""
    if value % by:
        raise ValueError(f"{name}={value}: must be divisible by {by_name}={by}")
    return value


def check_batch(global_batch, world_size: int, accumulate: int = 1) -> int:
    """Every rank (and each of its `accumulate` micro-batches) gets the same number of samples."""
    check_int("global_batch", global_batch, 1)
    if global_batch % (world_size * accumulate):
        by = f"world_size={world_size}" + (f" x accumulate={accumulate}" if accumulate > 1 else "")
        raise ValueError(f"global_batch={global_batch}: must be divisible by {by}")
    return global_batch


def check_number(name: str, value, low: float = 0.0, high: float | None = None) -> float:
    """A finite number in [low, high] (a time, a byte count, a ratio): refuses bools, text, nan and ±inf."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name}={value!r}: must be a number >= {low:g}")
    try:
        finite = math.isfinite(value)
    except OverflowError:  # an int too big for a float: the arithmetic on it would overflow
        finite = False
    if not finite:
        raise ValueError(f"{name}={value!r}: must be a finite number")
    if value < low or (high is not None and value > high):
        allowed = f"between {low:g} and {high:g}" if high is not None else f">= {low:g}"
        raise ValueError(f"{name}={value!r}: must be {allowed}")
    return float(value)
