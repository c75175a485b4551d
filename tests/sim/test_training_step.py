"""Lesson 5b's simulator: each stored activation against Korthikanti et al. 2022's §4.1 by hand, their sum against
Table 2's closed form for any shape (Hypothesis), the precision recipes against lesson 3's and 6's bytes, FLOPs
against Korthikanti's Eq. 7 and Narayanan's Eq. 3, the roofline by hand, micro-batching against lesson 3's
communication volume, and one step against lesson 6's model (what `simlab plan` prints)."""
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simlab.sim.advisor import evaluate_plan
from simlab.sim.gpus import GPUS, gemm_seconds
from simlab.sim.hardware import cluster
from simlab.sim.hybrid import ACTIVATION_BYTES, PRECISIONS, STATE_BYTES, Plan
from simlab.sim.hybrid_layer import gemms
from simlab.sim.hybrid_memory import activation_terms as table
from simlab.sim.hybrid_memory import knobs, layer_activation_bytes
from simlab.sim.hybrid_time import step
from simlab.sim.memory import comm_volume_per_step
from simlab.sim.model import PRESETS, Transformer
from simlab.sim.training_step import microbatching, one_step
from simlab.sim.training_step_flops import gemm_roofline, layer_roofline, machine, step_flops, utilization
from simlab.sim.training_step_memory import (
    BLOCK,
    LOSS_SCALING,
    RECIPES,
    TERMS,
    activation_terms,
    number_format,
    state_recipe,
)

GPT3 = PRESETS["gpt3-175b"]  # s = 2048, h = 12288, a = 96


def korthikanti(model, b, t, sp, recompute, attention, fp8=False):
    """Table 2's closed form, generalised as lesson 6 wrote it before the table existed: sbh(10 + 24/t + 5as/(ht))
    for GPT, 4 + 4·kv/h + 4·ffn/h (6·ffn/h gated) for the 24, no masks without dropout, FP8 GEMM inputs in 1 byte."""
    s, h, a = model.seq, model.hidden, model.heads
    sbh = s * b * h
    split = 4 + 4 * model.kv_width / h + (6 if model.gated else 4) * model.ffn_width / h - (
        (1 + model.ffn_width / h) if fp8 else 0)
    replicated = (8 - (2 if fp8 else 0)) + (2 if model.dropout else 0)
    replicated = replicated / t if sp else replicated
    if recompute == "full":
        return 2 * sbh / (t if sp else 1)
    if attention == "flash":
        scores = 4 * a / (h * t)
    else:
        scores = (5 if model.dropout else 2) * a * s / (h * t) if recompute == "none" else 0
    return sbh * (replicated + split / t + scores)


@st.composite
def shapes(draw):
    heads = draw(st.sampled_from([1, 2, 4, 8, 12, 16]))
    kv = draw(st.sampled_from([d for d in (1, 2, 4, 8, 16) if heads % d == 0] + [0]))
    model = Transformer("h", layers=draw(st.integers(1, 8)), hidden=heads * draw(st.integers(1, 64)), heads=heads,
                        seq=draw(st.integers(1, 4096)), vocab=draw(st.integers(1, 60000)), kv_heads=kv,
                        ffn=draw(st.sampled_from([0, 96, 1000])), gated=draw(st.booleans()),
                        dropout=draw(st.booleans()))
    t = draw(st.sampled_from([d for d in (1, 2, 4, 8) if heads % d == 0]))
    return model, draw(st.integers(1, 16)), t, t > 1 and draw(st.booleans())


@settings(max_examples=300, deadline=None)
@given(shapes(), st.sampled_from(("none", "selective", "full")), st.sampled_from(("eager", "flash")),
       st.sampled_from(PRECISIONS))
def test_the_terms_add_up_to_table_2_for_any_shape(shape, recompute, attention, precision):
    model, b, t, sp = shape
    terms = activation_terms(model, b, attention=attention, recompute=recompute, tp=t, sequence_parallel=sp,
                             precision=precision)
    scale = ACTIVATION_BYTES[precision] / 2
    want = korthikanti(model, b, t, sp, recompute, attention, fp8=precision == "fp8") * scale
    assert sum(terms.values()) == pytest.approx(want, rel=1e-12)
    plan = Plan(tp=t, microbatch=b, sequence_parallel=sp, recompute=recompute, attention=attention)
    assert float(layer_activation_bytes(model, knobs(plan, model), fp8=precision == "fp8")) * scale == pytest.approx(
        sum(terms.values()), rel=1e-12)  # lesson 6's number is this sum
    assert all(v >= 0 for v in terms.values())


def test_each_tensor_is_korthikantis():
    """§4.1 for GPT-3, eager attention with dropout, b = 1: 34sbh + 5as²b, tensor by tensor."""
    s, b, h, a = 2048, 1, 12288, 96
    sbh, as2b = s * b * h, a * s * s * b
    want = {"ln1_input": 2 * sbh, "qkv_input": 2 * sbh, "q": 2 * sbh, "k": 2 * sbh, "v": 2 * sbh,
            "softmax_output": 2 * as2b, "softmax_dropout_mask": as2b, "softmax_dropout_output": 2 * as2b,
            "flash_lse": 0, "out_proj_input": 2 * sbh, "attention_dropout_mask": sbh,
            "ln2_input": 2 * sbh, "fc1_input": 2 * sbh, "gelu_input": 8 * sbh, "gelu_output": 8 * sbh,
            "mlp_dropout_mask": sbh}
    terms = activation_terms(GPT3, attention="eager")
    assert terms == want and list(terms) == list(TERMS)
    assert sum(terms.values()) == 34 * sbh + 5 * as2b
    attention = sum(v for k, v in terms.items() if BLOCK[k] == "attention")
    assert attention == 11 * sbh + 5 * as2b  # Korthikanti: "11sbh + 5as²b" for the attention block
    assert sum(v for k, v in terms.items() if BLOCK[k] == "mlp") == 19 * sbh
    assert sum(v for k, v in terms.items() if BLOCK[k] == "norms") == 4 * sbh


def test_flash_selective_and_full_remove_what_they_should():
    sbh, a, s = 2048 * 12288, 96, 2048
    eager = activation_terms(GPT3, attention="eager")
    flash = activation_terms(GPT3, attention="flash")
    s2 = ("softmax_output", "softmax_dropout_mask", "softmax_dropout_output")
    assert all(flash[k] == 0 for k in s2) and flash["flash_lse"] == 4 * a * s  # fp32, per head and token
    assert {k: v for k, v in flash.items() if k not in s2 + ("flash_lse",)} == {
        k: v for k, v in eager.items() if k not in s2 + ("flash_lse",)}
    selective = activation_terms(GPT3, attention="eager", recompute="selective")
    assert sum(selective.values()) == 34 * sbh and all(selective[k] == 0 for k in s2)
    full = activation_terms(GPT3, attention="eager", recompute="full")
    assert full["ln1_input"] == 2 * sbh and sum(full.values()) == 2 * sbh  # the layer's input alone
    sp = activation_terms(GPT3, attention="eager", recompute="full", tp=8, sequence_parallel=True)
    assert sum(sp.values()) == 2 * sbh / 8


def test_no_dropout_gqa_gated_fp8_and_fp32():
    llama = PRESETS["llama2-70b"]  # no dropout, kv_heads 8 of 64, SwiGLU 28672
    sbh, h = 4096 * 8192, 8192
    t = activation_terms(llama, attention="eager")
    assert t["softmax_dropout_mask"] == t["softmax_dropout_output"] == t["attention_dropout_mask"] == 0
    assert t["k"] == t["v"] == 2 * sbh * 8 / 64 and t["q"] == 2 * sbh
    assert t["gelu_input"] == 4 * sbh * 28672 / h and t["gelu_output"] == 2 * sbh * 28672 / h
    fp8 = activation_terms(llama, attention="eager", precision="fp8")
    for name in ("qkv_input", "out_proj_input", "fc1_input", "gelu_output"):  # the four GEMMs' inputs
        assert fp8[name] == t[name] / 2
    assert activation_terms(GPT3, precision="fp32") == {k: 2 * v for k, v in activation_terms(GPT3).items()}
    assert list(table(llama, knobs(Plan(), llama))) == list(TERMS) == list(BLOCK)  # one table, one set of names


@pytest.mark.parametrize("precision, want", [("fp32", (4, 4, 0, 4, 4)), ("mixed", (2, 2, 4, 4, 4)),
                                             ("mixed-fp32-grads", (2, 4, 4, 4, 4)), ("fp8", (2, 4, 4, 4, 4))])
def test_state_recipes_are_the_bytes_lessons_3_and_6_count(precision, want):
    r = state_recipe(precision)
    assert tuple(r[k] for k in ("params", "grads", "master", "adam_m", "adam_v")) == want
    assert r["total"] == sum(STATE_BYTES[precision]) == sum(want)
    assert r["total"] == (16 if precision in ("fp32", "mixed") else 18)
    assert precision in RECIPES


def test_number_formats_by_hand():
    fp16, bf16 = number_format("fp16"), number_format("bf16")
    assert (fp16["max"], fp16["smallest_normal"], fp16["smallest_subnormal"]) == (65504.0, 2**-14, 2**-24)
    assert (bf16["smallest_normal"], bf16["epsilon"], bf16["bytes"]) == (2**-126, 2**-7, 2)
    assert number_format("fp8-e4m3")["max"] == 448.0 and number_format("fp8-e5m2")["max"] == 57344.0
    assert number_format("fp32")["max"] == float.fromhex("0x1.fffffep+127")
    assert set(LOSS_SCALING) == {"fp32", "bf16", "fp16", "fp8"} and "loss scaling" in LOSS_SCALING["fp16"]


def test_flops_are_korthikantis_eq_7_and_narayanans_eq_3():
    B, L, s, h, V = 8, 96, 2048, 12288, 51200
    none = step_flops(GPT3, B, attention="eager")
    # the model's FLOPs: Eq. 7 with its s² term halved (causal: the half of the square a token attends to)
    assert none["model_flops"] == 72 * B * L * s * h * h + 6 * B * L * s * s * h + 6 * B * s * h * V
    assert none["attention"] == 6 * L * s * h * none["tokens"] == none["masked_flops"]  # eager: the other half too
    assert none["model_flops"] == none["dense"] + none["attention"]
    # eager attention computes the whole square: its hardware FLOPs are Eq. 7's
    assert none["hardware_flops"] == 72 * B * L * s * h * h + 12 * B * L * s * s * h + 6 * B * s * h * V  # Eq. 7
    assert none["hardware_flops"] == GPT3.model_flops(B, causal=False) and none["recompute_flops"] == 0
    assert none["six_n"] == 6 * GPT3.params * B * s
    full = step_flops(GPT3, B, recompute="full", attention="eager")
    assert full["hardware_flops"] == 96 * B * s * L * h * h + 16 * B * L * s * s * h + 6 * B * s * h * V  # Eq. 3
    selective = step_flops(GPT3, B, recompute="selective", attention="eager")
    assert selective["recompute_flops"] == 4 * B * s * s * h * L  # QKᵀ and AV forward again, the whole square
    flash = step_flops(GPT3, B, recompute="selective", attention="flash")
    assert flash["recompute_flops"] == B * s * s * h * L and flash["masked_flops"] == 0  # causal QKᵀ in the backward
    assert flash["hardware_flops"] == flash["model_flops"] + B * s * s * h * L  # FA's count: 3.5 causal forwards
    flash_full = step_flops(GPT3, B, recompute="full", attention="flash")  # the forward again, causal as it runs
    assert flash_full["recompute_flops"] == 24 * B * s * L * h * h + 2 * B * L * s * s * h + B * s * s * h * L
    u = utilization(1e15, 1.5e15, 2.0, 1e15, gpus=2)
    assert (u["mfu"], u["hfu"]) == (0.25, 0.375)


def test_a_mixture_of_experts_counts_the_experts_a_token_meets_everywhere():
    """Regression: the dense part counted all E experts while model FLOPs counted top_k, and attention was taken as
    their difference: negative (−7.2e14 for llama2-7b with 8 experts), and HFU with it (`simlab step --experts 8`)."""
    dense = PRESETS["llama2-7b"]
    for experts, top_k in ((8, 1), (8, 2), (64, 1)):
        moe = dense.with_(experts=experts, top_k=top_k)
        for attention in ("eager", "flash"):
            for recompute in ("none", "selective", "full"):
                f = step_flops(moe, 2, recompute=recompute, attention=attention)
                plain = step_flops(dense, 2, recompute=recompute, attention=attention)
                assert f["attention"] == plain["attention"] == 6 * 32 * 4096 * 4096 * f["tokens"]  # experts: no change
                assert f["dense"] == 6 * f["tokens"] * (32 * moe.active_matmul_params + 32000 * 4096)
                assert f["model_flops"] == f["dense"] + f["attention"] == moe.model_flops(2)
                assert 0 < f["model_flops"] <= f["hardware_flops"]
                assert min(f["masked_flops"], f["recompute_flops"]) >= 0
                out = one_step(moe, "h100-80gb", 2, attention=attention, recompute=recompute)
                assert 0 < out["mfu"] <= out["hfu"] < 1


def test_mfu_at_a_million_tokens_is_below_hfu_and_hfu_below_the_gpus_rate():
    """Regression: MFU counted attention's whole s × s square while FlashAttention (and its time here) does the
    causal half: `simlab step --model llama2-7b --seq 1048576` said MFU 102.7 % (→ 12/7 · 189/312 = 103.8 % as s
    grows: 12 counted against FA's 7 per b·s²·h, at its 189 TFLOP/s chart rate of a 312 TFLOP/s A100)."""
    m = PRESETS["llama2-7b"].with_(seq=2**20)
    out = one_step(m, "a100-80gb")
    T, L, h = 2**20, 32, 4096
    hand = 6 * T * (L * (4 * h * h + 3 * h * 11008) + 32000 * h) + 6 * L * 2**20 * h * T  # causal: 6·L·s·h per token
    assert out["flops"]["model_flops"] == hand
    assert out["mfu"] == pytest.approx(hand / (out["time"]["step_seconds"] * 312e12), rel=1e-12)
    assert out["hfu"] == pytest.approx((hand + L * T * 2**20 * h) / (out["time"]["step_seconds"] * 312e12), rel=1e-12)
    # attention is ~95 % of the work, charged at FlashAttention's 189 of 312 TFLOP/s: HFU just above 189/312
    assert out["mfu"] < out["hfu"] < 0.62 and out["hfu"] > 189 / 312
    # lesson 6's step on 8 GPUs (what `simlab plan` prints) counts the same FLOPs
    t = step(m, Plan(tp=8, attention="flash", overlap="none"), cluster("a100-80gb", gpus=8), 1)
    assert t["mfu"] == pytest.approx(hand / (t["step_seconds"] * 8 * 312e12), rel=1e-12) and 0 < t["mfu"] < 0.62


def test_mfu_of_a_tiny_model_by_hand():
    """Two layers, h = 8, s = 4, V = 10 (`tests/sim/test_model.py`'s 768 matmul weights per layer), b = 2, on a
    measured machine of 1 GFLOP/s: 6 FLOPs per weight per token and 6·L·s·h per token of causal attention."""
    tiny = Transformer("tiny", layers=2, hidden=8, heads=2, seq=4, vocab=10)
    here = machine(1e9, 1e10)
    out = one_step(tiny, here, 2, attention="eager")
    tokens = 2 * 4
    model = 6 * tokens * (2 * 768 + 10 * 8) + 6 * 2 * 4 * 8 * tokens  # 77,568 + 3,072
    assert out["flops"]["model_flops"] == model == 80640
    assert out["flops"]["hardware_flops"] == model + 3072  # eager computes the masked half too
    seconds = out["time"]["step_seconds"]
    assert out["mfu"] == pytest.approx(model / (seconds * 1e9), rel=1e-12)
    assert out["hfu"] == pytest.approx(83712 / (seconds * 1e9), rel=1e-12)
    assert 0 < out["mfu"] < out["hfu"] < 1


GPU_NAMES = ("a100-80gb", "h100-80gb", "h200", "b200", "rtx-4090")


@settings(max_examples=150, deadline=None)
@given(heads=st.sampled_from([1, 2, 4, 8]), width=st.integers(1, 32), layers=st.integers(1, 4),
       seq=st.sampled_from([1, 7, 64, 512, 4096, 2**16, 2**20, 2**22]), experts=st.sampled_from([0, 2, 8]),
       top_k=st.integers(1, 2), b=st.integers(1, 4), attention=st.sampled_from(("eager", "flash")),
       recompute=st.sampled_from(("none", "selective", "full")), gpu=st.sampled_from(GPU_NAMES),
       precision=st.sampled_from(("mixed", "fp32", "fp8")))
def test_mfu_never_passes_hfu_and_hfu_never_passes_one(heads, width, layers, seq, experts, top_k, b, attention,
                                                      recompute, gpu, precision):
    """0 < MFU ≤ HFU ≤ 1 for any shape, length, mixture, kernel and recomputation: model FLOPs ≤ the FLOPs the
    time model charges, each at no more than the GPU's peak."""
    model = Transformer("m", layers=layers, hidden=heads * width, heads=heads, seq=seq, vocab=1000,
                        experts=experts, top_k=min(top_k, experts) if experts else 1)
    if precision == "fp8" and not GPUS[gpu].peak_flops_fp8:
        precision = "mixed"
    out = one_step(model, gpu, b, attention=attention, recompute=recompute, precision=precision)
    f = out["flops"]
    assert f["model_flops"] == f["dense"] + f["attention"] and min(f[k] for k in f) >= 0
    assert f["hardware_flops"] == f["model_flops"] + f["masked_flops"] + f["recompute_flops"]
    assert 0 < out["mfu"] <= out["hfu"] < 1


@pytest.mark.parametrize("bad", [dict(seconds=float("nan")), dict(seconds=0), dict(hardware_flops=0.5e15),
                                 dict(peak_flops=float("inf")), dict(gpus=0)])
def test_utilization_refuses_bad_numbers(bad):
    args = dict(model_flops=1e15, hardware_flops=1e15, seconds=1.0, peak_flops=1e15, gpus=1) | bad
    with pytest.raises(ValueError, match=next(iter(bad))):
        utilization(**args)


def test_the_roofline_by_hand():
    a100 = GPUS["a100-80gb"]
    n = 4096
    square = gemm_roofline(a100, n, n, n)
    assert square["intensity"] == 2 * n / (3 * 2) and square["balance"] == 312e12 / 2039e9  # 2n³ / (3n²·2 bytes)
    assert square["bound"] == "compute" and square["attainable_flops"] == 312e12
    thin = gemm_roofline(a100, 1, n, n)  # one token: a matrix-vector product, ~1 FLOP per byte
    assert thin["bound"] == "memory" and thin["attainable_flops"] == thin["intensity"] * 2039e9 < 312e12
    assert thin["seconds"] == thin["flops"] / thin["attainable_flops"]
    # the bytes are those `gpus.gemm_seconds` charges at HBM speed (16-bit inputs and output)
    g, (m, nn, k) = a100, (2048, 4608, 12288)
    implied = (gemm_seconds(g, m, nn, k) - g.gemm_latency - 2 * m * nn * k / (g.matmul_flops * 0.933)) * g.hbm_bandwidth
    assert gemm_roofline(g, m, nn, k)["bytes"] == pytest.approx(implied, rel=1e-6)
    assert gemm_roofline(GPUS["h100-80gb"], n, n, n, bytes_per_element=1)["balance"] == 1979e12 / 3350e9  # FP8 peak
    here = machine(1e11, 1e10)
    assert gemm_roofline(here, n, n, n, bytes_per_element=4)["balance"] == 10.0


def test_the_layers_gemms_are_lesson_6s_and_small_microbatches_are_memory_bound():
    m = Transformer("small", layers=2, hidden=1024, heads=16, seq=128, vocab=1000)
    rows = layer_roofline(m, GPUS["a100-80gb"], 1)
    assert [r["name"] for r in rows] == ["qkv", "attn_out", "fc1", "fc2", "scores", "context"]
    assert [(r["m"], r["n"], r["k"]) for r in rows[:4]] == [tuple(map(float, g)) for g in gemms(m, knobs(Plan(), m))]
    assert sum(r["flops"] for r in rows) == m.layer_flops(128, causal=False)  # every forward FLOP, the whole square
    assert all(r["bound"] == "memory" for r in rows)  # 128 tokens: far below an A100's 153 FLOP/B
    big = layer_roofline(m, GPUS["a100-80gb"], 64)
    assert all(r["bound"] == "compute" for r in big[:4]) and big[4]["bound"] == "memory"  # per head: h/a = 64 wide
    assert len(layer_roofline(m, GPUS["a100-80gb"], 1, attention="flash")) == 4


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_microbatching_is_lesson_3s_volume_and_activations_scale_with_b(zero):
    m = PRESETS["llama2-7b"]
    one = microbatching(m, 8, 2, dp=4, zero=zero)
    assert one["microbatches"] == 1 and one["bytes_per_rank_per_step"] == comm_volume_per_step(m.params, zero, 4)
    eight = microbatching(m, 64, 2, dp=4, zero=zero)
    assert eight["microbatches"] == 8 and eight["samples_per_rank"] == 16
    assert eight["activation_bytes"] == one["activation_bytes"]  # one micro-batch of b at a time, whatever m
    assert eight["activation_bytes_whole_batch"] > 7 * eight["activation_bytes"]  # 16 sequences at once
    if zero <= 1:  # one reduction per step: accumulation sends what one big batch would
        assert eight["bytes_per_rank_per_step"] == one["bytes_per_rank_per_step"] and eight["reductions_per_step"] == 1
    else:
        assert eight["reductions_per_step"] == 8 and eight["bytes_per_rank_per_step"] > one["bytes_per_rank_per_step"]
    if zero == 0:
        assert eight["bytes_if_reduced_every_microbatch"] == 8 * eight["bytes_per_rank_per_step"]


@pytest.mark.parametrize("kwargs, message", [
    (dict(global_batch=10, microbatch=4, dp=1), "global_batch=10"), (dict(global_batch=8, microbatch=0), "microbatch=0"),
    (dict(global_batch=8, microbatch=2, dp=0), "dp=0"), (dict(global_batch=8, microbatch=2, zero=4), "zero=4"),
    (dict(global_batch=8, microbatch=2, precision="fp64"), "precision='fp64'")])
def test_microbatching_refuses_in_one_line(kwargs, message):
    with pytest.raises(ValueError, match=message) as err:
        microbatching("llama2-7b", **kwargs)
    assert "\n" not in str(err.value)


CASES = [("gpt3-175b", "a100-80gb", 1, 8, "eager", "none", "mixed-fp32-grads"),
         ("llama2-7b", "h100-80gb", 2, 4, "flash", "selective", "mixed"),
         ("megatron-1.7b-2021", "rtx-4090", 4, 2, "eager", "full", "fp32"),
         ("llama3-8b", "h200", 1, 16, "flash", "full", "fp8")]


@pytest.mark.parametrize("name, gpu, b, m, attention, recompute, precision", CASES)
def test_one_step_is_what_simlab_plan_says_and_its_parts_add_up(name, gpu, b, m, attention, recompute, precision):
    out = one_step(name, gpu, b, m, attention=attention, recompute=recompute, precision=precision)
    plan = Plan(microbatch=b, attention=attention, recompute=recompute, precision=precision, overlap="none")
    want = evaluate_plan(PRESETS[name], cluster(gpu, gpus=1), b * m, plan)  # `simlab plan`'s own function
    mem, time = out["memory"], out["time"]
    assert {k: mem[k] for k in want["bytes_per_gpu"]} == want["bytes_per_gpu"] and mem["fits"] == want["fits"]
    assert (time["step_seconds"], out["mfu"], mem["usable"]) == (want["step_seconds"], want["mfu"],
                                                                 want["usable_bytes_per_gpu"])
    model = PRESETS[name]
    recipe = state_recipe(precision)
    assert (mem["params"], mem["grads"]) == (model.params * recipe["params"], model.params * recipe["grads"])
    assert mem["master"] + mem["adam_m"] + mem["adam_v"] == pytest.approx(mem["optimizer"], rel=1e-12)
    assert mem["layer_activations"] + mem["working"] + mem["embedding"] + mem["logits"] == pytest.approx(
        mem["activations"], rel=1e-12)
    assert sum(out["activation_terms"].values()) == pytest.approx(mem["layer_activations"], rel=1e-12)
    assert mem["params"] + mem["grads"] + mem["optimizer"] + mem["activations"] == pytest.approx(mem["total"])
    assert mem["cuda_context"] + mem["nccl"] + mem["fragmentation"] + mem["usable"] == pytest.approx(mem["capacity"])
    parts = ("forward", "backward", "recompute", "output_layer", "optimizer")
    assert sum(time[p] for p in parts) == pytest.approx(time["step_seconds"], rel=1e-12)
    flops = out["flops"]
    peak = GPUS[gpu].peak_flops_fp8 if precision == "fp8" else GPUS[gpu].peak_flops
    assert out["mfu"] == pytest.approx(flops["model_flops"] / (time["step_seconds"] * peak), rel=1e-12)
    assert out["hfu"] == pytest.approx(flops["hardware_flops"] / (time["step_seconds"] * peak), rel=1e-12)
    assert (time["recompute"] > 0) == (recompute == "full" or (recompute == "selective" and attention == "eager"))


def test_full_recompute_keeps_inputs_and_rebuilds_one_layer():
    full = one_step("megatron-22b", microbatch=4, attention="eager", recompute="full")
    none = one_step("megatron-22b", microbatch=4, attention="eager")
    sbh = 2048 * 4 * 6144
    assert full["memory"]["layer_activations"] == 48 * 2 * sbh
    assert full["memory"]["working"] == none["memory"]["layer_activations"] / 48 and none["memory"]["working"] == 0
    assert full["time"]["recompute"] == full["time"]["forward"]  # the whole forward again
    assert full["hfu"] > full["mfu"] == pytest.approx(none["mfu"] * none["time"]["step_seconds"]
                                                      / full["time"]["step_seconds"])


def test_a_gpu_object_and_a_sequence_length():
    here = machine(2e11, 2e10)
    out = one_step(Transformer("tiny", layers=2, hidden=64, heads=4, seq=32, vocab=100), here, 2, seq=16)
    assert out["config"]["seq"] == 16 and out["config"]["gpu"] == "this machine"
    assert out["memory"]["cuda_context"] == out["memory"]["fragmentation"] == 0  # a CPU reserves nothing
    assert math.isfinite(out["mfu"]) and out["mfu"] > 0


@pytest.mark.parametrize("kwargs, message", [
    (dict(model="gpt-5"), "model='gpt-5'"), (dict(gpu="tpu"), "gpu='tpu'"), (dict(microbatch=0), "microbatch=0"),
    (dict(microbatches=True), "microbatches=True"), (dict(attention="sdpa"), "attention='sdpa'"),
    (dict(recompute="some"), "recompute='some'"), (dict(precision="int8"), "precision='int8'"),
    (dict(seq=0), "seq=0"), (dict(model=3), "model=3")])
def test_one_step_refuses_in_one_line(kwargs, message):
    args = dict(model="llama2-7b") | kwargs
    with pytest.raises(ValueError, match=message) as err:
        one_step(**args)
    assert "\n" not in str(err.value)


JUNK = st.one_of(st.integers(-3, 5), st.integers(), st.floats(allow_nan=True, allow_infinity=True), st.none(),
                 st.booleans(), st.text(max_size=3), st.lists(st.integers(), max_size=2), st.sampled_from(
                     ["eager", "flash", "none", "selective", "full", "mixed", "fp32", "fp8", "llama2-7b", "h100-80gb"]))
CALLS = {  # each public function of lesson 5b's simulator, and the argument names a refusal may start with
    "one_step": (lambda a: one_step(a[0], a[1], a[2], a[3], seq=a[4], attention=a[5], recompute=a[6], precision=a[7]),
                 ("model", "gpu", "microbatch", "microbatches", "seq", "attention", "recompute", "precision")),
    "microbatching": (lambda a: microbatching(a[0], a[1], a[2], dp=a[3], zero=a[4], precision=a[5]),
                      ("model", "global_batch", "microbatch", "dp", "zero", "precision")),
    "activation_terms": (lambda a: activation_terms(a[0], a[1], attention=a[2], recompute=a[3], tp=a[4],
                                                    sequence_parallel=a[5], precision=a[6]),
                         ("model", "microbatch", "attention", "recompute", "tp", "sequence_parallel", "precision",
                          "heads")),
    "step_flops": (lambda a: step_flops(a[0], a[1], recompute=a[2], attention=a[3]),
                   ("model", "samples", "recompute", "attention")),
    "gemm_roofline": (lambda a: gemm_roofline(GPUS["a100-80gb"] if a[5] else a[0], a[1], a[2], a[3], batch=a[4]),
                      ("gpu", "m", "n", "k", "batch")),
    "layer_roofline": (lambda a: layer_roofline(a[0], GPUS["a100-80gb"], a[1], tp=a[2], attention=a[3], precision=a[4]),
                       ("model", "microbatch", "tp", "attention", "precision", "heads")),
    "state_recipe": (lambda a: state_recipe(a[0]), ("precision",)),
    "number_format": (lambda a: number_format(a[0]), ("name",)),
}


@settings(max_examples=400, deadline=None)
@given(name=st.sampled_from(sorted(CALLS)), args=st.lists(JUNK, min_size=8, max_size=8))
def test_any_input_gets_an_answer_or_a_one_line_refusal_naming_it(name, args):
    call, names = CALLS[name]
    try:
        out = call(args)
    except ValueError as err:
        message = str(err)
        assert "\n" not in message and message.split("=")[0].split(":")[0] in names, (name, args, message)
    else:  # an answer: numbers, all finite
        def numbers(x):
            if isinstance(x, dict):
                for v in x.values():
                    yield from numbers(v)
            elif isinstance(x, list):
                for v in x:
                    yield from numbers(v)
            elif isinstance(x, float):
                yield x
        assert all(math.isfinite(x) for x in numbers(out)), (name, args)
