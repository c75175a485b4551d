"""Exhaustive sweeps under `make test-full`, a seeded sample under `make test`.

`make test` must stay under 7 minutes on 2 cores, yet the sweeps (every ring size 1..64, every 3-D grid of
up to 8 ranks) are what proves the engines exact. So `make test` runs each sweep's edge cases *always* and a
sample of the rest drawn with a seed that changes every day: over a week the whole sweep is covered, and a
failure names its seed so it can be replayed:

    SIMLAB_TEST_SEED=739953 make test      # the sample of that day
    make test-full                          # SIMLAB_TEST_FULL=1: every case

The seed is fixed once per session in `tests/conftest.py` (and printed in pytest's header), before
pytest-xdist starts its workers, so every worker collects the same sample.
"""
from __future__ import annotations

import datetime
import os
import random

FULL = os.environ.get("SIMLAB_TEST_FULL", "") not in ("", "0")


def seed() -> int:
    """SIMLAB_TEST_SEED if set, else today's date as a day number (changes daily, same for every worker)."""
    return int(os.environ.get("SIMLAB_TEST_SEED") or datetime.date.today().toordinal())


def sample(items, k: int, *, always=(), name: str = "") -> list:
    """`always` (edge cases, kept in their place) plus `k` of the other `items` drawn with today's seed, in
    their original order; every item under SIMLAB_TEST_FULL=1. `name` gives each sweep its own draw."""
    items = list(items)
    missing = [a for a in always if a not in items]
    if missing:
        raise ValueError(f"always={missing}: not among the items")
    if FULL:
        return items
    rest = [i for i in items if i not in always]
    drawn = random.Random(f"{seed()}:{name}").sample(rest, min(k, len(rest)))
    return [i for i in items if i in always or i in drawn]
