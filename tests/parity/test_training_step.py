"""`simlab.parity.training_step`: accumulation over m micro-batches on dp real processes is the update of ONE process
on the whole b·m·dp batch, and torch's DDP under no_sync(); one all-reduce per step, its bytes in closed form, m×
when reducing every micro-batch; a wrong accumulation is caught; bad input refused before any process starts; the
lesson's measurements against the recipes."""
import pytest

import simlab.parity.training_step as P
from simlab.exec.training_step import accumulation_step
from simlab.sim.collectives import ring_bytes_sent
from simlab.sim.model import Transformer

TOL = 1e-5  # fp32 sums in another order, then Adam (eps 1e-5) for two steps


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def _check(res, world_size, m, b):
    assert res["global_batch"] == b * m * world_size and res["microbatches"] == m
    assert res["max_abs_diff_vs_reference"] <= TOL and res["max_abs_diff_vs_torch"] <= TOL
    assert res["max_abs_grad_diff_vs_reference"] <= 1e-6
    assert res["losses"] == pytest.approx(res["reference_losses"], abs=TOL)
    assert res["torch_losses"] == pytest.approx(res["reference_losses"], abs=TOL)
    params = Transformer("gpt", layers=2, hidden=16, heads=2, seq=8, vocab=32, tied=False).params
    closed = ring_bytes_sent("all-reduce", world_size, params, itemsize=4)
    assert res["params"] == params and res["bytes_sent_per_rank"] == res["bytes_per_rank_closed_form"] == closed
    assert res["allreduces_per_step"] == 1 and res["allreduces_per_step_every_microbatch"] == m
    assert res["bytes_sent_every_microbatch"] == [m * c for c in closed] == res["bytes_every_microbatch_closed_form"]
    assert res["max_abs_diff_every_microbatch"] <= TOL  # the same update, m× the bytes
    trace = res["trace"]
    for rank in range(world_size):
        mine = trace.for_rank(rank)
        assert sum(e.kind == "compute" for e in mine) == 2 * m and sum(e.kind == "comm" for e in mine) == 2  # 2 steps
        assert [e.nbytes for e in mine if e.kind == "comm"] == [closed[rank]] * 2


def test_accumulating_four_micro_batches_on_two_ranks_is_one_big_batch():
    _check(P.run_training_step(world_size=2, microbatches=4, microbatch_size=2), 2, 4, 2)


def test_three_ranks_whose_gradient_does_not_split_evenly():
    res = P.run_training_step(world_size=3, microbatches=3, microbatch_size=1)
    assert res["params"] % 3 != 0  # the ring's chunks differ by one element: the closed form per rank
    _check(res, 3, 3, 1)


def test_forgetting_to_divide_by_m_is_caught(monkeypatch):
    """A step that sums the micro-batch losses instead of averaging them updates with m× the gradient."""
    def summing(model, opt, micro_batches, loss_fn, **kw):
        return accumulation_step(model, opt, micro_batches, lambda out, y: loss_fn(out, y) * len(micro_batches), **kw)
    monkeypatch.setattr(P, "accumulation_step", summing)  # forked workers inherit the patch
    res = P.run_training_step(world_size=2, microbatches=2, microbatch_size=1, steps=1, compare_torch=False)
    assert res["max_abs_grad_diff_vs_reference"] > 1e-3 and res["max_abs_diff_vs_reference"] > TOL


@pytest.mark.parametrize("kwargs, message", [
    (dict(microbatches=0), "microbatches=0: must be between 1 and 64"),
    (dict(microbatch_size=65), "microbatch_size=65: must be between 1 and 64"),
    (dict(steps=17), "steps=17: must be between 1 and 16"), (dict(hidden=15, heads=2), "hidden=15"),
    (dict(lr=float("nan")), "lr=nan"), (dict(compare_torch=1), "compare_torch=1"),
    (dict(world_size=65), "world_size=65"), (dict(timeout=-1), "timeout=-1")])
def test_refused_in_one_line_before_any_process(kwargs, message, no_launch, monkeypatch):
    monkeypatch.setattr(P.common, "reference_model", lambda *a, **k: pytest.fail("the reference ran"))
    with pytest.raises(ValueError, match=message) as err:
        P.run_training_step(**kwargs)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("precision", ["fp32", "mixed", "mixed-fp32-grads"])
def test_measured_precision_is_the_recipe(precision):
    res = P.measure_precision(precision)
    assert res["matches"] and res["bytes_per_param"] == res["recipe"]
    assert res["total_per_param"] == (18 if precision == "mixed-fp32-grads" else 16)


def test_fp8_training_is_refused_and_fp8_support_says_why():
    with pytest.raises(ValueError, match="precision='fp8'") as err:
        P.measure_precision("fp8")
    assert "fp8_support" in str(err.value)
    assert "FP8 GPU" in P.fp8_support()["note"]


def test_loss_scaling_and_the_machine_and_a_gpt_step():
    ls = P.measure_loss_scaling()
    assert ls["zeros"]["fp32"] == ls["zeros"]["fp16_scaled"] == ls["zeros"]["bf16"] == 0 < ls["zeros"]["fp16"]
    assert ls["fp16_smallest_subnormal"] == 2.0 ** -24
    machine = P.measure_machine(sizes=(32, 64), copy_mib=4, repeats=1)
    assert machine["peak_flops"] == max(machine["per_size"].values()) and machine["bandwidth"] > 0
    assert machine["balance"] == machine["peak_flops"] / machine["bandwidth"] and machine["threads"] == 1
    step = P.measure_gpt_step(layers=1, hidden=16, heads=2, seq=8, vocab=32, batch=2, peak_flops=1e9, repeats=1)
    assert step["params"] == step["model_params"]  # the simulator's count of the real model
    assert step["mfu"] == step["model_flops"] / step["seconds"] / 1e9 and step["tokens"] == 16


def test_recomputation_measured_saves_what_the_formula_says():
    r = P.measure_recompute(microbatch=1, seq=16, hidden=16, heads=2, repeats=1)["modes"]
    assert [r[m]["max_abs_grad_diff"] for m in ("none", "selective", "full")] == [0.0, 0.0, 0.0]
    assert r["full"]["saved_bytes"] == r["full"]["formula_bytes"] == 4 * 16 * 16  # the layer's fp32 input
    assert r["full"]["saved_bytes"] < r["selective"]["saved_bytes"] < r["none"]["saved_bytes"]
    assert all(r[m]["seconds"] > 0 for m in r)  # reported, never compared
