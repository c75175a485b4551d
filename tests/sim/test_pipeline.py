"""Pipeline timing: closed forms for bubbles and memory, the dependency rules, and the validator's messages."""
import time

import numpy as np
import pytest

from simlab.plan import Action
from simlab.sim.pipeline import bubble_fraction, makespan, peak_activations, simulate
from simlab.sim.pipeline_check import validate
from simlab.sim.pipeline_schedules import SCHEDULES, gpipe, interleaved, make_schedule, naive, one_f_one_b, zero_bubble
from simlab.trace import Event, Trace

PM = [(p, m) for p in (1, 2, 3, 4, 8) for m in (1, 2, 3, 4, 7, 8, 16)]


@pytest.mark.parametrize("p,m", PM)
def test_gpipe_and_1f1b_bubble_is_p_minus_1_over_m_plus_p_minus_1(p, m):
    for sched in (gpipe(p, m), one_f_one_b(p, m)):
        trace = simulate(sched, t_f=1.0, t_b=2.0)
        assert makespan(trace) == (m + p - 1) * 3.0  # exact: small integers are exact floats
        assert bubble_fraction(trace, p) == pytest.approx((p - 1) / (m + p - 1), abs=1e-12)


@pytest.mark.parametrize("p,m", PM)
def test_peak_activations_1f1b_min_p_minus_r_m_vs_gpipe_m(p, m):
    assert peak_activations(one_f_one_b(p, m)) == [min(p - r, m) for r in range(p)]
    assert peak_activations(gpipe(p, m)) == [m] * p


@pytest.mark.parametrize("p", [1, 2, 5])
def test_naive_runs_one_stage_at_a_time(p):
    assert bubble_fraction(simulate(naive(p)), p) == pytest.approx((p - 1) / p)
    t_f, t_b = [1.0, 2.0, 0.5, 3.0, 1.5][:p], [2.0, 1.0, 4.0, 0.5, 2.5][:p]
    assert makespan(simulate(naive(p), t_f, t_b)) == pytest.approx(sum(t_f) + sum(t_b))
    # every hop (p-1 forward, p-1 backward) pays the link once
    assert makespan(simulate(naive(p), t_comm=0.25)) == pytest.approx(3 * p + 2 * (p - 1) * 0.25)


@pytest.mark.parametrize("p,m,v", [(1, 4, 2), (2, 2, 2), (2, 8, 3), (3, 6, 2), (4, 4, 2), (4, 8, 2), (4, 12, 3),
                                   (4, 16, 4), (8, 16, 2), (8, 32, 4)])
def test_interleaved_bubble_shrinks_v_times(p, m, v):
    """Each chunk is 1/v of a rank's layers, so it takes t/v: bubble (p-1)/(v·m+p-1) (Narayanan et al., 2021)."""
    trace = simulate(interleaved(p, m, v), t_f=1.0 / v, t_b=2.0 / v)
    assert bubble_fraction(trace, p) == pytest.approx((p - 1) / (v * m + p - 1), abs=1e-12)
    assert makespan(trace) == pytest.approx(3.0 * (m + (p - 1) / v))


@pytest.mark.parametrize("p,m", [(2, 2), (3, 3), (4, 4), (4, 8), (4, 16), (8, 8), (8, 16)])
def test_zero_bubble_h1_closed_forms(p, m):
    """Qi et al. 2023 (section 2.1, and the authors' table: bubble rate (p-1)/(3m) vs 1F1B's (p-1)/m):
    with T_F = T_B = T_W (forward, input-gradient and weight-gradient pass all 1, so our full backward
    t_b is 2) ZB-H1's bubble is a third of 1F1B's: bubble fraction (p-1)/(3m+p-1).
    For other ratios we measure, for m >= p, an idle time per rank of exactly (p-1)(T_F + T_B - T_W)
    with T_B = t_b - t_w the input-gradient time: the paper's general form as we recall it (not checked
    against its text here); for m < p the pipeline never fills and the idle time is larger."""
    trace = simulate(zero_bubble(p, m), t_f=1.0, t_b=2.0, t_w=1.0)
    assert bubble_fraction(trace, p) == pytest.approx((p - 1) / (3 * m + p - 1), abs=1e-12)
    for t_f, t_b, t_w in [(1.0, 2.0, 0.5), (1.0, 3.0, 1.0), (2.0, 2.0, 1.0), (1.0, 2.0, 0.75), (1.0, 1.0, 0.5)]:
        span = makespan(simulate(zero_bubble(p, m), t_f, t_b, t_w))
        assert span == pytest.approx(m * (t_f + t_b) + (p - 1) * (t_f + (t_b - t_w) - t_w))
    assert max(peak_activations(zero_bubble(p, m))) == max(peak_activations(one_f_one_b(p, m))) == p


@pytest.mark.parametrize("p,m", [(p, m) for p, m in PM if p > 1])
def test_zero_bubble_beats_1f1b_at_the_same_peak_memory(p, m):
    for t_w in (0.5, 1.0):
        zb = bubble_fraction(simulate(zero_bubble(p, m), t_w=t_w), p)
        assert zb < bubble_fraction(simulate(one_f_one_b(p, m)), p)
    assert max(peak_activations(zero_bubble(p, m))) == max(peak_activations(one_f_one_b(p, m)))


def test_peak_activations_counts_until_w_when_split():
    assert peak_activations([["0F0", "0F1", "0I0", "0I1", "0W0", "0W1"]]) == [2]
    assert peak_activations([["0F0", "0I0", "0W0", "0F1", "0I1", "0W1"]]) == [1]
    # counted by hand from the golden grid (tests/golden/pipeline_grids.txt): rank 0 reaches 5 at 0F2,
    # rank 1 never holds more than 3; each (stage, micro-batch) is one unit
    assert peak_activations(interleaved(2, 4, 2)) == [5, 3]


CASES = [(name, p, m, v) for name in SCHEDULES for p, m, v in [(1, 1, 1), (2, 4, 2), (3, 6, 3), (4, 8, 2), (4, 3, 1)]
         if (name != "naive" or m == 1) and (name != "interleaved" or m % p == 0) and (name == "interleaved" or v == 1)]


def _deps(a: Action, stages: int):
    """What an action waits for, written out independently of the simulator."""
    if a.op == "F":
        return [(a.stage - 1, "F", a.mb)] if a.stage else []
    if a.op == "W":
        return [(a.stage, "I", a.mb)]
    own = [(a.stage, "F", a.mb)]
    return own + ([(a.stage + 1, "BI", a.mb)] if a.stage < stages - 1 else [])


@pytest.mark.parametrize("name,p,m,v", CASES)
def test_every_action_starts_as_soon_as_its_rank_and_inputs_allow(name, p, m, v):
    sched = make_schedule(name, p, m, v)
    rng = np.random.default_rng(p * 100 + m)
    t_f, t_b = list(rng.uniform(0.5, 2, p * v)), list(rng.uniform(1, 3, p * v))
    t_w, t_comm = [b * 0.4 for b in t_b], 0.3
    trace = simulate(sched, t_f, t_b, t_w, t_comm)
    ev = {(e.rank, e.step): e for e in trace}
    assert len(ev) == len(trace) == sum(map(len, sched))
    done = {}
    for r, acts in enumerate(sched):
        for i, a in enumerate(acts):
            e = ev[r, i]
            assert (e.kind, e.name, e.peer, e.chunk, e.nbytes) == ("compute", str(a), None, None, 0)
            want = {"F": t_f, "B": t_b, "W": t_w}.get(a.op)
            length = want[a.stage] if want else t_b[a.stage] - t_w[a.stage]
            assert e.end - e.start == pytest.approx(length)
            done[a.stage, a.op, a.mb] = (r, e)
    for (s, op, j), (r, e) in done.items():
        ready = [ev[r, e.step - 1].end] if e.step else [0.0]  # the rank is free
        for ds, ops, dj in _deps(Action(s, op, j), p * v):
            q, dep = next(done[ds, o, dj] for o in ops if (ds, o, dj) in done)
            ready.append(dep.end + (t_comm if q != r else 0.0))
        assert e.start == pytest.approx(max(ready)), (s, op, j)


def test_trace_signature_is_rank_step_name():
    """The executor emits Event(rank, "compute", step=index in the rank's list, name="2F0"): same signature."""
    sched = one_f_one_b(3, 4)
    real = Trace(Event(r, "compute", i, name=str(a), start=9.0, end=9.5)
                 for r, acts in enumerate(sched) for i, a in enumerate(acts))
    assert simulate(sched).matches(real)


def test_makespan_and_bubble_of_a_hand_written_trace():
    trace = Trace([Event(0, "compute", 0, name="0F0", start=0.0, end=1.0),
                   Event(1, "compute", 0, name="1F0", start=1.0, end=2.0),
                   Event(1, "compute", 1, name="1B0", start=2.0, end=4.0),
                   Event(0, "compute", 1, name="0B0", start=4.0, end=6.0)])
    assert makespan(trace) == 6.0
    assert bubble_fraction(trace, 2) == 0.5  # 6 busy of 12
    assert makespan(Trace()) == 0.0 and bubble_fraction(Trace(), 2) == 0.0


def test_simulating_65536_actions_is_fast():
    sched = interleaved(32, 256, 4)
    best = float("inf")
    for _ in range(2):
        start = time.perf_counter()
        trace = simulate(sched)
        best = min(best, time.perf_counter() - start)
    assert len(trace) == 65536
    assert best < 2.0, f"{best:.2f} s (target well under 1 s on a quiet machine)"


@pytest.mark.parametrize("kwargs,message", [
    ({"t_f": 0}, "t_f=0: must be a positive number (or one per stage)"),
    ({"t_b": [1.0, "2", 1.0]}, "t_b=[1.0, '2', 1.0]: must be a positive number (or one per stage)"),
    ({"t_b": [1.0, 2.0]}, "t_b: per-stage list has 2 entries, the schedule has 3 stages"),
    ({"t_w": 2.5}, "t_w=2.5: the weight-gradient part cannot exceed the full backward t_b=2.0"),
    ({"t_comm": -1.0}, "t_comm=-1.0: must be a number >= 0 (or one per stage)"),
])
def test_simulate_rejects_bad_times_in_one_line(kwargs, message):
    with pytest.raises(ValueError) as err:
        simulate(gpipe(3, 2), **kwargs)
    assert str(err.value) == message


def test_simulate_refuses_a_deadlocked_schedule():
    with pytest.raises(ValueError, match=r"schedule cannot run: deadlock: rank 0 is stuck at step 0 \(0B0\)"):
        simulate([["0B0", "0F0"]])


# ---- the validator: each mistake, its message ----

def _swap(sched, r, i, k):
    sched = [list(acts) for acts in sched]
    sched[r][i], sched[r][k] = sched[r][k], sched[r][i]
    return sched


@pytest.mark.parametrize("name,p,m,v", CASES)
def test_every_generated_schedule_is_valid(name, p, m, v):
    assert validate(make_schedule(name, p, m, v), chunks=v) == []
    assert validate(make_schedule(name, p, m, v)) == []  # stages inferred from the actions


def test_wrong_rank_and_names_out_of_range():
    sched = [["0F0", "1F0", "0B0"], ["1B0"]]
    assert validate(sched)[0] == (
        "rank 0, step 1: 1F0 is on the wrong rank: stage 1 lives on rank 1 (rank r holds stages r, r+2, r+4, …)")
    assert validate([["0F0", "0B0", "2F0"], ["1F0", "1B0", "1F5"]], stages=2, microbatches=1)[:2] == [
        "rank 0, step 2: 2F0 names stage 2, but the stages are 0..1",
        "rank 1, step 2: 1F5 names micro-batch 5, but the micro-batches are 0..0"]


def test_missing_and_duplicate_actions():
    sched = [list(map(str, acts)) for acts in one_f_one_b(2, 2)]
    sched[1].remove("1B1")
    sched[0].append("0F1")
    assert validate(sched) == [
        "duplicate: 0F1 appears 2 times (rank 0 step 1, rank 0 step 4); each action runs exactly once",
        "missing: 1B1: stage 1 never runs the backward of micro-batch 1 (it belongs on rank 1)",
        "deadlock: rank 0 is stuck at step 3 (0B1), waiting for 1B1, which no rank runs"]


def test_split_backward_needs_i_and_w_not_b_and_i():
    assert validate([["0F0", "0I0"]]) == [
        "missing: 0W0: stage 0 never runs the weight-gradient backward of micro-batch 0 (it belongs on rank 0)"]
    assert validate([["0F0", "0B0", "0I0", "0W0"]]) == [
        "duplicate backward: 0B0 and 0I0 and 0W0: a micro-batch's backward is either B, or I then W"]


def test_backward_before_forward_and_w_before_i():
    assert validate([["0F0", "0B0"], ["1B0", "1F0"]])[0] == (
        "rank 1, step 0: 1B0 comes before 1F0 (step 1): a backward needs the activations its own forward saves")
    assert validate([["0F0", "0W0", "0I0"]]) == [
        "rank 0, step 1: 0W0 comes before 0I0 (step 2): W needs the output gradient that I brings in",
        "deadlock: rank 0 is stuck at step 1 (0W0), waiting for 0I0, which it only runs later (step 2)"]


def test_a_later_stage_before_the_stage_that_feeds_it():
    sched = [[str(a) for a in acts] for acts in interleaved(2, 2, 2)]
    assert sched[0][:3] == ["0F0", "0F1", "2F0"]
    bad = _swap(sched, 0, 0, 2)  # rank 0 runs 2F0 first: its input comes 0F0 → 1F0 (rank 1) → 2F0
    assert validate(bad) == [
        "rank 0, step 0: 2F0 comes before 0F0 (step 2), but 2F0 needs 0F0's output (through the stages in between): "
        "no timing can fix this order",
        "deadlock: rank 0 is stuck at step 0 (2F0), waiting for 1F0 from rank 1 (step 0), "
        "which is itself stuck at step 0",
        "deadlock: rank 1 is stuck at step 0 (1F0), waiting for 0F0 from rank 0 (step 2), "
        "which is itself stuck at step 0"]


def test_one_rank_two_stages_in_the_wrong_order():
    assert validate([["1F0", "0F0", "1B0", "0B0"]], chunks=2) == [
        "rank 0, step 0: 1F0 comes before 0F0 (step 1), but 1F0 needs 0F0's output: no timing can fix this order",
        "deadlock: rank 0 is stuck at step 0 (1F0), waiting for 0F0, which it only runs later (step 1)"]
    assert validate([["0F0", "1F0", "0B0", "1B0"]], chunks=2)[0] == (
        "rank 0, step 2: 0B0 comes before 1B0 (step 3), but 0B0 needs 1B0's output: no timing can fix this order")


def test_cross_rank_deadlock_names_each_stuck_rank():
    """Every rank's own order is fine, yet rank 0 waits for micro-batch 0's gradient while rank 1
    waits for micro-batch 1's activation, which rank 0 only sends after that gradient."""
    sched = [["0F0", "0B0", "0F1", "0B1"], ["1F1", "1B1", "1F0", "1B0"]]
    assert validate(sched) == [
        "deadlock: rank 0 is stuck at step 1 (0B0), waiting for 1B0 from rank 1 (step 3), "
        "which is itself stuck at step 0",
        "deadlock: rank 1 is stuck at step 0 (1F1), waiting for 0F1 from rank 0 (step 2), "
        "which is itself stuck at step 1"]
    with pytest.raises(ValueError, match="deadlock"):
        simulate(sched)


def test_empty_lists_are_not_a_schedule():
    assert validate([[], []]) == [
        "missing: 0F0: stage 0 never runs the forward of micro-batch 0 (it belongs on rank 0)",
        "missing: 0B0: stage 0 never runs the backward of micro-batch 0 (it belongs on rank 0)",
        "missing: 1F0: stage 1 never runs the forward of micro-batch 0 (it belongs on rank 1)",
        "missing: 1B0: stage 1 never runs the backward of micro-batch 0 (it belongs on rank 1)"]
    with pytest.raises(ValueError, match=r"^schedule: must be a list with one list of actions per rank"):
        validate([])


def test_validate_reads_strings_and_rejects_garbage():
    assert validate([["0F0", "0B0"]]) == validate([[Action(0, "F", 0), Action(0, "B", 0)]]) == []
    with pytest.raises(ValueError, match=r"action='0X0'"):
        validate([["0X0"]])
    with pytest.raises(ValueError, match=r"schedule\[0\]\[0\]=3: must be an Action"):
        validate([[3]])
