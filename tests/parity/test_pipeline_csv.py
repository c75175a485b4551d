"""`simlab.parity.pipeline_csv.run_csv`: a schedule written as torch's CSV, loaded by torch's own loader and run by
torch's pipeline runtime on gloo processes, gives the gradients our executor gives on the same schedule, weights
and batch; the comparison can fail; torch really ran our file (as loaded, and lowered with its own comms); bad
input is refused in one line before any process starts."""
import re

import pytest

import simlab.parity.pipeline_csv as PC
from simlab.exec.models import loss_fn
from simlab.export.pipeline_csv import from_csv
from simlab.parity import CORE_KEYS
from simlab.sim.pipeline_schedules import make_schedule

TOL = 1e-6  # the bar: every parameter gradient, ours against torch's runtime
REF_TOL = 1e-5  # ours against one process: the micro-batch sums run in another order than the whole batch's


@pytest.mark.parametrize("name, p, m, v", [("1f1b", 4, 4, 1), ("1f1b", 3, 3, 1), ("interleaved", 2, 4, 2),
                                           ("zero-bubble", 3, 6, 1),
                                           ("1f1b", 4, 2, 1)])  # m < p: torch's Schedule1F1B refuses, its CSV runs
def test_torchs_runtime_on_our_csv_gives_our_gradients(name, p, m, v):
    res = PC.run_csv(name, p, m, v, global_batch=2 * m, hidden=8)
    assert list(res)[:len(CORE_KEYS)] == list(CORE_KEYS) and res["backend"] == "gloo"
    assert res["max_abs_diff_vs_torch"] <= TOL and res["matched"] is True
    assert res["max_abs_diff_vs_reference"] <= REF_TOL
    assert abs(res["loss"] - res["torch_loss"]) <= TOL
    assert res["gradients_compared"] == 2 * p * v  # each stage's Linear: weight and bias
    schedule = make_schedule(name, p, m, v)
    assert from_csv(res["csv"]) == schedule
    assert res["torch_loaded"] == [[str(a) for a in acts] for acts in schedule]  # what torch read is what we wrote


@pytest.mark.parametrize("name, p, m, v", [("1f1b", 2, 4, 1), ("interleaved", 2, 4, 2), ("zero-bubble", 2, 4, 1)])
def test_torch_ran_it_lowered_with_its_own_comms(name, p, m, v):
    """Each rank's lowered list: its compute actions in our order, a SEND_F after every forward whose next stage
    lives on another rank, a SEND_B after every B or I whose previous stage does, one REDUCE_GRAD per stage."""
    res = PC.run_csv(name, p, m, v, global_batch=m, hidden=4)
    S = p * v
    for r, (lowered, ours) in enumerate(zip(res["torch_lowered"], make_schedule(name, p, m, v))):
        assert [a for a in lowered if re.fullmatch(r"\d+[FBIW]\d+", a)] == [str(a) for a in ours]
        sends_f = [a for a in ours if a.op == "F" and a.stage < S - 1]
        sends_b = [a for a in ours if a.op in "BI" and a.stage > 0]
        assert sorted(x for x in lowered if "SEND_F" in x) == sorted(f"{a.stage}SEND_F{a.mb}" for a in sends_f)
        assert sorted(x for x in lowered if "SEND_B" in x) == sorted(f"{a.stage}SEND_B{a.mb}" for a in sends_b)
        assert sorted(x for x in lowered if "REDUCE_GRAD" in x) == [f"{s}REDUCE_GRAD" for s in range(r, S, p)]
    if name == "zero-bubble":  # the split backward reached torch as I and W, never merged into B
        assert not any(re.fullmatch(r"\d+B\d+", a) for acts in res["torch_lowered"] for a in acts)


def test_a_learners_hand_made_schedule_runs_on_torch_too():
    repaired = [["0F0", "0F1", "0B0", "0B1"], ["1F0", "1B0", "1F1", "1B1"]]  # GPipe on rank 0, 1F1B on rank 1
    res = PC.run_csv(repaired, 2, 2, global_batch=4, hidden=8)
    assert res["matched"] and res["schedule_name"] is None
    assert res["csv"] == "0F0,0F1,0B0,0B1\r\n1F0,1B0,1F1,1B1\r\n"


def test_the_comparison_can_fail(monkeypatch):
    monkeypatch.setattr(PC, "loss_fn", lambda out, y: 2 * loss_fn(out, y))  # torch's runtime's loss only
    res = PC.run_csv("1f1b", 2, 4, global_batch=8, hidden=8)  # forked ranks inherit the patch
    assert res["max_abs_diff_vs_torch"] > 1e-3 and res["matched"] is False
    assert res["max_abs_diff_vs_reference"] <= REF_TOL  # ours is untouched
    assert res["torch_loss"] == pytest.approx(2 * res["loss"], rel=1e-5)


@pytest.mark.parametrize("kwargs, message", [
    ({"world_size": 0}, "world_size=0"),
    ({"backend": "mpi"}, "backend='mpi'"),
    ({"timeout": 0}, "timeout=0"),
    ({"schedule": "pipedream"}, "schedule='pipedream'"),
    ({"microbatches": 0}, "microbatches=0"),
    ({"global_batch": 6, "microbatches": 4}, "global_batch=6"),
    ({"schedule": "interleaved", "microbatches": 3, "chunks": 2, "global_batch": 6}, "microbatches=3"),
    ({"hidden": 0}, "hidden=0"),
    ({"lr": 0}, "lr=0"),
    ({"layers": 3}, "layers=3"),
    ({"schedule": [["0F0", "0B0"], ["1B0", "1F0"]], "microbatches": 1, "global_batch": 2},
     "schedule: rank 1, step 0: 1B0 comes before 1F0"),
])
def test_bad_input_fails_before_any_process_starts(no_launch, kwargs, message):
    with pytest.raises(ValueError, match="^" + re.escape(message)) as err:
        PC.run_csv(**({"world_size": 2, "microbatches": 4, "global_batch": 8} | kwargs))
    assert "\n" not in str(err.value)
