"""Context parallelism in lesson 6's model (`hybrid_memory`, `hybrid_layer.cp_seconds`, `hybrid_time.step`): each
rank keeps s/cp of every activation, holds the K,V buffers of its `cp_comm`, runs 1/cp of the causal attention, and
pays its K,V traffic — the ring's hops partly hidden under attention. Hand-computed cases on a small model, the
array closed forms against `context_parallel_costs.costs`, and cp = 1 as lesson 6's numbers."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simlab.sim.context_parallel import imbalance, work_per_rank
from simlab.sim.context_parallel_costs import VARIANTS, costs, kv_block_numel, layer_bytes, ulysses_pieces
from simlab.sim.expert_parallel_costs import all_to_all
from simlab.sim.hardware import cluster
from simlab.sim.hybrid import Plan, check_plan
from simlab.sim.hybrid_layer import attention_core, cp_seconds
from simlab.sim.hybrid_memory import activation_terms, activations, knobs, layer_activation_bytes, model_states
from simlab.sim.hybrid_time import step
from simlab.sim.model import PRESETS, Transformer
from simlab.sim.network import all_gather, reduce_scatter

# h 64, 4 heads of 16, 2 K,V heads; 1024 tokens
TINY = Transformer("tiny", layers=4, hidden=64, heads=4, seq=1024, vocab=1000, ffn=128, kv_heads=2, gated=True,
                   tied=False, learned_positions=False, biases=False, dropout=False)
C = cluster("h100-80gb", gpus=8)


@settings(max_examples=60, deadline=None)
@given(n=st.sampled_from([1, 2, 4, 8]), chunk=st.integers(1, 6), kv=st.sampled_from([1, 2, 4, 8]),
       group=st.sampled_from([1, 2]), d=st.integers(1, 8), batch=st.integers(1, 3), itemsize=st.sampled_from([2, 4]))
def test_the_array_closed_forms_are_costs(n, chunk, kv, group, d, batch, itemsize):
    """`layer_bytes` (what the step model prices) is `costs` (what the real run sends), variant by variant."""
    seq, heads = 2 * n * chunk, kv * group * n  # Ulysses: heads and kv_heads divisible by n (kv·n K,V heads)
    kv_heads = kv * n
    block = kv_block_numel(world_size=n, seq=seq, kv_heads=kv_heads, head_dim=d, batch=batch) * itemsize
    qkv, out = ulysses_pieces(world_size=n, seq=seq, heads=heads, kv_heads=kv_heads, head_dim=d, batch=batch)
    for i, variant in enumerate(VARIANTS):
        want = costs(variant, world_size=n, seq=seq, heads=heads, head_dim=d, kv_heads=kv_heads, batch=batch,
                     itemsize=itemsize)
        got = layer_bytes(i, n, block, qkv * itemsize, out * itemsize)
        assert [int(x) for x in got] == [want.forward_bytes, want.backward_bytes, want.kv_buffer_bytes]


def test_zig_zag_is_balanced_so_attention_divides_by_cp():
    for n in (2, 4, 8):
        assert imbalance(work_per_rank(n, 64 * n)) == 1.0
    one, four = knobs(Plan(), TINY), knobs(Plan(cp=4), TINY)
    for a, b in zip(attention_core(TINY, one, C.gpu), attention_core(TINY, four, C.gpu)):
        assert float(b) == pytest.approx(float(a) / 4, rel=1e-12)


def test_activations_scale_one_over_cp():
    for rec in ("none", "selective", "full"):
        one, eight = (knobs(Plan(cp=n, recompute=rec, microbatch=2), TINY) for n in (1, 8))
        assert float(layer_activation_bytes(TINY, eight)) == pytest.approx(float(layer_activation_bytes(TINY, one)) / 8)
        for name, value in activation_terms(TINY, eight).items():
            assert float(value) == pytest.approx(float(activation_terms(TINY, one)[name]) / 8)
    one, eight = (activations(TINY, knobs(Plan(cp=n), TINY), 1, "mixed", 0) for n in (1, 8))
    for part in ("layer_activations", "logits_activations", "embedding_activations"):
        assert float(eight[part]) == pytest.approx(float(one[part]) / 8)


@pytest.mark.parametrize("variant, buffers", [("ring", 2), ("all-gather-kv", 4), ("ulysses", 1)])
def test_kv_buffers_by_hand(variant, buffers):
    """cp 4, b 2: one rank's K,V block = 2 (K and V) · 2 · 256 tokens · 2 heads · 16 · 2 bytes = 65,536 bytes;
    the ring holds two blocks beyond its own, all-gather all four, Ulysses one."""
    k = knobs(Plan(cp=4, microbatch=2, cp_comm=variant), TINY)
    assert float(activations(TINY, k, 1, "mixed", 0)["working_activations"]) == buffers * 65536


def test_hops_hide_under_attention_and_what_sticks_out_is_exposed():
    """Ring, cp 4 inside one node: a forward hop sends one K,V block (65,536 bytes, `network.send`), 3 hops; the
    backward 4 hops of (2·4 − 1)/4 blocks. Each hides under a 1/4 of the layer's attention."""
    k = knobs(Plan(cp=4, microbatch=2), TINY)
    hop_f = C.gpu.intra_alpha + 65536 / C.gpu.intra_bandwidth
    hop_b = C.gpu.intra_alpha + 7 * 65536 / 4 / C.gpu.intra_bandwidth
    busy = cp_seconds(TINY, k, C, 2, (1.0, 1.0))  # attention dominates: nothing exposed
    assert float(busy["forward"]) == float(busy["backward"]) == 0
    assert float(busy["hidden"]) == pytest.approx(3 * hop_f + 4 * hop_b)
    idle = cp_seconds(TINY, k, C, 2, (0.0, 0.0))  # no attention to hide under: all exposed
    assert float(idle["forward"]) == pytest.approx(3 * hop_f) and float(idle["backward"]) == pytest.approx(4 * hop_b)
    assert float(idle["hidden"]) == pytest.approx(0, abs=1e-15)
    half = cp_seconds(TINY, k, C, 2, (4 * hop_f / 2, 4 * hop_b / 2))  # each hop's block computes in half a hop
    assert float(half["forward"]) == pytest.approx(3 * hop_f / 2) and float(half["backward"]) == pytest.approx(2 * hop_b)


def test_all_gather_and_ulysses_are_exposed_collectives():
    gather = cp_seconds(TINY, knobs(Plan(cp=4, microbatch=2, cp_comm="all-gather-kv"), TINY), C, 2, (1.0, 1.0))
    assert float(gather["forward"]) == pytest.approx(float(all_gather(C, 1, 4, 4 * 65536)))
    assert float(gather["backward"]) == pytest.approx(float(reduce_scatter(C, 1, 4, 4 * 65536)))
    assert float(gather["hidden"]) == 0
    # Ulysses, cp 2: a piece is 512 tokens · 16 · (4 + 2·2)/2 heads of Q,K,V (and 4/2 of the output) · b · 2 bytes
    ulysses = cp_seconds(TINY, knobs(Plan(cp=2, microbatch=2, cp_comm="ulysses"), TINY), C, 2, (1.0, 1.0))
    qkv, out = 2 * 512 * 16 * 4 * 2, 2 * 512 * 16 * 2 * 2
    assert float(ulysses["forward"]) == pytest.approx(float(all_to_all(C, 1, 2, qkv + out)))


def test_a_cp_group_across_nodes_pays_the_network():
    """TP 8 fills a node, so CP ranks sit on different nodes: a hop crosses on one NIC's share."""
    c = cluster("h100-80gb", gpus=16)
    k = knobs(Plan(tp=8, cp=2, sequence_parallel=True), PRESETS["llama3-8b"])
    hop = cp_seconds(PRESETS["llama3-8b"], k, c, 2, (0.0, 0.0))["forward"]
    block = 2 * 4096 * 1 * 128 * 2  # 8 K,V heads over t = 8: one head per rank, s/cp = 4096 tokens
    assert float(hop) == pytest.approx(c.inter_alpha + block / c.inter_bandwidth)


def test_zero_shards_over_dp_times_cp():
    """Megatron's distributed optimizer and torchtitan's FSDP shard over the DP group with its CP ranks: 2 · 4."""
    states = model_states(TINY, knobs(Plan(dp=2, cp=4, zero=2), TINY), "mixed", 0)
    assert float(states["params"]) == TINY.params * 2
    assert float(states["grads"]) == np.ceil(TINY.params / 8) * 2
    assert float(states["optimizer"]) == np.ceil(TINY.params / 8) * 12


def test_the_step_adds_up_and_cp_one_is_lesson_6():
    m, c = PRESETS["llama3-8b"].with_(seq=32768), cluster("h100-80gb", gpus=16)
    plan = Plan(tp=2, cp=4, dp=2, zero=1, sequence_parallel=True)
    check_plan(m, plan, 16, 8)
    t = step(m, plan, c, 8)
    assert sum(t["breakdown"].values()) == pytest.approx(t["step_seconds"])
    assert t["breakdown"]["cp_comm"] >= 0 and t["hidden"]["cp_comm"] > 0
    assert t["tokens_per_second"] == pytest.approx(8 * 32768 / t["step_seconds"])
    flat = Plan(tp=2, dp=2, zero=1, sequence_parallel=True)  # Knobs without lesson 7's fields: their defaults
    k = knobs(flat, m)._replace(cp=1, cp_comm=0)
    bare = type(k)(*k[:20])
    assert step(m, bare, cluster("h100-80gb", gpus=4), 8, "mixed")["step_seconds"] == \
        step(m, flat, cluster("h100-80gb", gpus=4), 8)["step_seconds"]
    assert step(m, flat, cluster("h100-80gb", gpus=4), 8)["breakdown"]["cp_comm"] == 0


def test_cp_refuses_eager_attention_in_one_line():
    with pytest.raises(ValueError, match=r"^cp=2: .*attention='flash'") as err:
        check_plan(TINY, Plan(cp=2, attention="eager"), 2, 1)
    assert "\n" not in str(err.value)
