"""Predict, then run (lesson 1): a prediction of what rank 2 sends in a ring all-reduce of an UNEVEN buffer is
graded against a REAL run's measured bytes, and every known wrong answer is refused with its own reason —
never with the right count, so a copied number cannot pass and a wrong one cannot learn the answer.

The expected numbers are worked out by hand here, not copied from the code: 11 float32 on 4 ranks make
chunks of 3, 3, 3, 2 elements = 12, 12, 12, 8 B. In the reduce-scatter rank r sends every chunk but chunk r;
in the all-gather every chunk but chunk r+1. So rank 0 sends (12+12+8) + (12+12+8) = 64 B, rank 1
(12+12+8) + (12+12+8) = 64, rank 2 (12+12+8) + (12+12+12) = 68, rank 3 (12+12+12) + (12+12+8) = 68.
Rank 2's halves differ (32 and 36 B), so doubling either half is wrong, and lesson 1 prints neither 68 nor
34 (its uneven tables are 10 float32: chunks of 3, 3, 2, 2)."""
import pytest

from simlab.grading.collectives import check_bytes_prediction
from simlab.parity.collectives import run_collective

N, NUMEL = 4, 11  # S = 44 B of float32
RIGHT = 68  # rank 2
BY_HAND = [64, 64, RIGHT, 68]


@pytest.fixture(scope="module")
def real():
    return run_collective("ring-all-reduce", world_size=N, numel=NUMEL)


def test_the_right_prediction_passes_against_the_real_count(real, capsys):
    assert real["bytes_sent_per_rank"] == BY_HAND  # counted by the real ranks
    check_bytes_prediction(RIGHT, real, rank=2)
    out = capsys.readouterr().out
    assert out.startswith("predicted bytes sent: ✓") and "really sent 68 B (32 B in the reduce-scatter, " \
        "36 B in the all-gather)" in out


@pytest.mark.parametrize("predicted, reasons", [
    (66, ["2(N−1)/N·S is the average over ranks",
          "every chunk but chunk 2 in the reduce-scatter and every chunk but chunk 3 in the all-gather"]),
    (64, ["counts the reduce-scatter half twice", "64 B is what rank 0 sends", "64 B is what rank 1 sends"]),
    (72, ["counts the all-gather half twice"]),
    (32, ["only the reduce-scatter half"]),
    (36, ["only the all-gather half"]),
    (132, ["sent plus bytes received", "naive star's root"]),            # 68 + 64 from rank 1 = (N−1)·S
    (44, ["one whole buffer"]),                                        # S
    (88, ["2S would be the whole buffer out twice"]),
    (12, ["one chunk"]), (8, ["one chunk"]),
    (70, ["not what rank 2 sends", "count its chunks", "the chunks hold 3, 3, 3, 2 elements of 4 B"]),
    ("68", ["expected a number of bytes"]),
    (None, ["expected a number of bytes"]),
    (True, ["expected a number of bytes"]),
    (float("nan"), ["expected a number of bytes"]),
])
def test_each_wrong_answer_fails_with_its_reason_not_the_answer(real, predicted, reasons, capsys):
    with pytest.raises(AssertionError):
        check_bytes_prediction(predicted, real, rank=2)
    out = capsys.readouterr().out
    assert out.startswith("predicted bytes sent: ✗ rank 2 of 4, S = 44 B"), out
    for reason in reasons:
        assert reason in out, (reason, out)
    if predicted != "68":
        assert "68" not in out and "34" not in out, out  # neither the answer nor its half


def test_an_even_buffer_has_no_average_to_confuse(capsys):
    """S = 4096 B on 4 ranks: every rank sends 2(N−1)/N·S = 6144 B, which passes; 3072 is one half."""
    even = run_collective("ring-all-reduce", world_size=4, numel=1024)
    check_bytes_prediction(2 * 3 * 4096 // 4, even, rank=2)
    assert "really sent 6144 B" in capsys.readouterr().out
    with pytest.raises(AssertionError):
        check_bytes_prediction(3072, even, rank=2)
    out = capsys.readouterr().out
    assert "only the reduce-scatter half" in out and "average" not in out and "what rank" not in out


def test_it_is_the_real_count_that_grades(real, capsys):
    """A run whose rank 2 (really) sent something else: the plan's count no longer passes, and the line says
    what the run measured instead of blaming the theory."""
    broken = dict(real, bytes_sent_per_rank=[64, 64, 52, 68])
    with pytest.raises(AssertionError):
        check_bytes_prediction(RIGHT, broken, rank=2)
    assert "right in theory, but the real run sent 52 B" in capsys.readouterr().out  # said only to a right answer
    check_bytes_prediction(52, broken, rank=2)  # graded against what happened, not the formula
    out = capsys.readouterr().out
    assert "really sent 52 B, as you predicted" in out and "reduce-scatter" not in out  # no halves that do not add up


def test_wrong_inputs_to_the_check_are_named(real, capsys):
    for result, rank, reason in [("not a result", 2, "pass what run_collective"),
                                 (dict(real, name="naive-all-reduce"), 2, "pass what run_collective"),
                                 (real, 4, "the run has ranks 0..3")]:
        with pytest.raises(AssertionError):
            check_bytes_prediction(RIGHT, result, rank=rank)
        assert reason in capsys.readouterr().out


def test_the_unanswered_placeholder_is_a_stub_not_a_wrong_answer(real):
    with pytest.raises(NotImplementedError, match="write your prediction"):
        check_bytes_prediction(..., real, rank=2)
