"""Predict, then run (lesson 1): a prediction of what rank 2 sends in a ring all-reduce of an UNEVEN buffer is
graded against a REAL run's measured bytes, and every known wrong answer is refused with its own reason.

The expected numbers are worked out by hand here, not copied from the code: 10 float32 on 4 ranks make
chunks of 3, 3, 2, 2 elements = 12, 12, 8, 8 B. In the reduce-scatter rank r sends every chunk but chunk r;
in the all-gather every chunk but chunk r+1. So rank 0 sends (12+8+8) + (12+8+8) = 56 B, rank 1
(12+8+8) + (12+12+8) = 60, rank 2 (12+12+8) + (12+12+8) = 64, rank 3 (12+12+8) + (12+8+8) = 60."""
import pytest

from simlab.grading.collectives import check_bytes_prediction
from simlab.parity.collectives import run_collective

N, NUMEL = 4, 10  # S = 40 B of float32
BY_HAND = [56, 60, 64, 60]


@pytest.fixture(scope="module")
def real():
    return run_collective("ring-all-reduce", world_size=N, numel=NUMEL)


def test_the_right_prediction_passes_against_the_real_count(real, capsys):
    assert real["bytes_sent_per_rank"] == BY_HAND  # counted by the real ranks
    check_bytes_prediction(64, real, rank=2)
    out = capsys.readouterr().out
    assert out.startswith("predicted bytes sent: ✓") and "really sent 64 B (32 B in the reduce-scatter, " \
        "32 B in the all-gather)" in out


@pytest.mark.parametrize("predicted, reasons", [
    (60, ["2(N−1)/N·S is the average over ranks", "is what rank 1 sends", "is what rank 3 sends",
          "every chunk but chunk 2 in the reduce-scatter and every chunk but chunk 3 in the all-gather"]),
    (56, ["56 B is what rank 0 sends"]),
    (32, ["only the reduce-scatter half", "only the all-gather half"]),  # 32 B each, here
    (124, ["sent plus bytes received"]),                               # 64 sent + 60 received from rank 1
    (40, ["one whole buffer"]),                                        # S
    (120, ["naive star's root"]),                                      # (N−1)·S
    (80, ["2S would be the whole buffer out twice"]),
    (12, ["one chunk"]), (8, ["one chunk"]),
    (70, ["the real rank sent 64 B", "32 B + 32 B"]),                  # anything else: the real count and why
    ("64", ["expected a number of bytes"]),
    (None, ["expected a number of bytes"]),
    (True, ["expected a number of bytes"]),
    (float("nan"), ["expected a number of bytes"]),
])
def test_each_wrong_answer_fails_with_its_reason(real, predicted, reasons, capsys):
    with pytest.raises(AssertionError):
        check_bytes_prediction(predicted, real, rank=2)
    out = capsys.readouterr().out
    assert out.startswith("predicted bytes sent: ✗ rank 2 of 4, S = 40 B"), out
    for reason in reasons:
        assert reason in out, (reason, out)


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
    broken = dict(real, bytes_sent_per_rank=[56, 60, 52, 60])
    with pytest.raises(AssertionError):
        check_bytes_prediction(64, broken, rank=2)
    assert "right in theory, but the real run sent 52 B" in capsys.readouterr().out
    check_bytes_prediction(52, broken, rank=2)  # graded against what happened, not the formula
    out = capsys.readouterr().out
    assert "really sent 52 B, as you predicted" in out and "reduce-scatter" not in out  # no halves that do not add up


def test_wrong_inputs_to_the_check_are_named(real, capsys):
    for result, rank, reason in [("not a result", 2, "pass what run_collective"),
                                 (dict(real, name="naive-all-reduce"), 2, "pass what run_collective"),
                                 (real, 4, "the run has ranks 0..3")]:
        with pytest.raises(AssertionError):
            check_bytes_prediction(64, result, rank=rank)
        assert reason in capsys.readouterr().out


def test_the_unanswered_placeholder_is_a_stub_not_a_wrong_answer(real):
    with pytest.raises(NotImplementedError, match="write your prediction"):
        check_bytes_prediction(..., real, rank=2)
