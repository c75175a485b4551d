"""Lesson 6's capstone, part A: `choose(budget)` passes only with plans that fit and tie with the advisor's best
on every budget, shown and variant, decided without the model's step time — a brute force over evaluate_plan or
search is rejected, and so are plans found by one outside `choose` and looked up; a failing budget is told the
concept, not the best plan. The two ZeRO-3 plans are graded against the rank grid and the model's breakdown."""
import json
from pathlib import Path

import pytest

from simlab.grading import hybrid
from simlab.grading.hybrid import (
    BUDGETS,
    CONCEPTS,
    PAIR,
    SHOWN,
    WITHIN,
    check_choose,
    check_zero3_pair,
    memory_gb,
)
from simlab.sim import advisor, hybrid_time
from simlab.sim.advisor import by_family, evaluate_plan, family, search
from simlab.sim.hybrid import Plan
from simlab.sim.model import PRESETS

SOLUTION = Path(__file__).resolve().parents[2] / "solutions" / "06_choosing_a_strategy.ipynb"


def solution_choose():
    """The solution notebook's `choose`, as the learner's cell defines it."""
    cells = {c["id"]: "".join(c["source"]) for c in json.loads(SOLUTION.read_text())["cells"]}
    space = {"Plan": Plan, "PRESETS": PRESETS, "memory_gb": memory_gb}
    exec(cells["x6-choose"], space)
    return space["choose"]


def lines(out: str) -> dict:
    """{budget key: its line} of check_choose's output."""
    return {line.split(":")[0]: line for line in out.splitlines() if line.split(":")[0] in BUDGETS}


def test_the_solutions_rules_pass_every_budget_shown_and_variant(capsys):
    check_choose(solution_choose())
    out = capsys.readouterr().out
    assert all(line.startswith(f"{key}: ✓") for key, line in lines(out).items()) and len(lines(out)) == 6
    assert out.endswith("choose(budget): ✓ every budget fits and ties with the advisor's best, and choose never "
                        "asked the model for a step time\n")
    assert set(SHOWN) < set(BUDGETS)


def brute_force(budget):
    """The lazy answer issue 23 found: try the plans, keep the fastest that fits (15 lines, a couple of seconds)."""
    model, machine = PRESETS[budget.model], budget.cluster()
    best = None
    for tp in (1, 2, 4, 8):
        for pp in (1, 2, 4, 8, 16):
            if budget.gpus % (tp * pp):
                continue
            for zero in range(4):
                plan = Plan(tp=tp, pp=pp, dp=budget.gpus // (tp * pp), zero=zero, sequence_parallel=tp > 1)
                try:
                    r = evaluate_plan(model, machine, budget.global_batch, plan)
                except ValueError:
                    continue
                if r["fits"] and (best is None or r["step_seconds"] < best[0]):
                    best = (r["step_seconds"], plan)
    return best[1]


def test_a_brute_force_over_evaluate_plan_is_rejected_on_every_budget(capsys):
    with pytest.raises(AssertionError):
        check_choose(brute_force)
    out = capsys.readouterr().out
    assert all("✗ asked the model for a step time (evaluate_plan)" in line for line in lines(out).values())
    assert out.splitlines()[-1] == "choose(budget): ✗ 6 of 6 budgets: see the lines above"


def test_the_same_brute_force_passes_with_the_model_on(capsys):
    """The rejection is the switch, not the plans: outside the check the brute force finds good plans."""
    for key in SHOWN:
        b = BUDGETS[key]
        plan = brute_force(b)
        best = search(PRESETS[b.model], b.cluster(), b.global_batch, top=1)["best"]["step_seconds"]
        assert evaluate_plan(PRESETS[b.model], b.cluster(), b.global_batch, plan)["step_seconds"] <= best * (1 + WITHIN)


def swallowing(budget):
    try:
        return Plan(**search(PRESETS[budget.model], budget.cluster(), budget.global_batch)["best"]["config"])
    except BaseException:  # noqa: BLE001 — the lazy answer hides the refusal and returns something
        return Plan(dp=budget.gpus, zero=3, recompute="full")


def swallowing_then_crashing(budget):
    found = []
    try:
        found.append(evaluate_plan(PRESETS[budget.model], budget.cluster(), budget.global_batch, Plan(dp=budget.gpus)))
    except BaseException:  # noqa: BLE001 — a brute force that swallows every refusal, as a lazy learner would
        pass
    return found[0]  # IndexError: but the refusal is what the line reports


def straight_to_step(budget):
    plan = Plan(dp=budget.gpus, zero=3, recompute="full")
    hybrid_time.step(PRESETS[budget.model], plan, budget.cluster(), budget.global_batch)
    return plan


@pytest.mark.parametrize("choose, name", [(swallowing, "search"), (swallowing_then_crashing, "evaluate_plan"),
                                          (straight_to_step, "step")])
def test_asking_the_model_any_way_is_rejected_even_if_the_error_is_caught(choose, name, capsys):
    with pytest.raises(AssertionError):
        check_choose(choose)
    assert all(f"✗ asked the model for a step time ({name})" in line for line in lines(capsys.readouterr().out).values())


def test_plans_found_outside_choose_and_looked_up_fail_the_variants(capsys):
    found = {BUDGETS[key]: brute_force(BUDGETS[key]) for key in SHOWN}  # the model is on here

    def lookup(budget):
        return found[budget]
    with pytest.raises(AssertionError):
        check_choose(lookup)
    out = lines(capsys.readouterr().out)
    assert all(out[key].startswith(f"{key}: ✓") for key in SHOWN)
    assert all("✗ raised KeyError" in out[key] for key in BUDGETS if key not in SHOWN)


def test_the_advisors_best_for_each_shown_model_fails_its_variant(capsys):
    """Each variant changes what a rule keys on: the shown budget's best plan, keyed on the model, fails there."""
    best = {BUDGETS[key].model: Plan(**search(PRESETS[BUDGETS[key].model], BUDGETS[key].cluster(),
                                              BUDGETS[key].global_batch)["best"]["config"]) for key in SHOWN}
    with pytest.raises(AssertionError):
        check_choose(lambda budget: best[budget.model])
    out = lines(capsys.readouterr().out)
    assert all(out[key].startswith(f"{key}: ✓") for key in SHOWN)
    assert "more than the model's error (12%) slower" in out["7b-a100"]
    assert "✗ cannot run here: " in out["70b-h200"] and "✗ cannot run here: " in out["175b-512"]


def test_the_model_is_switched_back_on_after_the_check(capsys):
    originals = {name: getattr(advisor, name) for name in hybrid.MODEL_TIME}
    with pytest.raises(AssertionError):
        check_choose(brute_force)
    assert {name: getattr(advisor, name) for name in hybrid.MODEL_TIME} == originals
    assert hybrid.search is search and hybrid.evaluate_plan is evaluate_plan and advisor.step is hybrid_time.step
    b = BUDGETS["7b-a100"]
    assert evaluate_plan(PRESETS[b.model], b.cluster(), b.global_batch, Plan(dp=8, zero=1))["fits"]


def test_a_plan_that_does_not_fit_is_told_its_bytes_and_the_remedies(capsys):
    with pytest.raises(AssertionError):
        check_choose(lambda budget: Plan(dp=budget.gpus))
    out = lines(capsys.readouterr().out)
    line = out["70b-ethernet"]
    assert line.startswith("70b-ethernet: ✗ tp 1 × pp 1 × dp 64 does not fit: ") and "> 79 GB usable" in line
    assert all(f"{part} " in line for part in ("params", "grads", "optimizer", "activations"))
    assert line.endswith("shard more (ZeRO over DP, TP inside a node, PP) or recompute")


def test_a_slow_plan_is_told_the_concept_never_the_best_plan(capsys):
    slow = {"70b-ethernet": PAIR["P"]}  # ZeRO-3 whose DP group crosses Ethernet: dp_comm

    def choose(budget):
        key = next(k for k, b in BUDGETS.items() if b == budget)
        return slow.get(key) or solution_choose()(budget)
    with pytest.raises(AssertionError):
        check_choose(choose)
    out = capsys.readouterr().out
    line = lines(out)["70b-ethernet"]
    assert line == ("70b-ethernet: ✗ TP+PP+DP+ZeRO-3, tp 4 × pp 4 × dp 4, fits but is more than the model's error "
                    "(12%) slower than the best plan; most of the time it loses goes to " + CONCEPTS["dp_comm"])
    b = BUDGETS["70b-ethernet"]
    best = search(PRESETS[b.model], b.cluster(), b.global_batch, top=1)["best"]
    assert family(best["config"]) not in line and f"{best['step_seconds']:.3g}" not in line
    assert out.splitlines()[-1] == "choose(budget): ✗ 1 of 6 budgets: see the lines above"


@pytest.mark.parametrize("answer, said", [
    (lambda b: None, "returned NoneType, not a simlab.sim.hybrid.Plan"),
    (lambda b: "tp=8", "returned str, not a simlab.sim.hybrid.Plan"),
    (lambda b: Plan(tp=3, dp=2), "cannot run here: tp=3: tp*pp*dp = 6 must use all gpus="),
    (lambda b: 1 / 0, "raised ZeroDivisionError: division by zero")])
def test_a_bad_return_is_one_line_per_budget(answer, said, capsys):
    with pytest.raises(AssertionError):
        check_choose(answer)
    out = capsys.readouterr().out
    assert all(said in line for line in lines(out).values()) and out.count("\n") == 7


def test_the_stub_passes_through_and_a_non_function_is_refused(capsys):
    def stub(budget):
        raise NotImplementedError("exercise: write your answer here")
    with pytest.raises(NotImplementedError):
        check_choose(stub)
    with pytest.raises(AssertionError):
        check_choose(Plan())
    assert "expected a function of one budget, got Plan" in capsys.readouterr().out


def test_memory_gb_is_the_models_memory_and_refuses_what_cannot_run():
    b = BUDGETS["7b-workstation"]
    for plan in (Plan(dp=8, zero=3), Plan(dp=8, zero=3, microbatch=2, recompute="full")):
        m, r = memory_gb(b, plan), evaluate_plan(PRESETS[b.model], b.cluster(), b.global_batch, plan)
        assert m["total"] == pytest.approx(r["bytes_per_gpu"]["total"] / 1e9) and m["fits"] == r["fits"]
    with pytest.raises(ValueError, match="must use all gpus"):
        memory_gb(b, Plan(dp=4))


def test_the_rationale_holds_on_ethernet_zero3_ties_only_where_its_dp_group_stays_in_a_node():
    """The solution says (x6-pair-answer, x6-choose): on a slow network ZeRO-0/1 may cross it, ZeRO-3 only where
    its DP group rides fast links. The advisor agrees: its ZeRO-3 family ties with the best there with DP
    inside a node, and the same family with DP across nodes (PAIR's P) is far slower."""
    b = BUDGETS["70b-ethernet"]
    model, machine = PRESETS[b.model], b.cluster()
    best = search(model, machine, b.global_batch, top=1)["best"]["step_seconds"]
    zero3 = by_family(model, machine, b.global_batch, families=("TP+PP+DP+ZeRO-3",))["TP+PP+DP+ZeRO-3"]
    assert zero3["step_seconds"] <= best * (1 + WITHIN)
    assert zero3["config"]["tp"] * zero3["config"]["dp"] <= b.gpus_per_node
    assert evaluate_plan(model, machine, b.global_batch, PAIR["P"])["step_seconds"] > 5 * best


def test_the_zero3_pair_is_graded_against_the_grid_and_the_breakdown(capsys):
    check_zero3_pair({"P": True, "Q": False}, "Q", "dp_comm")
    assert capsys.readouterr().out.startswith("two ZeRO-3 plans: ✓ Q is faster: Q ")


@pytest.mark.parametrize("answer, case, hint", [
    (({"P": False, "Q": False}, "Q", "dp_comm"), "dp_crosses", "not for P: in Megatron's order a DP group's ranks "
                                                               "are tp apart"),
    (({"P": True, "Q": True}, "Q", "dp_comm"), "dp_crosses", "not for Q: "),
    (({"P": True, "Q": False}, "P", "dp_comm"), "faster", "every micro-batch (lesson 3): in which plan"),
    (({"P": True, "Q": False}, "Q", "pp_bubble"), "decides", "not the part that differs most"),
    (({"P": True, "Q": False}, "Q", "compute"), "decides", "not the part that differs most")])
def test_a_wrong_pair_answer_gets_the_concept_not_the_numbers(answer, case, hint, capsys):
    with pytest.raises(AssertionError):
        check_zero3_pair(*answer)
    out = capsys.readouterr().out
    assert out.startswith(f"two ZeRO-3 plans: ✗ {case}: ") and hint in out and out.count("\n") == 1
    assert " s per step" not in out and "780" not in out


@pytest.mark.parametrize("answer, message", [
    (("yes", "Q", "dp_comm"), "answer with a dict of True or False for \"P\" and \"Q\""),
    (({"P": 1, "Q": 0}, "Q", "dp_comm"), "answer with a dict of True or False"),
    (({"P": True, "Q": False}, "q", "dp_comm"), "answer with \"P\" or \"Q\""),
    (({"P": True, "Q": False}, "Q", "network"), "answer with one of 'compute', 'tp_comm'")])
def test_a_pair_answer_of_the_wrong_shape_is_refused(answer, message, capsys):
    with pytest.raises(AssertionError):
        check_zero3_pair(*answer)
    assert message in capsys.readouterr().out
