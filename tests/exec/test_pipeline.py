"""simlab.exec.pipeline on real gloo ranks: every schedule trains exactly like one process, its trace is
the simulator's, a broken schedule fails fast instead of hanging, and the measured-time plumbing reproduces a
simulated run exactly. (run_pipeline's own checks, and torch.distributed.pipelining beside ours, are tested in
tests/parity/test_pipeline.py and test_pipeline_torch.py.)"""
import time

import pytest

import simlab.exec.pipeline as PL
from simlab.exec.launch import LaunchTimeout, WorkerError
from simlab.exec.pipeline import owner
from simlab.parity.pipeline import run_pipeline
from simlab.sim.pipeline import bubble_fraction, simulate
from simlab.sim.pipeline_calibrate import bubbles, stage_times, transfer_time
from simlab.sim.pipeline_schedules import gpipe, make_schedule, zero_bubble

TOL = 1e-5  # fp32: the micro-batch sums run in another order than the whole batch's, nothing more
CASES = [(name, p) for name in ("naive", "gpipe", "1f1b", "interleaved", "zero-bubble") for p in (2, 4)]


def setting(name: str, p: int):
    """(microbatches, chunks) for a case: naive runs the whole batch, interleaved two chunks per rank."""
    return (1 if name == "naive" else 8), (2 if name == "interleaved" else 1)


@pytest.fixture(scope="module", params=CASES, ids=lambda c: f"{c[0]}-n{c[1]}")
def run(request):
    name, p = request.param
    m, v = setting(name, p)
    return run_pipeline(name, p, m, v, steps=2, global_batch=16)


def test_loss_grads_and_params_match_one_process_and_torch(run):
    assert run["max_abs_diff_vs_reference"] <= TOL  # loss of both steps, every grad, params after SGD
    assert run["max_abs_diff_vs_torch"] <= TOL  # torch.distributed.pipelining: losses and params after SGD
    assert abs(run["loss"] - run["reference_loss"]) <= TOL
    assert len(run["losses"]) == 2 and run["reference_losses"][1] < run["reference_losses"][0]  # it trains


def test_bytes_sent_are_one_activation_forward_and_one_grad_back_per_boundary(run):
    """Per step, stage s's owner sends the batch's activation (B, h) on to stage s+1 and its input grad
    back to stage s-1, whenever that neighbour lives on another rank: B·h·4 bytes each, fp32."""
    p, S, B, h = run["world_size"], run["num_stages"], 16, 16
    sent = [0] * p
    for s in range(S):
        r = owner(s, p)
        sent[r] += B * h * 4 * ((s < S - 1 and owner(s + 1, p) != r) + (s > 0 and owner(s - 1, p) != r))
    assert run["bytes_sent_per_rank"] == sent and run["backend"] == "gloo"


def test_trace_is_the_simulators(run):
    name, p = run["schedule_name"], run["world_size"]
    plan = make_schedule(name, p, *setting(name, p))
    assert run["schedule"] == [[str(a) for a in acts] for acts in plan]
    for trace in run["traces"]:  # every step, not just the last
        assert trace.signature() == simulate(plan).signature()
        assert all(e.kind == "compute" and 0 <= e.start <= e.end for e in trace)
        for r in range(p):  # each rank ran its list in order
            ends = [e for e in sorted(trace.for_rank(r), key=lambda e: e.step)]
            assert all(a.end <= b.start for a, b in zip(ends, ends[1:]))


SLACK = 1e-6  # s: one monotonic clock for all ranks, so causality is exact up to float rounding


def producers(name: str, num_stages: int) -> list[str]:
    """The actions whose output `name` consumes (an F's activation, a B/I's output grad, a W's saved grad)."""
    s, op, j = int(name[0]), name[1], int(name[2:])
    if op == "F":
        return [f"{s - 1}F{j}"] if s > 0 else []
    if op == "W":
        return [f"{s}I{j}"]
    return [f"{s}F{j}"] + ([f"{s + 1}B{j}", f"{s + 1}I{j}"] if s < num_stages - 1 else [])


def assert_causal(trace, ready: dict, num_stages: int) -> int:
    """No action starts before the outputs it consumes were computed; returns the cross-rank pairs checked."""
    by_name, cross = {e.name: e for e in trace}, 0
    for e in trace:
        for name in (n for n in producers(e.name, num_stages) if n in by_name):
            assert e.start >= ready[name] - SLACK, f"{e.name} starts {ready[name] - e.start:.1e} s before {name}'s output"
            assert ready[name] <= by_name[name].end  # ready is inside the producer's event
            cross += by_name[name].rank != e.rank
    return cross


def test_consumers_start_after_their_producers_outputs_exist(run):
    for trace, ready in zip(run["traces"], run["output_ready"]):
        checked = assert_causal(trace, ready, run["num_stages"])
        assert checked >= (run["world_size"] - 1) * run["microbatches"]  # every hand-over between ranks


def test_late_leaving_a_barrier_does_not_skew_the_trace(monkeypatch):
    # rank 1 leaves every barrier 0.2 s late; rank 0 starts 0F0 0.4 s in: with per-rank clock origins
    # rank 1 would seem to start 1F0 0.2 s before 0F0 even began
    barrier, forward = PL.dist.barrier, PL.PipelineRank.forward
    def late_barrier(*args, **kwargs):
        barrier(*args, **kwargs)
        time.sleep(0.2 if PL.dist.get_rank() == 1 else 0.0)
    def slow_first_forward(self, a):
        time.sleep(0.4 if a.stage == 0 and a.mb == 0 else 0.0)
        forward(self, a)
    monkeypatch.setattr(PL.dist, "barrier", late_barrier)  # forked ranks inherit both
    monkeypatch.setattr(PL.PipelineRank, "forward", slow_first_forward)
    res = run_pipeline("gpipe", 2, 2, steps=1, global_batch=4, compare_torch=False)
    trace, ready = res["trace"], res["output_ready"][0]
    start = {e.name: e.start for e in trace}
    assert start["0F0"] > 0.35 and start["1F0"] > start["0F0"]  # per-rank origins: 1F0 at ≈ 0.2, 0F0 at ≈ 0.4
    assert assert_causal(trace, ready, 2) == 4


def test_bubble_fractions_are_reported(run):
    assert 0 < run["measured_bubble_fraction"] < 1 and 0 < run["simulated_bubble_fraction"] < 1
    assert len(run["stage_times"]["t_f"]) == run["num_stages"] and run["transfer_time"] >= 0


def test_same_rank_neighbours_hand_over_in_memory():
    res = run_pipeline("interleaved", 1, 2, 3, global_batch=4)  # one rank holds all three stages
    assert res["max_abs_diff_vs_reference"] <= TOL
    assert [e.name for e in sorted(res["trace"], key=lambda e: e.step)] == [str(a) for a in
                                                                             make_schedule("interleaved", 1, 2, 3)[0]]


def test_hand_made_split_backward_schedule():
    # GPipe with split backward and every W deferred to the very end, as strings
    plan = [[f"{r}F{j}" for j in range(3)] + [f"{r}I{j}" for j in range(3)] + [f"{r}W{j}" for j in (2, 0, 1)]
            for r in range(2)]
    res = run_pipeline(plan, 2, 3, global_batch=6)
    assert res["max_abs_diff_vs_reference"] <= TOL
    assert res["trace"].signature() == simulate(plan).signature()


def test_a_receive_that_never_comes_times_out_quickly():
    # 2F0 waits for 1F0, which waits for 0F0, which rank 0 runs only after 2F0: both ranks wait forever
    plan = [["2F0", "0F0", "2B0", "0B0"], ["1F0", "3F0", "3B0", "1B0"]]
    start = time.monotonic()
    with pytest.raises(LaunchTimeout, match="ranks \\[0, 1\\]"):
        run_pipeline(plan, 2, 1, 2, global_batch=2, timeout=2.0, check=False)
    assert time.monotonic() - start < 10


def test_an_out_of_order_rank_fails_at_once():
    plan = [["1F0", "0F0", "2F0", "2B0", "1B0", "0B0"]]  # one rank, three stages: 1F0 before its input
    with pytest.raises(WorkerError, match="out of order"):
        run_pipeline(plan, 1, 1, 3, global_batch=2, timeout=10.0, check=False)


# ---------------------------------------------------------------- measured times → simulator, exactly

@pytest.mark.parametrize("plan", [gpipe(3, 4), zero_bubble(3, 5), make_schedule("interleaved", 2, 4, 2)],
                         ids=["gpipe", "zero-bubble", "interleaved"])
def test_measuring_a_simulated_run_gives_back_its_inputs(plan):
    stages = 1 + max(a.stage for acts in plan for a in acts)
    t_f, t_b = [1.0 + s / 8 for s in range(stages)], [2.0 + s / 4 for s in range(stages)]
    t_w = [0.75 + s / 16 for s in range(stages)]
    trace = simulate(plan, t_f=t_f, t_b=t_b, t_w=t_w, t_comm=0.375)
    times = stage_times([trace], stages)
    assert times["t_f"] == pytest.approx(t_f) and times["t_b"] == pytest.approx(t_b)
    assert times["t_w"] == (pytest.approx(t_w) if any(a.op == "W" for acts in plan for a in acts) else None)
    assert transfer_time(trace, len(plan), stages) == pytest.approx(0.375)
    out = bubbles([trace], plan, len(plan), stages)  # re-simulating a simulated run reproduces it
    assert out["simulated_bubble_fraction"] == pytest.approx(out["measured_bubble_fraction"])
    assert out["measured_bubble_fraction"] == pytest.approx(bubble_fraction(trace, len(plan)))


# ---------------------------------------------------------------- torch.distributed.pipelining


