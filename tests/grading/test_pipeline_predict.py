"""Lesson 4's repair exercise and its predict-then-run check: the right answer passes, each kind of wrong
answer fails with the line that explains it. The prediction is graded against real runs (gloo, CPU)."""
import pytest

from simlab.grading.pipeline import (
    BROKEN_ONE_F_ONE_B,
    PREDICT_MICROBATCHES,
    PREDICT_STAGES,
    check_peak_prediction,
    check_repaired_schedule,
)
from simlab.parity.pipeline import run_pipeline
from simlab.sim.pipeline_check import validate
from simlab.sim.pipeline_schedules import gpipe, one_f_one_b


def _fails(check, *args, capsys) -> str:
    with pytest.raises(AssertionError):
        check(*args)
    out = capsys.readouterr().out
    assert "✗" in out and "✓" not in out
    return out


# ---------------------------------------------------------------- the repair

def test_the_broken_list_is_broken_both_ways():
    problems = validate(BROKEN_ONE_F_ONE_B)
    assert any("a backward needs the activations its own forward saves" in line for line in problems)
    assert any(line.startswith("deadlock: rank 0") for line in problems)


@pytest.mark.parametrize("repair", [one_f_one_b(3, 4), [[str(a) for a in rank] for rank in one_f_one_b(3, 4)]])
def test_the_repair_passes(repair, capsys):
    check_repaired_schedule(repair)
    assert capsys.readouterr().out.startswith("repaired 1F1B schedule: ✓ valid, makespan 18 = 1F1B's")


def test_the_untouched_stub_is_an_unwritten_answer(capsys):
    """The exercise cell left as it is: NotImplementedError, like every stub, not a wrong-answer ✗."""
    with pytest.raises(NotImplementedError, match="mend the lists"):
        check_repaired_schedule([list(rank) for rank in BROKEN_ONE_F_ONE_B])
    assert capsys.readouterr().out == ""


def _fix_only_rank(r):
    """The broken list with only rank r's slip mended."""
    out = [list(rank) for rank in BROKEN_ONE_F_ONE_B]
    out[r] = [str(a) for a in one_f_one_b(3, 4)[r]]
    return out


@pytest.mark.parametrize("schedule, reason", [
    ([BROKEN_ONE_F_ONE_B[0][:-2] + ["0B3", "0B2"]] + BROKEN_ONE_F_ONE_B[1:],  # touched, not mended
     "rank 2, step 2: 2B1 comes before 2F1 (step 3): a backward needs the activations"),
    (_fix_only_rank(2), "deadlock: rank 0 is stuck at step 1 (0B0), waiting for 1B0"),
    (_fix_only_rank(0), "2B1 comes before 2F1"),
    ([_fix_only_rank(2)[0][:-1]] + _fix_only_rank(0)[1:], "missing: 0B3"),
    (gpipe(3, 4), "valid and as fast as 1F1B, but rank 0 holds 4 micro-batches' activations at once, 1F1B only 3"),
    ([[str(a) for a in rank] for rank in one_f_one_b(3, 4)[:2]], "2 action lists, the pipeline has 3 ranks"),
    ("0F0 0B0", "must be a list with one list of actions per rank"),
    ([["0F0", "0X0"]], "action='0X0': expected '<stage><F|B|I|W><microbatch>'"),
])
def test_each_wrong_repair_fails_with_its_reason(schedule, reason, capsys):
    assert reason in _fails(check_repaired_schedule, schedule, capsys=capsys)


def test_a_valid_but_slow_repair_is_told_the_makespan(capsys):
    # rank 0 keeps a one-forward warm-up and rank 1 waits for it: valid (no deadlock), but slower
    slow = [["0F0", "0B0", "0F1", "0B1", "0F2", "0B2", "0F3", "0B3"],
            ["1F0", "1B0", "1F1", "1B1", "1F2", "1B2", "1F3", "1B3"],
            [str(a) for a in one_f_one_b(3, 4)[2]]]
    assert validate(slow) == []
    out = _fails(check_repaired_schedule, slow, capsys=capsys)
    assert "valid, but the simulated makespan is 36 time units, 1F1B's is 18" in out


# ---------------------------------------------------------------- predict, then run

P, M = 3, 6  # the exercise's pipeline: not the lesson's 4 x 8, whose peaks the lesson prints


@pytest.fixture(scope="module")
def runs():
    """GPipe and 1F1B on 3 real processes, m = 6, as the check asks for them: about a second each."""
    return {name: run_pipeline(name, world_size=P, microbatches=M, global_batch=12, compare_torch=False)
            for name in ("gpipe", "1f1b")}


def replay(results, calls=None):
    """A stand-in for run_pipeline that hands back `results` (real runs made once), noting each call."""
    def run(name, **kwargs):
        (calls if calls is not None else []).append((name, kwargs))
        return results[name]
    return run


def test_the_exercise_asks_for_a_case_the_lesson_does_not_print():
    assert (PREDICT_STAGES, PREDICT_MICROBATCHES) == (P, M) != (4, 8)


def test_the_real_runs_hold_what_the_closed_forms_say(runs):
    # measured in the executor's own stash, not computed from the list: the check grades against these
    assert runs["gpipe"]["measured_peak_activations"] == [M] * P
    assert runs["1f1b"]["measured_peak_activations"] == [min(P - r, M) for r in range(P)] == [3, 2, 1]


def test_the_right_prediction_passes_and_the_check_runs_the_asked_case(runs, capsys):
    calls = []
    check_peak_prediction({"gpipe": [6, 6, 6], "1f1b": (3, 2, 1)}, replay(runs, calls))
    assert capsys.readouterr().out.startswith(
        "peak activations per rank, predicted vs the real run: ✓ GPipe [6, 6, 6], 1F1B [3, 2, 1] micro-batches' "
        "activations, as measured")
    assert [(name, kw["world_size"], kw["microbatches"]) for name, kw in calls] == [("gpipe", P, M), ("1f1b", P, M)]


@pytest.mark.parametrize("predicted, reason", [
    ({"gpipe": [3, 2, 1], "1f1b": [3, 2, 1]},
     "gpipe: you predicted [3, 2, 1], the real run held [6, 6, 6] (rank 0: 6, not 3): GPipe runs all m = 6"),
    ({"gpipe": [3, 3, 3], "1f1b": [3, 2, 1]}, "p - r is 1F1B's bound; GPipe's grows with m"),
    ({"gpipe": [6, 6, 6], "1f1b": [1, 1, 1]}, "1f1b: you predicted [1, 1, 1], the real run held [3, 2, 1]"),
    ({"gpipe": [6, 6, 6], "1f1b": [1, 1, 1]}, "does not mean one micro-batch in flight"),
    ({"gpipe": [6, 6, 6], "1f1b": [2, 1, 0]}, "plus the steady state's forward that runs before the first backward"),
    ({"gpipe": [6, 6, 6], "1f1b": [6, 6, 6]}, "that is GPipe's"),
    ({"gpipe": [6, 6, 6], "1f1b": [1, 2, 3]}, "rank 0 is the first stage: its first gradient comes back last"),
    ({"gpipe": [6, 6, 6], "1f1b": [3, 3, 3]}, "(rank 1: 2, not 3)"),
    ({"gpipe": [6, 6, 6], "1f1b": [3, 3, 3]}, "rank r warms up only p - r - 1"),
    ({"gpipe": [6, 6, 6], "1f1b": [3, 2, 2]}, "min(p - r, m) = [3, 2, 1]"),
])
def test_each_wrong_prediction_fails_with_its_reason(runs, predicted, reason, capsys):
    assert reason in _fails(check_peak_prediction, predicted, replay(runs), capsys=capsys)


@pytest.mark.parametrize("predicted, reason", [
    ({"gpipe": 6, "1f1b": [3, 2, 1]}, "gpipe: predict one whole number per rank, 3 in all (rank 0 first), got 6"),
    ({"gpipe": [6, 6], "1f1b": [3, 2, 1]}, "3 in all (rank 0 first), got [6, 6]"),
    ({"gpipe": [6.0, 6, 6], "1f1b": [3, 2, 1]}, "predict one whole number per rank"),
    ({"gpipe": [6, 6, 6], "1f1b": None}, "1f1b: predict one whole number per rank, 3 in all (rank 0 first), got None"),
    ({"gpipe": [6, 6, 6]}, "must be a dict with the keys 'gpipe' and '1f1b'"),
    (8, "must be a dict with the keys"),
])
def test_a_malformed_prediction_fails_before_any_process_starts(predicted, reason, capsys):
    calls = []
    assert reason in _fails(check_peak_prediction, predicted, replay({}, calls), capsys=capsys)
    assert calls == []


def test_the_unanswered_stub_is_not_implemented_and_starts_nothing(capsys):
    calls = []
    with pytest.raises(NotImplementedError, match="write your prediction"):
        check_peak_prediction({"gpipe": None, "1f1b": None}, replay({}, calls))
    assert calls == [] and capsys.readouterr().out == ""


def test_the_prediction_is_graded_on_real_runs_of_the_asked_case(runs, capsys):
    right = {"gpipe": [6, 6, 6], "1f1b": [3, 2, 1]}
    assert "needs the function that runs a schedule for real" in _fails(check_peak_prediction, right, runs,
                                                                        capsys=capsys)
    swapped = {"gpipe": runs["1f1b"], "1f1b": runs["gpipe"]}
    assert "the run must be gpipe on world_size=3" in _fails(check_peak_prediction, right, replay(swapped),
                                                              capsys=capsys)
    simulated = {name: {"schedule_name": name, "world_size": P, "microbatches": M} for name in ("gpipe", "1f1b")}
    assert "a real run" in _fails(check_peak_prediction, right, replay(simulated), capsys=capsys)


def test_the_grade_follows_the_measurement_not_the_list(runs, capsys):
    """Were a rank to hold one more micro-batch than the list says (a leak), the same right-by-the-list
    prediction would fail: the check reads what the executor counted."""
    leaky = runs | {"1f1b": runs["1f1b"] | {"measured_peak_activations": [4, 2, 1]}}
    out = _fails(check_peak_prediction, {"gpipe": [6, 6, 6], "1f1b": [3, 2, 1]}, replay(leaky), capsys=capsys)
    assert "the real run held [4, 2, 1] (rank 0: 4, not 3)" in out
