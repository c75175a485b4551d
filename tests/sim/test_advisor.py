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
    assert any(k.startswith("single GPU: ") and "> 80 GB" for k in r["rejected"])  # 16 B × 6.7B = 108 GB


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
    assert any("FSDP" in note for note in r["notes"])


def test_ranked_candidates_all_fit_and_agree_with_one_plan_at_a_time():
    m, c = PRESETS["gpt3-175b"], cluster(gpus=256)
    r = search(m, c, 512, top=10)
    times = [x["step_seconds"] for x in r["candidates"]]
    assert times == sorted(times) and all(x["fits"] for x in r["candidates"]) and len(times) == 10
    for x in r["candidates"][:3]:  # the vectorised search and the scalar model are the same model
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
    assert set(np.unique(k.zero)) == {0, 1, 2, 3} and set(np.unique(k.recompute)) == {0, 1, 2}
