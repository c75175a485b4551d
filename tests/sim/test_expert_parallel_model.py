"""A mixture of experts in lesson 6's model: parameters (all experts) and FLOPs (top_k of them), expert states
over ep (and tp), the MoE layer's activations, grouped GEMMs and all-to-alls (`expert_parallel_costs`) —
hand-computed on a small model, Mixtral against its published counts, the all-to-all's bytes against
`expert_parallel_dispatch.balanced_bytes`."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simlab.sim.expert_parallel_costs import (
    BASE_LATENCY,
    a2a_bytes,
    activation_bytes,
    all_to_all,
    gemms,
    layer_a2a,
    rows_per_token,
)
from simlab.sim.expert_parallel_dispatch import balanced_bytes
from simlab.sim.hardware import cluster
from simlab.sim.hybrid import Plan, check_plan
from simlab.sim.hybrid_memory import knobs, layer_activation_bytes, model_states
from simlab.sim.hybrid_time import step
from simlab.sim.model import PRESETS, Transformer

# h 64, 4 heads (2 K,V), 4 SwiGLU experts of width 32, top-2, 1024 tokens
MOE = Transformer("tiny-moe", layers=4, hidden=64, heads=4, seq=1024, vocab=1000, ffn=128, kv_heads=2, gated=True,
                  tied=False, learned_positions=False, biases=False, dropout=False, experts=4, top_k=2, expert_ffn=32)
C = cluster("h100-80gb", gpus=8)


def test_parameters_by_hand():
    """Attention 2·64² + 2·64·32 = 12,288; experts 4 · 3 · 64 · 32 = 24,576; router 64 · 4 = 256; norms 2 · 64."""
    assert MOE.expert_params == 24576 and MOE.matmul_params == 12288 + 24576 + 256
    assert MOE.active_matmul_params == 12288 + 2 * 3 * 64 * 32 + 256  # two experts per token
    assert MOE.layer_params == 37120 + 128
    assert MOE.active_params == MOE.params - 4 * 2 * 3 * 64 * 32
    # t = 2, ep = 2: attention halved, router and norms replicated, experts over t · ep
    assert MOE.layer_params_per_rank(2, 2) == 12288 / 2 + 128 + 256 + 24576 / 4
    assert MOE.layer_params_per_rank(1) == MOE.layer_params
    assert MOE.layer_flops(10) == 2 * 10 * MOE.active_matmul_params + 2 * 10 * 1024 * 64  # causal attention


def test_mixtral_as_mistral_ai_counts_it():
    """Jiang et al. 2024: Mixtral 8x7B has 47B parameters, 13B active per token; Mistral AI: 8x22B 141B and 39B."""
    for name, total, active in (("mixtral-8x7b", 46.7, 12.9), ("mixtral-8x22b", 140.6, 39.2)):
        m = PRESETS[name]
        assert (round(m.params / 1e9, 1), round(m.active_params / 1e9, 1)) == (total, active)
        assert m.model_flops(1) == 3 * (m.layers * m.layer_flops(m.seq) + m.logits_flops(m.seq))


def test_expert_states_scale_one_over_ep_and_shard_over_the_expert_data_parallel_group():
    experts = 4 * MOE.expert_params  # every layer on the one stage
    one, four = (model_states(MOE, knobs(Plan(dp=4, ep=ep), MOE), "mixed", 0) for ep in (1, 4))
    assert float(one["params"] - four["params"]) == experts * (1 - 1 / 4) * 2
    zero1 = model_states(MOE, knobs(Plan(dp=4, ep=4, zero=1), MOE), "mixed", 0)
    dense = MOE.params - experts
    # dense state over the 4 DP ranks; each expert's over dp/ep = 1 rank (no one else holds it)
    assert float(zero1["optimizer"]) == np.ceil(dense / 4) * 12 + experts / 4 * 12


def test_moe_activations_by_hand():
    """T = 1024, rows = 2T: router fp32 4 · 4 experts · T; per row the dispatched input 2·64, gate and up 4·32,
    the down GEMM's input 2·32, the expert's output 2·64 bytes."""
    k = knobs(Plan(), MOE)
    assert float(rows_per_token(MOE, k)) == 2
    assert float(activation_bytes(MOE, k)) == 4 * 4 * 1024 + 2048 * (128 + 128 + 64 + 128)
    dense = MOE.with_(experts=0, top_k=1, ffn=32)  # the same layer around one MLP of width 32
    gelu = 1024 * 64 * (4 * 32 / 64 + 2 * 32 / 64)
    assert float(layer_activation_bytes(MOE, k)) == pytest.approx(
        float(layer_activation_bytes(dense, knobs(Plan(), dense))) - gelu + float(activation_bytes(MOE, k)))
    assert float(rows_per_token(MOE, knobs(Plan(capacity=1.25), MOE))) == 2.5  # padded to capacity


def test_grouped_gemms_by_hand():
    """ep 2: each rank holds 2 experts; 2048 rows over 4 experts from 2 ranks: 1024 rows per expert."""
    router, up, down = gemms(MOE, knobs(Plan(dp=2, ep=2), MOE))
    assert router == (1024, 4, 64, 1)
    assert [float(x) for x in up] == [1024, 64, 64, 2] and [float(x) for x in down] == [1024, 64, 32, 2]


@settings(max_examples=50, deadline=None)
@given(seq=st.integers(1, 64), b=st.integers(1, 4), top_k=st.integers(1, 2), ep=st.sampled_from([1, 2, 4]),
       itemsize=st.sampled_from([1, 2, 4]))
def test_a2a_bytes_are_the_dispatch_plans(seq, b, top_k, ep, itemsize):
    m = MOE.with_(seq=4 * seq, top_k=top_k)  # tokens · top_k divisible by ep
    k = knobs(Plan(dp=4, ep=ep, microbatch=b), m)
    assert float(a2a_bytes(m, k, itemsize)) == balanced_bytes(b * 4 * seq, top_k, ep, 64, itemsize)


def test_all_to_all_inside_a_node_and_across_nodes():
    nbytes = 131072  # ep 2, b 1: 2048 rows · 1/2 · 64 · 2 bytes
    assert float(a2a_bytes(MOE, knobs(Plan(dp=2, ep=2), MOE), 2)) == nbytes
    inside = BASE_LATENCY + C.gpu.intra_alpha + nbytes / C.gpu.intra_bandwidth
    assert float(all_to_all(C, 1, 2, nbytes)) == pytest.approx(inside)
    assert float(layer_a2a(MOE, knobs(Plan(dp=2, ep=2), MOE), C, 2)) == pytest.approx(2 * inside)
    c16 = cluster("h100-80gb", gpus=16)  # ranks 8 apart: one per node, everything over the NIC
    assert float(all_to_all(c16, 8, 2, nbytes)) == pytest.approx(BASE_LATENCY + c16.inter_alpha
                                                                  + nbytes / c16.inter_bandwidth)
    assert float(all_to_all(C, 1, 1, nbytes)) == 0


def test_the_step_prices_the_all_to_alls_and_mfu_counts_active_parameters():
    m = PRESETS["mixtral-8x7b"]
    c = cluster("h100-80gb", gpus=16)
    for ep in (1, 8):
        plan = Plan(pp=2, dp=8, ep=ep, zero=1)
        check_plan(m, plan, 16, 64)
        t = step(m, plan, c, 64)
        assert sum(t["breakdown"].values()) == pytest.approx(t["step_seconds"])
        assert (t["breakdown"]["ep_comm"] > 0) == (ep > 1)
        assert t["mfu"] == pytest.approx(m.model_flops(64) / (t["step_seconds"] * 16 * c.gpu.peak_flops))
    assert m.model_flops(1) < 3 * 2 * m.seq * m.params  # not every expert: a token meets two of eight


def test_dense_models_have_no_expert_terms():
    m = PRESETS["llama3-8b"]
    t = step(m, Plan(dp=8), cluster("h100-80gb", gpus=8), 8)
    assert t["breakdown"]["ep_comm"] == 0 and m.expert_params == 0 and m.active_params == m.params


def test_every_new_term_broadcasts_over_the_advisors_arrays():
    """Plans with different cp, cp_comm, ep and capacity evaluated at once as Knobs of arrays give each plan's own
    numbers (the advisor evaluates thousands of plans in one call)."""
    from simlab.sim.hybrid_memory import Knobs, per_gpu

    m = PRESETS["mixtral-8x7b"].with_(seq=8192)
    c = cluster("h100-80gb", gpus=64)
    plans = [Plan(tp=2, cp=2, dp=16, ep=8, zero=1, sequence_parallel=True), Plan(cp=4, dp=16, ep=4, capacity=1.25),
             Plan(tp=2, pp=2, cp=2, dp=8, ep=2, cp_comm="all-gather-kv", sequence_parallel=True, recompute="full"),
             Plan(cp=2, dp=32, ep=8, cp_comm="ulysses", zero=3), Plan(tp=8, dp=8, ep=8, sequence_parallel=True)]
    each = [knobs(p, m) for p in plans]
    stacked = Knobs(*(np.array([np.asarray(getattr(k, f)) for k in each]) for f in Knobs._fields))
    together = step(m, stacked, c, 256, "mixed")
    memory = per_gpu(m, stacked, 256, "mixed")
    for i, p in enumerate(plans):
        alone = step(m, p, c, 256)
        assert float(together["step_seconds"][i]) == pytest.approx(alone["step_seconds"], rel=1e-12)
        for part, value in alone["breakdown"].items():
            assert float(together["breakdown"][part][i]) == pytest.approx(value, rel=1e-12, abs=1e-15)
        assert float(memory["total"][i]) == pytest.approx(per_gpu(m, p, 256)["total"], rel=1e-12)
