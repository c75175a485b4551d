"""`simlab.parity.expert_parallel.run_expert_parallel`: the MoE layer over real ranks is exact against one process
(dropped tokens included), torch's differentiable all-to-all agrees, and every rank sends exactly the bytes of the
simulator's plan; with ep × dp, the gradient sums run over the right groups — and leaving one out is caught."""
import pytest

import simlab.parity.expert_parallel as P
from simlab.exec.expert_parallel_layout import _sum_over
from simlab.parity.expert_parallel import run_expert_parallel


def assert_exact_and_as_planned(res):
    assert res["max_abs_diff_vs_reference"] <= 1e-5 and res["max_abs_diff_vs_torch"] <= 1e-5
    assert res["bytes_sent_per_rank"] == res["plan_bytes_sent_per_rank"]
    assert res["send_counts"] == res["plan_send_counts"]
    assert res["routing_matches_simulator"] is True and res["trace_matches_plan"] is True


def test_two_ranks_exact_with_dropped_tokens():
    res = run_expert_parallel(world_size=2, experts=4, top_k=1, capacity_factor=0.5, tokens=8)
    assert_exact_and_as_planned(res)
    assert res["capacity"] == 1  # ceil(0.5 · 8 · 1 / 4): at most 4 of a rank's 8 tokens are kept
    assert all(d >= 4 for d in res["tokens_dropped_per_rank"])
    assert res["plan_bytes_by_group"]["all-to-all"] == [b - d for b, d in zip(
        res["bytes_sent_per_rank"], res["plan_bytes_by_group"]["dense all-reduce"])]


def test_ep_by_dp_sums_gradients_over_megatrons_groups():
    res = run_expert_parallel(world_size=4, dp=2, experts=4, top_k=2, capacity_factor=1.0, tokens=6)
    assert_exact_and_as_planned(res)
    by_group = res["plan_bytes_by_group"]
    assert all(b > 0 for b in by_group["expert all-reduce"]) and all(b > 0 for b in by_group["dense all-reduce"])
    assert res["ep"] == 2 and res["dp"] == 2 and len(res["send_counts"]) == 2  # two ep groups, each its own matrix
    assert res["layout"][1].startswith("rank 1: experts [2, 3]; all-to-all with [0, 1]; expert gradients summed "
                                       "over [1, 3]")


def test_dropless_renormalised_on_four_expert_ranks():
    res = run_expert_parallel(world_size=4, experts=8, top_k=2, capacity_factor=None, renormalize=True, tokens=5)
    assert_exact_and_as_planned(res)
    assert res["capacity"] is None and res["dropped_per_rank"] == [0, 0, 0, 0]


def test_a_missing_expert_gradient_sum_is_caught(monkeypatch):
    """The check can fail: without the expert-data-parallel all-reduce (workers are forked, so they run the patched
    function), each rank's expert gradients hold only its own dp slice's tokens."""
    def dense_only(moe, groups, rec):  # the router's sum alone
        _sum_over(list(moe.router.parameters()), groups["dense"], rec, "dense all-reduce")
    monkeypatch.setattr(P, "sum_gradients", dense_only)
    res = run_expert_parallel(world_size=4, dp=2, experts=4, top_k=2, capacity_factor=1.0, tokens=6)
    assert res["max_abs_diff_vs_reference"] > 1e-3
    assert res["bytes_sent_per_rank"] != res["plan_bytes_sent_per_rank"] and res["trace_matches_plan"] is False


@pytest.mark.parametrize("kwargs, message", [
    (dict(dp=0), "dp=0"), (dict(dp=3), "world_size=2: must be divisible by dp=3"),
    (dict(experts=3), "experts=3: must be divisible by ep=2"), (dict(top_k=5), "top_k=5: must be between 1 and 4"),
    (dict(capacity_factor=0), "capacity_factor=0"), (dict(capacity_factor=float("nan")), "capacity_factor=nan"),
    (dict(tokens=0), "tokens=0"), (dict(hidden=0), "hidden=0"), (dict(ffn=0), "ffn=0"),
    (dict(renormalize="yes"), "renormalize='yes'"), (dict(seed=-1), "seed=-1"), (dict(world_size=0), "world_size=0"),
    (dict(timeout=0), "timeout=0"),
])
def test_bad_input_fails_before_any_process_starts(kwargs, message, no_launch):
    with pytest.raises(ValueError) as err:
        run_expert_parallel(**kwargs)
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")  # megatron.core without TE/Apex
def test_eight_ranks_ep_4_by_dp_2_on_megatrons_groups_with_every_groups_bytes_as_planned():
    """The largest grid the course runs (8 processes): exact, each group's bytes as the plan says (the all-to-all
    in each ep group, the expert gradients over the expert-dp group, the router's over all 8), on the groups
    Megatron-LM's two rank generators make (experts: "tp-ep-dp-pp"; dense: dp = ep · dp)."""
    from megatron.core.parallel_state import RankGenerator
    res = run_expert_parallel(world_size=8, dp=2, experts=8, top_k=2, capacity_factor=1.0, tokens=8)
    assert_exact_and_as_planned(res)
    assert res["bytes_sent_by_group"] == res["plan_bytes_by_group"]
    assert all(b > 0 for k, row in res["bytes_sent_by_group"].items() for b in row)
    experts = RankGenerator(tp=1, ep=4, dp=2, pp=1, cp=1, order="tp-cp-ep-dp-pp")
    dense = RankGenerator(tp=1, ep=1, dp=8, pp=1, cp=1, order="tp-cp-ep-dp-pp")
    as_tuples = lambda groups: sorted(tuple(g) for g in groups)  # noqa: E731 — a one-line helper for the assert
    assert res["groups"] == {"ep": as_tuples(experts.get_ranks("ep")), "expert dp": as_tuples(experts.get_ranks("dp")),
                             "dense dp": as_tuples(dense.get_ranks("dp"))}
