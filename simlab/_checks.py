"""One-line input checks shared by the simulator, the executor and the CLI.

Each raises `ValueError` naming the parameter and what is allowed, before any process starts.
"""
from __future__ import annotations

MAX_RANKS = 64  # the simulator's range; real runs are limited by the machine instead


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


def check_positive(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{name}={value!r}: must be a positive number")
    return float(value)
