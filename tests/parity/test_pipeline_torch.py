"""`simlab.parity.pipeline_torch`: torch.distributed.pipelining computes the very same loss and grads on the same
model, split and schedule as ours; the comparison can fail; what torch refuses is refused before a launch; the
timing of both is reported with their ratio."""
import pytest

import simlab.exec.pipeline as PL
import simlab.parity.pipeline_torch as PT
from simlab.parity.pipeline import run_pipeline

TOL = 1e-5  # fp32: the micro-batch sums run in another order than the whole batch's, nothing more


def setting(name: str, p: int) -> tuple[int, int]:
    """(microbatches, chunks) for a case, as tests/exec/test_pipeline.py runs it: naive runs the whole batch,
    interleaved two chunks per rank."""
    return (1 if name == "naive" else 8), (2 if name == "interleaved" else 1)


@pytest.mark.parametrize("name, p", [("naive", 2), ("gpipe", 2), ("1f1b", 4), ("interleaved", 2),
                                     ("zero-bubble", 4)])
def test_same_loss_and_grads_as_torch_pipelining(name, p):
    m, v = setting(name, p)
    res = PT.compare_with_torch(name, p, m, v, global_batch=16)
    assert res["max_abs_diff_vs_torch"] <= TOL
    assert abs(res["loss"] - res["torch_loss"]) <= TOL
    assert sorted(res["grads"]) == [(s, i) for s in range(p * v) for i in range(2)]  # every stage's W and b


@pytest.mark.parametrize("fn", [PT.compare_with_torch, PT.time_pipeline_steps])
def test_torch_1f1b_with_fewer_microbatches_than_stages_fails_before_launch(no_launch, fn):
    with pytest.raises(ValueError, match="^microbatches=2: torch's Schedule1F1B needs microbatches >= stages=3$"):
        fn("1f1b", 3, 2, global_batch=4)


def test_the_torch_comparison_can_fail(monkeypatch):
    monkeypatch.setattr(PT, "loss_fn", lambda out, y: 2 * PL.loss_fn(out, y))  # torch's loss only
    res = PT.compare_with_torch("1f1b", 2, 4)
    assert abs(res["torch_loss"] - 2 * res["loss"]) <= TOL and res["max_abs_diff_vs_torch"] > 1e-3
    res = run_pipeline("1f1b", 2, 4, steps=2, global_batch=8)  # the same check inside run_pipeline
    assert res["max_abs_diff_vs_reference"] <= TOL and res["max_abs_diff_vs_torch"] > 1e-3


def test_time_pipeline_steps_reports_both_and_the_ratio():
    res = PT.time_pipeline_steps("1f1b", 2, 4, 1, 2, global_batch=16, hidden=16)
    assert res["ours_s"] > 0 and res["torch_s"] > 0
    assert res["ratio"] == pytest.approx(res["ours_s"] / res["torch_s"])
