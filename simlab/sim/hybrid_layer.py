"""One transformer layer on one GPU, for one micro-batch: its GEMMs, its attention, its element-wise work and
its tensor-parallel collectives, forward and backward — the unit lesson 6's step time is built from.

Teaches where a layer's time goes on a TP rank of t, with T = b·s tokens:
- four GEMMs forward — QKV (T × h → (h + 2·kv)/t), the attention's output (T × h/t → h), the MLP's up (T × h →
  ffn/t, twice that gated) and down (T × ffn/t → h) — and two per GEMM backward (the input's gradient and the
  weight's), each timed by its shape (`gpus.gemm_seconds`): a TP-8 shard or a small micro-batch makes thin
  GEMMs that run below the GPU's best rate;
- the attention core: FlashAttention at its published rate (its backward recomputes the scores inside the
  kernel, counted in its 2.5× backward), or eager attention's two batched GEMMs per head over the full s × s
  scores, and their softmax at HBM speed;
- element-wise work (norms, activation, dropout, residuals, the eager softmax) at HBM speed: K_ELEMENTWISE
  bytes moved per byte of activations the layer keeps (`hybrid_memory.layer_activation_bytes`); FP8 also casts
  every GEMM input (read 2 bytes, write 1);
- recomputation: full repeats the forward, selective repeats eager attention's core (nothing under flash);
- TP: two collectives forward (after attention and after the MLP: all-reduces, or reduce-scatter +
  all-gather with sequence parallelism, the same bytes), two backward, two more when fully recomputing, on
  the TP group's link (`simlab.sim.network`).

K_ELEMENTWISE and `gpus.IN_TRAINING` are the model's two fitted constants: they make one 22B layer's forward
(TP 8, b = 4, eager attention, A100) take the 7.7 ms of Korthikanti et al. 2022's Table 4, and 7.2 ms with
sequence parallelism, which keeps fewer activations. Every other time the tests compare with
— that table's backward, recompute and sequence-parallel rows, its Table 5, Narayanan et al.'s Table 1 and the
published runs of `simlab.sim.published_runs` — is a prediction.
"""
from __future__ import annotations

import numpy as np

from .gpus import flash_seconds, gemm_seconds
from .hybrid import ACTIVATION_BYTES, ATTENTION
from .hybrid_memory import Knobs, layer_activation_bytes
from .model import Transformer
from .network import all_gather, all_reduce, reduce_scatter

K_ELEMENTWISE = 2.39  # HBM bytes moved per activation byte kept: fitted (with gpus.IN_TRAINING) to Table 4
# Fixed costs, in operations (torch's aten calls) of `GPU.op_overhead` seconds each: nothing on a GPU's big
# layers (the datasheet presets have op_overhead = 0), most of the step for lesson 6's tiny model on a CPU.
# Counted on the course's own GPT (`simlab.exec.models`) by tests/exec/test_hybrid_ops.py.
OPS_LAYER = {"forward": 39, "backward": 96}
OPS_OUTSIDE = {"forward": 13, "backward": 17}


def gemms(model: Transformer, k: Knobs) -> list[tuple]:
    """The forward GEMMs of one layer on one TP rank, (M, N, K) each: M = T tokens, K the inner dimension."""
    tokens, h, t = k.b * model.seq, model.hidden, k.tp
    up = model.ffn_width * (2 if model.gated else 1)
    return [(tokens, (h + 2 * model.kv_width) / t, h), (tokens, h, h / t), (tokens, up / t, h),
            (tokens, h, model.ffn_width / t)]


def _gemm_times(gpu, shapes, fp8: bool):
    """(forward, input gradients, weight gradients) seconds of these GEMMs."""
    fwd = sum(gemm_seconds(gpu, m, n, kk, fp8=fp8) for m, n, kk in shapes)
    dgrad = sum(gemm_seconds(gpu, m, kk, n, fp8=fp8) for m, n, kk in shapes)
    wgrad = sum(gemm_seconds(gpu, kk, n, m, fp8=fp8) for m, n, kk in shapes)
    return fwd, dgrad, wgrad


def attention_core(model: Transformer, k: Knobs, gpu) -> tuple:
    """(forward, backward) seconds of softmax(QKᵀ)V on this rank's b·a/t heads, per `k.attention`."""
    s, d = model.seq, model.hidden // model.heads
    heads = k.b * model.heads / k.tp
    flash = flash_seconds(gpu, heads, s, d)
    scores = gemm_seconds(gpu, s, s, d, batch=heads) + gemm_seconds(gpu, s, d, s, batch=heads)  # QKᵀ, AV
    if flash is None:  # no published chart: the same GEMMs, causal blocks skipped, backward 2.5× (FA's count)
        flash = 3.5 * scores / 2
    is_flash = k.attention == ATTENTION.index("flash")
    return np.where(is_flash, flash / 3.5, scores), np.where(is_flash, flash * 2.5 / 3.5, 2 * scores)


def layer_seconds(model: Transformer, k: Knobs, c, precision: str) -> dict:
    """One layer, one micro-batch: `forward`, `backward` and `recompute` compute (GEMMs, attention, element-wise
    work, fixed costs), `gemm` (the forward GEMMs alone), `wgrad` (the backward's weight-gradient GEMMs) and one
    TP collective, `tp_collective` (2 forward, 2 backward, 2 more under full recomputation)."""
    gpu, a_b = c.gpu, ACTIVATION_BYTES[precision]
    fp8 = precision == "fp8"
    shapes = gemms(model, k)
    fwd, dgrad, wgrad = _gemm_times(gpu, shapes, fp8)
    attn_f, attn_b = attention_core(model, k, gpu)
    kept = layer_activation_bytes(model, k, recompute=0) * a_b / 2
    elementwise = K_ELEMENTWISE * kept / gpu.hbm_bandwidth
    if fp8:  # GEMM inputs cast to FP8, read 2 bytes and write 1: X forward, dY backward (the weights' FP8 copies
        # are cast once per step and cached across micro-batches: Transformer Engine's `is_first_microbatch`)
        elementwise = elementwise + 3 * sum(m * kk + m * n for m, n, kk in shapes) / gpu.hbm_bandwidth
    forward = fwd + attn_f + elementwise + OPS_LAYER["forward"] * gpu.op_overhead
    backward = dgrad + wgrad + attn_b + 2 * elementwise + OPS_LAYER["backward"] * gpu.op_overhead
    # selective recomputation redoes eager attention's core: its GEMMs and the s² tensors it drops
    scores = kept - layer_activation_bytes(model, k, recompute=1) * a_b / 2
    selective = np.where(k.attention == ATTENTION.index("eager"), attn_f + K_ELEMENTWISE * scores / gpu.hbm_bandwidth, 0)
    message = k.b * model.seq * model.hidden * a_b  # one (b, s, h) activation
    tp = np.where(k.sp, reduce_scatter(c, 1, k.tp, message) + all_gather(c, 1, k.tp, message),
                  all_reduce(c, 1, k.tp, message))
    return {"forward": forward, "backward": backward, "gemm": fwd, "wgrad": wgrad,
            "recompute": np.where(k.recompute == 2, forward, np.where(k.recompute == 1, selective, 0)),
            "tp_collective": np.where(k.tp > 1, tp, 0)}


def output_seconds(model: Transformer, k: Knobs, c, precision: str) -> dict:
    """The output layer and the loss, one micro-batch, forward + backward (the last stage's extra work), and the
    TP collectives around the model's edges: the vocab-parallel embedding's all-reduce of its (b, s, h)
    output and the loss's three of (b, s) fp32 values (max, sum of exponentials, target logit)."""
    gpu, a_b, tokens = c.gpu, ACTIVATION_BYTES[precision], k.b * model.seq
    fwd, dgrad, wgrad = _gemm_times(gpu, [(tokens, model.vocab / k.tp, model.hidden)], precision == "fp8")
    loss = 4 * tokens * model.vocab / k.tp * K_ELEMENTWISE / gpu.hbm_bandwidth  # fp32 logits, softmax, loss
    edges = all_reduce(c, 1, k.tp, tokens * model.hidden * a_b) + 3 * all_reduce(c, 1, k.tp, tokens * 4)
    return {"logits": fwd + dgrad + wgrad + loss + sum(OPS_OUTSIDE.values()) * gpu.op_overhead,
            "edges": np.where(k.tp > 1, edges, 0)}
