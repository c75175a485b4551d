"""Lesson 4's repair exercise and its predict-then-run check: the right answer passes, each kind of wrong
answer fails with the line that explains it. The prediction is graded against real runs (gloo, CPU)."""
import pytest

from simlab.grading.pipeline import (
    BROKEN_ONE_F_ONE_B,
    PREDICT_CHUNKS,
    PREDICT_MICROBATCHES,
    PREDICT_STAGES,
    PREDICTED,
    check_peak_prediction,
    check_repaired_schedule,
)
from simlab.parity.pipeline import run_pipeline
from simlab.sim.pipeline import peak_activations
from simlab.sim.pipeline_check import validate
from simlab.sim.pipeline_schedules import gpipe, make_schedule, one_f_one_b


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

P, M, V = 3, 6, 2  # the exercise's pipeline: not the lesson's 4 x 8, whose peaks the lesson prints
RIGHT = {"interleaved": [8, 6, 4], "zero-bubble": [3, 3, 3]}


@pytest.fixture(scope="module")
def runs():
    """Interleaved (v = 2) and ZB-H1 on 3 real processes, m = 6, as the check asks for them: about a second each."""
    return {name: run_pipeline(name, world_size=P, microbatches=M, chunks=V if name == "interleaved" else 1,
                               global_batch=12, compare_torch=False) for name in ("interleaved", "zero-bubble")}


def replay(results, calls=None):
    """A stand-in for run_pipeline that hands back `results` (real runs made once), noting each call."""
    def run(name, **kwargs):
        (calls if calls is not None else []).append((name, kwargs))
        return results[name]
    return run


def test_the_exercise_asks_for_a_case_nothing_before_it_prints():
    """Not the lesson's p = 4, m = 8 (whose interleaved and ZB-H1 peaks its section 6 prints), and not 1F1B,
    whose peaks the exercise's own repair check prints for p = 3 and whose min(p - r, m) its intro states."""
    assert (PREDICT_STAGES, PREDICT_MICROBATCHES, PREDICT_CHUNKS) == (P, M, V) and (P, M) != (4, 8)
    assert PREDICTED == ("interleaved", "zero-bubble")
    shown = [peak_activations(one_f_one_b(P, 4)), peak_activations(one_f_one_b(P, M)), [M] * P, [V * M] * P]
    assert all(peaks not in shown for peaks in RIGHT.values())  # 1F1B's (the repair check's) and GPipe's


def test_the_real_runs_hold_what_the_lessons_rules_say(runs):
    """Measured in the executor's own stash, not computed from the list: the check grades against these. The
    lesson's rules: interleaved rank r warms up (v - 1)·p + 2(p - r - 1) chunk forwards and runs one more
    before its first backward; ZB-H1's rank r holds 1F1B's p - r plus the r weight gradients it defers."""
    assert runs["interleaved"]["measured_peak_activations"] == [(V - 1) * P + 2 * (P - r - 1) + 1 for r in range(P)] \
        == RIGHT["interleaved"] == peak_activations(make_schedule("interleaved", P, M, V))
    assert runs["zero-bubble"]["measured_peak_activations"] == [(P - r) + r for r in range(P)] \
        == RIGHT["zero-bubble"] == peak_activations(make_schedule("zero-bubble", P, M))


def test_the_right_prediction_passes_and_the_check_runs_the_asked_case(runs, capsys):
    calls = []
    check_peak_prediction({"interleaved": [8, 6, 4], "zero-bubble": (3, 3, 3)}, replay(runs, calls))
    assert capsys.readouterr().out.startswith(
        "peak activations per rank, predicted vs the real run: ✓ interleaved [8, 6, 4] chunk units, ZB-H1 [3, 3, 3] "
        "micro-batches, as measured")
    assert [(name, kw["world_size"], kw["microbatches"], kw["chunks"]) for name, kw in calls] == [
        ("interleaved", P, M, V), ("zero-bubble", P, M, 1)]


@pytest.mark.parametrize("name, guess, reason", [
    ("interleaved", [3, 2, 1], "that is 1F1B's"),
    ("interleaved", [12, 12, 12], "that is every forward of the step, as GPipe holds them"),
    ("interleaved", [6, 6, 6], "that is every forward of the step"),
    ("interleaved", [6, 4, 2], "not v times 1F1B's"),
    ("interleaved", [7, 5, 3], "the warm-up, plus the steady state's forward"),
    ("interleaved", [4, 6, 8], "rank 0 is the first stage"),
    ("interleaved", [8, 6, 5], "rank 2 really held fewer than that: count chunk units"),
    ("interleaved", [7, 6, 4], "rank 0 really held more than that: count chunk units"),
    ("zero-bubble", [3, 2, 1], "that is 1F1B's"),
    ("zero-bubble", [6, 6, 6], "as GPipe holds them"),
    ("zero-bubble", [1, 2, 3], "rank 0 is the first stage"),
    ("zero-bubble", [3, 3, 2], "rank 2 really held more than that: a micro-batch's activations stay until its "
                               "weight gradient W"),
])
def test_each_wrong_prediction_gets_the_concept_and_never_the_numbers(runs, name, guess, reason, capsys):
    """A failed prediction under nbval shows its ✗ line: with the measured peaks in it, copying them would pass."""
    predicted = dict(RIGHT) | {name: guess}
    out = _fails(check_peak_prediction, predicted, replay(runs), capsys=capsys)
    assert f"✗ {name}: you predicted {guess}; " in out and reason in out, out
    assert str(RIGHT[name]) not in out and "held [" not in out


@pytest.mark.parametrize("predicted, reason", [
    ({"interleaved": 8, "zero-bubble": [3, 3, 3]}, "interleaved: predict one whole number per rank, 3 in all (rank 0 "
                                                   "first), got 8"),
    ({"interleaved": [8, 6], "zero-bubble": [3, 3, 3]}, "3 in all (rank 0 first), got [8, 6]"),
    ({"interleaved": [8.0, 6, 4], "zero-bubble": [3, 3, 3]}, "predict one whole number per rank"),
    ({"interleaved": [8, 6, 4], "zero-bubble": None}, "zero-bubble: predict one whole number per rank, 3 in all "
                                                      "(rank 0 first), got None"),
    ({"interleaved": [8, 6, 4]}, "must be a dict with the keys 'interleaved' and 'zero-bubble'"),
    ({"gpipe": [6, 6, 6], "1f1b": [3, 2, 1]}, "must be a dict with the keys 'interleaved' and 'zero-bubble'"),
    (8, "must be a dict with the keys"),
])
def test_a_malformed_prediction_fails_before_any_process_starts(predicted, reason, capsys):
    calls = []
    assert reason in _fails(check_peak_prediction, predicted, replay({}, calls), capsys=capsys)
    assert calls == []


def test_the_unanswered_stub_is_not_implemented_and_starts_nothing(capsys):
    calls = []
    with pytest.raises(NotImplementedError, match="write your prediction"):
        check_peak_prediction({"interleaved": None, "zero-bubble": None}, replay({}, calls))
    assert calls == [] and capsys.readouterr().out == ""


def test_the_prediction_is_graded_on_real_runs_of_the_asked_case(runs, capsys):
    assert "needs the function that runs a schedule for real" in _fails(check_peak_prediction, RIGHT, runs,
                                                                        capsys=capsys)
    swapped = {"interleaved": runs["zero-bubble"], "zero-bubble": runs["interleaved"]}
    assert "the run must be interleaved on world_size=3 with microbatches=6 and chunks=2" in _fails(
        check_peak_prediction, RIGHT, replay(swapped), capsys=capsys)
    one_chunk = runs | {"interleaved": runs["interleaved"] | {"chunks": 1}}
    assert "and chunks=2" in _fails(check_peak_prediction, RIGHT, replay(one_chunk), capsys=capsys)
    simulated = {name: {"schedule_name": name, "world_size": P, "microbatches": M, "chunks": V}
                 for name in ("interleaved", "zero-bubble")}
    assert "a real run" in _fails(check_peak_prediction, RIGHT, replay(simulated), capsys=capsys)


def test_the_grade_follows_the_measurement_not_the_list(runs, capsys):
    """Were a rank to hold one more micro-batch than the list says (a leak), the same right-by-the-list
    prediction would fail: the check reads what the executor counted."""
    leaky = runs | {"zero-bubble": runs["zero-bubble"] | {"measured_peak_activations": [4, 3, 3]}}
    out = _fails(check_peak_prediction, RIGHT, replay(leaky), capsys=capsys)
    assert "zero-bubble: you predicted [3, 3, 3]; rank 0 really held more than that" in out
