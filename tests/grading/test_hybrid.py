"""Lesson 6's capstone checks: a plan passes only if it fits and is within 10 % of the advisor's best, a failing
plan is told why in numbers, and the run predictions are checked against the run's own groups and bytes —
one run for all of them."""
import pytest

from simlab.grading import hybrid
from simlab.grading.hybrid import (
    BUDGETS,
    BYTES_WITHIN,
    GPUS_PER_NODE,
    PREDICTION_GRID,
    PREDICTION_RUN,
    WITHIN,
    check_budget_plan,
    check_network_prediction,
    check_tp_bytes_prediction,
)
from simlab.sim.advisor import search
from simlab.sim.hybrid import Plan
from simlab.sim.mesh import KINDS, Mesh
from simlab.sim.model import PRESETS


def best_and_others(key):
    b = BUDGETS[key]
    return search(PRESETS[b.model], b.cluster(), b.global_batch, top=400)["candidates"]


@pytest.mark.parametrize("key", BUDGETS)
def test_the_best_plan_and_any_within_10_percent_pass_and_a_slower_one_fails(key, capsys):
    ranked = best_and_others(key)
    best = ranked[0]["step_seconds"]
    close = [c for c in ranked if c["step_seconds"] <= best * (1 + WITHIN)]
    far = [c for c in ranked if c["step_seconds"] > best * (1 + WITHIN)]
    for c in (close[0], close[-1]):
        check_budget_plan(key, Plan(**c["config"]))
        assert capsys.readouterr().out.startswith(f"budget {key!r}: ✓")
    assert far, "the ranked list reaches past 10 %"
    with pytest.raises(AssertionError):
        check_budget_plan(key, Plan(**far[0]["config"]))
    out = capsys.readouterr().out
    ratio = far[0]["step_seconds"] / best
    assert "✗ too slow: " in out and f"is {ratio:.2f}× the best plan's {best:.3g} s" in out


def test_a_plan_that_does_not_fit_is_told_its_bytes(capsys):
    with pytest.raises(AssertionError):
        check_budget_plan("70b-ethernet", Plan(dp=64))
    out = capsys.readouterr().out
    assert out.startswith("budget '70b-ethernet': ✗ does not fit: ") and "> 79 GB usable" in out
    assert all(f"{part} " in out for part in ("params", "grads", "optimizer", "activations"))
    with pytest.raises(AssertionError):
        check_budget_plan("7b-workstation", Plan(dp=8, zero=3, offload=True, microbatch=2))
    assert "the host holds" in capsys.readouterr().out  # Offload: the host's share is said too


@pytest.mark.parametrize("key, plan, message", [
    ("70b-ethernet", "tp=8", "expected a simlab.sim.hybrid.Plan"),
    ("70b-ethernet", Plan(tp=3, dp=2), "tp*pp*dp = 6 must use all gpus=64"),
    ("70b-ethernet", Plan(tp=8, pp=8, offload=True), "offload=True: needs zero 2 or 3"),
    ("moon", Plan(), "not one of")])
def test_bad_answers_are_one_line(key, plan, message, capsys):
    with pytest.raises(AssertionError):
        check_budget_plan(key, plan)
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "✗" in out and message in out


def fake_run(bytes_rank0, groups=None):
    mesh = Mesh(pp=PREDICTION_GRID["pp"], dp=PREDICTION_GRID["dp"], tp=PREDICTION_GRID["tp"])
    groups = groups or {k: [list(g) for g in mesh.groups(k)] for k in KINDS}

    def run(**kw):
        assert kw == PREDICTION_RUN == {**PREDICTION_GRID, "zero": 1, "steps": 1, "hidden": 32, "microbatches": 8}
        return {"groups": groups, "bytes_sent_per_group": {k: [bytes_rank0[k]] * 8 for k in KINDS}}
    return run


def test_the_predictions_are_checked_against_the_runs_groups_and_bytes(capsys):
    run = fake_run({"tp": 30, "dp": 20, "pp": 10})
    check_network_prediction("pp", "tp", run=run)
    assert capsys.readouterr().out.startswith("3-D run prediction: ✓ the pp groups ([0 4] [1 5] [2 6] [3 7]) cross")
    with pytest.raises(AssertionError):
        check_network_prediction("dp", "tp", run=run)
    assert "the run's dp groups are [0 2] [1 3] [4 6] [5 7], all inside a node" in capsys.readouterr().out
    with pytest.raises(AssertionError):
        check_network_prediction("pp", "dp", run=run)
    assert "tp carries the most" in capsys.readouterr().out
    # the answer follows the run, not a fixed key: a run where DP sends most makes "dp" right
    check_network_prediction("pp", "dp", run=fake_run({"tp": 1, "dp": 50, "pp": 10}))
    assert capsys.readouterr().out.endswith("dp the most\n")


def test_a_non_answer_is_refused_before_any_run(capsys):
    def no_run(**kw):
        pytest.fail("ran")
    with pytest.raises(AssertionError):
        check_network_prediction("network", "tp", run=no_run)
    assert "answer with one of 'tp', 'dp', 'pp'" in capsys.readouterr().out
    assert GPUS_PER_NODE * 2 == 8


@pytest.mark.parametrize("answer", [147_456, 147_456.0, 147_456 * (1 + 0.99 * BYTES_WITHIN),
                                    147_456 * (1 - 0.99 * BYTES_WITHIN)])
def test_a_byte_count_within_10_percent_of_the_measured_one_passes(answer, capsys):
    check_tp_bytes_prediction(answer, run=fake_run({"tp": 147_456, "dp": 54_656, "pp": 16_384}))
    out = capsys.readouterr().out
    assert out.startswith("3-D run, TP bytes: ✓ you said") and "rank 0 sent 147,456 B on its TP group" in out


@pytest.mark.parametrize("answer, ratio", [(131_072, "0.89"), (36_864, "0.25"), (73_728, "0.50"), (294_912, "2.00")])
def test_a_byte_count_off_by_more_is_told_the_measured_bytes_and_why(answer, ratio, capsys):
    # 131,072: forgot the embedding's all-reduce; 36,864: the lesson's run, unscaled; 73,728: scaled once
    with pytest.raises(AssertionError):
        check_tp_bytes_prediction(answer, run=fake_run({"tp": 147_456, "dp": 54_656, "pp": 16_384}))
    out = capsys.readouterr().out
    assert out.startswith("3-D run, TP bytes: ✗ tp_bytes: you said") and out.count("\n") == 1
    assert f"rank 0 sent 147,456 B on its TP group per step (yours is {ratio}× that)" in out


def test_the_byte_answer_follows_the_run_not_a_fixed_number(capsys):
    check_tp_bytes_prediction(1000, run=fake_run({"tp": 1000, "dp": 1, "pp": 1}))
    with pytest.raises(AssertionError):
        check_tp_bytes_prediction(147_456, run=fake_run({"tp": 1000, "dp": 1, "pp": 1}))


@pytest.mark.parametrize("answer", [None, "147456", -5, 0, float("nan"), float("inf"), True])
def test_a_byte_answer_that_is_not_a_number_is_refused_before_any_run(answer, capsys):
    def no_run(**kw):
        pytest.fail("ran")
    with pytest.raises(AssertionError):
        check_tp_bytes_prediction(answer, run=no_run)
    assert "answer with a positive number of bytes" in capsys.readouterr().out


def test_both_predictions_grade_one_launch_of_the_real_run(monkeypatch, capsys):
    import simlab.parity.hybrid as parity
    calls = []

    def once(**kw):
        calls.append(kw)
        return fake_run({"tp": 147_456, "dp": 54_656, "pp": 16_384})(**kw)
    monkeypatch.setattr(parity, "run_hybrid", once)
    monkeypatch.setattr(hybrid, "_RUNS", {})
    check_network_prediction("pp", "tp")
    check_tp_bytes_prediction(147_456)
    assert calls == [PREDICTION_RUN]
