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
    (3, 33456, "that is DP's hub"),                         # (N−1)·model …
    (3, 33456, "bytes sent plus bytes received"),           # … = 2 · 2(N−1)/N·model at N = 4: both said
    (3, 8364, "only the reduce-scatter half"),              # (N−1)/N · 11,152
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


# ---- the bucketing check: each kind of mistake is named, not only "expected …" -------------------

def _grade(capsys, assign, ready=None):
    from simlab.grading.data_parallel import check_bucketing
    from simlab.sim.data_parallel_buckets import BucketReadiness
    with pytest.raises(AssertionError):
        check_bucketing(assign, ready or BucketReadiness)
    out = capsys.readouterr().out
    assert out.startswith("DDP bucketing: ✗"), out
    return out


def _pack(order, sizes, cap, closes_at_cap=False):
    """Pack `order` into buckets by hand: simlab's rule, or torch's (close once the cap is reached)."""
    buckets, current, used = [], [], 0
    for i in order:
        if current and not closes_at_cap and used + sizes[i] > cap:
            buckets, current, used = buckets + [current], [], 0
        current, used = current + [i], used + sizes[i]
        if closes_at_cap and used >= cap:
            buckets, current, used = buckets + [current], [], 0
    return buckets + ([current] if current else [])


@pytest.mark.parametrize("assign, reason", [
    (lambda sizes, cap: None, "return a list of buckets"),
    (lambda sizes, cap: _pack(range(len(sizes)), sizes, cap), "walk the parameters last to first"),
    (lambda sizes, cap: _pack(reversed(range(len(sizes))), sizes, cap, closes_at_cap=True), "torch's rule"),
    (lambda sizes, cap: [list(reversed(range(len(sizes))))], "over the cap"),
    (lambda sizes, cap: [[]] + _pack(reversed(range(len(sizes))), sizes, cap), "empty one"),
    (lambda sizes, cap: _pack(reversed(range(len(sizes) - 1)), sizes, cap), "exactly one bucket"),
])
def test_each_bucketing_mistake_gets_its_reason(capsys, assign, reason):
    assert reason in _grade(capsys, assign)


def test_each_launch_mistake_gets_its_reason(capsys):
    from simlab.sim.data_parallel_buckets import BucketReadiness, assign_buckets

    class Forgets(BucketReadiness):  # no return statement
        def mark_ready(self, p):
            super().mark_ready(p)

    class Eager(BucketReadiness):  # launches a full bucket even if an earlier one still waits
        def mark_ready(self, p):
            b = self.bucket_of[p]
            self.pending[b] -= 1
            return [b] if self.pending[b] == 0 else []

    class Early(BucketReadiness):  # counts a bucket as full as soon as its first gradient arrives
        def mark_ready(self, p):
            b = self.bucket_of[p]
            if self.pending[b] == 0:  # a later gradient of a bucket already counted as full
                return []
            self.pending[b] = 1
            return super().mark_ready(p)

    for ready, reason in [(Forgets, "returned None"), (Eager, "in bucket order"),
                          (Early, "before all of its gradients")]:
        out = _grade(capsys, assign_buckets, ready)
        assert "launches differ" in out and reason in out, (ready.__name__, out)
