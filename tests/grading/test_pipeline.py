"""The 1F1B exercise's grader: accepts Megatron's order written by hand, rejects each kind of mistake with a
teaching line, and refuses simlab's own generator however it is handed over."""
import sys

import pytest
from learner_answers import one_f_one_b as one_f_one_b_by_hand

from simlab.grading.pipeline import check_one_f_one_b
from simlab.plan import Action
from simlab.sim import pipeline_schedules
from simlab.sim.pipeline_schedules import one_f_one_b

by_hand = one_f_one_b_by_hand  # the solution's three loops, written out (tests/learner_answers.py)


def gpipe(p, m):
    return [[Action(r, "F", j) for j in range(m)] + [Action(r, "B", j) for j in range(m)] for r in range(p)]


def test_accepts_megatrons_order_written_by_hand(capsys):
    assert all(by_hand(p, m) == one_f_one_b(p, m) for p in range(1, 9) for m in range(1, 17))
    check_one_f_one_b(by_hand)
    assert capsys.readouterr().out.startswith("1F1B schedule: ✓ 10 (p, m) cases")


def _copied(p, m):
    """The package's lists, re-made as new Actions a few calls down: still the package's answer."""
    return [[Action(a.stage, a.op, a.mb) for a in rank] for rank in _fetch(p, m)]


def _fetch(p, m):
    return one_f_one_b(p, m)


@pytest.mark.parametrize("lazy, called", [
    (lambda p, m: pipeline_schedules.one_f_one_b(p, m), "one_f_one_b"),
    (lambda p, m: pipeline_schedules.make_schedule("1f1b", p, m), "make_schedule"),
    (lambda p, m: [list(rank) for rank in pipeline_schedules.SCHEDULES["1f1b"](p, m)], "one_f_one_b"),
    (lambda p, m: _copied(p, m), "one_f_one_b"),
], ids=["one_f_one_b", "make_schedule", "SCHEDULES", "deeper"])
def test_handing_over_simlabs_own_generator_is_refused(lazy, called, capsys):
    """The exercise's notebook imports from simlab: returning the package's 1F1B is not writing it."""
    before = sys.getprofile()
    with pytest.raises(AssertionError):
        check_one_f_one_b(lazy)
    out = capsys.readouterr().out
    assert out.startswith(f"1F1B schedule: ✗ stages=4, microbatches=8: it calls simlab's own {called} ")
    assert "write the three loops yourself" in out, out
    assert sys.getprofile() is before  # the watch is taken down again


@pytest.mark.parametrize("fn", [one_f_one_b, pipeline_schedules.gpipe])
def test_simlabs_function_itself_is_refused(fn, capsys):
    with pytest.raises(AssertionError):
        check_one_f_one_b(fn)
    assert capsys.readouterr().out.startswith(f"1F1B schedule: ✗ your function: that is simlab's own {fn.__name__}")


def _drop_last(p, m):
    s = by_hand(p, m)
    s[0] = s[0][:-1]
    return s


def _warmup_one_short(p, m):  # a common slip: p - r - 2 warm-up forwards
    out = []
    for r in range(p):
        w = max(min(p - r - 2, m), 0)
        acts = [Action(r, "F", j) for j in range(w)]
        for j in range(m - w):
            acts += [Action(r, "F", w + j), Action(r, "B", j)]
        out.append(acts + [Action(r, "B", j) for j in range(m - w, m)])
    return out


def _backward_first_in_steady(p, m):  # B before F in the steady state: deadlocks
    out = []
    for r in range(p):
        w = min(p - r - 1, m)
        acts = [Action(r, "F", j) for j in range(w)]
        for j in range(m - w):
            acts += [Action(r, "B", j), Action(r, "F", w + j)]
        out.append(acts + [Action(r, "B", j) for j in range(m - w, m)])
    return out


def _backwards_swapped(p, m):  # valid, same bubble and peak memory: only the order differs
    s = by_hand(p, m)
    s[0][12], s[0][13] = s[0][13], s[0][12]  # (4, 8), the first case: rank 0's 0B4 and 0B5
    return s


@pytest.mark.parametrize("broken, reason", [
    (gpipe, "peak activations [8, 8, 8, 8], expected min(p-r, m) = [4, 3, 2, 1] per rank"),
    (_drop_last, "missing: 0B7"),
    (_warmup_one_short, "bubble 0.5556, closed form (p-1)/(m+p-1) = 0.2727"),
    (_backwards_swapped, "valid, with 1F1B's bubble and memory, but not Megatron's order: "
                         "rank 0 step 12 is 0B5, Megatron's 1F1B runs 0B4 there"),
    (_backward_first_in_steady, "rank 3, step 0: 3B0 comes before 3F0"),
    (lambda p, m: [["0X0"]], "action='0X0'"),
])
def test_rejects_mistakes_with_a_reason(broken, reason, capsys):
    with pytest.raises(AssertionError):
        check_one_f_one_b(broken)
    out = capsys.readouterr().out
    assert out.startswith("1F1B schedule: ✗ stages=4, microbatches=8") and reason in out, out


def test_lets_the_stub_error_through():
    def stub(p, m):
        raise NotImplementedError
    with pytest.raises(NotImplementedError):
        check_one_f_one_b(stub)
