"""Lesson 7's exercise B: which choices a router drops at a capacity factor, written as the rule (top-k, capacity
ceil(cf·T·k/E), GShard's choice-major order), graded against the simulator on routings the lesson never printed and
then against the drops of a real expert-parallel run; an answer that calls simlab is refused; each broken rule is
named, never the mask."""
import math

import numpy as np
import pytest

from simlab.grading import expert_parallel as ep
from simlab.grading.expert_parallel import CASES, DROP_RUN, check_drops
from simlab.sim.expert_parallel import route


def kept_choices(logits, top_k, capacity_factor):
    """The answer written out: top-k, capacity in exact decimal arithmetic, first choices before second ones."""
    from fractions import Fraction
    logits = np.asarray(logits)
    tokens, experts = logits.shape
    cap = math.ceil(Fraction(str(capacity_factor)) * tokens * top_k / experts)
    chosen = np.argsort(-logits, axis=1, kind="stable")[:, :top_k]
    claimed, kept = [0] * experts, np.zeros((tokens, top_k), dtype=bool)
    for c in range(top_k):
        for t in range(tokens):
            kept[t, c] = claimed[chosen[t, c]] < cap
            claimed[chosen[t, c]] += 1
    return kept


def fake_run(dropped=None, tokens_dropped=None, matches=True):
    masks = [route(z, DROP_RUN["top_k"], DROP_RUN["capacity_factor"]).kept for z in ep.run_logits(DROP_RUN)]

    def run(**kw):
        assert kw == DROP_RUN
        return {"routing_matches_simulator": matches,
                "dropped_per_rank": dropped or [int((~m).sum()) for m in masks],
                "tokens_dropped_per_rank": tokens_dropped or [int((~m.any(axis=1)).sum()) for m in masks]}
    return run


def test_the_rule_written_out_passes(capsys):
    check_drops(kept_choices, run=fake_run())
    assert capsys.readouterr().out == (f"dropped tokens: ✓ {len(CASES)} routings exactly; then the real run dropped "
                                       "6 + 4 choices and 2 + 0 whole tokens on its ranks, as you said\n")


def test_against_the_real_run():
    """The launch the notebook grades against: torch's routing on the ranks == the logits recomputed here."""
    ep._RUNS.clear()
    check_drops(kept_choices)
    assert ep._RUNS["real"]["dropped_per_rank"] == [6, 4] and ep._RUNS["real"]["tokens_dropped_per_rank"] == [2, 0]


def token_major(logits, top_k, factor):
    logits = np.asarray(logits)
    return ep._kept_by(logits, top_k, route(logits, top_k, factor).capacity, "token")


def float_ceil(logits, top_k, factor):
    t, e = np.shape(logits)
    return ep._kept_by(np.asarray(logits), top_k, math.ceil(factor * t * top_k / e), "choice")


def floor_cap(logits, top_k, factor):
    t, e = np.shape(logits)
    return ep._kept_by(np.asarray(logits), top_k, math.floor(factor * t * top_k / e), "choice")


def no_k(logits, top_k, factor):
    t, e = np.shape(logits)
    return ep._kept_by(np.asarray(logits), top_k, math.ceil(factor * t / e), "choice")


def worst(logits, top_k, factor):
    logits = np.asarray(logits)
    return ep._kept_by(logits, top_k, route(logits, top_k, factor).capacity, "choice", "worst")


@pytest.mark.parametrize("wrong, rule", [
    (token_major, "every token's first choice takes its place before any token's second choice"),
    (float_ceil, "a float product can land a hair above an integer"),
    (floor_cap, "capacity rounds up"),
    (no_k, "the capacity counts choices"),
    (worst, "the largest logits"),
    (lambda z, k, f: np.ones(np.shape(z)[:1] + (k,), dtype=bool), "an expert keeps at most C"),
])
def test_each_broken_rule_is_named_and_the_mask_never_shown(wrong, rule, capsys, monkeypatch):
    monkeypatch.setattr(ep, "SIMLAB", "/nowhere/")  # the wrong answers above use the grader's own helpers
    with pytest.raises(AssertionError):
        check_drops(wrong, run=fake_run())
    out = capsys.readouterr().out
    assert out.startswith("dropped tokens: ✗ ") and out.count("\n") == 1 and rule in out, out
    assert "True" not in out and "False" not in out


def test_an_answer_that_calls_simlab_is_refused(capsys):
    for answer in (lambda z, k, f: route(z, k, f).kept, lambda z, k, f: ep._kept_by(np.asarray(z), k, 1, "choice")):
        with pytest.raises(AssertionError):
            check_drops(answer, run=fake_run())
        assert "it calls simlab's own router (" in capsys.readouterr().out


@pytest.mark.parametrize("value", [None, [[1, 0]], "mask", [[True]]])
def test_an_answer_that_is_not_a_mask_is_refused_in_one_line(value, capsys):
    with pytest.raises(AssertionError):
        check_drops(lambda *a: value, run=fake_run())
    out = capsys.readouterr().out
    assert "True/False" in out and out.count("\n") == 1


def test_the_real_runs_drops_are_compared_with_the_answers(capsys):
    with pytest.raises(AssertionError):
        check_drops(kept_choices, run=fake_run(dropped=[5, 4]))
    assert "your drops differ from the real run's" in capsys.readouterr().out
    with pytest.raises(AssertionError):
        check_drops(kept_choices, run=fake_run(matches=False))
    assert "the run's routing differs from the simulator's" in capsys.readouterr().out


def test_the_stub_error_passes_through():
    def stub(*args):
        raise NotImplementedError("exercise")
    with pytest.raises(NotImplementedError):
        check_drops(stub, run=fake_run())
