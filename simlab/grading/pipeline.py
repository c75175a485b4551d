"""Checks for the graded exercise of lesson 4 (pipeline parallel); lesson 5's is in `simlab.grading.tensor_parallel`.

As in every `simlab.grading` module: each check prints one stable line (✓ or ✗ naming the case), which nbval
compares; a failing check raises AssertionError so the cell fails.
"""
from __future__ import annotations

from ..sim.pipeline import as_actions, bubble_fraction, peak_activations, simulate
from ..sim.pipeline_check import validate
from ..sim.schedules import one_f_one_b
from .common import fail

# (p, m): the lesson's 4 x 8 plus cases the student has not seen — fewer micro-batches than stages
# (warm-up is cut short), one stage, one micro-batch, odd sizes
ONE_F_ONE_B_CASES = [(4, 8), (1, 1), (1, 3), (2, 1), (2, 5), (3, 2), (4, 4), (5, 7), (8, 16), (8, 3)]


def _first_difference(got, want) -> str:
    for r, (g, w) in enumerate(zip(got, want)):
        for i, (a, b) in enumerate(zip(g, w)):
            if a != b:
                return f"rank {r} step {i} is {a}, Megatron's 1F1B runs {b} there"
        if len(g) != len(w):
            return f"rank {r} has {len(g)} actions, expected {len(w)}"
    return f"{len(got)} ranks, expected {len(want)}"


def check_one_f_one_b(fn) -> None:
    """Grade `fn(stages, microbatches) -> list[list[Action]]`, most teaching message first: valid (the
    validator's words), then the simulated bubble equals (p−1)/(m+p−1), then peak memory min(p−r, m)
    per rank, and last Megatron's exact order (a valid schedule with 1F1B's bubble and memory that only
    orders things differently is told so last)."""
    title = "1F1B schedule"
    for p, m in ONE_F_ONE_B_CASES:
        case = f"stages={p}, microbatches={m}"
        try:
            got = as_actions(fn(p, m))
        except ValueError as err:
            fail(title, case, str(err))
        problems = validate(got, stages=p, microbatches=m)
        if problems:
            fail(title, case, problems[0])
        bubble, closed = bubble_fraction(simulate(got, t_f=1.0, t_b=2.0), p), (p - 1) / (m + p - 1)
        if abs(bubble - closed) > 1e-9:
            fail(title, case, f"bubble {bubble:.4f}, closed form (p-1)/(m+p-1) = {closed:.4f}: "
                               f"some rank waits longer than 1F1B's")
        peaks = peak_activations(got)
        if peaks != [min(p - r, m) for r in range(p)]:
            fail(title, case, f"peak activations {peaks}, expected min(p-r, m) = "
                               f"{[min(p - r, m) for r in range(p)]} per rank: a backward comes later than it could")
        want = one_f_one_b(p, m)
        if got != want:
            fail(title, case, "valid, with 1F1B's bubble and memory, but not Megatron's order: "
                               + _first_difference(got, want))
    print(f"{title}: ✓ {len(ONE_F_ONE_B_CASES)} (p, m) cases: valid, Megatron's order, "
          f"bubble (p-1)/(m+p-1), peak activations min(p-r, m)")
