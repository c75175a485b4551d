"""Lesson 2's predict-then-run check: the right answer passes; each kind of wrong answer fails with its reason.

The 'real' result is a real 4-process DDP run, made once for the module (about a second)."""
import pytest

from simlab.grading.data_parallel import PREDICT_CAP_BYTES, check_ddp_prediction
from simlab.parity.data_parallel import run_ddp


@pytest.fixture(scope="module")
def real():
    return run_ddp(world_size=4, steps=1, bucket_cap_mb=PREDICT_CAP_BYTES / 2**20, compare_torch=False)


def test_the_real_run_is_what_the_question_says(real):
    assert real["param_numels"] == [512, 32, 1024, 32, 1024, 32, 128, 4]  # the sizes the question lists
    assert len(real["buckets"]) == 3 and real["bytes_sent_per_rank"] == [16728] * 4


def test_right_answer_passes(real, capsys):
    check_ddp_prediction(3, 2 * 3 * 11152 // 4, real)
    assert capsys.readouterr().out.startswith("DDP prediction: ✓ 3 buckets and 16,728 bytes")


@pytest.mark.parametrize("buckets, nbytes, reason", [
    (2, 16728, "that is torch's rule"),
    (1, 16728, "predicted 1 bucket: the real run formed 3: one bucket would need the whole model"),
    (8, 16728, "a bucket packs several tensors"),
    (5, 16728, "walk the tensors last to first"),
    (3, 11152, "that is the model once"),
    (3, 22304, "2x the model is the limit for many ranks"),
    (3, 33456, "that is DP's hub"),
    (3, 16000, "sum 2(N-1)/N of each bucket's bytes"),
    (3.0, 16728, "write a whole number"),
    (3, "16728", "write a whole number"),
])
def test_each_wrong_answer_fails_with_its_reason(real, capsys, buckets, nbytes, reason):
    with pytest.raises(AssertionError):
        check_ddp_prediction(buckets, nbytes, real)
    out = capsys.readouterr().out
    assert out.startswith("DDP prediction: ✗") and reason in out, out


def test_an_unanswered_prediction_is_the_exercise_stub(real):
    with pytest.raises(NotImplementedError, match="set predicted_buckets"):
        check_ddp_prediction(None, None, real)


def test_the_reasons_follow_the_real_run_not_a_copy(real):
    """A different world size changes the right bytes: the check reads them from the run it is given."""
    two = dict(real, world_size=2, bytes_sent_per_rank=[11152, 11152])
    check_ddp_prediction(3, 11152, two)  # 2(N-1)/N = 1 for N = 2: once the model is right there
    with pytest.raises(AssertionError):
        check_ddp_prediction(3, 16728, two)
