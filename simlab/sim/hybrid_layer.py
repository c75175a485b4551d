"""One transformer layer on one GPU, for one micro-batch: its GEMMs, its attention, its element-wise work and
its tensor-parallel collectives, forward and backward — the unit lesson 6's step time is built from.

Teaches where a layer's time goes on a TP rank of t, with T = b·s tokens:
- four GEMMs forward — QKV (T × h → (h + 2·kv)/t), the attention's output (T × h/t → h), the MLP's up (T × h →
  ffn/t, twice that gated) and down (T × ffn/t → h) — and two per GEMM backward (the input's gradient and the
  weight's), each timed by its shape (`gpus.gemm_seconds`): a TP-8 shard or a small micro-batch makes thin
  GEMMs that run below the GPU's best rate;
- the attention core: FlashAttention at its published rate (its backward recomputes the scores inside the
  kernel, counted in its 2.5× backward; FlashAttention's Triton kernel 1.4× slower forward and 2× backward,
  `gpus.FLASH_TRITON_SLOWER`), or eager attention's two batched GEMMs per head over the full s × s
  scores, and their softmax at HBM speed;
- element-wise work (norms, activation, dropout, residuals, the eager softmax) at HBM speed: K_ELEMENTWISE
  bytes moved per byte of activations the layer keeps (`hybrid_memory.layer_activation_bytes`); FP8 also casts
  every GEMM input (read 2 bytes, write 1);
- recomputation: full repeats the forward, selective repeats eager attention's core (nothing under flash),
  op-sac (torchtitan's op-level policy) the unsaved matmuls (k, o, w3) and all the element-wise work;
- TP: two collectives forward (after attention and after the MLP: all-reduces, or reduce-scatter +
  all-gather with sequence parallelism, the same bytes), two backward, two more when fully recomputing (one
  under op-sac: the all-gathers, or the all-reduce, that feed the recomputed matmuls), on
  the TP group's link (`simlab.sim.network`).

- lesson 7: with context parallelism a rank works on T = b·s/cp tokens and 1/cp of the causal attention (zig-zag:
  balanced), and sends K,V (`cp_seconds`); a mixture of experts' MLP is the router and E/ep experts as a grouped
  GEMM on the rows dispatched to them, with 4 all-to-alls (`ep_seconds`; `simlab.sim.expert_parallel_costs`).

K_ELEMENTWISE and `gpus.IN_TRAINING` are the model's two fitted constants: they make one 22B layer's forward
(TP 8, b = 4, eager attention, A100) take the 7.7 ms of Korthikanti et al. 2022's Table 4, and 7.2 ms with
sequence parallelism, which keeps fewer activations. Every other time the tests compare with
— that table's backward, recompute and sequence-parallel rows, its Table 5, Narayanan et al.'s Table 1 and the
published runs of `simlab.sim.published_runs` — is a prediction.
"""
from __future__ import annotations

import numpy as np

from .expert_parallel_costs import all_to_all, layer_a2a
from .expert_parallel_costs import gemms as moe_gemms
from .gpus import FLASH_TRITON_SLOWER, flash_seconds, gemm_seconds
from .hybrid import ACTIVATION_BYTES, ATTENTION, CP_COMMS, rank_tokens
from .hybrid_loss import moved_per_logit
from .hybrid_memory import Knobs, cp_traffic, layer_activation_bytes
from .hybrid_op_sac import recomputed_mms
from .model import Transformer
from .network import all_gather, all_reduce, reduce_scatter, send

K_ELEMENTWISE = 2.39  # HBM bytes moved per activation byte kept: fitted (with gpus.IN_TRAINING) to Table 4
# Fixed costs, in operations (torch's aten calls) of `GPU.op_overhead` seconds each: nothing on a GPU's big
# layers (the datasheet presets have op_overhead = 0), most of the step for lesson 6's tiny model on a CPU.
# Counted on the course's own GPT (`simlab.exec.models`) by tests/exec/test_hybrid_ops.py.
OPS_LAYER = {"forward": 39, "backward": 96}
OPS_OUTSIDE = {"forward": 13, "backward": 17}


def gemms(model: Transformer, k: Knobs) -> list[tuple]:
    """The forward GEMMs of one layer on one TP rank, (M, N, K) each: M = T tokens (b·s/cp), K the inner dimension;
    a mixture of experts' MLP as (M, N, K, batch): the router and the local experts (`expert_parallel_costs.gemms`)."""
    tokens, h, t = rank_tokens(model, k), model.hidden, k.tp
    attention = [(tokens, (h + 2 * model.kv_width) / t, h), (tokens, h, h / t)]
    if model.experts:
        return attention + moe_gemms(model, k)
    up = model.ffn_width * (2 if model.gated else 1)
    return attention + [(tokens, up / t, h), (tokens, h, model.ffn_width / t)]


def _gemm_times(gpu, shapes, fp8: bool):
    """(forward, input gradients, weight gradients) seconds of these GEMMs ((M, N, K) or (M, N, K, batch))."""
    shapes = [s if len(s) == 4 else (*s, 1) for s in shapes]
    fwd = sum(gemm_seconds(gpu, m, n, kk, batch=b, fp8=fp8) for m, n, kk, b in shapes)
    dgrad = sum(gemm_seconds(gpu, m, kk, n, batch=b, fp8=fp8) for m, n, kk, b in shapes)
    wgrad = sum(gemm_seconds(gpu, kk, n, m, batch=b, fp8=fp8) for m, n, kk, b in shapes)
    return fwd, dgrad, wgrad


def attention_core(model: Transformer, k: Knobs, gpu) -> tuple:
    """(forward, backward) seconds of softmax(QKᵀ)V on this rank's b·a/t heads, per `k.attention`; with context
    parallelism a 1/cp of the causal (query, key) pairs: the zig-zag layout gives every rank the same share
    (`context_parallel.work_per_rank`, imbalance 1), so the whole sequence's time over cp."""
    s, d = model.seq, model.hidden // model.heads
    heads = k.b * model.heads / k.tp
    flash = flash_seconds(gpu, heads, s, d)
    scores = gemm_seconds(gpu, s, s, d, batch=heads) + gemm_seconds(gpu, s, d, s, batch=heads)  # QKᵀ, AV
    if flash is None:  # no published chart: the same GEMMs, causal blocks skipped, backward 2.5× (FA's count)
        flash = 3.5 * scores / 2
    is_flash, triton = k.attention != ATTENTION.index("eager"), k.attention == ATTENTION.index("flash-triton")
    slower = np.where(triton, FLASH_TRITON_SLOWER[0], 1), np.where(triton, FLASH_TRITON_SLOWER[1], 1)
    fwd = np.where(is_flash, flash / 3.5 * slower[0], scores)
    bwd = np.where(is_flash, flash * 2.5 / 3.5 * slower[1], 2 * scores)
    return (fwd, bwd) if np.all(np.asarray(k.cp) == 1) else (fwd / k.cp, bwd / k.cp)


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
        elementwise = elementwise + 3 * sum((m * kk + m * n) * (s[3] if len(s) == 4 else 1)
                                            for s in shapes for m, n, kk in [s[:3]]) / gpu.hbm_bandwidth
    forward = fwd + attn_f + elementwise + OPS_LAYER["forward"] * gpu.op_overhead
    backward = dgrad + wgrad + attn_b + 2 * elementwise + OPS_LAYER["backward"] * gpu.op_overhead
    # selective recomputation redoes eager attention's core: its GEMMs and the s² tensors it drops
    scores = kept - layer_activation_bytes(model, k, recompute=1) * a_b / 2
    selective = np.where(k.attention == ATTENTION.index("eager"), attn_f + K_ELEMENTWISE * scores / gpu.hbm_bandwidth, 0)
    # op-sac (`hybrid_op_sac`): the unsaved matmuls' forward GEMMs by their shapes, and the forward's element-wise
    # work again (norms, rotary, SiLU and the gate's product, residuals: none of them is saved); skipped when no
    # plan asks for it (the advisor's default search times ~10⁶ plans)
    op_sac = _gemm_times(gpu, [mm[1:] for mm in recomputed_mms(model, k)], fp8)[0] + elementwise + \
        OPS_LAYER["forward"] * gpu.op_overhead if np.any(np.asarray(k.recompute) == 3) else 0
    message = rank_tokens(model, k) * model.hidden * a_b  # one (b, s/cp, h) activation
    tp = np.where(k.sp, reduce_scatter(c, 1, k.tp, message) + all_gather(c, 1, k.tp, message),
                  all_reduce(c, 1, k.tp, message))
    return {"forward": forward, "backward": backward, "gemm": fwd, "wgrad": wgrad,
            "recompute": np.where(k.recompute == 2, forward, np.where(k.recompute == 1, selective,
                                  np.where(k.recompute == 3, op_sac, 0))),
            "tp_collective": np.where(k.tp > 1, tp, 0), "attention": (attn_f, attn_b)}


def cp_seconds(model: Transformer, k: Knobs, c, a_b: int, attention) -> dict:
    """One layer's context-parallel traffic, one micro-batch: {forward, backward: exposed seconds, hidden: what ran
    under attention}. The CP group is cp ranks tp apart (Megatron's tp-cp-dp-pp order); bytes are `cp_comm`'s
    closed forms (`hybrid_memory.cp_traffic`).
    - ring: N − 1 hops forward, N backward (K,V again with dK,dV); each hop runs under the attention of the block
      already held, 1/N of the layer's attention, so a hop exposes max(0, hop − attention/N) (`network.send`:
      NVLink, or one NIC's share when the group spans nodes);
    - all-gather-kv: one all-gather of K,V forward, a reduce-scatter of dK,dV backward, exposed (they must finish
      before attention starts, and after it ends);
    - ulysses: two all-to-alls forward (Q,K,V in, the output back), two backward, exposed."""
    fwd_b, bwd_b, _ = cp_traffic(model, k, a_b)
    n, attn_f, attn_b = np.asarray(k.cp), attention[0], attention[1]
    hops_f, hops_b = np.maximum(n - 1, 1), n
    hop_f, hop_b = send(c, k.tp, n, fwd_b / hops_f), send(c, k.tp, n, bwd_b / hops_b)
    ring_f = hops_f * np.maximum(0, hop_f - attn_f / n)
    ring_b = hops_b * np.maximum(0, hop_b - attn_b / n)
    block = fwd_b / hops_f  # all-gather: each rank's K,V block; N of them gathered
    gather_f, gather_b = all_gather(c, k.tp, n, n * block), reduce_scatter(c, k.tp, n, n * block)
    a2a_f, a2a_b = all_to_all(c, k.tp, n, fwd_b), all_to_all(c, k.tp, n, bwd_b)
    ring, gather = k.cp_comm == CP_COMMS.index("ring"), k.cp_comm == CP_COMMS.index("all-gather-kv")
    on = n > 1
    forward = np.where(on, np.where(ring, ring_f, np.where(gather, gather_f, a2a_f)), 0)
    backward = np.where(on, np.where(ring, ring_b, np.where(gather, gather_b, a2a_b)), 0)
    hidden = np.where(on & ring, hops_f * hop_f - ring_f + hops_b * hop_b - ring_b, 0)
    return {"forward": forward, "backward": backward, "hidden": hidden}


def ep_seconds(model: Transformer, k: Knobs, c, a_b: int) -> np.ndarray:
    """One MoE layer's expert-parallel traffic in one direction (dispatch + combine, and TP's extra rows), exposed:
    0 without experts."""
    if not model.experts:
        return 0.0
    return layer_a2a(model, k, c, a_b)


def output_seconds(model: Transformer, k: Knobs, c, precision: str) -> dict:
    """The output layer and the loss, one micro-batch, forward + backward (the last stage's extra work), and the
    TP collectives around the model's edges: the vocab-parallel embedding's all-reduce of its (b, s, h)
    output and the loss's three of (b, s) fp32 values (max, sum of exponentials, target logit)."""
    gpu, a_b, tokens = c.gpu, ACTIVATION_BYTES[precision], rank_tokens(model, k)
    fwd, dgrad, wgrad = _gemm_times(gpu, [(tokens, model.vocab / k.tp, model.hidden)], precision == "fp8")
    loss = tokens * model.vocab / k.tp * moved_per_logit(k, K_ELEMENTWISE) / gpu.hbm_bandwidth  # `hybrid_loss`
    edges = all_reduce(c, 1, k.tp, tokens * model.hidden * a_b) + 3 * all_reduce(c, 1, k.tp, tokens * 4)
    return {"logits": fwd + dgrad + wgrad + loss + sum(OPS_OUTSIDE.values()) * gpu.op_overhead,
            "edges": np.where(k.tp > 1, edges, 0)}
