"""Lesson 2's predict-then-run check: the right answer passes; each kind of wrong answer fails with its reason,
and no ✗ line says the measured numbers (a copied number must not pass, a wrong one must not learn the answer).

The 'real' result is a real 3-process DDP run of an MLP the lesson never runs, made once for the module. By hand:
tensors of [1152, 96, 2304, 96, 576, 24] bytes (4,248 in all) under a 1,200-byte cap, last first: 24 + 576 + 96,
then 2,304 alone (over the cap), then 96, then 1,152 (together 1,248 > 1,200) -> 4 buckets; every bucket is a
multiple of 3 elements, so every rank sends 2·2/3 · 4,248 = 5,664 bytes. Lesson 2 prints 4-rank counts only."""
import re

import pytest
from learner_answers import BucketReadiness  # tests/learner_answers.py: right answers written out
from notebook_cells import texts  # tests/notebook_cells.py: one reader of stored notebooks

from simlab.grading.data_parallel import (
    PREDICT_BATCH,
    PREDICT_CAP_BYTES,
    PREDICT_SIZES,
    PREDICT_WORLD_SIZE,
    check_ddp_prediction,
)
from simlab.parity.data_parallel import run_ddp

BUCKETS, SENT = 4, 5664


@pytest.fixture(scope="module")
def real():
    return run_ddp(world_size=PREDICT_WORLD_SIZE, steps=1, global_batch=PREDICT_BATCH, sizes=PREDICT_SIZES,
                   bucket_cap_mb=PREDICT_CAP_BYTES / 2**20, compare_torch=False)


def test_the_real_run_is_what_the_question_says(real):
    assert [4 * k for k in real["param_numels"]] == [1152, 96, 2304, 96, 576, 24]  # the sizes the question lists
    assert real["buckets"] == [[5, 4, 3], [2], [1], [0]] and real["bytes_sent_per_rank"] == [SENT] * 3


def test_right_answer_passes(real, capsys):
    check_ddp_prediction(BUCKETS, 2 * 2 * 4248 // 3, real)
    assert capsys.readouterr().out.startswith("DDP prediction: ✓ 4 buckets and 5,664 bytes")


@pytest.mark.parametrize("buckets, nbytes, reason", [
    (2, SENT, "that is torch's rule"),
    (1, SENT, "predicted 1 bucket: not the number of buckets the real run formed: one bucket would need the whole "
              "model (4,248 bytes) under the 1,200-byte cap"),
    (6, SENT, "a bucket packs several tensors"),
    (3, SENT, "walk the tensors last to first"),             # the tiny MLP's old answer, or [1, 0] together
    (BUCKETS, 4248, "that is the model once"),
    (BUCKETS, 8496, "2x the model is the limit for many ranks"),
    (BUCKETS, 8496, "that is DP's hub"),                       # (N−1)·model = 2·model at N = 3: both said
    (BUCKETS, 2832, "only the reduce-scatter half"),           # (N−1)/N · 4,248
    (BUCKETS, 11328, "bytes sent plus bytes received"),
    (BUCKETS, 6372, "2(N-1)/N of the model for N=4; this run has N=3 ranks"),  # lesson 2's factor, 3/2
    (BUCKETS, 16728, "sum 2(N-1)/N of each bucket's bytes"),   # the lesson's tiny MLP at N = 4
    (4.0, SENT, "write a whole number"),
    (BUCKETS, "5664", "write a whole number"),
])
def test_each_wrong_answer_fails_with_its_reason_not_the_answer(real, capsys, buckets, nbytes, reason):
    with pytest.raises(AssertionError):
        check_ddp_prediction(buckets, nbytes, real)
    out = capsys.readouterr().out
    assert out.startswith("DDP prediction: ✗") and reason in out, out
    if buckets != BUCKETS:
        assert not re.search(r"\b4 buckets?\b|formed 4|formed: 4", out), out
    assert "5,664" not in out and "5664" not in out.replace("'5664'", ""), out


def test_an_unanswered_prediction_is_the_exercise_stub(real):
    with pytest.raises(NotImplementedError, match="set predicted_buckets"):
        check_ddp_prediction(None, None, real)


def test_the_reasons_follow_the_real_run_not_a_copy(real):
    """A different world size changes the right bytes: the check reads them from the run it is given."""
    two = dict(real, world_size=2, bytes_sent_per_rank=[4248, 4248])
    check_ddp_prediction(BUCKETS, 4248, two)  # 2(N-1)/N = 1 for N = 2: once the model is right there
    with pytest.raises(AssertionError):
        check_ddp_prediction(BUCKETS, SENT, two)


@pytest.mark.parametrize("path, before", [(f"{folder}{lang}02_data_parallel.ipynb", None if folder != "solutions/" else
                                           "l2-predict") for folder in ("notebooks/", "exercises/", "solutions/")
                                          for lang in ("", "zh/")])
def test_nothing_before_the_prediction_gives_its_answer_away(path, before):
    """Neither the lesson nor the exercise shows 5,664 bytes, nor this model's buckets."""
    text = "\n".join(texts(path, before))
    assert not re.search(r"(?<![\d,])5,?664(?![\d,])", text)  # not inside 377,585,664
    assert "[[5, 4, 3], [2], [1], [0]]" not in text


# ---- the bucketing check: each kind of mistake is named, not only "expected …" -------------------
# The right answers are written out here, as the learner writes them: simlab's own would be refused.

def _assign(sizes, cap):
    return _pack(reversed(range(len(sizes))), sizes, cap)


Ready = BucketReadiness  # the launch rule by hand (tests/learner_answers.py)


def _grade(capsys, assign, ready=Ready):
    from simlab.grading.data_parallel import check_bucketing
    with pytest.raises(AssertionError):
        check_bucketing(assign, ready)
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


def _off_by_one(sizes, cap):
    """Starts a new bucket when the next parameter would *reach* the cap (`>=`), not exceed it."""
    buckets, current, used = [], [], 0
    for i in reversed(range(len(sizes))):
        if current and used + sizes[i] >= cap:
            buckets, current, used = buckets + [current], [], 0
        current, used = current + [i], used + sizes[i]
    return buckets + ([current] if current else [])


def test_the_off_by_one_is_wrong_only_where_a_bucket_fills_the_cap_exactly_and_is_refused_there(capsys):
    from simlab.grading.data_parallel import BUCKET_CAPS, BUCKET_MODELS
    from simlab.sim.data_parallel_buckets import assign_buckets
    # the case the issue found: [400, 400] fills a cap of 800 exactly; `>=` splits it
    assert assign_buckets([400, 400, 400, 400, 2000], 800) == [[4], [3, 2], [1, 0]]
    assert _off_by_one([400, 400, 400, 400, 2000], 800) == [[4], [3], [2], [1], [0]]
    # … and no earlier case tells them apart: without the boundary cases the off-by-one would pass
    assert all(_off_by_one(sizes, cap) == assign_buckets(sizes, cap)
               for sizes in BUCKET_MODELS.values() for cap in BUCKET_CAPS)
    out = _grade(capsys, _off_by_one)
    assert "five tensors, exact fits, cap_bytes=800" in out and "fill up to the cap exactly" in out, out


def test_every_boundary_case_is_graded_and_the_hand_written_answer_passes(capsys):
    from simlab.grading.data_parallel import BOUNDARY_CASES, check_bucketing
    assert {cap for _, _, cap in BOUNDARY_CASES} >= {800, 1600, 2400}  # exact fits: 2 + 2, 4 × 400, 2000 + 400
    check_bucketing(_assign, Ready)
    assert capsys.readouterr().out.startswith(f"DDP bucketing: ✓ {20 + len(BOUNDARY_CASES)} model/cap cases")


def test_simlabs_own_bucketing_is_refused_however_it_is_reached(capsys):
    """The answer is simlab.sim.data_parallel_buckets; passing it, wrapping it or subclassing it is not writing it."""
    from simlab.sim import data_parallel_buckets as reference
    from simlab.sim.data_parallel_buckets import BucketReadiness, assign_buckets

    class Inherits(BucketReadiness):
        pass

    class Wraps:
        def __init__(self, buckets):
            self.inner = reference.BucketReadiness(buckets)

        def mark_ready(self, p):
            return self.inner.mark_ready(p)

    for assign, ready, name in [(assign_buckets, Ready, "assign_buckets"),
                                (lambda sizes, cap: reference.assign_buckets(list(sizes), cap), Ready,
                                 "assign_buckets"),
                                (_assign, BucketReadiness, "BucketReadiness"),
                                (_assign, Inherits, "BucketReadiness"),
                                (_assign, Wraps, "BucketReadiness")]:
        out = _grade(capsys, assign, ready)
        assert f"it calls simlab's own {name}: write the bucketing yourself" in out, out


def test_each_launch_mistake_gets_its_reason(capsys):
    class Forgets(Ready):  # no return statement
        def mark_ready(self, p):
            super().mark_ready(p)

    class Eager(Ready):  # launches a full bucket even if an earlier one still waits
        def mark_ready(self, p):
            b = self.bucket_of[p]
            self.pending[b] -= 1
            return [b] if self.pending[b] == 0 else []

    class Early(Ready):  # counts a bucket as full as soon as its first gradient arrives
        def mark_ready(self, p):
            b = self.bucket_of[p]
            if self.pending[b] == 0:  # a later gradient of a bucket already counted as full
                return []
            self.pending[b] = 1
            return super().mark_ready(p)

    for ready, reason in [(Forgets, "returned None"), (Eager, "in bucket order"),
                          (Early, "before all of its gradients")]:
        out = _grade(capsys, _assign, ready)
        assert "launches differ" in out and reason in out, (ready.__name__, out)
