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


def _gather_worker(rank: int, world_size: int, plan) -> dict:
    """Run a student's all-gather plan on this rank and torch's all_gather beside it."""
    import torch

    from .exec.collectives import Recorder, run_plan
    from .exec.compare import torch_all_gather_uneven
    from .plan import chunk_offsets
    from .sim.collectives import make_inputs

    sizes, offsets = plan.chunk_sizes, chunk_offsets(plan.chunk_sizes)
    full = torch.tensor(make_inputs(1, plan.numel, seed=rank)[0], dtype=torch.float32)  # (numel,)
    mine = full[offsets[rank]:offsets[rank] + sizes[rank]]  # this rank brings chunk `rank`
    out = torch.zeros(plan.numel)
    out[offsets[rank]:offsets[rank] + sizes[rank]] = mine
    recorder = Recorder()
    run_plan(plan, out, recorder)
    want = torch_all_gather_uneven(mine, sizes)
    return {"diff": (out - want).abs().max().item(), "events": recorder.events}


def check_plan_runs_for_real(plan_fn, world_size: int = 4, numel: int = 10) -> None:
    """Run the student's plan on `world_size` real processes; compare with torch and the simulator."""
    from .exec.launch import launch
    from .trace import merge

    title = f"your plan on {world_size} real processes"
    plan = plan_fn(world_size, numel, 4)
    problem = _ring_all_gather_problem(plan, world_size, numel, 4)
    if problem:
        _fail(title, f"world_size={world_size}, numel={numel}", problem)
    ranks = launch(_gather_worker, world_size, plan, timeout=60)
    diff = max(r["diff"] for r in ranks)
    same = merge(r["events"] for r in ranks).signature() == simulate(plan).trace.signature()
    if diff != 0.0 or not same:
        _fail(title, f"numel={numel}", f"max |ours - torch all_gather| = {diff}, trace matches simulator: {same}")
    print(f"{title}: ✓ equals torch all_gather exactly; every transfer matches the simulator")


# ---- lesson 2: DDP gradient buckets ---------------------------------------------------------

BUCKET_MODELS = {  # parameter bytes in module order (weight, bias, …), from real layer shapes
    "tiny MLP 8-16-16-4": [512, 64, 1024, 64, 256, 16],
    "MLP 1024x4": [4 * 1024 * 1024, 4096] * 4,
    "transformer block h=256": [4 * 256 * 768, 4 * 768, 4 * 256 * 256, 4 * 256, 4 * 256, 4 * 256,
                                4 * 256 * 1024, 4 * 1024, 4 * 1024 * 256, 4 * 256, 4 * 256, 4 * 256],
    "one huge layer": [64 << 20, 1024],
}
BUCKET_CAPS = [1, 1000, 4096, 1 << 20, 25 << 20]


def _backward_orders(n: int) -> list[list[int]]:
    """Grad-ready orders to replay: true reverse order, plus a scrambled one (hooks can fire out of order)."""
    reverse = list(reversed(range(n)))
    scrambled = reverse[1::2] + reverse[0::2]
    return [reverse, scrambled]


def _launch_sequence(readiness_cls, buckets, order) -> list[list[int]]:
    tracker = readiness_cls(buckets)
    return [list(tracker.mark_ready(p)) for p in order]


def check_bucketing(assign_fn, readiness_cls) -> None:
    """Grade a student's `assign_buckets` and `BucketReadiness` against simlab's on several models."""
    from .sim.buckets import BucketReadiness, assign_buckets

    title, cases = "DDP bucketing", 0
    for model, sizes in BUCKET_MODELS.items():
        for cap in BUCKET_CAPS:
            case = f"{model}, cap_bytes={cap}"
            want, got = assign_buckets(sizes, cap), assign_fn(sizes, cap)
            if [list(b) for b in got] != want:
                _fail(title, case, f"buckets {got} but expected {want}")
            for order in _backward_orders(len(sizes)):
                expected = _launch_sequence(BucketReadiness, want, order)
                if _launch_sequence(readiness_cls, want, order) != expected:
                    _fail(title, f"{case}, grads ready in order {order}",
                          f"launches differ from {expected} (a bucket may only go after all earlier ones)")
            cases += 1
    print(f"{title}: ✓ {cases} model/cap cases: buckets in reverse order under the cap, "
          f"each launched when its last gradient is ready, in bucket order")


# ---- lesson 3: ZeRO memory per GPU -------------------------------------------------------------

PAPER = {0: 120e9, 1: 31.40625e9, 2: 16.640625e9, 3: 1.875e9}  # ZeRO paper, Figure 1: Ψ=7.5B, N=64, K=12


def check_zero_memory(fn) -> None:
    """Grade `fn(psi, n_gpus, stage) -> {params, grads, optimizer, total}` (mixed precision, K=12)."""
    from .sim.memory import per_gpu_bytes

    title, keys = "ZeRO memory per GPU", ("params", "grads", "optimizer", "total")
    for stage, total in PAPER.items():
        got = fn(7_500_000_000, 64, stage)
        if got.get("total") != total:
            _fail(title, f"the paper's example, stage {stage}", f"total={got.get('total')} B, paper: {total:.0f} B")
    cases = [(psi, n, stage) for psi in (1_000_000, 1_000_003, 7_500_000_000) for n in (1, 3, 64, 1000)
             for stage in range(4)]
    for psi, n, stage in cases:
        want, got = per_gpu_bytes(psi, n, stage, precision="mixed"), fn(psi, n, stage)
        wrong = [k for k in keys if got.get(k) != want[k]]
        if wrong:
            _fail(title, f"psi={psi}, n_gpus={n}, stage={stage}",
                  f"{wrong[0]}={got.get(wrong[0])} but expected {want[wrong[0]]} (shards round up)")
    print(f"{title}: ✓ the paper's 120 / 31.4 / 16.6 / 1.9 GB and {len(cases)} more cases "
          f"(uneven shards round up)")
