"""Lesson 1's exercise: a ring all-gather plan, graded in the simulator (8 ring sizes, uneven chunks) and
then on real processes against torch's all_gather and the simulated trace."""
from __future__ import annotations

from ..plan import CollectivePlan, split_sizes
from ..sim.stepper import PlanError, simulate
from .common import fail

GATHER_CASES = [(n, numel) for n in (1, 2, 3, 4, 5, 8) for numel in (3 * n, 3 * n + 1, n + 2)]


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
            fail(title, case, problem)
    print(f"{title}: ✓ {len(GATHER_CASES)} cases (1 to 8 ranks, uneven sizes): n-1 steps, "
          f"one chunk per rank per step, every rank ends with every chunk")


def _gather_worker(rank: int, world_size: int, plan) -> dict:
    """Run a student's all-gather plan on this rank and torch's all_gather beside it."""
    import torch

    from ..exec.collectives import run_plan
    from ..parity.collectives import torch_all_gather_uneven
    from ..parity.common import max_abs_diff
    from ..plan import chunk_offsets
    from ..sim.collectives import make_inputs
    from ..trace import Recorder

    sizes, offsets = plan.chunk_sizes, chunk_offsets(plan.chunk_sizes)
    full = torch.tensor(make_inputs(1, plan.numel, seed=rank)[0], dtype=torch.float32)  # (numel,)
    mine = full[offsets[rank]:offsets[rank] + sizes[rank]]  # this rank brings chunk `rank`
    out = torch.zeros(plan.numel)
    out[offsets[rank]:offsets[rank] + sizes[rank]] = mine
    recorder = Recorder()
    run_plan(plan, out, recorder)
    want = torch_all_gather_uneven(mine, sizes)
    return {"diff": max_abs_diff(out, want), "events": recorder.events}


def check_plan_runs_for_real(plan_fn, world_size: int = 4, numel: int = 10) -> None:
    """Run the student's plan on `world_size` real processes; compare with torch and the simulator."""
    from ..exec.launch import launch
    from ..trace import merge

    title = f"your plan on {world_size} real processes"
    plan = plan_fn(world_size, numel, 4)
    problem = _ring_all_gather_problem(plan, world_size, numel, 4)
    if problem:
        fail(title, f"world_size={world_size}, numel={numel}", problem)
    ranks = launch(_gather_worker, world_size, plan, timeout=60)
    diff = max(r["diff"] for r in ranks)
    same = merge(r["events"] for r in ranks).signature() == simulate(plan).trace.signature()
    if diff != 0.0 or not same:
        fail(title, f"numel={numel}", f"max |ours - torch all_gather| = {diff}, trace matches simulator: {same}")
    print(f"{title}: ✓ equals torch all_gather exactly; every transfer matches the simulator")
