"""Lesson 5b's arithmetic of one training step: how many FLOPs it does, how much of the machine it uses (MFU and
HFU), and which of its matrix multiplies the memory holds back (the roofline).

Teaches:
- a step costs about 6 FLOPs per parameter per token — 2 in the forward (a multiply and an add per weight), 4 in
  the backward (the input's gradient and the weight's) — plus attention's two s² GEMMs, QKᵀ and AV. A causal model
  needs only the half below the diagonal, 2·b·s²·h forward per layer: model FLOPs = 3 × forward =
  6·tokens·(L·matmul weights + V·h) + 6·L·s·h·tokens (`sim.model.Transformer.model_flops`: Korthikanti's Eq. 7
  with its s² term halved, as Megatron-LM and FlashAttention count; a mixture of experts: the top_k experts a
  token meets and the router);
- MFU = model FLOPs / (seconds × peak): only the work the model needs. HFU counts what the hardware does, the
  FLOPs the time model charges: eager attention computes the whole s × s square, masked half included (its
  hardware FLOPs are Korthikanti's Eq. 7); recomputation repeats work — full: one more forward of every layer
  (eager: Narayanan's Eq. 3, 96·B·s·L·h²(1 + s/6h + V/16Lh)); selective: eager attention's core forward again;
  FlashAttention's backward always recomputes the causal QKᵀ inside its kernel (FA's count: 3.5 forwards).
  So MFU ≤ HFU ≤ the fraction of its peak the time model lets the GPU run at;
- the roofline (Williams et al. 2009): a GEMM of (m×k)·(k×n) does 2mnk FLOPs and moves at least (mk + kn + mn)
  elements; its arithmetic intensity is FLOPs per byte moved. Below the machine's balance point, peak FLOP/s ÷
  memory bytes/s (about 153 FLOP/B on an A100 in bf16), the memory is the limit: attainable = intensity ×
  bandwidth. A small micro-batch makes a layer's GEMMs thin (m = b·s tokens) and the attention's per-head GEMMs
  are thin by nature (k or n = h/a).

    >>> from simlab.sim.model import PRESETS
    >>> m = PRESETS["gpt3-175b"]
    >>> f = step_flops(m, 1536)
    >>> f["model_flops"] == m.model_flops(1536), f["attention"] == 6 * 96 * 2048 * 12288 * f["tokens"]
    (True, True)
    >>> from simlab.sim.gpus import GPUS
    >>> r = gemm_roofline(GPUS["a100-80gb"], 2048, 12288, 12288)
    >>> r["intensity"] == 2048 * 12288 / (2048 + 12288 + 2048), round(r["balance"]), r["bound"]  # mnk/(mk+kn+mn)
    (True, 153, 'compute')
"""
from __future__ import annotations

import math

from .._checks import check_choice, check_int, check_number, check_positive
from .gpus import GPU, GPUS
from .hybrid import ACTIVATION_BYTES, LAYER_ATTENTION, LAYER_RECOMPUTE, PRECISIONS, Plan, check_plan
from .hybrid_layer import gemms
from .hybrid_memory import knobs
from .model import Transformer
from .training_step_memory import check_model

GEMM_NAMES = ("qkv", "attn_out", "fc1", "fc2")  # `hybrid_layer.gemms`' order
WIDTHS = (1, 2, 4)  # bytes per element a GEMM reads and writes: FP8, 16-bit, fp32


def step_flops(model: Transformer, samples: int, *, recompute: str = "none", attention: str = "eager") -> dict:
    """FLOPs of one training step on `samples` sequences: tokens; six_n (the rule of thumb, 6·N·tokens with N all
    parameters, embeddings too); dense (6 per matmul weight a token meets per token, the output layer's included);
    attention (the causal s² GEMMs, forward + backward); model_flops (dense + attention, what MFU counts);
    masked_flops (eager attention's masked half of the square, computed and thrown away); recompute_flops (full:
    every layer's forward again, as the kernel runs it; selective with eager attention: the attention core's; plus,
    with FlashAttention, the causal QKᵀ again in its backward); hardware_flops (model + masked + recompute, what
    HFU counts: the FLOPs `hybrid_layer.layer_seconds` charges)."""
    model = check_model(model)
    check_int("samples", samples, 1)
    check_choice("recompute", recompute, LAYER_RECOMPUTE)
    check_choice("attention", attention, LAYER_ATTENTION)
    tokens = samples * model.seq
    model_flops = model.model_flops(samples)  # sim.model's formula, the one lesson 6's MFU divides
    dense = 3 * (2 * tokens * model.layers * model.active_matmul_params + model.logits_flops(tokens))
    core = model.layers * model.attention_flops(tokens)  # QKᵀ and AV forward, causal: 2·L·s·h·tokens
    eager = attention == "eager"
    masked = 3 * core if eager else 0  # the square's other half, forward (1×) and backward (2×)
    extra = {"full": model.layers * model.layer_flops(tokens, causal=not eager), "selective": 2 * core if eager else 0,
             "none": 0}[recompute]
    flash = 0 if eager else core // 2  # FlashAttention's backward recomputes the causal QKᵀ (FA counts 3.5 forwards)
    return {"tokens": tokens, "six_n": 6 * model.params * tokens, "dense": dense, "attention": 3 * core,
            "model_flops": model_flops, "masked_flops": masked, "recompute_flops": extra + flash,
            "hardware_flops": model_flops + masked + extra + flash}


def utilization(model_flops: float, hardware_flops: float, seconds: float, peak_flops: float, gpus: int = 1) -> dict:
    """MFU and HFU: model and hardware FLOPs over what `gpus` GPUs at `peak_flops` could do in `seconds`."""
    check_number("model_flops", model_flops)
    check_number("hardware_flops", hardware_flops, model_flops)
    for name, value in (("seconds", seconds), ("peak_flops", peak_flops)):
        check_positive(name, value)
    check_int("gpus", gpus, 1)
    capacity = seconds * peak_flops * gpus
    return {"mfu": model_flops / capacity, "hfu": hardware_flops / capacity}


def machine(peak_flops: float, bandwidth: float, name: str = "this machine") -> GPU:
    """A measured machine as a `GPU` the roofline can place GEMMs on: its best matmul FLOP/s and memory bytes/s
    (`parity.training_step.measure_machine`), everything else the uncalibrated CPU's."""
    check_positive("peak_flops", peak_flops)
    check_positive("bandwidth", bandwidth)
    return GPUS["cpu-this-machine"].with_(name=name, peak_flops=peak_flops, hbm_bandwidth=bandwidth,
                                          matmul_efficiency=1.0)


def _check_gpu(gpu) -> None:
    if not isinstance(gpu, GPU):
        raise ValueError(f"gpu={gpu!r}: must be a GPU (simlab.sim.gpus.GPUS[...] or training_step_flops.machine)")


def _peak(gpu: GPU, width: int) -> float:
    """The GPU's dense peak for elements of `width` bytes: FP8's for one byte where it has FP8 units."""
    return gpu.peak_flops_fp8 if width == 1 and gpu.peak_flops_fp8 else gpu.peak_flops


def gemm_roofline(gpu: GPU, m, n, k, *, batch: int = 1, bytes_per_element: int = 2) -> dict:
    """One (batched) GEMM (m×k)·(k×n) on the roofline: flops (2mnk·batch), bytes (inputs and output once each,
    (mk + kn + mn)·width·batch: the least any kernel moves), intensity (FLOP/B), balance (the GPU's peak ÷ its
    memory bandwidth, FLOP/B), bound ("memory" below the balance point, else "compute"), attainable_flops
    (min(peak, intensity × bandwidth)), seconds (flops / attainable)."""
    _check_gpu(gpu)
    for name, value in (("m", m), ("n", n), ("k", k)):
        check_positive(name, value)
    check_int("batch", batch, 1)
    check_choice("bytes_per_element", bytes_per_element, WIDTHS)
    flops = 2.0 * m * n * k * batch
    moved = float((m * k + k * n + m * n) * bytes_per_element * batch)
    if not math.isfinite(flops):
        raise ValueError(f"m={m}: the GEMM's FLOPs ({m} × {n} × {k} × {batch}) overflow a float")
    peak, bandwidth = _peak(gpu, bytes_per_element), gpu.hbm_bandwidth
    intensity, balance = flops / moved, peak / bandwidth
    attainable = min(peak, intensity * bandwidth)
    return {"flops": flops, "bytes": moved, "intensity": intensity, "balance": balance,
            "bound": "memory" if intensity < balance else "compute", "attainable_flops": attainable,
            "seconds": flops / attainable}


def layer_roofline(model: Transformer, gpu: GPU, microbatch: int = 1, *, tp: int = 1, attention: str = "eager",
                   precision: str = "mixed") -> list[dict]:
    """Each forward GEMM of one layer on one TP rank, on the roofline: {"name", "m", "n", "k", "batch",
    **gemm_roofline}. The four weight GEMMs are lesson 6's (`hybrid_layer.gemms`: m = b·s tokens); eager attention
    adds its two batched GEMMs per head, "scores" (QKᵀ: s × h/a by h/a × s) and "context" (AV: s × s by s × h/a),
    b·a/t of each — the ones `hybrid_layer.attention_core` times."""
    model = check_model(model)
    _check_gpu(gpu)
    check_int("microbatch", microbatch, 1)
    check_choice("precision", precision, PRECISIONS)
    plan = Plan(tp=tp, microbatch=microbatch, attention=attention, precision=precision)
    check_plan(model, plan, gpus=tp, global_batch=microbatch)
    width = 1 if precision == "fp8" else ACTIVATION_BYTES[precision]
    rows = [(name, float(m), float(n), float(k), 1) for name, (m, n, k) in zip(GEMM_NAMES, gemms(model, knobs(plan, model)))]
    if attention == "eager":
        s, d, heads = model.seq, model.hidden // model.heads, microbatch * model.heads // tp
        rows += [("scores", s, s, d, heads), ("context", s, d, s, heads)]
    return [{"name": name, "m": m, "n": n, "k": k, "batch": batch,
             **gemm_roofline(gpu, m, n, k, batch=batch, bytes_per_element=width)} for name, m, n, k, batch in rows]
