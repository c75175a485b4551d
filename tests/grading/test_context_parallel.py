"""Lesson 7's exercises A and C. A: the bytes one rank sends in a zig-zag ring, written as a formula, graded on shapes
the lesson never printed against the closed form and then against what a real run's ranks sent; an answer that
calls simlab is refused; each classic mistake gets its concept, never the number. C: a long-context plan as
rules, graded with the model's step time switched off."""
import pytest

from simlab.grading import context_parallel as cp
from simlab.grading import context_parallel_plan as plan_grader
from simlab.grading.context_parallel import RING_RUN, SHAPES, check_ring_bytes_prediction
from simlab.sim.context_parallel_costs import costs
from simlab.sim.hybrid import Plan


def ring_bytes(world_size, seq, heads, kv_heads, head_dim, batch, itemsize):
    """The answer written out, as the exercise asks (3N − 2 blocks of 2·b·(s/N)·kv_heads·head_dim elements)."""
    if world_size == 1:
        return 0
    block = 2 * batch * (seq // world_size) * kv_heads * head_dim * itemsize
    return (3 * world_size - 2) * block


def fake_run(sent=None, matches=True):
    def run(**kw):
        assert kw == RING_RUN
        right = ring_bytes(*(kw[k] for k in ("world_size", "seq", "heads", "kv_heads", "head_dim", "batch")), 4)
        return {"bytes_sent_per_rank": sent or [right] * kw["world_size"], "matches_plan": matches}
    return run


def test_the_written_formula_is_the_closed_form_on_every_shape_and_passes(capsys):
    assert all(ring_bytes(*case) == costs("ring", world_size=case[0], seq=case[1], heads=case[2], kv_heads=case[3],
                                          head_dim=case[4], batch=case[5], itemsize=case[6]).bytes_sent
               for case in SHAPES)
    check_ring_bytes_prediction(ring_bytes, run=fake_run())
    out = capsys.readouterr().out
    assert out == (f"ring attention's bytes: ✓ {len(SHAPES)} shapes exactly; then 3 real processes each sent 14,336 B "
                   "in one forward and backward, as you said\n")


def test_the_real_run_sends_what_the_formula_says():
    """The launch the notebook grades against (3 processes, a few seconds)."""
    cp._RUNS.clear()
    check_ring_bytes_prediction(ring_bytes)
    assert cp._RUNS["real"]["bytes_sent_per_rank"] == [14_336] * 3 and cp._RUNS["real"]["matches_plan"]


def test_the_lessons_shapes_are_not_the_graded_ones():
    assert (RING_RUN["world_size"], RING_RUN["seq"]) not in {(4, 16), (2, 8), (4, 32)}
    assert RING_RUN["kv_heads"] < RING_RUN["heads"]  # GQA: heads instead of kv_heads is wrong here


def _block(n, s, kv, d, b, i):
    return 2 * b * (s // n) * kv * d * i


MISTAKES = [
    (lambda n, s, h, kv, d, b, i: (n - 1) * _block(n, s, kv, d, b, i), "that is the forward alone"),
    (lambda n, s, h, kv, d, b, i: 2 * (n - 1) * _block(n, s, kv, d, b, i), "you left out the dK,dV"),
    (lambda n, s, h, kv, d, b, i: 3 * (n - 1) * _block(n, s, kv, d, b, i), "the dK,dV make N hops, not N − 1"),
    (lambda n, s, h, kv, d, b, i: 3 * n * _block(n, s, kv, d, b, i), "N − 1 hops bring every K,V block"),
    (lambda n, s, h, kv, d, b, i: ring_bytes(n, s, h, h, d, b, i), "grouped-query attention"),
    (lambda n, s, h, kv, d, b, i: ring_bytes(n, s, h, kv, d, b, i) // 2, "a block is K and V together"),
    (lambda n, s, h, kv, d, b, i: (3 * n - 2) * _block(n, s, kv, d, b, i), "one rank alone"),
]


@pytest.mark.parametrize("wrong, concept", MISTAKES)
def test_each_classic_mistake_is_told_its_concept_and_never_the_value(wrong, concept, capsys):
    with pytest.raises(AssertionError):
        check_ring_bytes_prediction(wrong, run=fake_run())
    out = capsys.readouterr().out
    assert out.startswith("ring attention's bytes: ✗ ") and out.count("\n") == 1 and concept in out, out
    assert "14,336" not in out and "14336" not in out


def test_an_answer_that_calls_simlab_is_refused(capsys):
    def lookup(n, s, h, kv, d, b, i):
        return costs("ring", world_size=n, seq=s, heads=h, kv_heads=kv, head_dim=d, batch=b, itemsize=i).bytes_sent
    for answer in (lookup, lambda *a: cp.truth(*a)):
        with pytest.raises(AssertionError):
            check_ring_bytes_prediction(answer, run=fake_run())
        assert "it calls simlab's own model (" in capsys.readouterr().out


@pytest.mark.parametrize("value", [None, "5120", float("nan"), True, float("inf")])
def test_an_answer_that_is_not_a_number_is_refused_in_one_line(value, capsys):
    with pytest.raises(AssertionError):
        check_ring_bytes_prediction(lambda *a: value, run=fake_run())
    out = capsys.readouterr().out
    assert "return a number of bytes" in out and out.count("\n") == 1


def test_a_run_that_left_its_plan_is_not_graded(capsys):
    with pytest.raises(AssertionError):
        check_ring_bytes_prediction(ring_bytes, run=fake_run(matches=False))
    assert "the run did not follow its plan" in capsys.readouterr().out


def test_the_stub_error_passes_through():
    def stub(*args):
        raise NotImplementedError("exercise")
    with pytest.raises(NotImplementedError):
        check_ring_bytes_prediction(stub, run=fake_run())


# ---- exercise C --------------------------------------------------------------------------------------------------

def test_a_brute_force_choose_is_refused_on_every_budget(capsys):
    def brute(budget):
        key = next(k for k, b in plan_grader.BUDGETS.items() if b == budget)
        return Plan(**{k: v for k, v in plan_grader.best_plan(key)["config"].items() if k in Plan.__dataclass_fields__})
    with pytest.raises(AssertionError):
        plan_grader.check_long_context_plan(brute)
    out = capsys.readouterr().out
    assert out.count("asked the model for a step time") == len(plan_grader.BUDGETS)


def test_the_best_plans_pass_and_a_plan_that_does_not_fit_is_told_why(capsys):
    answers = {k: plan_grader._BEST.setdefault(k, plan_grader.best_plan(k)) for k in plan_grader.BUDGETS}  # the
    # grader's own cache, filled here: its searches are the slowest part of this test, and would run twice
    best = {k: Plan(**{f: v for f, v in a["config"].items() if f in Plan.__dataclass_fields__}) for k, a in answers.items()}
    plan_grader.check_long_context_plan(lambda b: best[next(k for k, x in plan_grader.BUDGETS.items() if x == b)])
    assert capsys.readouterr().out.endswith("choose(budget): ✓ every long-context budget fits and ties with the best "
                                            "plan, and choose never asked the model for a step time\n")
    with pytest.raises(AssertionError):
        plan_grader.check_long_context_plan(lambda b: Plan(dp=b.gpus))
    out = capsys.readouterr().out
    assert "does not fit" in out and "activations grow with s" in out


def test_memory_gb_is_memory_only_and_refuses_what_is_not_a_plan():
    budget = plan_grader.BUDGETS["8b-64k"]
    m = plan_grader.memory_gb(budget, Plan(tp=8, dp=2, zero=1, sequence_parallel=True, recompute="full"))
    assert m["total"] == pytest.approx(m["params"] + m["grads"] + m["optimizer"] + m["activations"], rel=0.2)
    with pytest.raises(TypeError, match="plan: expected"):
        plan_grader.memory_gb(budget, {"tp": 8})
    with pytest.raises(ValueError):
        plan_grader.memory_gb(budget, Plan(dp=3))


def test_the_lesson_never_runs_or_prints_what_exercises_a_and_b_grade():
    """Predict, then run: the shapes the checks grade appear nowhere in lesson 7 (its calls or what it prints)."""
    import json
    from pathlib import Path

    from simlab.grading.expert_parallel import CASES, DROP_RUN
    lesson = json.loads((Path(__file__).resolve().parents[2] / "notebooks/07_long_sequences_and_experts.ipynb")
                        .read_text(encoding="utf-8"))
    code = "\n".join("".join(c["source"]) for c in lesson["cells"] if c["cell_type"] == "code")
    shown = code + "\n".join("".join(o.get("text", "")) for c in lesson["cells"] for o in c.get("outputs", []))
    assert "14,336 B" not in shown and "14336 B" not in shown  # exercise A's answer (Llama 3 8B's ffn is 14336 too)
    assert f"world_size={RING_RUN['world_size']}," not in code and f"seq={RING_RUN['seq']}," not in code
    assert f"seed={DROP_RUN['seed']}" not in code and "capacity_factor=0.75" not in code
    assert all(f"seed={case[4]}" not in code for case in CASES)


def test_a_forgotten_batch_is_told_so_not_mistaken_for_a_missing_v(capsys):
    with pytest.raises(AssertionError):
        check_ring_bytes_prediction(lambda n, s, h, kv, d, b, i: ring_bytes(n, s, h, kv, d, 1, i), run=fake_run())
    assert "it grows with batch" in capsys.readouterr().out
