"""Checks for the graded exercises. Each prints one stable line, which nbval compares.

A check that fails prints a line starting with ✗ that names the case, then raises AssertionError,
so the cell fails under nbval and in JupyterLab alike.
"""
from __future__ import annotations

from .plan import CollectivePlan, split_sizes
from .sim.stepper import PlanError, simulate

GATHER_CASES = [(n, numel) for n in (1, 2, 3, 4, 5, 8) for numel in (3 * n, 3 * n + 1, n + 2)]


def _fail(title: str, case: str, reason: str):
    print(f"{title}: ✗ {case}: {reason}")
    raise AssertionError(f"{case}: {reason}")


def _ring_all_gather_problem(plan, n: int, numel: int, itemsize: int) -> str | None:
    """What is wrong with a student's all-gather plan, or None."""
    if not isinstance(plan, CollectivePlan):
        return f"expected a CollectivePlan, got {type(plan).__name__}"
    if plan.world_size != n or plan.chunk_sizes != split_sizes(numel, n) or plan.itemsize != itemsize:
        return "world_size, chunk_sizes (use split_sizes) or itemsize do not match the arguments"
    if plan.start != "own":
        return f"start={plan.start!r}: in an all-gather rank r starts with its own chunk ('own')"
    if plan.num_steps != n - 1:
        return f"{plan.num_steps} steps; a ring all-gather takes n-1 = {n - 1}"
    for step in plan.steps:
        if sorted(t.src for t in step) != list(range(n)):
            return f"step {step[0].step if step else '?'}: every rank must send exactly one chunk per step"
        if any(t.dst not in ((t.src + 1) % n, (t.src - 1) % n) for t in step):
            return "every transfer must go to a ring neighbour"
    goal = CollectivePlan(plan.name, n, plan.chunk_sizes, itemsize, plan.start, plan.steps,
                          meta={"goal": "all_gather"})  # graded against all-gather, whatever it claims
    try:
        result = simulate(goal)
    except PlanError as err:
        return str(err)
    if not result.final_ok:
        return "after the last step some rank is missing a chunk (or holds the wrong one)"
    return None


def check_ring_all_gather(plan_fn, itemsize: int = 4) -> None:
    """Grade `plan_fn(world_size, numel, itemsize)` on ring sizes 1..8, even and uneven."""
    title = "ring all-gather plan"
    for n, numel in GATHER_CASES:
        case = f"world_size={n}, numel={numel}"
        try:
            plan = plan_fn(n, numel, itemsize)
        except NotImplementedError:
            raise
        except Exception as err:  # a student's bug: say which case, keep the traceback
            print(f"{title}: ✗ {case}: raised {type(err).__name__}: {err}")
            raise
        problem = _ring_all_gather_problem(plan, n, numel, itemsize)
        if problem:
            _fail(title, case, problem)
    print(f"{title}: ✓ {len(GATHER_CASES)} cases (1 to 8 ranks, uneven sizes): n-1 steps, "
          f"one chunk per rank per step, every rank ends with every chunk")
