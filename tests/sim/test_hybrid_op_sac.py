"""torchtitan's op-level selective checkpointing (`recompute="op-sac"`): the tensors one layer keeps, listed by
hand for a small layer, and the order none ≤ op-sac ≤ full in time (the reverse in memory)."""
from __future__ import annotations

import numpy as np
import pytest

from simlab.sim.gpus import gemm_seconds
from simlab.sim.hardware import cluster
from simlab.sim.hybrid import RECOMPUTE, Plan, check_plan
from simlab.sim.hybrid_layer import layer_seconds
from simlab.sim.hybrid_memory import knobs, layer_activation_bytes, per_gpu
from simlab.sim.hybrid_op_sac import kept_bytes, layer_mms, recomputed_mms, saved_mms
from simlab.sim.hybrid_time import step
from simlab.sim.model import PRESETS, Transformer

# T = b·s = 2·4 = 8 tokens, h = 8, two heads of d = 4, one K,V head (kv = 4), a gated MLP of 12
SMALL = Transformer("small", layers=2, hidden=8, heads=2, seq=4, vocab=16, ffn=12, kv_heads=1, gated=True)


def test_the_policy_saves_every_odd_mm_of_a_layer():
    k = knobs(Plan(microbatch=2, recompute="op-sac"), SMALL)
    assert [m[0] for m in layer_mms(SMALL, k)] == ["q", "k", "v", "o", "w1", "w3", "w2"]
    assert [m[0] for m in saved_mms(SMALL, k)] == ["q", "v", "w1", "w2"]
    assert [m[0] for m in recomputed_mms(SMALL, k)] == ["k", "o", "w3"]
    plain = SMALL.with_(gated=False)
    assert [m[0] for m in recomputed_mms(plain, knobs(Plan(microbatch=2), plain))] == ["k", "o"]  # fc2: not read


def test_a_small_layer_tensor_by_tensor():
    """Bytes, 16-bit (fp32 log-sum-exp), written out by hand from the shapes."""
    k = knobs(Plan(microbatch=2, recompute="op-sac"), SMALL)
    assert kept_bytes(SMALL, k) == pytest.approx({
        "layer_input": 2 * 8 * 8,  # x (T, h)
        "q_output": 2 * 8 * 8,  # (T, h)
        "v_output": 2 * 8 * 4,  # (T, kv)
        "w1_output": 2 * 8 * 12,  # (T, ffn)
        "w2_output": 2 * 8 * 8,  # (T, h)
        "attention_output": 2 * 8 * 8,  # flash's output (T, a·d)
        "flash_lse": 4 * 8 * 2,  # (T, a) fp32
        "reduce_scatter_outputs": 0})  # no TP
    assert float(layer_activation_bytes(SMALL, k)) == 832


def test_a_small_layer_with_tensor_and_sequence_parallelism():
    k = knobs(Plan(tp=2, microbatch=2, sequence_parallel=True, recompute="op-sac"), SMALL)
    kept = kept_bytes(SMALL, k)
    hand = {"layer_input": 2 * 4 * 8,  # (T/t, h)
            "q_output": 2 * 8 * 4, "v_output": 2 * 8 * 2, "w1_output": 2 * 8 * 6,  # column-parallel: N/t
            "w2_output": 2 * 8 * 8,  # row-parallel: each rank's partial sums (T, h)
            "attention_output": 2 * 8 * 4, "flash_lse": 4 * 8 * 1,  # one head per rank
            "reduce_scatter_outputs": 2 * 2 * 4 * 8}  # two (T/t, h)
    assert {name: float(v) for name, v in kept.items()} == pytest.approx(hand)
    assert float(layer_activation_bytes(SMALL, k)) == sum(hand.values()) == 608


def test_the_recompute_is_the_unsaved_gemms_and_the_elementwise_work():
    c = cluster(gpus=8)
    model = PRESETS["llama3-8b"]
    op, none = (layer_seconds(model, knobs(Plan(microbatch=2, recompute=r), model), c, "mixed")
                for r in ("op-sac", "none"))
    gemms = op["recompute"] - (op["forward"] - op["gemm"] - op["attention"][0])  # less the element-wise work
    k = knobs(Plan(microbatch=2), model)
    assert gemms == pytest.approx(sum(gemm_seconds(c.gpu, m, n, kk) for _, m, n, kk in recomputed_mms(model, k)))
    assert none["recompute"] == 0


@pytest.mark.parametrize("plan", [Plan(dp=8, microbatch=2, zero=3), Plan(tp=2, pp=2, dp=2, sequence_parallel=True)])
def test_op_sac_sits_between_none_and_full(plan):
    model, c = PRESETS["llama3-8b"], cluster(gpus=8)
    runs = {r: Plan(**{**plan.__dict__, "recompute": r}) for r in ("none", "op-sac", "full")}
    seconds = {r: step(model, p, c, global_batch=16)["step_seconds"] for r, p in runs.items()}
    memory = {r: per_gpu(model, p, global_batch=16)["activations"] for r, p in runs.items()}
    assert seconds["none"] < seconds["op-sac"] < seconds["full"]
    assert memory["none"] > memory["op-sac"] > memory["full"]


def test_bad_combinations_are_refused_in_one_line():
    assert RECOMPUTE[3] == "op-sac"
    with pytest.raises(ValueError, match="attention='flash'"):
        check_plan(SMALL, Plan(recompute="op-sac", attention="eager"), gpus=1, global_batch=1)
    moe = PRESETS["mixtral-8x7b"]
    with pytest.raises(ValueError, match="mixture of experts"):
        check_plan(moe, Plan(recompute="op-sac"), gpus=1, global_batch=1)


def test_the_advisor_tries_op_sac_only_when_asked():
    from simlab.sim.advisor_space import candidates
    c = cluster("h100-80gb", gpus=8)
    asked = candidates(PRESETS["llama3-8b"], c, 16, {"recompute": "op-sac"})
    assert set(np.unique(asked.recompute)) == {3}
    assert 3 not in set(np.unique(candidates(PRESETS["llama3-8b"], c, 16, {}).recompute))
    with pytest.raises(ValueError, match="needs attention='flash'"):
        candidates(PRESETS["llama3-8b"], c, 16, {"recompute": "op-sac"}, attention="eager")


def test_one_array_mixes_the_recompute_choices():
    """The advisor evaluates plans of every recompute choice in one array: each gets its own bytes."""
    plans = [Plan(microbatch=2, recompute=r) for r in RECOMPUTE]
    one_by_one = [float(layer_activation_bytes(SMALL, knobs(p, SMALL))) for p in plans]
    k = knobs(plans[0], SMALL)._replace(recompute=np.arange(len(RECOMPUTE)))
    assert np.asarray(layer_activation_bytes(SMALL, k)).tolist() == one_by_one
    assert one_by_one[2] < one_by_one[3] < one_by_one[0]  # full < op-sac < none


@pytest.mark.parametrize("emit, words", [("megatron", "no Megatron flag"), ("deepspeed", "no DeepSpeed setting")])
def test_exporters_without_the_policy_refuse_it(emit, words):
    from importlib import import_module
    plan = Plan(dp=8, microbatch=2, zero=1, recompute="op-sac")
    with pytest.raises(ValueError, match=f"^recompute='op-sac': .*{words}"):
        import_module(f"simlab.export.{emit}").emit(PRESETS["llama3-8b"], cluster("h100-80gb", gpus=8), 16, plan)


def test_the_torchtitan_exporter_writes_the_op_level_policy():
    from simlab.export.torchtitan import emit
    text = emit(PRESETS["llama3-8b"], cluster("h100-80gb", gpus=8), 16, Plan(dp=8, microbatch=2, zero=3,
                                                                             recompute="op-sac"))
    assert "SelectiveAC.Config()" in text and "every second matmul" in text
