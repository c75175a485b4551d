"""Lesson 4's repair exercise and its predict-then-run check: the right answer passes, each kind of wrong
answer fails with the line that explains it. The prediction is graded against real runs (gloo, CPU)."""
import pytest

from simlab.grading.pipeline import (BROKEN_ONE_F_ONE_B, check_peak_prediction, check_repaired_schedule)
from simlab.parity.pipeline import run_pipeline
from simlab.sim.pipeline_check import validate
from simlab.sim.schedules import gpipe, one_f_one_b


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


def _fix_only_rank(r):
    """The broken list with only rank r's slip mended."""
    out = [list(rank) for rank in BROKEN_ONE_F_ONE_B]
    out[r] = [str(a) for a in one_f_one_b(3, 4)[r]]
    return out


@pytest.mark.parametrize("schedule, reason", [
    (BROKEN_ONE_F_ONE_B, "rank 2, step 2: 2B1 comes before 2F1 (step 3): a backward needs the activations"),
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

@pytest.fixture(scope="module")
def runs():
    """GPipe and 1F1B on 4 real processes, m = 8: about a second each."""
    return {name: run_pipeline(name, world_size=4, microbatches=8, compare_torch=False) for name in ("gpipe", "1f1b")}


def test_the_real_runs_hold_what_the_lists_say(runs):
    # measured in the executor's own stash, not computed from the list: the check grades against these
    assert runs["gpipe"]["measured_peak_activations"] == [8, 8, 8, 8]
    assert runs["1f1b"]["measured_peak_activations"] == [4, 3, 2, 1]


def test_the_right_prediction_passes(runs, capsys):
    check_peak_prediction({"gpipe": 8, "1f1b": 4}, runs)
    assert capsys.readouterr().out.startswith(
        "peak activations on rank 0, predicted vs the real run: ✓ GPipe 8, 1F1B 4 micro-batches' activations, "
        "as measured: GPipe holds 2× as many as 1F1B on rank 0")


@pytest.mark.parametrize("predicted, reason", [
    ({"gpipe": 4, "1f1b": 4}, "gpipe: you predicted 4, the real run held 8: GPipe runs all m = 8 forwards"),
    ({"gpipe": 4, "1f1b": 4}, "p is 1F1B's bound; GPipe's grows with m"),
    ({"gpipe": 8, "1f1b": 1}, "1f1b: you predicted 1, the real run held 4"),
    ({"gpipe": 8, "1f1b": 1}, "does not mean one micro-batch in flight"),
    ({"gpipe": 8, "1f1b": 3}, "plus the steady state's forward that runs before the first backward"),
    ({"gpipe": 8, "1f1b": 8}, "that is GPipe's"),
    ({"gpipe": 8, "1f1b": 2}, "1f1b: you predicted 2, the real run held 4: 1F1B's rank 0 runs p - 1 = 3 warm-up"),
    ({"gpipe": 8.0, "1f1b": 4}, "gpipe: predict a whole number of micro-batches, got 8.0"),
    ({"gpipe": 8}, "must be a dict with the keys 'gpipe' and '1f1b'"),
    (8, "must be a dict with the keys"),
    ({"gpipe": None, "1f1b": None}, "gpipe: predict a whole number of micro-batches, got None"),  # the unanswered stub
])
def test_each_wrong_prediction_fails_with_its_reason(runs, predicted, reason, capsys):
    assert reason in _fails(check_peak_prediction, predicted, runs, capsys=capsys)


def test_the_prediction_is_graded_on_real_runs_of_the_asked_case(runs, capsys):
    assert "needs {'gpipe'" in _fails(check_peak_prediction, {"gpipe": 8, "1f1b": 4}, {"gpipe": runs["gpipe"]},
                                      capsys=capsys)
    swapped = {"gpipe": runs["1f1b"], "1f1b": runs["gpipe"]}
    assert "the run must be gpipe on world_size=4" in _fails(check_peak_prediction, {"gpipe": 8, "1f1b": 4},
                                                              swapped, capsys=capsys)
    simulated = {name: {"schedule_name": name, "world_size": 4, "microbatches": 8} for name in ("gpipe", "1f1b")}
    assert "real runs" in _fails(check_peak_prediction, {"gpipe": 8, "1f1b": 4}, simulated, capsys=capsys)
