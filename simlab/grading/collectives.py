"""Lesson 1's exercise: a ring all-gather plan, graded in the simulator (8 ring sizes, uneven chunks) and
then on real processes against torch's all_gather and the simulated trace. A plan that simlab's own
collectives build (`simlab.sim.collectives`, which the lesson imports) is refused: the learner writes the
transfers."""
from __future__ import annotations

from ..i18n import _
from ..plan import CollectivePlan, split_sizes
from ..sim import collectives as reference
from ..sim.collectives_stepper import PlanError, simulate
from .common import fail, failed_line, first_call, passed

GATHER_CASES = [(n, numel) for n in (1, 2, 3, 4, 5, 8) for numel in (3 * n, 3 * n + 1, n + 2)]
# the code of every function that builds one of simlab's plans: calling any of them is delegating
_REFERENCE_CODE = {f.__code__: f.__name__ for f in (
    *reference.PLANS.values(), reference.make_plan, reference.plan_for, reference._cached_plan.__wrapped__,
    reference._ring_steps, reference.ring_bytes_sent)}


def call_watched(fn, watched: dict, *args):
    """`fn(*args)`, and the name (`watched[code]`) of the first watched function it called, or None."""
    return first_call(fn, watched.get, *args)


def _delegated(name: str) -> str:
    return _("it calls simlab's own {name}: build the transfers yourself, with Transfer and CollectivePlan").format(
        name=name)


def _ring_all_gather_problem(plan, n: int, numel: int, itemsize: int) -> str | None:
    """What is wrong with a student's all-gather plan, or None."""
    if not isinstance(plan, CollectivePlan):
        return _("expected a CollectivePlan, got {type}").format(type=type(plan).__name__)
    if plan.world_size != n or plan.chunk_sizes != split_sizes(numel, n) or plan.itemsize != itemsize:
        return _("world_size, chunk_sizes (use split_sizes) or itemsize do not match the arguments")
    if plan.start != "own":
        return _("start={start}: in an all-gather rank r starts with its own chunk ('own')").format(
            start=repr(plan.start))
    if plan.num_steps != n - 1:
        return _("{steps} steps; a ring all-gather takes n-1 = {want}").format(steps=plan.num_steps, want=n - 1)
    for step in plan.steps:
        if sorted(t.src for t in step) != list(range(n)):
            return _("step {step}: every rank must send exactly one chunk per step").format(
                step=step[0].step if step else "?")
        astray = next((t for t in step if t.dst != (t.src + 1) % n), None)
        if astray is not None:
            return _("step {step}: rank {src} sends to rank {dst}; in this ring every rank sends to its right "
                     "neighbour (r + 1) % n").format(step=astray.step, src=astray.src, dst=astray.dst)
    goal = CollectivePlan(plan.name, n, plan.chunk_sizes, itemsize, plan.start, plan.steps,
                          meta={"goal": "all_gather"})  # graded against all-gather, whatever it claims
    try:
        result = simulate(goal)
    except PlanError as err:
        return str(err)  # the simulator's own words (simlab.sim.collectives_stepper)
    if not result.final_ok:
        return _("after the last step some rank is missing a chunk (or holds the wrong one)")
    return None


def check_ring_all_gather(plan_fn, itemsize: int = 4) -> None:
    """Grade `plan_fn(world_size, numel, itemsize)` on ring sizes 1..8, even and uneven."""
    title = _("ring all-gather plan")
    for n, numel in GATHER_CASES:
        case = f"world_size={n}, numel={numel}"
        try:
            plan, called = call_watched(plan_fn, _REFERENCE_CODE, n, numel, itemsize)
        except NotImplementedError:
            raise
        except Exception as err:  # a student's bug: say which case, keep the traceback
            print(failed_line(title, case, _("raised {error}").format(error=f"{type(err).__name__}: {err}")))
            raise
        if called:
            fail(title, case, _delegated(called))
        problem = _ring_all_gather_problem(plan, n, numel, itemsize)
        if problem:
            fail(title, case, problem)
    passed(title, _("{cases} cases (1 to 8 ranks, uneven sizes): n-1 steps, one chunk per rank per step, "
                    "every rank ends with every chunk").format(cases=len(GATHER_CASES)))


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

    title = _("your plan on {n} real processes").format(n=world_size)
    plan, called = call_watched(plan_fn, _REFERENCE_CODE, world_size, numel, 4)
    problem = _delegated(called) if called else _ring_all_gather_problem(plan, world_size, numel, 4)
    if problem:
        fail(title, f"world_size={world_size}, numel={numel}", problem)
    ranks = launch(_gather_worker, world_size, plan, timeout=60)
    diff = max(r["diff"] for r in ranks)
    same = merge(r["events"] for r in ranks).signature() == simulate(plan).trace.signature()
    if diff != 0.0 or not same:
        fail(title, f"numel={numel}", _("max |ours - torch all_gather| = {diff}, trace matches simulator: "
                                        "{same}").format(diff=diff, same=same))
    passed(title, _("equals torch all_gather exactly; every transfer matches the simulator"))


# ---- predict, then run: the bytes one rank sends in a real ring all-reduce ---------------------

def _half_bytes(plan, rank: int) -> tuple[int, int]:
    """(reduce-scatter, all-gather) bytes `rank` sends in a ring all-reduce plan: n−1 steps each."""
    sent = [sum(t.nbytes for t in step if t.src == rank) for step in plan.steps]
    half = plan.world_size - 1
    return sum(sent[:half]), sum(sent[half:])


def _bytes_mistake(predicted, plan, rank: int, measured: int) -> str | None:
    """Why `predicted` is not what `rank` sent in the ring all-reduce `plan` (None: it is). Each known
    wrong answer gets its own reason, worked out from the plan's chunks; `measured` is the real count.
    No reason says the right count: it names the concept to rethink (nbval must not pass a copied number)."""
    if isinstance(predicted, bool) or not isinstance(predicted, (int, float)) or predicted != predicted:
        return _("expected a number of bytes, got {value}").format(value=repr(predicted))
    if predicted == measured:
        return None
    n, size, sizes = plan.world_size, plan.nbytes, plan.chunk_sizes
    rs, ag = _half_bytes(plan, rank)
    right = rs + ag  # what the plan makes this rank send: the theory, independent of the measurement
    received = sum(t.nbytes for step in plan.steps for t in step if t.dst == rank)
    skip = _("rank {rank} sends every chunk but chunk {rank} in the reduce-scatter and every chunk but chunk "
             "{next} in the all-gather").format(rank=rank, next=(rank + 1) % n)
    even = len(set(sizes)) == 1
    average = 2 * (n - 1) * size / n
    why = [  # (wrong answer, what it counts); where several coincide, all are said
        (average, _("{bytes} B = 2(N−1)/N·S is the average over ranks; with chunks of {sizes} elements the ranks "
                    "differ: {skip}").format(bytes=f"{average:g}", sizes=", ".join(map(str, sizes)), skip=skip)),
        (rs, _("{bytes} B is only the reduce-scatter half; the all-gather sends N−1 more chunks").format(bytes=rs)),
        (ag, _("{bytes} B is only the all-gather half; the reduce-scatter sends N−1 chunks first").format(bytes=ag)),
        (2 * rs, _("{bytes} B counts the reduce-scatter half twice; the all-gather leaves out a different chunk "
                   "(the one it receives last), so its half need not be the same").format(bytes=2 * rs)),
        (2 * ag, _("{bytes} B counts the all-gather half twice; the reduce-scatter leaves out a different chunk "
                   "(the one the rank finishes), so its half need not be the same").format(bytes=2 * ag)),
        (right + received, _("{bytes} B counts bytes sent plus bytes received; the question asks what rank {rank} "
                             "sends").format(bytes=right + received, rank=rank)),
        (size, _("{bytes} B = S is one whole buffer: what a non-root rank of the naive star sends, not a ring rank, "
                 "which sends one chunk per step").format(bytes=size)),
        ((n - 1) * size, _("{bytes} B = (N−1)·S is what the naive star's root sends, not a ring rank").format(
            bytes=(n - 1) * size)),
        (2 * size, _("{bytes} B = 2S would be the whole buffer out twice; the ring sends 2(N−1) chunks, not "
                     "2N").format(bytes=2 * size)),
    ] + [(plan.itemsize * c, _("{bytes} B is one chunk: what one step sends; the ring takes 2(N−1) = {steps} "
                               "steps").format(bytes=plan.itemsize * c, steps=2 * (n - 1)))
         for c in sorted(set(sizes))] + [
        (sent, _("{bytes} B is what rank {k} sends; {skip}").format(bytes=sent, k=k, skip=skip))
        for k, sent in enumerate(plan.bytes_sent_per_rank()) if k != rank and not even]
    reasons = list(dict.fromkeys(reason for wrong, reason in why if predicted == wrong != right))
    if reasons:
        return _("; or ").join(reasons)
    if predicted == right:  # the plan's count, but the real run sent something else: say so, never hide it
        return _("{right} B is right in theory, but the real run sent {measured} B: rerun it").format(
            right=right, measured=measured)
    return _("not what rank {rank} sends: count its chunks, {skip}; the chunks hold {sizes} elements of {itemsize} "
             "B").format(rank=rank, skip=skip, sizes=", ".join(map(str, sizes)), itemsize=plan.itemsize)


def check_bytes_prediction(predicted, result, rank: int = 2) -> None:
    """Grade a prediction of what `rank` sends in a ring all-reduce against a REAL run's measured bytes
    (`result` = `run_collective("ring-all-reduce", ...)`), with the reason a wrong answer is wrong."""
    title = _("predicted bytes sent")
    if predicted is Ellipsis:  # the exercise's placeholder: not answered yet, like a stub
        raise NotImplementedError(_("exercise: write your prediction (a number of bytes) in the cell above"))
    if not isinstance(result, dict) or result.get("name") != "ring-all-reduce":
        fail(title, "result", _("pass what run_collective('ring-all-reduce', ...) returned"))
    n, plan = result["world_size"], result["plan"]
    if not 0 <= rank < n:
        fail(title, f"rank={rank}", _("the run has ranks 0..{last}").format(last=n - 1))
    measured = result["bytes_sent_per_rank"][rank]  # counted by the real rank's recorder, not simulated
    case = _("rank {rank} of {n}, S = {nbytes} B").format(rank=rank, n=n, nbytes=plan.nbytes)
    problem = _bytes_mistake(predicted, plan, rank, measured)
    if problem:
        fail(title, case, _("you said {said}: {problem}").format(said=repr(predicted), problem=problem))
    rs, ag = _half_bytes(plan, rank)
    halves = _(" ({rs} B in the reduce-scatter, {ag} B in the all-gather)").format(rs=rs, ag=ag) \
        if rs + ag == measured else ""
    passed(title, _("{case}: rank {rank} really sent {measured} B{halves}, as you predicted").format(
        case=case, rank=rank, measured=measured, halves=halves))
