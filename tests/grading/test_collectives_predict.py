"""Predict, then run (lesson 1): a prediction of what rank 2 sends is graded against a REAL ring all-reduce's
measured bytes, and every known wrong answer is refused with its own reason."""
import dataclasses

import pytest

from simlab.grading.collectives import check_bytes_prediction
from simlab.parity.collectives import run_collective

N, NUMEL = 4, 1024  # S = 4096 B of float32, chunks of S/N = 1024 B


@pytest.fixture(scope="module")
def real():
    return run_collective("ring-all-reduce", world_size=N, numel=NUMEL)


def test_the_right_prediction_passes_against_the_real_count(real, capsys):
    assert real["bytes_sent_per_rank"][2] == 6144  # 2(N−1)/N · 4096, counted by the real rank
    check_bytes_prediction(2 * (N - 1) * 4096 // N, real, rank=2)
    out = capsys.readouterr().out
    assert out.startswith("predicted bytes sent: ✓") and "really sent 6144 B" in out


@pytest.mark.parametrize("predicted, reason", [
    (4096, "one whole buffer"),                                # S
    (3072, "only the reduce-scatter half"),                    # (N−1)/N·S
    (12288, "sent plus bytes received"),                       # 2·2(N−1)/N·S …
    (12288, "naive star's root"),                              # … which at N=4 is also (N−1)·S: both said
    (8192, "2S would be the whole buffer out twice"),
    (1024, "what one step sends"),
    (5000, "the real rank sent 6144 B"),                       # anything else: the real count and why
    ("6144", "expected a number of bytes"),
    (None, "expected a number of bytes"),
    (True, "expected a number of bytes"),
    (float("nan"), "expected a number of bytes"),
])
def test_each_wrong_answer_fails_with_its_reason(real, predicted, reason, capsys):
    with pytest.raises(AssertionError):
        check_bytes_prediction(predicted, real, rank=2)
    out = capsys.readouterr().out
    assert out.startswith("predicted bytes sent: ✗ rank 2 of 4, S = 4096 B") and reason in out, out


def test_it_is_the_real_count_that_grades(real, capsys):
    """A run whose rank 2 (really) sent something else: the closed form no longer passes, and the line says
    what the run measured instead of blaming the theory."""
    broken = dict(real, bytes_sent_per_rank=[6144, 6144, 5120, 6144])
    with pytest.raises(AssertionError):
        check_bytes_prediction(6144, broken, rank=2)
    assert "right in theory, but the real run sent 5120 B" in capsys.readouterr().out
    check_bytes_prediction(5120, broken, rank=2)  # graded against what happened, not the formula
    assert "really sent 5120 B, as you predicted" in capsys.readouterr().out


def test_wrong_inputs_to_the_check_are_named(real, capsys):
    for result, rank, reason in [("not a result", 2, "pass what run_collective"),
                                 (dict(real, name="naive-all-reduce"), 2, "pass what run_collective"),
                                 (real, 4, "the run has ranks 0..3"),
                                 (dict(real, plan=dataclasses.replace(real["plan"], chunk_sizes=(3, 3, 2, 2))), 2,
                                  "splits evenly")]:
        with pytest.raises(AssertionError):
            check_bytes_prediction(6144, result, rank=rank)
        assert reason in capsys.readouterr().out


def test_the_unanswered_placeholder_is_a_stub_not_a_wrong_answer(real):
    with pytest.raises(NotImplementedError, match="write your prediction"):
        check_bytes_prediction(..., real, rank=2)
