"""Expert parallelism's simulator: routing, capacity and drops (`sim.expert_parallel`) and the all-to-all plan
(`sim.expert_parallel_dispatch`), each against its rule written out independently here or its closed form.
Expert-data parallel: tests/sim/test_expert_parallel_layout.py."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simlab.sim.expert_parallel import balanced_logits, capacity, random_logits, route, softmax
from simlab.sim.expert_parallel_dispatch import STEPS, balanced_bytes, dispatch_plan, owner

pytestmark = pytest.mark.usefixtures("english_afterwards")  # one test says a step in Chinese


# ---- capacity and routing ----------------------------------------------------------------------------------

def test_capacity_closed_form_and_decimal_factor():
    assert capacity(8, 4, 2, 1.25) == 5  # ceil(1.25 · 8 · 2 / 4)
    assert capacity(8, 4, 2, 1.0) == 4 and capacity(9, 4, 2, 1.0) == 5  # ceil(18 / 4)
    assert capacity(10, 11, 1, 1.1) == 1  # 11/10 · 10/11 = 1, not the float product's 1.0000000000000002 → 2
    assert capacity(3, 2, 1, 2) == 3 and capacity(8, 4, 2, None) is None


@pytest.mark.parametrize("args, message", [
    ((0, 4, 1, 1.0), "tokens=0"), ((4, 0, 1, 1.0), "experts=0"), ((4, 2, 3, 1.0), "top_k=3: must be between 1 and 2"),
    ((4, 2, 1, 0), "capacity_factor=0"), ((4, 2, 1, -1.0), "capacity_factor=-1.0"),
    ((4, 2, 1, float("nan")), "capacity_factor=nan"), ((4, 2, 1, float("inf")), "capacity_factor=inf"),
    ((4, 2, 1, "1"), "capacity_factor='1'"),
])
def test_capacity_refuses_bad_input_in_one_line(args, message):
    with pytest.raises(ValueError) as err:
        capacity(*args)
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("logits, message", [
    ([1.0, 2.0], "2-D"), ([[1.0, float("nan")]], "finite"), ([[1.0, float("inf")]], "finite"), (np.zeros((0, 3)), "2-D"),
    ([["a", "b"]], "2-D"), ([[1.0], [1.0, 2.0]], "2-D"),
])
def test_route_refuses_bad_logits_in_one_line(logits, message):
    with pytest.raises(ValueError) as err:
        route(logits, 1)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_choice_major_drop_order():
    """GShard's rule: every first choice claims its place before any second choice. Token 0 prefers expert 1,
    token 1 expert 0; capacity 1: both first choices are kept and both second choices dropped. (In token-major
    order token 0 would keep both and token 1 lose both.)"""
    r = route([[0.0, 1.0], [1.0, 0.0]], top_k=2, capacity_factor=0.5)
    assert r.capacity == 1 and r.experts.tolist() == [[1, 0], [0, 1]]
    assert r.kept.tolist() == [[True, False], [True, False]] and r.tokens_dropped == 0 and r.dropped == 2


def test_switch_top1_keeps_the_first_tokens_in_order():
    r = route(np.tile([0.0, 2.0, 1.0], (5, 1)), top_k=1, capacity_factor=1.2)  # all 5 want expert 1; C = 2
    assert r.capacity == 2 and r.kept[:, 0].tolist() == [True, True, False, False, False]
    assert r.load.tolist() == [0, 2, 0] and r.demand.tolist() == [0, 5, 0] and r.tokens_dropped == 3
    assert r.imbalance == 3.0  # 2 tokens on one of 3 experts: max 2 over a mean of 2/3


def test_weights_are_softmax_probabilities_or_renormalised():
    z = np.array([[2.0, 1.0, 0.0, -1.0]])
    p = np.exp(z) / np.exp(z).sum()
    assert route(z, 2, None).weights == pytest.approx(p[:, :2])  # Switch / DeepSeek: not renormalised
    assert route(z, 2, None, renormalize=True).weights == pytest.approx(p[:, :2] / p[:, :2].sum())  # Mixtral
    assert route([[1.0, 1.0, 0.0]], 2, None).experts.tolist() == [[0, 1]]  # a tie goes to the lower index


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 24), st.integers(1, 8), st.data(), st.integers(0, 10_000),
       st.one_of(st.none(), st.sampled_from([0.25, 0.5, 1.0, 1.1, 1.25, 2.0])), st.booleans())
def test_routing_properties(tokens, experts, data, seed, factor, renormalize):
    top_k = data.draw(st.integers(1, experts))
    z = random_logits(tokens, experts, seed, skew=data.draw(st.sampled_from([0.0, 2.0])))
    r = route(z, top_k, factor, renormalize)
    # top-k: distinct experts per token, most probable first, and none left out scored higher
    assert all(len(set(row)) == top_k for row in r.experts.tolist())
    chosen_scores = np.take_along_axis(z, r.experts, axis=1)
    assert (np.diff(chosen_scores, axis=1) <= 0).all()
    for t in range(tokens):
        others = np.delete(z[t], r.experts[t])
        assert others.size == 0 or chosen_scores[t].min() >= others.max()
    assert r.weights == pytest.approx(np.take_along_axis(softmax(z), r.experts, 1) /
                                      (np.take_along_axis(softmax(z), r.experts, 1).sum(1, keepdims=True)
                                       if renormalize else 1.0))
    # loads sum to tokens·k minus the dropped; each expert keeps min(demand, capacity)
    assert r.load.sum() == tokens * top_k - r.dropped and r.demand.sum() == tokens * top_k
    cap = capacity(tokens, experts, top_k, factor)
    assert r.capacity == cap
    assert r.load.tolist() == (r.demand if cap is None else np.minimum(r.demand, cap)).tolist()
    # the drop rule: per expert, in (choice, token) order, the kept claims are a prefix of its claims
    for e in range(experts):
        claims = [r.kept[t, c] for c in range(top_k) for t in range(tokens) if r.experts[t, c] == e]
        assert claims == sorted(claims, reverse=True)
    assert r.imbalance >= 1.0 - 1e-12 and (r.imbalance == 1.0) == (len(set(r.load.tolist())) == 1)
    assert 0 <= r.tokens_dropped <= min(tokens, r.dropped)


def test_balanced_logits_route_evenly():
    r = route(balanced_logits(12, 6, 2), 2, 1.0)
    assert r.load.tolist() == [4] * 6 and r.dropped == 0 and r.imbalance == 1.0


def test_random_logits_are_seeded_and_skew_prefers_the_first_experts():
    assert np.array_equal(random_logits(5, 4, seed=3), random_logits(5, 4, seed=3))
    assert not np.array_equal(random_logits(5, 4, seed=3), random_logits(5, 4, seed=4))
    skewed = route(random_logits(400, 4, seed=0, skew=3.0), 1, None)
    assert skewed.demand[0] > skewed.demand[-1] and skewed.imbalance > 2.0


# ---- the all-to-all plan ------------------------------------------------------------------------------------

def _routings(ep, tokens, experts, top_k, factor, seed):
    return [route(random_logits(tokens, experts, seed + r), top_k, factor) for r in range(ep)]


@settings(max_examples=100, deadline=None)
@given(st.sampled_from([1, 2, 3, 4]), st.integers(1, 3), st.integers(1, 16), st.integers(0, 1000), st.data())
def test_send_matrix_sums_and_bytes(ep, per_rank, tokens, seed, data):
    experts = ep * per_rank
    top_k = data.draw(st.integers(1, experts))
    factor = data.draw(st.sampled_from([None, 0.5, 1.0, 1.5]))
    routings = _routings(ep, tokens, experts, top_k, factor, seed)
    plan = dispatch_plan(routings, hidden=6, itemsize=2)
    s = plan.send_counts
    assert s.sum(axis=1).tolist() == [tokens * top_k - r.dropped for r in routings]  # row: what i kept
    for j in range(ep):  # column: rows j's experts compute, from every rank
        assert s[:, j].sum() == sum(r.load[e] for r in routings for e in range(experts) if owner(e, experts, ep) == j)
    assert plan.received_rows == s.sum(axis=0).tolist()
    diag = np.diag(s)
    assert plan.dispatch_bytes == ((s.sum(axis=1) - diag) * 6 * 2).tolist()
    assert plan.combine_bytes == ((s.sum(axis=0) - diag) * 6 * 2).tolist()
    assert sum(plan.dispatch_bytes) == sum(plan.combine_bytes)  # whatever goes out comes back
    assert plan.counts_bytes == [(ep - 1) * per_rank * 8] * ep
    trace = plan.to_trace()
    # a rank receives in dispatch what it sends in combine and the other way round: sent == received, per rank
    assert trace.bytes_sent_per_rank(ep) == plan.bytes_sent_per_rank == trace.bytes_received_per_rank(ep)
    assert len([e for e in trace if e.kind == "compute"]) == 3 * ep


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([1, 2, 4, 8]), st.integers(1, 3), st.integers(1, 4), st.integers(1, 3), st.data())
def test_balanced_closed_form(ep, per_rank, multiple, hidden, data):
    experts = ep * per_rank
    top_k = data.draw(st.integers(1, experts))
    tokens = multiple * experts // math.gcd(experts, top_k)  # tokens · top_k divisible by experts
    plan = dispatch_plan([route(balanced_logits(tokens, experts, top_k), top_k, 1.0)] * ep, hidden, 4)
    assert (plan.send_counts == tokens * top_k // ep).all()
    closed = balanced_bytes(tokens, top_k, ep, hidden, 4)
    assert plan.dispatch_bytes == plan.combine_bytes == [closed] * ep
    assert closed == tokens * top_k * (ep - 1) * hidden * 4 / ep
    assert plan.bytes_sent_per_rank == [(ep - 1) * per_rank * 8 + 4 * closed] * ep


def test_steps_reverse_the_exchanges_in_backward():
    plan = dispatch_plan(_routings(3, 10, 6, 2, 1.0, seed=1), hidden=4)
    steps = {s.name: s for s in plan.steps()}
    assert [s.name for s in plan.steps()] == list(STEPS)
    s = plan.send_counts
    assert np.array_equal(steps["dispatch"].rows, s) and np.array_equal(steps["combine"].rows, s.T)
    assert np.array_equal(steps["combine backward"].rows, s) and np.array_equal(steps["dispatch backward"].rows, s.T)
    assert steps["combine backward"].bytes_sent == steps["dispatch"].bytes_sent
    assert steps["experts"].work == tuple(plan.received_rows) and steps["route"].rows is None
    assert [steps[n].phase for n in STEPS] == ["forward"] * 6 + ["backward"] * 2


def test_a_step_is_said_in_english_and_in_chinese():
    from simlab.i18n import _, set_language
    dropless = dispatch_plan(_routings(2, 4, 4, 2, None, seed=0), hidden=8).steps()[0].text()
    capped = dispatch_plan(_routings(2, 4, 4, 2, 1.0, seed=0), hidden=8).steps()[0].text()
    assert capped == "each rank routes its 4 tokens: top-2 of 4 experts, an expert keeps at most 2 of them"
    assert dropless.endswith("no capacity limit (dropless)")
    set_language("zh")
    assert "专家" in _(capped) and "2" in _(capped) and "不丢弃" in _(dropless)


@pytest.mark.parametrize("kwargs, message", [
    (dict(routings=[]), "routings"), (dict(routings=["x"]), "routings"),
    (dict(routings=_routings(3, 4, 4, 1, 1.0, 0)), "experts=4: must be divisible by ep=3"),
    (dict(routings=_routings(2, 4, 4, 1, 1.0, 0), hidden=0), "hidden=0"),
])
def test_dispatch_plan_refuses_bad_input(kwargs, message):
    with pytest.raises(ValueError) as err:
        dispatch_plan(**({"hidden": 4} | kwargs))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_balanced_bytes_refuses_a_split_that_is_not_whole():
    with pytest.raises(ValueError, match="tokens\\*top_k=3: must be divisible by ep=2"):
        balanced_bytes(3, 1, 2, 4)


@pytest.mark.parametrize("call, message", [
    (lambda: random_logits(4, 2, skew=float("nan")), "skew=nan"), (lambda: random_logits(4, 2, seed=-1), "seed=-1"),
    (lambda: balanced_logits(4, 4, 5), "top_k=5"), (lambda: route([[1.0, 2.0]], 0), "top_k=0"),
    (lambda: route([[1.0, 2.0]], True), "top_k=True"), (lambda: route([[1.0, 2.0]], 1, renormalize="no"), "renormalize='no'"),
    (lambda: route([[1.0, 2.0]], 1, capacity_factor=True), "capacity_factor=True"),
])
def test_the_other_entry_points_refuse_bad_input_in_one_line(call, message):
    with pytest.raises(ValueError) as err:
        call()
    assert message in str(err.value) and "\n" not in str(err.value)
