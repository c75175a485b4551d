"""`simlab.parity.pipeline.run_pipeline`: bad input refused in one line before any process starts, a lost weight
gradient caught, a run torch cannot mirror says why, and `compare_bubbles` reports both bubbles and their gap."""
import pytest

import simlab.exec.pipeline as PL
from simlab.parity.pipeline import run_pipeline

TOL = 1e-5  # fp32: the micro-batch sums run in another order than the whole batch's, nothing more


def test_a_lost_weight_gradient_is_caught(monkeypatch):
    def overwrite(self, a):  # the bug: W overwrites .grad instead of accumulating over micro-batches
        out, grad = self.saved.pop((a.stage, a.mb))[1], self.for_w.pop((a.stage, a.mb))
        start = PL.time.perf_counter()
        params = list(self.stages[a.stage].parameters())
        for p, g in zip(params, PL.torch.autograd.grad(out, params, grad)):
            p.grad = g
        self.mark(start)
    monkeypatch.setattr(PL.PipelineRank, "backward_weight", overwrite)  # forked ranks inherit it
    assert run_pipeline("zero-bubble", 2, 4, steps=1, global_batch=8)["max_abs_diff_vs_reference"] > 1e-3


@pytest.mark.parametrize("kwargs, message", [
    ({"schedule": "pipedream"}, "schedule='pipedream'"),
    ({"world_size": 0}, "world_size=0"),
    ({"microbatches": 0}, "microbatches=0"),
    ({"chunks": 0}, "chunks=0"),
    ({"schedule": "1f1b", "chunks": 2}, "chunks=2"),
    ({"schedule": "naive", "microbatches": 4}, "microbatches=4"),
    ({"schedule": "interleaved", "world_size": 4, "microbatches": 6, "chunks": 2, "global_batch": 12},
     "microbatches=6"),
    ({"global_batch": 12, "microbatches": 8}, "global_batch=12"),
    ({"steps": 0}, "steps=0"),
    ({"hidden": 0}, "hidden=0"),
    ({"lr": 0}, "lr=0"),
    ({"timeout": -1}, "timeout=-1"),
    ({"schedule": [["0F0", "0B0"]], "world_size": 2}, "schedule="),
    ({"schedule": [["0F0", "0B0"], ["1B0", "1F0"]], "world_size": 2, "microbatches": 1, "global_batch": 2},
     "schedule: rank 1, step 0: 1B0 comes before 1F0"),
])
def test_bad_input_fails_before_any_process_starts(no_launch, kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("[", r"\[")) as err:
        run_pipeline(**kwargs)
    assert "\n" not in str(err.value)


def test_runs_without_a_torch_counterpart_say_why():
    res = run_pipeline("1f1b", 3, 2, global_batch=4)  # torch's Schedule1F1B refuses m < p
    assert res["max_abs_diff_vs_torch"] is None and "Schedule1F1B" in res["why_no_torch"]
    assert res["max_abs_diff_vs_reference"] <= TOL


def test_compare_bubbles_reports_measured_simulated_and_their_gap():
    from simlab.parity.pipeline import compare_bubbles
    res = compare_bubbles("gpipe", 2, 2, hidden=8, microbatch_size=2, steps=2)
    measured, simulated = res["measured_bubble_fraction"], res["simulated_bubble_fraction"]
    assert res["relative_error"] == pytest.approx(abs(measured - simulated) / measured)
    assert res["max_abs_diff_vs_reference"] <= TOL and res["schedule_name"] == "gpipe"
