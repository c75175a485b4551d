"""Lesson 6's 3-D run on real processes: for every (dp, pp, tp) with dp·pp·tp ≤ 8, with ZeRO-1 off and on
(and the interleaved schedule where there is a pipeline), the losses of every step and every parameter
after the last equal one process's within 1e-5, every group carries exactly the bytes the model
predicts, and every rank holds exactly the model states the memory model predicts."""
import itertools

import pytest

import simlab.exec.hybrid as H
import simlab.exec.tensor_parallel as T
from simlab.parity.hybrid import run_hybrid

TOL = 1e-5
GRIDS = [(dp, pp, tp) for dp, pp, tp in itertools.product(range(1, 9), repeat=3) if dp * pp * tp <= 8]


def variants(pp):
    return ({"zero": 1},) + (({"schedule": "interleaved", "chunks": 2},) if pp > 1 else ())


@pytest.mark.parametrize("dp, pp, tp", GRIDS, ids=lambda x: str(x))
def test_every_grid_trains_like_one_process_with_the_predicted_bytes_and_memory(dp, pp, tp):
    res = run_hybrid(dp, pp, tp, steps=2, variants=variants(pp))
    runs = [res] + res["variants"]
    assert len(runs) == 1 + len(variants(pp)) and len(GRIDS) == 38
    for run in runs:
        what = run["config"]
        assert run["max_abs_diff_vs_reference"] <= TOL, what  # losses, all parameters, replicas identical
        assert run["max_abs_diff_across_replicas"] == 0.0, what  # DP keeps the replicas bit-identical
        assert run["bytes_sent_per_group"] == run["predicted_bytes_per_group"], what
        assert run["measured_memory_per_rank"] == run["predicted_memory_per_rank"], what
        assert run["world_size"] == dp * pp * tp and len(run["losses"]) == 2
        assert {kind: len(groups) for kind, groups in run["groups"].items()} == {
            "tp": dp * pp, "dp": pp * tp, "pp": dp * tp}


def test_zero_1_shards_the_optimizer_state():
    res = run_hybrid(4, 1, 2, steps=2, variants=({"zero": 1},))
    plain, zero1 = res["measured_memory_per_rank"][0], res["variants"][0]["measured_memory_per_rank"][0]
    assert zero1["params"] == plain["params"] and zero1["optimizer"] * 4 >= plain["optimizer"] > zero1["optimizer"] * 3


def test_a_missing_data_parallel_reduction_is_caught(monkeypatch):
    monkeypatch.setattr(H, "ring_all_reduce", lambda tensor, recorder=None, group=None: None)  # forked ranks inherit
    res = run_hybrid(2, 1, 1, steps=2)
    assert res["max_abs_diff_vs_reference"] > 1e-3


def test_a_missing_tensor_parallel_sum_is_caught(monkeypatch):
    monkeypatch.setattr(T.CopyToTP, "backward", staticmethod(lambda ctx, grad: (grad, None)))  # f forgets to sum
    res = run_hybrid(1, 1, 2, steps=2)
    assert res["max_abs_diff_vs_reference"] > 1e-3


@pytest.mark.parametrize("kwargs, message", [
    (dict(dp=2, pp=1, tp=3, heads=4), "heads=4: must be divisible by tp=3"),
    (dict(dp=1, pp=3, tp=1, layers=4), "layers=4: must be divisible by pp × chunks = 3 × 1"),
    (dict(dp=2, pp=1, tp=1, world_size=3), "world_size=3: must be dp × pp × tp = 2 × 1 × 1"),
    (dict(dp=1, pp=1, tp=1, zero=2), "zero=2"),
    (dict(dp=1, pp=2, tp=1, schedule="gpipe"), "schedule='gpipe'"),
])
def test_bad_grids_are_refused_before_anything_runs(kwargs, message, no_launch):
    with pytest.raises(ValueError, match=message):
        run_hybrid(**kwargs)
