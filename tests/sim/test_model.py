"""The transformer spec against published parameter counts and the papers' FLOP formulas."""
import pytest

from simlab.sim.model import NARAYANAN_SHAPES, PRESETS, Transformer, preset

# Narayanan et al. 2021, Table 1: "Number of parameters (billion)"
PUBLISHED_BILLIONS = [1.7, 3.6, 7.5, 18.4, 39.1, 76.1, 145.6, 310.1, 529.6, 1008.0]


@pytest.mark.parametrize("shape, billions", list(zip(NARAYANAN_SHAPES, PUBLISHED_BILLIONS)), ids=lambda x: str(x))
def test_narayanan_table1_parameter_counts(shape, billions):
    size, heads, h, L = shape
    m = PRESETS[f"megatron-{size}-2021"]
    V, s = 51200, 2048
    eq2 = 12 * L * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * L * h))  # the paper's Eq. 2
    assert m.params == pytest.approx(eq2 + 2 * h, abs=0.5)  # + the final layer norm, which Eq. 2 leaves out
    assert abs(m.params / 1e9 - billions) <= 0.051  # the table's rounding


@pytest.mark.parametrize("name, count", [("llama2-7b", 6_738_415_616), ("llama2-70b", 68_976_648_192),
                                         ("bloom-176b", 176_247_271_424)])
def test_published_parameter_counts(name, count):
    """The counts the models' own checkpoints report (Hugging Face: meta-llama/Llama-2-7b-hf, -70b-hf,
    bigscience/bloom): gated MLP, grouped-query attention, untied output, BLOOM's embedding norm."""
    assert PRESETS[name].params == count


@pytest.mark.parametrize("name", ["gpt3-175b", "megatron-22b", "megatron-530b", "megatron-1t"])
def test_flops_are_korthikantis_equation_7(name):
    m = PRESETS[name]
    L, h, s, V, B = m.layers, m.hidden, m.seq, m.vocab, 64
    eq7 = 72 * B * L * s * h * h * (1 + s / (6 * h) + V / (12 * h * L))  # the whole s × s square
    assert m.model_flops(B, causal=False) == pytest.approx(eq7, rel=1e-12)
    # causal: the s² term halved, what MFU counts (a causal kernel does no more)
    assert m.model_flops(B) == pytest.approx(72 * B * L * s * h * h * (1 + s / (12 * h) + V / (12 * h * L)), rel=1e-12)
    assert m.layer_flops(2 * s, causal=False) == 24 * 2 * s * h * h + 4 * 2 * s * s * h  # Narayanan's appendix, b = 2
    assert m.layer_flops(2 * s) == 24 * 2 * s * h * h + 2 * 2 * s * s * h
    assert m.attention_flops(2 * s) * 2 == m.attention_flops(2 * s, causal=False) == 4 * 2 * s * s * h


def test_model_flops_count_causal_attention_and_the_experts_a_token_meets():
    """Regression: model FLOPs counted attention's whole square (12·L·s·h per token), more than the causal kernel
    the time is charged for does (FA: 7·b·s²·h per layer), so MFU passed 100 % at s ≈ 1M."""
    tiny = Transformer("tiny", layers=2, hidden=8, heads=2, seq=4, vocab=10)  # 768 matmul weights per layer
    assert tiny.model_flops(1) == 6 * 4 * (2 * 768 + 10 * 8) + 6 * 2 * 4 * 8 * 4 == 40320
    assert tiny.model_flops(1, causal=False) == 40320 + 1536
    moe = tiny.with_(experts=4, top_k=2, gated=True)
    assert moe.layer_flops(4) == 2 * 4 * (4 * 64 + 2 * 3 * 8 * 32 + 8 * 4) + 2 * 4 * 4 * 8  # 2 of 4 experts, router
    assert moe.model_flops(1) == 3 * (2 * moe.layer_flops(4) + moe.logits_flops(4))


def test_a_hand_counted_small_model():
    m = Transformer("tiny", layers=2, hidden=8, heads=2, seq=4, vocab=10)
    # per layer: QKV 3·64 + O 64 + MLP 2·8·32 = 768 weights; biases 24 + 8 + 32 + 8 = 72; 2 norms 32
    assert (m.matmul_params, m.layer_params) == (768, 872)
    assert m.embedding_params == 10 * 8 + 4 * 8 and m.output_params == 16  # tied: only the final norm
    assert m.params == 2 * 872 + 112 + 16
    gqa = m.with_(kv_heads=1, gated=True, tied=False, biases=False, learned_positions=False)
    assert gqa.matmul_params == 2 * 64 + 2 * 8 * 4 + 3 * 8 * 32 and gqa.output_params == 80 + 8


@pytest.mark.parametrize("kwargs, message", [(dict(heads=3), "hidden=8: must be divisible by heads=3"),
                                             (dict(layers=0), "layers=0"), (dict(kv_heads=3), "heads=2")])
def test_bad_shapes_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Transformer("x", **{"layers": 2, "hidden": 8, "heads": 2, "seq": 4, "vocab": 10, **kwargs})


def test_unknown_preset():
    with pytest.raises(ValueError, match="model='gpt5'"):
        preset("gpt5")
