"""The advisor derives the primer's 适用场景, scenario by scenario, and its search is consistent."""
import numpy as np
import pytest

from simlab.sim.advisor import candidates, evaluate, family, search
from simlab.sim.hardware import cluster
from simlab.sim.hybrid import Plan
from simlab.sim.hybrid_memory import per_gpu
from simlab.sim.hybrid_time import step
from simlab.sim.model import PRESETS, Transformer

GPT2 = Transformer("gpt2-124m", 12, 768, 12, seq=1024, vocab=50257)  # 124M parameters
WIDE = Transformer("wide-4-layers", 4, 22528, 128, seq=2048, vocab=51200)  # one layer: 6.1B params, 97 GB


def best(model, c, batch, **fixed):
    r = search(model, c, batch, **fixed)
    return r, r["best"]["config"]


def test_one_gpu_that_fits_trains_plainly():
    r, b = best(GPT2, cluster("rtx-4090", gpus=1), 8)
    assert family(b) == "single GPU" and b["zero"] == 0 and not b["offload"]


def test_one_gpu_that_does_not_fit_offloads():
    r, b = best(PRESETS["llama2-7b"], cluster("a100-80gb", gpus=1), 8)
    assert family(b) == "single GPU + Offload"
    assert any(k.startswith("single GPU: ") and k.endswith("> 79 GB usable") for k in r["rejected"])  # 16 B × 6.7B


def test_one_node_and_the_model_fits_on_a_gpu_data_parallel():
    r, b = best(PRESETS["megatron-1.7b-2021"], cluster(gpus=8), 64)
    assert (b["tp"], b["pp"], b["dp"]) == (1, 1, 8)  # DDP; ZeRO optional


def test_one_node_and_the_model_does_not_fit_shards_it():
    r, b = best(PRESETS["megatron-18.4b-2021"], cluster(gpus=8), 64)
    assert b["tp"] > 1 or b["pp"] > 1 or b["zero"] >= 1
    assert any(k.startswith("pure DP: ") for k in r["rejected"])  # 18.4B × 16 B on every GPU


def test_one_node_and_one_layer_bigger_than_a_gpu_needs_tp_or_zero_3_never_pure_pp():
    r, b = best(WIDE, cluster(gpus=8), 16)
    assert b["tp"] > 1 or b["zero"] == 3
    model, c = WIDE, cluster(gpus=8)
    k = candidates(model, c, 16, {})
    mem, _, fits = evaluate(model, c, 16, k, "mixed")
    pipeline_only = (k.tp == 1) & (k.zero == 0) & (k.pp > 1)  # pure PP (+ DP): a whole layer's states on a GPU
    assert pipeline_only.any() and not fits[pipeline_only].any()
    assert (mem["total"][pipeline_only] > 97e9).all()


def test_many_nodes_fast_network_zero_or_3d():
    r, b = best(PRESETS["gpt3-175b"], cluster(gpus=1024, inter_node_gbps=1600), 1536)
    assert (b["zero"] >= 1 and b["dp"] > 1) or (b["tp"] > 1 and b["pp"] > 1 and b["dp"] > 1)
    assert r["notes"]  # it says how this compares with today's FSDP + TP practice


def test_many_nodes_slow_network_dp_tp_pp_zero_1_with_tp_inside_a_node():
    r, b = best(PRESETS["gpt3-175b"], cluster(gpus=1024, inter_node_gbps=25), 1536)
    assert family(b) == "TP+PP+DP+ZeRO-1" and b["tp"] <= 8
    assert any("TP+PP+DP+ZeRO-3" in line and "slower" in line for line in r["explanation"])  # per micro-batch
    assert not r["notes"]  # FSDP does not come close on a slow network: the "modern practice" note does not apply


def test_tp_8_for_an_8b_model_on_one_node_loses_to_sharding_the_data():
    r, b = best(PRESETS["llama3-8b"], cluster("h100-80gb", gpus=8), 16)
    assert b["tp"] < 8 and b["dp"] > 1
    tp8 = search(PRESETS["llama3-8b"], cluster("h100-80gb", gpus=8), 16, tp=8)["best"]
    assert tp8["step_seconds"] > 1.15 * r["best"]["step_seconds"]


def test_tp_groups_that_straddle_nodes_never_win():
    """96 heads divide by 6, and 48 GPUs by TP 6; but TP 6 on 8-GPU nodes crosses the network every layer."""
    m, c = PRESETS["gpt3-175b"], cluster(gpus=48)
    r = search(m, c, 96)
    assert all(x["config"]["tp"] in (1, 2, 4, 8) for x in r["candidates"])
    six = search(m, c, 96, tp=6)["best"]
    assert six["step_seconds"] > r["best"]["step_seconds"] and six["breakdown"]["tp_comm"] > 0


def test_close_plans_are_a_tie_within_the_models_error_with_what_would_decide():
    from simlab.sim.advisor_explain import MODEL_ERROR, tie_line
    r = search(PRESETS["megatron-1.7b-2021"], cluster(gpus=8), 64)
    assert {t["family"] for t in r["ties"]} >= {"DDP"}
    assert all(1 <= t["ratio"] <= 1 + MODEL_ERROR and t["decide"].startswith(("measure", "time")) for t in r["ties"])
    assert any(line.startswith("DDP: ") and "a tie within the model's error" in line for line in r["explanation"])
    assert tie_line(r["ties"]).startswith(f"tie within the model's error (±{MODEL_ERROR:.0%}): ")
    far = search(PRESETS["gpt3-175b"], cluster(gpus=1024, inter_node_gbps=25), 1536)
    assert all(t["family"] != "TP+PP+DP+ZeRO-3" for t in far["ties"])


def test_the_search_tries_hsdp_and_lighter_end_stages():
    k = candidates(PRESETS["gpt3-175b"], cluster(gpus=256), 512, {})
    assert ((k.shard < k.dp) & (k.zero > 0)).any() and (k.shard[k.zero == 0] == k.dp[k.zero == 0]).all()
    assert ((k.first < k.mid) & (k.pp > 2)).any()
    hsdp = search(PRESETS["llama2-7b"], cluster(gpus=64, inter_node_gbps=100), 128, shard=16)
    assert all(x["config"]["shard"] == 16 or x["config"]["dp"] == 16  # sharding over all 16 is plain ZeRO
               for x in hsdp["candidates"] if x["config"]["zero"])


def test_ranked_candidates_all_fit_and_agree_with_one_plan_at_a_time():
    m, c = PRESETS["gpt3-175b"], cluster(gpus=256)
    r = search(m, c, 512, top=10)
    times = [x["step_seconds"] for x in r["candidates"]]
    assert times == sorted(times) and all(x["fits"] for x in r["candidates"]) and len(times) == 10
    for x in r["candidates"][:3] + search(m, c, 512, shard=8, pp=4)["candidates"][:2]:  # vectorised == scalar
        plan = Plan(**x["config"])
        assert step(m, plan, c, 512)["step_seconds"] == pytest.approx(x["step_seconds"])
        assert per_gpu(m, plan, 512)["total"] == pytest.approx(x["bytes_per_gpu"]["total"])
    assert 0 < sum(r["rejected"].values()) < r["plans"]


def test_fixed_choices_are_constraints():
    r = search(PRESETS["gpt3-175b"], cluster(gpus=256), 512, tp=4, recompute="full")
    assert all(x["config"]["tp"] == 4 and x["config"]["recompute"] == "full" for x in r["candidates"])


@pytest.mark.parametrize("kwargs, message", [(dict(tp=5), "no layout"), (dict(colour="red"), "constraint='colour'")])
def test_bad_constraints(kwargs, message):
    with pytest.raises(ValueError, match=message):
        search(PRESETS["gpt3-175b"], cluster(gpus=64), 64, **kwargs)


def test_nothing_fits_is_said():
    r = search(PRESETS["megatron-1t"], cluster(gpus=8), 8)
    assert r["best"] is None and r["explanation"][0].startswith("nothing fits")


def test_every_plan_of_a_trillion_parameters_on_3072_gpus():
    k = candidates(PRESETS["megatron-1t"], cluster(gpus=3072), 3072, {})
    assert len(k.tp) > 50_000  # what the benchmark times (benchmarks/advisor.py)
    assert set(np.unique(k.zero)) == {0, 1, 2, 3} and set(np.unique(k.recompute)) == {0, 2}  # flash: no selective
    eager = candidates(PRESETS["megatron-1t"], cluster(gpus=3072), 3072, {}, attention="eager")
    assert set(np.unique(eager.recompute)) == {0, 1, 2}


def test_the_modern_practice_note_follows_a_tie_with_fsdp_under_tp_and_pp_not_the_grid():
    """N5 (issue 23): the note keys on FSDP (ZeRO-3) under TP+PP tying with the winner, so the slow network's
    3-D + ZeRO-1, whose ZeRO-3 rivals lose, gets none; the lesson's stored outputs show the same."""
    import json
    from pathlib import Path

    from simlab.sim.advisor_explain import MODERN, notes
    c = cluster(gpus=1024, inter_node_gbps=25)
    three_d = {"tp": 8, "pp": 16, "dp": 8, "zero": 1}
    assert notes(three_d, c, []) == [] and notes(three_d, c, [{"family": "TP+PP+DP", "ratio": 1.0}]) == []
    assert notes(three_d, c, [{"family": "TP+PP+DP+ZeRO-3", "ratio": 1.05}]) == [MODERN]
    lesson = Path(__file__).resolve().parents[2] / "notebooks" / "06_choosing_a_strategy.ipynb"
    printed = {c["id"]: "".join("".join(o.get("text", "")) for o in c.get("outputs", []))
               for c in json.loads(lesson.read_text(encoding="utf-8"))["cells"]}
    assert "modern practice" in printed["l6-nodes-fast"] and "modern practice" not in printed["l6-nodes-slow"]


def test_search_and_by_family_on_one_question_evaluate_the_plans_once(monkeypatch):
    """The strategy explorer asks both at once: one evaluation of every plan serves them (read-only, so a caller
    cannot change the other's answer), and another question is evaluated afresh."""
    from simlab.sim import advisor
    from simlab.sim.hardware import cluster as make_cluster
    from simlab.sim.model import PRESETS as models

    calls = []
    real = advisor.evaluate
    monkeypatch.setattr(advisor, "evaluate", lambda *a: calls.append(a[2]) or real(*a))
    advisor._EVALUATED.clear()
    model, c = models["llama2-7b"], make_cluster("a100-80gb", 8)
    best = advisor.search(model, c, 64)["best"]
    rivals = advisor.by_family(model, c, 64)
    assert calls == [64] and best["step_seconds"] == min(r["step_seconds"] for r in rivals.values() if r["fits"])
    k, mem, _time, _fits = next(iter(advisor._EVALUATED.values()))
    with pytest.raises(ValueError):
        mem["total"][0] = 0.0
    advisor.search(model, c, 128)
    assert calls == [64, 128]


# ---- lesson 7: context parallelism and experts in the search ------------------------------------------------------

LONG = PRESETS["llama3-8b"].with_(seq=32768)
TINY_MOE = Transformer("tiny-moe", 4, 512, 8, seq=1024, vocab=1000, experts=6, top_k=2)


def test_cp_is_every_split_of_the_sequence_into_2cp_chunks_and_ulysses_needs_whole_heads():
    h100 = cluster("h100-80gb", gpus=8)
    assert set(candidates(LONG, h100, 8, {}).cp.tolist()) == {1, 2, 4, 8}
    short = Transformer("seq-24", 2, 64, 4, seq=24, vocab=100, kv_heads=2)
    assert set(candidates(short, h100, 8, {}).cp.tolist()) == {1, 2, 4}  # 24 = 2·cp chunks: cp 8 would need 16 | 24
    k = candidates(short, h100, 8, {}, cp_comm="ulysses")  # 2 K/V heads: tp·cp must divide them
    assert set(np.unique((k.tp * k.cp)[k.cp > 1])) == {2} and set(k.cp.tolist()) == {1, 2}


def test_ep_divides_the_dp_group_and_the_experts_and_a_dense_model_has_none():
    k = candidates(TINY_MOE, cluster(gpus=8), 8, {})
    assert set(k.ep.tolist()) == {1, 2} and (k.dp % k.ep == 0).all()  # 6 experts, dp a divisor of 8: ep 1 or 2
    assert (TINY_MOE.experts % k.ep == 0).all() and set(candidates(GPT2, cluster(gpus=8), 8, {}).ep.tolist()) == {1}


def test_every_candidate_is_a_plan_that_can_run():
    from simlab.sim.advisor import config
    from simlab.sim.hybrid import check_plan
    for model, c, batch in ((LONG, cluster("h100-80gb", gpus=8), 8), (TINY_MOE, cluster(gpus=8), 8)):
        k = candidates(model, c, batch, {}, cp_comm="ulysses", capacity=1.25 if model.experts else 0.0)
        for i in range(0, len(k.tp), 37):
            check_plan(model, Plan(**config(k, i, model)), c.gpus, batch)  # raises if the space holds a bad plan


def test_cp_and_ep_are_constraints_and_the_settings_are_checked_in_one_line():
    h100 = cluster("h100-80gb", gpus=8)
    r = search(LONG, h100, 8, cp=2)
    assert all(x["config"]["cp"] == 2 for x in r["candidates"])
    assert all(x["config"]["ep"] == 2 for x in search(TINY_MOE, cluster(gpus=8), 8, ep=2)["candidates"])
    for kwargs, message in ((dict(cp=0), "cp=0"), (dict(cp_comm="star"), "cp_comm='star'"),
                            (dict(capacity=float("nan")), "capacity=nan"), (dict(capacity=1.25), "capacity=1.25")):
        with pytest.raises(ValueError, match=message):
            search(LONG, h100, 8, **kwargs)  # capacity=1.25: a dense model routes nothing


def test_families_name_cp_and_ep_in_megatrons_order():
    assert family({"tp": 2, "cp": 4, "pp": 2, "dp": 2, "zero": 1, "offload": False}) == "TP+CP+PP+DP+ZeRO-1"
    assert family({"tp": 1, "pp": 1, "dp": 8, "ep": 8, "zero": 0, "offload": False}) == "DP+EP"
    assert family({"tp": 1, "cp": 8, "pp": 1, "dp": 1, "zero": 3, "offload": False}) == "CP+ZeRO-3"  # over dp·cp


def test_only_plans_that_fit_are_timed_and_each_family_keeps_its_least_hungry():
    from simlab.sim.advisor_explain import family_codes
    model, c = LONG, cluster("h100-80gb", gpus=8)
    k = candidates(model, c, 8, {})
    mem, time, fits = evaluate(model, c, 8, k, "mixed")
    timed = ~np.isnan(time["step_seconds"])
    assert (timed >= fits).all() and (~fits).any()
    codes, _names = family_codes(k)
    for code in np.unique(codes):
        members = np.flatnonzero(codes == code)
        assert timed[members[np.argmin(mem["total"][members])]]


def test_the_cp_line_says_what_the_plans_without_cp_cost():
    """The explanation's CP line is the best plan against the search with cp fixed at 1: a separate search."""
    model, c = LONG.with_(seq=131072), cluster("h100-80gb", gpus=8)
    r = search(model, c, 8)
    line = next(x for x in r["explanation"] if x.startswith("CP"))
    sides = [1] if r["best"]["config"]["cp"] > 1 else [2, 4, 8]  # the other side: without CP, or with it
    rival = min((search(model, c, 8, cp=cp)["best"] for cp in sides), key=lambda x: x["step_seconds"])
    assert f"{rival['step_seconds'] / r['best']['step_seconds']:.2f}×" in line


def test_the_lesson_7_line_for_a_side_that_does_not_fit_names_its_largest_part():
    from simlab.sim.advisor_explain import _lesson7_line
    mem = {"total": np.array([60e9, 90e9]), "params": np.array([10e9, 10e9]), "grads": np.array([5e9, 5e9]),
           "optimizer": np.array([5e9, 5e9]), "activations": np.array([40e9, 70e9])}
    time = {"step_seconds": np.array([1.0, np.nan]), "breakdown": {"compute": np.array([1.0, np.nan])}}
    best = {"config": {"cp": 4}, "step_seconds": 1.0, "breakdown": {"compute": 1.0}}
    line = _lesson7_line("CP", np.array([True, False]), 131072, best, mem, time, np.array([True, False]), 79e9)
    assert line == ("CP wins (cp 4): without it nothing fits — the least any plan needs is 90 GB per GPU, 70 GB of it "
                    "activations (seq 131072), > 79 GB usable")
