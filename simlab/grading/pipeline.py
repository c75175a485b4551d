"""Checks for the graded exercises of lesson 4 (pipeline parallel); lesson 5's are in `simlab.grading.tensor_parallel`:
write 1F1B (`check_one_f_one_b`), repair a broken 1F1B list (`check_repaired_schedule`), and predict rank 0's
peak activations under GPipe and 1F1B before running both for real (`check_peak_prediction`).

As in every `simlab.grading` module: each check prints one stable line (✓ or ✗ naming the case), which nbval
compares; a failing check raises AssertionError so the cell fails.
"""
from __future__ import annotations

from ..sim.pipeline import as_actions, bubble_fraction, makespan, peak_activations, simulate
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
    title, p, m = "repaired 1F1B schedule", REPAIR_STAGES, REPAIR_MICROBATCHES
    case = f"stages={p}, microbatches={m}"
    try:
        got = as_actions(schedule)
    except (TypeError, ValueError) as err:
        fail(title, case, str(err))
    if len(got) != p:
        fail(title, case, f"{len(got)} action lists, the pipeline has {p} ranks: one list per rank")
    problems = validate(got, stages=p, microbatches=m)
    if problems:
        more = f" (and {len(problems) - 1} more: print validate(...) to see all)" if len(problems) > 1 else ""
        fail(title, case, problems[0] + more)
    want = one_f_one_b(p, m)
    span, best = makespan(simulate(got)), makespan(simulate(want))
    if span > best + 1e-9:
        fail(title, case, f"valid, but the simulated makespan is {span:g} time units, 1F1B's is {best:g}: "
                          f"some rank idles where it could have started its next forward or backward")
    peaks, bound = peak_activations(got), peak_activations(want)
    over = next((r for r in range(p) if peaks[r] > bound[r]), None)
    if over is not None:
        fail(title, case, f"valid and as fast as 1F1B, but rank {over} holds {peaks[over]} micro-batches' "
                          f"activations at once, 1F1B only {bound[over]}: a backward runs later than it could")
    print(f"{title}: ✓ valid, makespan {span:g} = 1F1B's, peak activations {peaks} per rank")


# ---------------------------------------------------------------- predict, then run: peak activations

PREDICT_STAGES, PREDICT_MICROBATCHES = 4, 8
_WHY_PEAK = {  # what the real run held on rank 0, and why: p = 4 stages, m = 8 micro-batches
    "gpipe": "GPipe runs all m = 8 forwards before its first backward frees anything",
    "1f1b": "1F1B's rank 0 runs p - 1 = 3 warm-up forwards, then one more forward before each backward: "
            "p = 4 micro-batches are in flight when its first backward arrives",
}


def _one_line(value) -> str:
    return (str(value).splitlines() or [""])[0][:80]


def check_peak_prediction(predicted, runs) -> None:
    """Grade `predicted` = {"gpipe": n, "1f1b": n}, the micro-batch activations rank 0 holds at its peak
    (p = 4, m = 8), against `runs` = {"gpipe": result, "1f1b": result} of `run_pipeline` on real processes:
    their "measured_peak_activations" is what each rank's executor really kept alive at once."""
    title = "peak activations on rank 0, predicted vs the real run"
    p, m = PREDICT_STAGES, PREDICT_MICROBATCHES
    if not isinstance(runs, dict) or set(runs) != {"gpipe", "1f1b"} or not all(
            isinstance(r, dict) and "measured_peak_activations" in r for r in runs.values()):
        fail(title, "runs", "needs {'gpipe': run_pipeline('gpipe', …), '1f1b': run_pipeline('1f1b', …)}: real runs")
    for name, res in runs.items():
        if (res.get("schedule_name"), res.get("world_size"), res.get("microbatches")) != (name, p, m):
            fail(title, name, f"the run must be {name} on world_size={p} with microbatches={m}")
    if not isinstance(predicted, dict) or set(predicted) != {"gpipe", "1f1b"}:
        fail(title, "predicted", f"must be a dict with the keys 'gpipe' and '1f1b', got {_one_line(predicted)}")
    for name in ("gpipe", "1f1b"):
        guess, real = predicted[name], runs[name]["measured_peak_activations"][0]
        if isinstance(guess, bool) or not isinstance(guess, int):
            fail(title, name, f"predict a whole number of micro-batches, got {_one_line(guess)}")
        if guess != real:
            fail(title, name, f"you predicted {guess}, the real run held {real}: {_WHY_PEAK[name]}"
                              + _hint(name, guess, real))
    g, o = (runs[n]["measured_peak_activations"][0] for n in ("gpipe", "1f1b"))
    print(f"{title}: ✓ GPipe {g}, 1F1B {o} micro-batches' activations, as measured: "
          f"GPipe holds {g / o:g}× as many as 1F1B on rank 0")


def _hint(name: str, guess: int, real: int) -> str:
    """The usual wrong answers, named."""
    if name == "1f1b" and guess == 1:
        return " (1F1B does not mean one micro-batch in flight: the warm-up fills the pipeline first)"
    if name == "1f1b" and guess == real - 1:
        return " (the warm-up's p - 1, plus the steady state's forward that runs before the first backward)"
    if name == "1f1b" and guess == PREDICT_MICROBATCHES:
        return " (that is GPipe's: 1F1B frees one micro-batch with each backward as it goes)"
    if name == "gpipe" and guess == PREDICT_STAGES:
        return " (p is 1F1B's bound; GPipe's grows with m)"
    return ""
