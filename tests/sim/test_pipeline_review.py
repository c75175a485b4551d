"""The validator and simulator on the inputs a review found mishandled: B mixed with a split W, garbage
ops, bad sizes, typos naming huge stages, and ZB-H1's closed form outside its range."""
import time

import pytest

from simlab.plan import Action
from simlab.sim.pipeline import closed_form_bubble, simulate
from simlab.sim.pipeline_check import MISSING_SHOWN, validate


def test_a_full_backward_then_a_split_w_is_a_duplicate_backward():
    # the executor's W needs the grad only an I keeps: after a B it would crash inside the worker
    assert validate([["0F0", "0B0", "0W0"]]) == [
        "duplicate backward: 0B0 and 0W0: a micro-batch's backward is either B, or I then W",
        "deadlock: rank 0 is stuck at step 2 (0W0), waiting for 0I0, which no rank runs"]


def test_the_simulator_runs_w_only_after_its_i():
    with pytest.raises(ValueError, match="waiting for 0I0, which no rank runs"):
        simulate([["0F0", "0B0", "0W0"]])
    # with its I, W starts when I ends (t_f=1, I = t_b - t_w = 1, W = 1)
    trace = simulate([["0F0", "0I0", "0W0"]], t_f=1.0, t_b=2.0, t_w=1.0)
    assert [(e.name, e.start, e.end) for e in trace] == [("0F0", 0, 1), ("0I0", 1, 2), ("0W0", 2, 3)]


def test_a_stuck_w_names_the_i_it_waits_for():
    assert validate([["0F0", "0W0"]])[-1] == (
        "deadlock: rank 0 is stuck at step 1 (0W0), waiting for 0I0, which no rank runs")


@pytest.mark.parametrize("op", ["", "FB", "X"])
def test_ops_must_be_one_letter_of_fbiw(op):
    with pytest.raises(ValueError, match=r"schedule\[0\]\[0\]"):
        validate([[Action(0, op, 0)]])


@pytest.mark.parametrize("kwargs, message", [(dict(stages=0), "stages=0: must be >= 1"),
                                             (dict(microbatches=-1), "microbatches=-1: must be >= 1"),
                                             (dict(stages=1.5), "stages=1.5: must be an integer"),
                                             (dict(chunks=0), "chunks=0: must be >= 1")])
def test_validate_checks_its_sizes_in_one_line(kwargs, message):
    with pytest.raises(ValueError, match=message):
        validate([["0F0", "0B0"]], **kwargs)


def test_a_typo_naming_a_huge_stage_lists_ten_missing_actions_and_a_count():
    start = time.perf_counter()
    problems = validate([["2000F2000"]])
    assert time.perf_counter() - start < 5
    missing = [p for p in problems if p.startswith("missing: ")]
    assert len(missing) == MISSING_SHOWN == 10
    assert missing[:2] == ["missing: 0F0: stage 0 never runs the forward of micro-batch 0 (it belongs on rank 0)",
                           "missing: 0B0: stage 0 never runs the backward of micro-batch 0 (it belongs on rank 0)"]
    # 2001 × 2001 (stage, micro-batch) pairs each need F and B; 2000F2000 is there
    assert f"… and {2001 * 2001 * 2 - 1 - 10} more missing actions" in problems
    assert len(problems) < 20


def test_out_of_range_actions_come_before_the_missing_ones():
    problems = validate([["0F0", "0B0", "0F7"]], stages=1, microbatches=1)
    assert problems[0] == "rank 0, step 2: 0F7 names micro-batch 7, but the micro-batches are 0..0"


def test_a_short_missing_list_is_not_capped():
    assert validate([[], []]) == [
        f"missing: {s}{op}0: stage {s} never runs the {w} of micro-batch 0 (it belongs on rank {s})"
        for s in (0, 1) for op, w in (("F", "forward"), ("B", "backward"))]


@pytest.mark.parametrize("p, m", [(4, 2), (4, 3), (2, 1)])
def test_zero_bubble_closed_form_refuses_fewer_microbatches_than_stages(p, m):
    with pytest.raises(ValueError, match=f"microbatches={m}: zero-bubble's closed form needs microbatches >= stages"):
        closed_form_bubble("zero-bubble", p, m)


def test_zero_bubble_closed_form_holds_from_m_equal_p():
    from simlab.sim.pipeline import bubble_fraction
    from simlab.sim.pipeline_schedules import zero_bubble
    bubble = bubble_fraction(simulate(zero_bubble(4, 4), t_f=1.0, t_b=2.0, t_w=1.0), 4)
    assert bubble == pytest.approx(closed_form_bubble("zero-bubble", 4, 4)) == pytest.approx(3 / 15)
