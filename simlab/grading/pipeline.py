"""Checks for the graded exercises of lesson 4 (pipeline parallel); lesson 5's are in `simlab.grading.tensor_parallel`:
write 1F1B (`check_one_f_one_b`; handing it simlab's own generator is refused), repair a broken 1F1B list
(`check_repaired_schedule`), and predict every rank's peak activations under interleaved 1F1B and ZB-H1
before running both for real (`check_peak_prediction`; a wrong guess gets a hint, never the numbers).

As in every `simlab.grading` module: each check prints one stable line (✓ or ✗ naming the case), which nbval
compares; a failing check raises AssertionError so the cell fails. The words go through `_()`
(simlab.i18n): after `set_language("zh")` the lines are Chinese, with the same numbers and the same ✓/✗.
The validator's and the parser's own words (`simlab.sim.pipeline_check`, `simlab.plan`) are quoted as they
come.
"""
from __future__ import annotations

from ..i18n import _
from ..sim import pipeline_schedules
from ..sim.pipeline import as_actions, bubble_fraction, makespan, peak_activations, simulate
from ..sim.pipeline_check import validate
from ..sim.pipeline_schedules import one_f_one_b
from .common import fail, first_call, passed

SCHEDULES_FILE = one_f_one_b.__code__.co_filename  # simlab's own generators, as their code names the file


def _calls_simlabs_generator(fn, *args):
    """`fn(*args)`, and the name of the first function of `simlab.sim.pipeline_schedules` it called (None if
    none): an answer that returns simlab's own 1F1B has not been written. (Lesson 3's grader watches the same
    way, through `simlab.grading.common.first_call`.)"""
    return first_call(fn, lambda code: code.co_name if code.co_filename == SCHEDULES_FILE else None, *args)

# (p, m): the lesson's 4 x 8 plus cases the student has not seen — fewer micro-batches than stages
# (warm-up is cut short), one stage, one micro-batch, odd sizes
ONE_F_ONE_B_CASES = [(4, 8), (1, 1), (1, 3), (2, 1), (2, 5), (3, 2), (4, 4), (5, 7), (8, 16), (8, 3)]


def _first_difference(got, want) -> str:
    for r, (g, w) in enumerate(zip(got, want)):
        for i, (a, b) in enumerate(zip(g, w)):
            if a != b:
                return _("rank {rank} step {step} is {got}, Megatron's 1F1B runs {want} there").format(
                    rank=r, step=i, got=a, want=b)
        if len(g) != len(w):
            return _("rank {rank} has {got} actions, expected {want}").format(rank=r, got=len(g), want=len(w))
    return _("{got} ranks, expected {want}").format(got=len(got), want=len(want))


def check_one_f_one_b(fn) -> None:
    """Grade `fn(stages, microbatches) -> list[list[Action]]`, most teaching message first: valid (the
    validator's words), then the simulated bubble equals (p−1)/(m+p−1), then peak memory min(p−r, m)
    per rank, and last Megatron's exact order (a valid schedule with 1F1B's bubble and memory that only
    orders things differently is told so last)."""
    title = _("1F1B schedule")
    if getattr(fn, "__module__", None) == pipeline_schedules.__name__:
        fail(title, _("your function"), _("that is simlab's own {name}: write the three loops yourself").format(
            name=getattr(fn, "__name__", "generator")))
    for p, m in ONE_F_ONE_B_CASES:
        case = f"stages={p}, microbatches={m}"
        schedule, called = _calls_simlabs_generator(fn, p, m)
        if called:
            fail(title, case, _("it calls simlab's own {name} (simlab.sim.pipeline_schedules): write the three "
                                "loops yourself").format(name=called))
        try:
            got = as_actions(schedule)
        except ValueError as err:
            fail(title, case, str(err))
        problems = validate(got, stages=p, microbatches=m)
        if problems:
            fail(title, case, _(problems[0]))  # the validator's Message, said in the reader's language
        bubble, closed = bubble_fraction(simulate(got, t_f=1.0, t_b=2.0), p), (p - 1) / (m + p - 1)
        if abs(bubble - closed) > 1e-9:
            fail(title, case, _("bubble {bubble}, closed form (p-1)/(m+p-1) = {closed}: some rank waits longer "
                                "than 1F1B's").format(bubble=f"{bubble:.4f}", closed=f"{closed:.4f}"))
        peaks = peak_activations(got)
        if peaks != [min(p - r, m) for r in range(p)]:
            fail(title, case, _("peak activations {peaks}, expected min(p-r, m) = {want} per rank: a backward "
                                "comes later than it could").format(peaks=peaks,
                                                                    want=[min(p - r, m) for r in range(p)]))
        want = one_f_one_b(p, m)
        if got != want:
            fail(title, case, _("valid, with 1F1B's bubble and memory, but not Megatron's order: {difference}")
                 .format(difference=_first_difference(got, want)))
    passed(title, _("{cases} (p, m) cases: valid, Megatron's order, bubble (p-1)/(m+p-1), peak activations "
                    "min(p-r, m)").format(cases=len(ONE_F_ONE_B_CASES)))


# ---------------------------------------------------------------- repair a broken 1F1B list

# p = 3, m = 4: 1F1B with two slips. Rank 0 cut its warm-up to one forward (0B0 before 0F1), so it waits
# for 1B0 while rank 1 waits for its 0F1: a deadlock. Rank 2 swapped 2F1 and 2B1: a backward before its
# forward, which no timing can fix.
BROKEN_ONE_F_ONE_B = [["0F0", "0B0", "0F1", "0F2", "0F3", "0B1", "0B2", "0B3"],
                      ["1F0", "1F1", "1B0", "1F2", "1B1", "1F3", "1B2", "1B3"],
                      ["2F0", "2B0", "2B1", "2F1", "2F2", "2B2", "2F3", "2B3"]]
REPAIR_STAGES, REPAIR_MICROBATCHES = 3, 4


def check_repaired_schedule(schedule) -> None:
    """Grade a repair of `BROKEN_ONE_F_ONE_B` (one action list per rank, Actions or "2F0" strings): the
    validator finds nothing wrong, the simulated makespan (t_F = 1, t_B = 2) is 1F1B's, and no rank holds
    more activations than 1F1B's — so GPipe, which is as fast here, is not taken for a repair."""
    title, p, m = _("repaired 1F1B schedule"), REPAIR_STAGES, REPAIR_MICROBATCHES
    case = f"stages={p}, microbatches={m}"
    try:
        got = as_actions(schedule)
    except (TypeError, ValueError) as err:
        fail(title, case, str(err))
    if got == as_actions(BROKEN_ONE_F_ONE_B):  # the exercise's stub: nothing mended yet, like an unwritten answer
        raise NotImplementedError(_("exercise: mend the lists in the cell above"))
    if len(got) != p:
        fail(title, case, _("{got} action lists, the pipeline has {p} ranks: one list per rank").format(
            got=len(got), p=p))
    problems = validate(got, stages=p, microbatches=m)
    if problems:
        more = _(" (and {more} more: print validate(...) to see all)").format(more=len(problems) - 1) \
            if len(problems) > 1 else ""
        fail(title, case, _(problems[0]) + more)
    want = one_f_one_b(p, m)
    span, best = makespan(simulate(got)), makespan(simulate(want))
    if span > best + 1e-9:
        fail(title, case, _("valid, but the simulated makespan is {span} time units, 1F1B's is {best}: some rank "
                            "idles where it could have started its next forward or backward").format(
            span=f"{span:g}", best=f"{best:g}"))
    peaks, bound = peak_activations(got), peak_activations(want)
    over = next((r for r in range(p) if peaks[r] > bound[r]), None)
    if over is not None:
        fail(title, case, _("valid and as fast as 1F1B, but rank {rank} holds {held} micro-batches' activations at "
                            "once, 1F1B only {bound}: a backward runs later than it could").format(
            rank=over, held=peaks[over], bound=bound[over]))
    passed(title, _("valid, makespan {span} = 1F1B's, peak activations {peaks} per rank").format(
        span=f"{span:g}", peaks=peaks))


# ---------------------------------------------------------------- predict, then run: peak activations

# Neither schedule nor size appears before it: the lesson prints p = 4, m = 8 (interleaved and ZB-H1 among
# them), the exercise's repair check prints 1F1B's peaks for p = 3 and its intro states 1F1B's min(p - r, m).
# The two schedules that beat 1F1B's bubble, asked about what each pays for it in activations.
PREDICT_STAGES, PREDICT_MICROBATCHES, PREDICT_CHUNKS = 3, 6, 2
PREDICT_GLOBAL_BATCH = 12  # 2 samples per micro-batch (run_pipeline needs the batch divisible by m)
PREDICTED = ("interleaved", "zero-bubble")


def _chunks(name: str) -> int:
    return PREDICT_CHUNKS if name == "interleaved" else 1


def _why_peak(name: str) -> str:
    """What to count, in the words of the lesson (sections 5 and 6): the concept, never the numbers."""
    if name == "interleaved":
        return _("count chunk units: each chunk forward keeps its activations until its backward, and before its "
                 "first backward rank r runs interleaved 1F1B's warm-up (lesson 4, section 6), then one more "
                 "forward")
    return _("a micro-batch's activations stay until its weight gradient W, not its input gradient I: count "
             "what rank r holds when it has deferred its Ws (lesson 4, section 5)")


def _one_line(value) -> str:
    return (str(value).splitlines() or [""])[0][:80]


def _per_rank(guess, p: int) -> list[int] | None:
    """`guess` as one whole number per rank, or None if it is not that."""
    if not isinstance(guess, (list, tuple)) or len(guess) != p:
        return None
    if any(isinstance(g, bool) or not isinstance(g, int) for g in guess):
        return None
    return list(guess)


def check_peak_prediction(predicted, run) -> None:
    """Grade `predicted` = {"interleaved": [n per rank], "zero-bubble": [n per rank]}, the most activations each
    rank holds at once (p = 3, m = 6; interleaved with v = 2 chunks, counted in chunk units). The prediction is
    read first (an unanswered stub raises NotImplementedError before anything starts); then `run`
    (`run_pipeline`) runs both schedules on p real processes, and their "measured_peak_activations" — what each
    rank's executor really kept alive at once, counted in its own stash, not read off the list — is the answer.
    A wrong prediction is told which rank is off, which way, and what to count: never the measured numbers."""
    title = _("peak activations per rank, predicted vs the real run")
    p, m = PREDICT_STAGES, PREDICT_MICROBATCHES
    if not isinstance(predicted, dict) or set(predicted) != set(PREDICTED):
        fail(title, "predicted", _("must be a dict with the keys 'interleaved' and 'zero-bubble', got {got}").format(
            got=_one_line(predicted)))
    if all(v is None for v in predicted.values()):  # the exercise's stub: no process is started for it
        raise NotImplementedError(_("exercise: write your prediction in the cell above"))
    guesses = {name: _per_rank(predicted[name], p) for name in PREDICTED}
    for name, guess in guesses.items():
        if guess is None:
            fail(title, name, _("predict one whole number per rank, {p} in all (rank 0 first), got {got}").format(
                p=p, got=_one_line(predicted[name])))
    if not callable(run):
        fail(title, "run", _("needs the function that runs a schedule for real (run_pipeline), got {got}").format(
            got=_one_line(run)))
    runs = {name: run(name, world_size=p, microbatches=m, chunks=_chunks(name), global_batch=PREDICT_GLOBAL_BATCH,
                      compare_torch=False) for name in PREDICTED}
    for name, res in runs.items():
        if not isinstance(res, dict) or "measured_peak_activations" not in res:
            fail(title, name, _("the run returned no measured_peak_activations: it must be run_pipeline, a real run"))
        if (res.get("schedule_name"), res.get("world_size"), res.get("microbatches"), res.get("chunks")) != (
                name, p, m, _chunks(name)):
            fail(title, name, _("the run must be {name} on world_size={p} with microbatches={m} and chunks={v}")
                 .format(name=name, p=p, m=m, v=_chunks(name)))
    for name, guess in guesses.items():
        real = list(runs[name]["measured_peak_activations"])
        if guess != real:
            r = next(r for r in range(p) if guess[r] != real[r])
            way = _("more") if real[r] > guess[r] else _("fewer")
            fail(title, name, _("you predicted {guess}; rank {rank} really held {way} than that: {why}").format(
                guess=guess, rank=r, way=way, why=_why_peak(name)) + _hint(name, guess))
    i, z = (runs[n]["measured_peak_activations"] for n in PREDICTED)
    passed(title, _("interleaved {interleaved} chunk units, ZB-H1 {zero_bubble} micro-batches, as measured: "
                    "interleaving pays for its smaller bubble with a longer warm-up, ZB-H1 with the "
                    "activations its deferred weight gradients keep").format(interleaved=i, zero_bubble=z))


def _hint(name: str, guess: list[int]) -> str:
    """The usual wrong answers, named by the idea they miss."""
    p, m, v = PREDICT_STAGES, PREDICT_MICROBATCHES, PREDICT_CHUNKS
    one_f = [min(p - r, m) for r in range(p)]
    if guess == one_f:
        return _(" (that is 1F1B's: see what this schedule changes)")
    if guess == [m] * p or guess == [v * m] * p:
        return _(" (that is every forward of the step, as GPipe holds them: this schedule runs backwards as soon "
                 "as it can)")
    if sorted(guess) == guess and guess != sorted(guess, reverse=True):
        return _(" (rank 0 is the first stage: its first gradient comes back last, so it holds the most)")
    if name == "interleaved" and guess == [v * n for n in one_f]:
        return _(" (not v times 1F1B's: the warm-up first carries p micro-batches through a rank's earlier chunk, "
                 "the same on every rank)")
    if name == "interleaved" and guess == [(v - 1) * p + 2 * (p - r - 1) for r in range(p)]:
        return _(" (the warm-up, plus the steady state's forward that runs before the first backward)")
    return ""
