"""The simulator's public functions refuse bad input before any work, in one line that names the argument.

First the defects that were found (each returned a wrong answer or raised something other than a one-line
ValueError), then one Hypothesis property per family of functions: for any integers, floats (nan, ±inf,
huge), None, text or bools in the size arguments, a call either returns a correct result or raises a
one-line ValueError/TypeError whose message starts with the name of an argument given a bad value.
"""
from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simlab._checks import MAX_COUNT
from simlab.sim import (
    collectives,
    collectives_stepper,
    cost,
    data_parallel,
    data_parallel_buckets,
    data_parallel_calibrate,
    memory,
    pipeline,
    pipeline_schedules,
    tensor_parallel,
    zero,
)


def refused(call, *names):
    """`call()` must raise a one-line ValueError/TypeError whose message starts with `name=` (or
    `name[i]=`, `name.shape=`, `name:`) for one of `names`; returns the message."""
    with pytest.raises((ValueError, TypeError)) as err:
        call()
    message = str(err.value)
    assert "\n" not in message, message
    head = re.match(r"[A-Za-z_]+", message)
    assert head and head.group() in names and message[head.end()] in "=[.:", message
    return message


# ---- the defects, one test each ----

@pytest.mark.parametrize("call, name", [
    (lambda: cost.ring_all_reduce_seconds(4, 10 ** 400), "nbytes"),
    (lambda: cost.ring_all_reduce_seconds(4, 8, alpha=10 ** 400), "alpha"),
    (lambda: pipeline.simulate(pipeline_schedules.gpipe(2, 2), t_comm=10 ** 400), "t_comm"),
    (lambda: pipeline.simulate(pipeline_schedules.gpipe(2, 2), t_f=[1, 10 ** 400]), "t_f"),
    (lambda: cost.fit_alpha_beta([10 ** 400], [8], 2), "durations")])
def test_huge_ints_are_not_finite(call, name):
    """An int too big for a float is refused like inf (it was an OverflowError in the arithmetic)."""
    assert refused(call, name)


@pytest.mark.parametrize("call", [
    lambda: pipeline_schedules.one_f_one_b(0, 8), lambda: pipeline_schedules.interleaved(0, 8, 2),
    lambda: pipeline_schedules.naive(0), lambda: pipeline_schedules.gpipe(-1, 2),
    lambda: pipeline_schedules.zero_bubble(0, 4), lambda: pipeline_schedules.naive(True),
    lambda: pipeline_schedules.gpipe(2.0, 2), lambda: pipeline_schedules.nearest_valid("interleaved", 0, 6, 2)])
def test_schedule_builders_refuse_no_stages(call):
    assert refused(call, "stages").startswith("stages=")


@pytest.mark.parametrize("call, name", [
    (lambda: pipeline_schedules.one_f_one_b(4, 0), "microbatches"),
    (lambda: pipeline_schedules.gpipe(4, -2), "microbatches"),
    (lambda: pipeline_schedules.zero_bubble(4, 1.5), "microbatches"),
    (lambda: pipeline_schedules.interleaved(4, 8, 0), "chunks"),
    (lambda: pipeline_schedules.interleaved(4, 8, False), "chunks"),
    (lambda: pipeline_schedules.nearest_valid("1f1b", 4, None, 1), "microbatches")])
def test_schedule_builders_refuse_bad_sizes(call, name):
    assert refused(call, name).startswith(f"{name}=")


def test_format_grid_refuses_what_is_not_a_schedule():
    refused(lambda: pipeline_schedules.format_grid(5), "schedule")


def test_cost_closed_forms_refuse_zero_ranks_instead_of_dividing_by_zero():
    assert refused(lambda: cost.ring_all_reduce_seconds(0, 100), "n").startswith("n=0: must be between 1 and")
    refused(lambda: cost.naive_all_reduce_seconds(-1, 100), "n")  # was a negative time
    refused(lambda: cost.optimal_bytes_per_rank("all_reduce", 0, 8), "n")
    refused(lambda: cost.ring_all_reduce_seconds(4, 100, bandwidth=0), "bandwidth")


@pytest.mark.parametrize("kwargs, name", [
    (dict(nbytes=-5), "nbytes"), (dict(nbytes=math.nan), "nbytes"), (dict(nbytes="8"), "nbytes"),
    (dict(alpha=math.nan), "alpha"), (dict(alpha=-1.0), "alpha"), (dict(bandwidth=math.inf), "bandwidth"),
    (dict(nbytes=10 ** 400), "nbytes")])  # an int no float can hold: was an OverflowError
def test_cost_closed_forms_refuse_nan_and_negative(kwargs, name):
    for fn in (cost.ring_all_reduce_seconds, cost.naive_all_reduce_seconds):
        refused(lambda fn=fn: fn(**(dict(n=4, nbytes=100) | kwargs)), name)


def test_alpha_beta_refuses_nan_alpha_and_what_is_not_a_plan():
    plan = collectives.ring_all_reduce(4, 8)
    refused(lambda: cost.alpha_beta(plan, alpha=math.nan), "alpha")  # was accepted: every time nan
    refused(lambda: cost.alpha_beta("x"), "plan")
    refused(lambda: cost.busiest_link_bytes(plan.steps[0], 0), "world_size")
    refused(lambda: cost.optimal_bytes_per_rank(["all_reduce"], 4, 8), "goal")  # was 'unhashable type'
    refused(lambda: cost.compare_all_reduce([4, 0], 64), "world_sizes")
    refused(lambda: cost.compare_all_reduce(4, 64), "world_sizes")
    refused(lambda: cost.compare_all_reduce([4], 0), "nbytes")


def test_make_inputs_refuses_negative_sizes():
    assert refused(lambda: collectives.make_inputs(-1, 4), "world_size").startswith("world_size=-1")
    refused(lambda: collectives.make_inputs(4, -1), "numel")
    refused(lambda: collectives.make_inputs(4, 2.5), "numel")
    refused(lambda: collectives.make_inputs(4, 4, seed=-1), "seed")
    refused(lambda: collectives.make_inputs(4, 4, seed=None), "seed")  # None would not be deterministic


def test_plan_cache_does_not_take_a_float_or_bool_for_an_int():
    collectives.plan_for("ring-all-reduce", 4, 8)
    collectives.plan_for("ring-all-reduce", 1, 8)
    refused(lambda: collectives.plan_for("ring-all-reduce", 4.0, 8), "world_size")  # 4.0 == 4: was a hit
    refused(lambda: collectives.plan_for("ring-all-reduce", True, 8), "world_size")  # True == 1
    refused(lambda: collectives.plan_for("ring-all-reduce", [4], 8), "world_size")  # was 'unhashable type'
    refused(lambda: collectives.ring_bytes_sent("all-reduce", 4, 8.0), "numel")
    refused(lambda: collectives.canonical(["ring-all-reduce"]), "collective")


def test_collectives_stepper_simulate_refuses_what_is_not_a_plan():
    refused(lambda: collectives_stepper.simulate("x"), "plan")  # was an AttributeError
    plan = collectives.ring_all_reduce(4, 8)
    refused(lambda: collectives_stepper.simulate(plan, seed=-1), "seed")
    refused(lambda: collectives_stepper.simulate(plan, alpha=math.nan), "alpha")
    refused(lambda: collectives_stepper.simulate(plan, inputs=5), "inputs")
    refused(lambda: collectives_stepper.simulate(plan, inputs=[[0.5] * 8] * 4), "inputs")  # was silently truncated


def test_pipeline_functions_refuse_bad_arguments():
    refused(lambda: pipeline.simulate("x"), "schedule")
    trace = pipeline.simulate(pipeline_schedules.gpipe(2, 2))
    assert refused(lambda: pipeline.bubble_fraction(trace, 0), "ranks").startswith("ranks=0")
    refused(lambda: pipeline.bubble_fraction(trace, 2.0), "ranks")
    refused(lambda: pipeline.bubble_fraction("x", 2), "trace")  # was an AttributeError
    refused(lambda: pipeline.makespan(5), "trace")
    refused(lambda: pipeline.closed_form_bubble("1f1b", 0, 8), "stages")  # was a negative fraction
    refused(lambda: pipeline.closed_form_bubble("gpipe", 4, -1), "microbatches")
    refused(lambda: pipeline.closed_form_bubble(["gpipe"], 4), "name")
    refused(lambda: pipeline.explore("1f1b", 4, 8, ratio=math.nan), "ratio")  # was reported as t_b
    refused(lambda: pipeline.explore("interleaved", 0, 8, 2), "stages")


@pytest.mark.parametrize("kwargs, name", [
    (dict(t_f=math.inf), "t_f"), (dict(t_b=[2.0, math.inf]), "t_b"), (dict(t_w=math.inf), "t_w"),
    (dict(t_comm=math.inf), "t_comm"), (dict(action_times=[[1.0] * 4, [math.nan] * 4]), "action_times"),
    (dict(action_times=[[1.0] * 4, [math.inf] * 4]), "action_times"), (dict(action_times=5), "action_times")])
def test_pipeline_simulate_refuses_infinite_times(kwargs, name):
    refused(lambda: pipeline.simulate(pipeline_schedules.gpipe(2, 2), **kwargs), name)


def test_memory_helpers_refuse_zero_ranks():
    assert refused(lambda: memory.shard_numel(10, 0), "world_size").startswith("world_size=0")
    refused(lambda: memory.padded_numel(10, -1), "world_size")
    refused(lambda: memory.shard_numel(-5, 2), "numel")
    refused(lambda: memory.per_gpu_bytes(100, 4, 2, precision=["mixed"]), "precision")
    refused(lambda: memory.check_offload(True, "2"), "stage")


def test_buckets_refuse_bad_arguments():
    refused(lambda: data_parallel_buckets.assign_buckets(5, 100), "param_nbytes")
    ready = data_parallel_buckets.BucketReadiness([[1], [0]])
    refused(lambda: ready.mark_ready(7), "param_index")  # was a KeyError
    refused(lambda: data_parallel_buckets.BucketReadiness(5), "buckets")
    refused(lambda: data_parallel_buckets.BucketReadiness([[0, "x"]]), "buckets")


def test_data_parallel_refuses_infinite_times_and_wrong_types():
    valid = dict(layer_params=(10, 20), fwd_seconds=(1.0, 2.0), bwd_seconds=(2.0, 4.0), global_batch=8)
    refused(lambda: data_parallel.Workload(**(valid | dict(fwd_seconds=(math.inf, 1.0)))), "fwd_seconds")
    refused(lambda: data_parallel.Workload(**(valid | dict(alpha=math.inf))), "alpha")
    refused(lambda: data_parallel.Workload(**(valid | dict(layer_params=5))), "layer_params")
    refused(lambda: data_parallel.workload_from_layers(["x"]), "layer_params")
    refused(lambda: data_parallel.workload_from_layers(5), "layer_params")
    refused(lambda: data_parallel.workload_from_layers(output_bytes="x"), "output_bytes")
    refused(lambda: data_parallel.scaled_workload(4, 1e308), "model_mparams")  # was an OverflowError
    refused(lambda: data_parallel.scaled_workload(4, 10, bandwidth_gbps=0), "bandwidth_gbps")
    refused(lambda: data_parallel.scaled_workload(4, 10, samples_per_device=0), "samples_per_device")
    refused(lambda: data_parallel.scaled_workload(0, 10), "world_size")
    for fn in (data_parallel.simulate_dp, data_parallel.simulate_ddp, data_parallel.compare):
        refused(lambda fn=fn: fn("w"), "w")


def _floats(*shape):
    return np.arange(np.prod(shape), dtype=np.float64).reshape(shape) / 10


def test_tensor_parallel_refuses_fractional_shapes_and_nan():
    refused(lambda: tensor_parallel.shard_plan("row", 2, (4.7, 6)), "shape")  # was truncated to 4
    refused(lambda: tensor_parallel.shard_plan("row", 2, (math.nan, 6)), "shape")
    refused(lambda: tensor_parallel.shard_plan("row", 2, (True, 6)), "shape")
    refused(lambda: tensor_parallel.shard_plan("row", 2, 5), "shape")
    assert tensor_parallel.shard_plan("row", 2, np.zeros((4, 6)).shape).shape == (4, 6)
    assert tensor_parallel.shard_plan("row", 2, (np.int64(4), 6)).shape == (4, 6)
    x, w = _floats(2, 4), _floats(4, 4)
    refused(lambda: tensor_parallel.split_linear("row", 2, x * math.nan, w), "x")
    refused(lambda: tensor_parallel.split_linear("row", 2, x, [["a"] * 4] * 4), "w")
    refused(lambda: tensor_parallel.split_linear("row", 2, x, [[1, 2], [3]]), "w")
    assert refused(lambda: tensor_parallel.megatron_mlp(2, x, _floats(5, 6), _floats(6, 4)), "x", "a")
    assert "a.shape[1]=6" in refused(lambda: tensor_parallel.megatron_mlp(4, x, _floats(4, 6), _floats(6, 4)), "a")
    refused(lambda: tensor_parallel.megatron_mlp(2, x, _floats(4, 6) + math.inf, _floats(6, 4)), "a")
    refused(lambda: tensor_parallel.attention_split(2, _floats(1, 2, 8) * math.nan, *[_floats(8, 8)] * 4, heads=2),
            "x")
    refused(lambda: tensor_parallel.layer_comm(2, 1, 4, 4, sequence_parallel=1), "sequence_parallel")
    refused(lambda: tensor_parallel.block_steps("mlp", 2, 4, 4, inner=8, itemsize=4.0), "itemsize")


def test_zero_refuses_bad_arguments():
    refused(lambda: zero.walkthrough(2, precision=["mixed"]), "precision")  # was 'unhashable type'
    for fn in (zero.memory_curve, zero.peak_bytes, zero.to_trace):
        refused(lambda fn=fn: fn([]), "steps")  # was an IndexError
    refused(lambda: zero.holdings_text("x"), "step")


def test_calibrate_refuses_bad_arguments():
    refused(lambda: cost.fit_alpha_beta([1.0], [100], 0), "world_size")  # was a negative alpha
    refused(lambda: cost.fit_alpha_beta([], [], 2), "durations")  # was nan
    refused(lambda: cost.fit_alpha_beta([1.0, 2.0], [100], 2), "nbytes")
    refused(lambda: cost.fit_alpha_beta([math.nan], [100], 2), "durations")
    refused(lambda: cost.fit_alpha_beta([1.0], [-1], 2), "nbytes")
    refused(lambda: data_parallel_calibrate.fit_ddp_workload([], [10], ["w"], 0, 8, 25.0),  # was ZeroDivisionError
            "world_size")
    refused(lambda: data_parallel_calibrate.fit_ddp_workload([], [10], ["w", "b"], 2, 8, 25.0), "param_names")


# ---- properties: any junk in a size argument gives a result or a one-line error naming it ----

JUNK = st.one_of(st.integers(-3, 9), st.integers(), st.floats(), st.none(), st.booleans(), st.text(max_size=3),
                 st.sampled_from([2.0, [2], "2", 10 ** 400]))
NUMBERS = st.one_of(st.floats(), st.integers(-10, 10 ** 12), st.none(), st.booleans(), st.text(max_size=3),
                    st.sampled_from([0, 0.0, 1e-9, 1e9]))  # 10**400: see test_huge_ints_are_not_finite
PROPERTY = settings(max_examples=100, deadline=None)


def is_size(value, low: int = 1) -> bool:
    return type(value) is int and value >= low


def is_number(value, low: float = 0.0, positive: bool = False) -> bool:
    if type(value) not in (int, float):
        return False
    try:
        value = float(value)
    except OverflowError:  # an int no float can hold
        return False
    return math.isfinite(value) and (value > low if positive else value >= low)


def outcome(call, args: dict):
    """The result when every argument is valid; otherwise a one-line error naming an invalid one."""
    bad = [name for name, ok in args.items() if not ok]
    if not bad:
        return call()
    refused(call, *bad)
    return None


@PROPERTY
@given(name=st.sampled_from(sorted(pipeline_schedules.SCHEDULES)), p=JUNK, m=JUNK, v=JUNK)
def test_schedule_builders_property(name, p, m, v):
    small = all(type(x) is not int or x < 50 for x in (p, m, v))  # keep the valid schedules small
    if not small:
        return
    fn = pipeline_schedules.SCHEDULES[name]
    args = {"naive": (p,), "interleaved": (p, m, v)}.get(name, (p, m))
    valid = dict(zip(("stages", "microbatches", "chunks"), map(is_size, args)))
    if name == "interleaved" and all(valid.values()) and m % p:
        return  # the divisibility rule has its own tests
    sched = outcome(lambda: fn(*args), valid)
    if sched is not None:
        assert len(sched) == p and all(sched)
    near = outcome(lambda: pipeline_schedules.nearest_valid(name, p, m, v),
                   dict(zip(("stages", "microbatches", "chunks"), (is_size(p), is_size(m), is_size(v)))))
    assert near is None or all(is_size(x) for x in near)


@PROPERTY
@given(n=JUNK, nbytes=NUMBERS, alpha=NUMBERS, bandwidth=NUMBERS)
def test_cost_closed_forms_property(n, nbytes, alpha, bandwidth):
    valid = {"n": is_size(n) and n <= MAX_COUNT, "nbytes": is_number(nbytes), "alpha": is_number(alpha),
             "bandwidth": is_number(bandwidth, positive=True)}
    for fn in (cost.ring_all_reduce_seconds, cost.naive_all_reduce_seconds):
        seconds = outcome(lambda fn=fn: fn(n, nbytes, alpha, bandwidth), valid)
        assert seconds is None or seconds >= 0  # inf only when finite inputs overflow
    goal_ok = {"n": is_size(n), "nbytes": is_size(nbytes, 0)}
    lower = outcome(lambda: cost.optimal_bytes_per_rank("all_reduce", n, nbytes), goal_ok)
    assert lower is None or 0 <= lower <= 2 * nbytes


@PROPERTY
@given(world_size=JUNK, numel=JUNK, seed=JUNK)
def test_make_inputs_property(world_size, numel, seed):
    if any(type(x) is int and x > 100 for x in (world_size, numel)):
        return
    valid = {"world_size": is_size(world_size), "numel": is_size(numel, 0), "seed": is_size(seed, 0)}
    inputs = outcome(lambda: collectives.make_inputs(world_size, numel, seed), valid)
    assert inputs is None or (len(inputs) == world_size and all(x.shape == (numel,) for x in inputs))


@PROPERTY
@given(name=st.sampled_from(sorted(collectives.PLANS)), world_size=JUNK, numel=JUNK, itemsize=JUNK)
def test_collective_plans_property(name, world_size, numel, itemsize):
    valid = {"world_size": is_size(world_size) and world_size <= 64, "numel": is_size(numel),
             "itemsize": is_size(itemsize)}
    plan = outcome(lambda: collectives.plan_for(name, world_size, numel, itemsize), valid)
    if plan is not None and numel < 1000 and itemsize <= 16:  # (10**400-byte elements overflow the α-β floats)
        assert collectives_stepper.simulate(plan).final_ok


@PROPERTY
@given(trace_ranks=JUNK, stages=JUNK, m=JUNK, ratio=NUMBERS, t_f=NUMBERS, t_comm=NUMBERS)
def test_pipeline_property(trace_ranks, stages, m, ratio, t_f, t_comm):
    trace = pipeline.simulate(pipeline_schedules.gpipe(2, 2))
    share = outcome(lambda: pipeline.bubble_fraction(trace, trace_ranks),
                    {"ranks": is_size(trace_ranks) and trace_ranks <= MAX_COUNT})
    assert share is None or share <= 1
    if all(type(x) is not int or x < 20 for x in (stages, m)):
        valid = {"stages": is_size(stages), "microbatches": is_size(m)}
        share = outcome(lambda: pipeline.closed_form_bubble("1f1b", stages, m), valid)
        assert share is None or 0 <= share < 1
        valid["ratio"] = is_number(ratio, positive=True) and ratio < 1e6
        if ratio is not None and is_number(ratio, positive=True) and ratio >= 1e6:
            return  # t_b = ratio·t_f: fine, but not what this property is about
        outcome(lambda: pipeline.explore("gpipe", stages, m, ratio=ratio), valid)
    times = {"t_f": is_number(t_f, positive=True), "t_comm": is_number(t_comm)}
    outcome(lambda: pipeline.simulate(pipeline_schedules.gpipe(2, 2), t_f=t_f, t_comm=t_comm), times)


@PROPERTY
@given(numel=JUNK, world_size=JUNK, stage=JUNK, activations=JUNK)
def test_memory_property(numel, world_size, stage, activations):
    valid = {"numel": is_size(numel, 0), "world_size": is_size(world_size)}
    shard = outcome(lambda: memory.shard_numel(numel, world_size), valid)
    assert shard is None or shard * world_size >= numel
    layers_ok = is_size(numel) or (type(numel) is list and numel and all(map(is_size, numel)))
    valid = {"layer_numels": layers_ok, "world_size": is_size(world_size),
             "stage": is_size(stage, 0) and stage <= 3, "activations": is_size(activations, 0)}
    held = outcome(lambda: memory.per_gpu_bytes(numel, world_size, stage, activations=activations), valid)
    assert held is None or held["total"] >= 0


@PROPERTY
@given(world_size=JUNK, mparams=NUMBERS, cap=NUMBERS, gbps=NUMBERS, samples=JUNK)
def test_data_parallel_property(world_size, mparams, cap, gbps, samples):
    valid = {"world_size": is_size(world_size) and world_size <= 64,
             "model_mparams": is_number(mparams, positive=True) and mparams <= 1e9,
             "bucket_cap_mb": is_number(cap, positive=True),
             "bandwidth_gbps": is_number(gbps, positive=True) and gbps <= 1e9,
             "samples_per_device": is_size(samples)}
    w = outcome(lambda: data_parallel.scaled_workload(world_size, mparams, cap, gbps, samples), valid)
    if w is not None and mparams < 1e4 and cap > 1e-3:  # small enough to simulate quickly
        result = data_parallel.compare(w)
        assert result["ddp_step_seconds"] > 0


@PROPERTY
@given(kind=st.sampled_from(tensor_parallel.KINDS), ranks=JUNK, rows=JUNK, cols=JUNK, fill=NUMBERS)
def test_tensor_parallel_property(kind, ranks, rows, cols, fill):
    valid = {"ranks": is_size(ranks) and ranks <= 64, "shape": is_size(rows) and is_size(cols)}
    if valid["ranks"] and valid["shape"]:
        valid["shape"] = (rows, cols)[kind == "column"] % ranks == 0
    plan = outcome(lambda: tensor_parallel.shard_plan(kind, ranks, (rows, cols)), valid)
    assert plan is None or plan.shape == (rows, cols)
    if type(fill) in (int, float) and not 1e300 < abs(fill) < math.inf:  # (4·1e308 overflows in the matmul)
        x = np.full((2, 4), float(fill))
        split = outcome(lambda: tensor_parallel.split_linear("row", 2, x, np.ones((4, 4))), {"x": math.isfinite(fill)})
        assert split is None or split.error == 0


@PROPERTY
@given(stage=JUNK, layers=JUNK, world_size=JUNK, block_numel=JUNK)
def test_zero_walkthrough_property(stage, layers, world_size, block_numel):
    valid = {"stage": is_size(stage, 0) and stage <= 3, "layers": is_size(layers) and layers <= 26,
             "world_size": is_size(world_size) and world_size <= 64, "block_numel": is_size(block_numel)}
    if valid["layers"] and valid["world_size"] and layers * world_size > 40:
        return  # fine, but slow for a property
    steps = outcome(lambda: zero.walkthrough(stage, layers, world_size, block_numel=block_numel), valid)
    if steps is not None:
        start = memory.per_gpu_bytes([world_size * block_numel] * layers, world_size, stage, precision="mixed")
        assert zero.memory_curve(steps)[0][0] == start["total"]


@PROPERTY
@given(durations=st.lists(NUMBERS, max_size=4), world_size=JUNK)
def test_fit_alpha_beta_property(durations, world_size):
    nbytes = [1000 * (i + 1) for i in range(len(durations))]
    valid = {"durations": bool(durations) and all(is_number(d) for d in durations),
             "world_size": is_size(world_size) and world_size <= MAX_COUNT}
    fit = outcome(lambda: cost.fit_alpha_beta(durations, nbytes, world_size), valid)
    assert fit is None or (fit[0] >= 0 and fit[1] > 0)
