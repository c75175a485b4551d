"""The 1F1B exercise's grader: accepts Megatron's order, rejects each kind of mistake with a teaching line."""
import pytest

from simlab.grading_parallel import check_one_f_one_b
from simlab.plan import Action
from simlab.sim.schedules import gpipe, one_f_one_b


def test_accepts_the_reference(capsys):
    check_one_f_one_b(one_f_one_b)
    assert capsys.readouterr().out.startswith("1F1B schedule: ✓ 10 (p, m) cases")


def _drop_last(p, m):
    s = one_f_one_b(p, m)
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


@pytest.mark.parametrize("broken, reason", [
    (gpipe, "rank 0 step 4 is 0F4, Megatron's 1F1B runs 0B0 there"),
    (_drop_last, "missing: 0B7"),
    (_warmup_one_short, "Megatron's 1F1B runs"),
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
