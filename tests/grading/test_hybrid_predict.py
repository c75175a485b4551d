"""Lesson 6's capstone, part B: the predictions of a real dp=2 × pp=2 × tp=2 run are graded against the run's own
groups and bytes — on nodes of 2 GPUs, so the lesson's grid (nodes of 4, where only PP crosses) does not give
the answer away; the TP byte count is exact, for global rank 0; a wrong answer is told the concept it missed,
never the measured number; one launch grades all three."""
import pytest

from simlab.grading import hybrid_predict
from simlab.grading.hybrid_predict import (
    GPUS_PER_NODE,
    PREDICTION_GRID,
    PREDICTION_RUN,
    check_network_prediction,
    check_tp_bytes_prediction,
)
from simlab.sim.mesh import KINDS, Mesh

TP = [147_456] * 4 + [148_992] * 4  # stage 1 (ranks 4-7) also all-reduces for the vocab-parallel loss
REAL = {"tp": TP, "dp": [54_656] * 4 + [53_888] * 4, "pp": [16_384] * 8}


def fake_run(bytes_per_rank=None, groups=None):
    mesh = Mesh(pp=PREDICTION_GRID["pp"], dp=PREDICTION_GRID["dp"], tp=PREDICTION_GRID["tp"])
    groups = groups or {k: [list(g) for g in mesh.groups(k)] for k in KINDS}
    sent = bytes_per_rank or REAL

    def run(**kw):
        assert kw == PREDICTION_RUN == {**PREDICTION_GRID, "zero": 1, "steps": 1, "hidden": 32, "microbatches": 8}
        return {"groups": groups, "bytes_sent_per_group": sent}
    return run


def test_on_nodes_of_2_the_answer_is_not_the_lessons_grid_on_nodes_of_4():
    mesh = Mesh(**PREDICTION_GRID)
    assert [k for k in KINDS if mesh.link(k, 4) == "inter-node"] == ["pp"]  # what lesson 6 prints
    assert GPUS_PER_NODE == 2 and [k for k in KINDS if mesh.link(k, GPUS_PER_NODE) == "inter-node"] == ["dp", "pp"]


@pytest.mark.parametrize("crosses", [{"dp", "pp"}, ["pp", "dp"], ("dp", "pp"), frozenset({"pp", "dp"})])
def test_the_crossing_kinds_are_a_set_and_the_busiest_the_runs(crosses, capsys):
    check_network_prediction(crosses, "tp", run=fake_run())
    out = capsys.readouterr().out
    assert out == ("3-D run prediction: ✓ across nodes of 2 GPUs (0-1, 2-3, 4-5, 6-7) the dp and pp groups cross: "
                   "[0 2] [1 3] [4 6] [5 7]; [0 4] [1 5] [2 6] [3 7]; rank 0 sends the most on its tp group\n")
    assert "147,456" not in out  # the next check's answer is not given away


@pytest.mark.parametrize("crosses", ["pp", {"pp"}, {"dp"}, {"tp", "dp", "pp"}, set()])
def test_a_wrong_set_of_crossing_kinds_gets_the_node_layout_not_the_groups(crosses, capsys):
    with pytest.raises(AssertionError):
        check_network_prediction(crosses, "tp", run=fake_run())
    out = capsys.readouterr().out
    assert out.startswith("3-D run prediction: ✗ crosses: you said ") and out.count("\n") == 1
    assert "the nodes hold ranks 0-1, 2-3, 4-5, 6-7: write each kind's groups" in out and "[0 2]" not in out


def test_a_wrong_busiest_kind_gets_what_each_kind_sends_not_the_bytes(capsys):
    with pytest.raises(AssertionError):
        check_network_prediction({"dp", "pp"}, "dp", run=fake_run())
    out = capsys.readouterr().out
    assert out.startswith("3-D run prediction: ✗ busiest: you said dp; count what each kind sends per step")
    assert not any(f"{n:,}" in out for n in (147_456, 54_656, 16_384))
    # the answer follows the run, not a fixed key: a run where DP sends most makes "dp" right
    check_network_prediction({"dp", "pp"}, "dp", run=fake_run({"tp": [1] * 8, "dp": [50] * 8, "pp": [10] * 8}))
    assert capsys.readouterr().out.endswith("rank 0 sends the most on its dp group\n")


@pytest.mark.parametrize("crosses, busiest", [("network", "tp"), (3, "tp"), ({"pp", "ib"}, "tp"), ({"pp"}, "all")])
def test_a_non_answer_is_refused_before_any_run(crosses, busiest, capsys):
    def no_run(**kw):
        pytest.fail("ran")
    with pytest.raises(AssertionError):
        check_network_prediction(crosses, busiest, run=no_run)
    assert "answer with" in capsys.readouterr().out


@pytest.mark.parametrize("answer", [147_456, 147_456.0])
def test_the_exact_byte_count_of_rank_0_passes(answer, capsys):
    check_tp_bytes_prediction(answer, run=fake_run())
    assert capsys.readouterr().out == ("3-D run, TP bytes: ✓ you said 147,456 B; rank 0 sent exactly that on its TP "
                                       "group in one step\n")


@pytest.mark.parametrize("answer, hint", [
    (148_992, "That is what a rank of the last stage sends"),  # rank 4's count: ranks 0 and 4 are not the same
    (147_456 * 1.09, "Count per micro-batch"),  # the old ±10 % window let this pass
    (147_457, "Count per micro-batch"),
    (131_072, "the vocab-parallel embedding all-reduces its output too"),
    (294_912, "A ring all-reduce over N ranks sends 2(N-1)/N of the buffer"),
    (73_728, "Check both factors for this run"),
    (36_864, "Check both factors for this run")])  # the lesson's run, unscaled
def test_any_other_byte_count_is_rejected_with_the_concept_it_missed(answer, hint, capsys):
    with pytest.raises(AssertionError):
        check_tp_bytes_prediction(answer, run=fake_run())
    out = capsys.readouterr().out
    assert out.startswith("3-D run, TP bytes: ✗ tp_bytes: you said ") and out.count("\n") == 1
    assert hint in out and "147,456" not in out


def test_the_byte_answer_follows_the_run_not_a_fixed_number(capsys):
    run = fake_run({"tp": [1000] * 8, "dp": [1] * 8, "pp": [1] * 8})
    check_tp_bytes_prediction(1000, run=run)
    with pytest.raises(AssertionError):
        check_tp_bytes_prediction(147_456, run=run)


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
        return fake_run()(**kw)
    monkeypatch.setattr(parity, "run_hybrid", once)
    monkeypatch.setattr(hybrid_predict, "_RUNS", {})
    check_network_prediction({"dp", "pp"}, "tp")
    check_tp_bytes_prediction(147_456)
    assert calls == [PREDICTION_RUN]


def test_part_b_is_importable_from_the_capstones_module():
    from simlab.grading import hybrid
    assert hybrid.check_network_prediction is check_network_prediction
    assert hybrid.check_tp_bytes_prediction is check_tp_bytes_prediction and hybrid.PREDICTION_RUN is PREDICTION_RUN
