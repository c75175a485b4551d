"""Memory per GPU for any 3-D plan: the most loaded GPU's parameters, gradients, optimizer state and
activations, in bytes — and how much of a GPU's memory tensors can really use.

Teaches (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models"):
- model states: the stage's parameters over t, times bytes per parameter of each kind (`hybrid.STATE_BYTES`:
  fp32 4+4+8, mixed 2+2+12 as in the ZeRO paper, Megatron's mixed-fp32-grads 2+4+12, FP8's recipe), each
  kind divided by the ZeRO group's size once ZeRO shards it (stage 1: optimizer, 2: + gradients, 3: +
  parameters, as `simlab.sim.memory`; the whole DP group, or one node's part of it under HSDP); ZeRO-3 also
  holds the layer at work gathered (at most 1e9 parameters of it), and the next one when it prefetches; Offload moves gradients and
  optimizer state to the host;
- activations of one layer and one micro-batch, 16-bit, with eager attention: sbh(34 + 5as/h) unsplit; with
  TP sbh(10 + 24/t + 5as/(ht)) (norms, dropouts and two inputs stay replicated: 10sbh); with TP + SP
  sbh/t·(34 + 5as/h); selective recomputation drops the 5as/h term (the softmax's s² activations); full
  recomputation keeps only each layer's input, 2sbh (2sbh/t with SP); torchtitan's op-level policy (op-sac) keeps
  the input, every second matmul's output and the attention's (`hybrid_op_sac`). FlashAttention never stores the s²
  scores (only a row's log-sum-exp, 4 bytes per head and token): its memory is selective recomputation's,
  at no recompute. Without dropout (Llama) the two dropout masks (sbh each) and the attention's (as²b) go.
  For other shapes the 24 becomes the attention's 4 + 4·kv/h and the MLP's 4·ffn/h (6·ffn/h gated). FP8
  saves each GEMM's input in one byte instead of two (Transformer Engine's "input in FP8 saved for backward");
- stage r of p holds, under 1F1B, min(p − r, m) micro-batches of its layers' activations (all m under GPipe);
  interleaved over v chunks, (2(p − r − 1) + (v − 1)p + 1)/v of them — Korthikanti's L(1 + (p−1)/(pv)) on the
  first stage. The first stage also holds the embedding, the last the output layer and its micro-batch's loss:
  4 bytes per logit with a fused loss (Megatron's), 12 with plain PyTorch's fp32 cross-entropy (16 under TP),
  1.5 chunked (`hybrid_loss`). The most loaded of the first, second and last stage is the GPU that must fit.
- lesson 7: context parallelism keeps s/cp of every activation on a rank (the sequence is split; it needs a fused
  attention kernel, so no s² scores) and, for the layer at work, the K,V buffers of its `cp_comm` (`cp_traffic`);
  ZeRO shards the dense states over dp·cp (Megatron's data-parallel-with-context group). A mixture of experts holds
  E/ep experts, each split over t, their states sharded over the expert-data-parallel group (dp·cp/ep), and keeps
  its router probabilities, dispatched rows, intermediates and outputs (`expert_parallel_costs`), plus the
  all-to-all's buffers for the layer at work.
- the GPU: an "80 GB" part holds 80 GiB, of which the CUDA context, NCCL's buffers and the allocator's
  fragmentation take a share (`hardware.GPU.usable_memory`).

Every function takes a `Knobs` of numpy arrays, so the advisor evaluates thousands of plans at once.

    >>> from simlab.sim.model import PRESETS
    >>> from simlab.sim.hybrid import Plan
    >>> gib = {k: v / 2**30 for k, v in per_gpu(PRESETS["gpt3-175b"], Plan(tp=8, pp=8, schedule="interleaved",
    ...        chunks=3, precision="mixed-fp32-grads", attention="eager"), global_batch=64).items()}
    >>> round(gib["layer_activations"], 5)  # Korthikanti Figure 1, GPT-3 baseline
    66.84375
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .context_parallel_costs import layer_bytes
from .expert_parallel_costs import activation_bytes as moe_bytes
from .expert_parallel_costs import buffer_bytes
from .hybrid import (
    ACTIVATION_BYTES,
    ATTENTION,
    CP_COMMS,
    LOSSES,
    RECOMPUTE,
    SCHEDULES,
    STATE_BYTES,
    Plan,
    rank_tokens,
    stage_split,
)
from .hybrid_loss import held_per_logit
from .hybrid_op_sac import kept_bytes as op_sac_kept
from .memory import CPU_GRAD_BYTES, HOST_ADAM_BYTES
from .model import Transformer

HOST_BYTES = HOST_ADAM_BYTES + CPU_GRAD_BYTES  # per parameter on the host under Offload (lesson 3's)
FIRST, MIDDLE, LAST = 0, 1, 2  # the stages that can be the most loaded: 0, 1 and p − 1
ZERO3_UNIT = 1e9  # parameters ZeRO-3 gathers at once at most (DeepSpeed: stage3_max_live_parameters)


class Knobs(NamedTuple):
    """A plan's numbers as arrays (one entry per plan); recompute, schedule and attention as indexes into
    `hybrid.RECOMPUTE`, `hybrid.SCHEDULES` and `hybrid.ATTENTION`; the overlaps as 0/1; `shard` the ZeRO
    group's size; `first`, `mid`, `last` the layers of the first stage, of the fullest middle one and of the last."""

    tp: np.ndarray
    pp: np.ndarray
    dp: np.ndarray
    b: np.ndarray
    v: np.ndarray
    zero: np.ndarray
    offload: np.ndarray
    sp: np.ndarray
    recompute: np.ndarray
    schedule: np.ndarray
    attention: np.ndarray
    shard: np.ndarray
    first: np.ndarray
    mid: np.ndarray
    last: np.ndarray
    overlap_dp: np.ndarray
    overlap_params: np.ndarray
    overlap_tp: np.ndarray
    bucket_gather: np.ndarray  # parameters per DP/ZeRO gather; 0: one per layer
    bucket_reduce: np.ndarray
    # lesson 7 (defaults: a dense model, no context parallelism); cp_comm an index into `hybrid.CP_COMMS`
    cp: np.ndarray = 1
    ep: np.ndarray = 1
    capacity: np.ndarray = 0.0
    cp_comm: np.ndarray = 0
    loss: np.ndarray = 0  # an index into `hybrid.LOSSES`


def knobs(plan: Plan, model: Transformer) -> Knobs:
    first, mid, last = stage_split(model, plan)
    over = plan.overlaps
    return Knobs(*(np.asarray(x) for x in (
        plan.tp, plan.pp, plan.dp, plan.microbatch, plan.chunks, plan.zero, plan.offload, plan.sequence_parallel,
        RECOMPUTE.index(plan.recompute), SCHEDULES.index(plan.schedule), ATTENTION.index(plan.attention),
        plan.shard_size, first, mid, last, "dp" in over, "params" in over, "tp" in over, *(plan.bucket or (0, 0)),
        plan.cp, plan.ep, plan.capacity, CP_COMMS.index(plan.cp_comm), LOSSES.index(plan.loss))))


def stage_params(model: Transformer, k: Knobs, stage: int) -> np.ndarray:
    """Parameters one GPU of a stage holds (its share of t, and of ep for the experts): its layers, plus the
    embedding on the first stage and the output layer on the last (both without PP)."""
    per_layer = model.layer_params_per_rank(k.tp, k.ep)
    if stage == MIDDLE:
        return k.mid * per_layer
    embedding, output = model.embedding_params_per_rank(k.tp), model.output_params_per_rank(k.tp, k.pp)
    if stage == FIRST:
        return k.first * per_layer + embedding + np.where(k.pp == 1, output, 0)
    return k.last * per_layer + output + np.where(k.pp == 1, embedding, 0)


def stage_expert_params(model: Transformer, k: Knobs, stage: int):
    """The experts among a stage GPU's parameters (0 for a dense model): they shard over another group."""
    return (k.first, k.mid, k.last)[stage] * model.expert_params_per_rank(k.tp, k.ep)


def zero_groups(k: Knobs) -> tuple:
    """(dense, expert) ZeRO group sizes: the DP group with its CP ranks — Megatron's distributed optimizer shards
    over the data-parallel-with-context group (`intra_dp_cp_group`, megatron/core/optimizer/__init__.py @ d98e8a6),
    torchtitan's FSDP over dp_shard·cp — and, for the experts, its ep-th part, the expert-data-parallel group
    (`intra_expt_dp_group`: dp·cp/ep ranks hold the same experts)."""
    dense = k.shard * k.cp
    return dense, np.maximum(1, dense / k.ep)


def zero3_unit(model: Transformer, tp, ep=1) -> np.ndarray:
    """Parameters ZeRO-3 holds gathered at once on one GPU of t: the layer, or `ZERO3_UNIT` of a bigger one, but
    never less than its largest matrix (one parameter is gathered whole; below that takes memory-centric tiling)."""
    return np.minimum(model.layer_params_per_rank(tp, ep), np.maximum(ZERO3_UNIT, model.largest_matrix / np.asarray(tp)))


def model_states(model: Transformer, k: Knobs, precision: str, stage: int) -> dict:
    """Weights, gradients and optimizer state per GPU of a stage; shards round up, as `simlab.sim.memory` does."""
    p_b, g_b, o_b = STATE_BYTES[precision]
    full = stage_params(model, k, stage)
    dense_group, expert_group = zero_groups(k)
    if model.experts:
        experts = stage_expert_params(model, k, stage)
        shard = np.ceil((full - experts) / dense_group) + np.ceil(experts / expert_group)
    else:
        shard = np.ceil(full / dense_group)
    params = np.where(k.zero >= 3, shard, full) * p_b
    grads = np.where(k.offload, 0, np.where(k.zero >= 2, shard, full) * g_b)
    optimizer = np.where(k.offload, 0, np.where(k.zero >= 1, shard, full) * o_b)
    # ZeRO-3: the unit at work gathered (weights and gradients), and the next unit's weights if prefetched; a unit
    # is a layer, or at most 1e9 parameters of a bigger one (DeepSpeed's stage3_max_live_parameters default;
    # FSDP users wrap such a layer's linears one by one) — but never less than its largest matrix: a parameter is
    # gathered whole (going below one tensor takes memory-centric tiling, ZeRO-Infinity's TiledLinear)
    layer = zero3_unit(model, k.tp, k.ep)
    gathered = np.where(k.zero >= 3, layer * (p_b + g_b + k.overlap_params * p_b), 0)
    return {"params": params + gathered, "grads": grads, "optimizer": optimizer,
            "cpu": np.where(k.offload, shard * HOST_BYTES, 0)}


def _per_element(model: Transformer, k: Knobs, rec, fp8: bool) -> dict:
    """`activation_terms` in bytes per element of a (s, b, h) tensor, before full recomputation drops them."""
    s, h, a = model.seq, model.hidden, model.heads
    kv, ffn = model.kv_width / h, model.ffn_width / h
    gemm_in = 1 if fp8 else 2  # bytes per element of a GEMM's saved input
    mask = 1 if model.dropout else 0  # one byte per element; Llama has no dropout
    replicated = np.where(k.sp, 1 / k.tp, 1)  # what TP repeats on every rank, unless sequence parallelism splits it
    split = 1 / k.tp
    eager = (k.attention == ATTENTION.index("eager")) & (rec == 0)
    scores = np.where(eager, a * s / h * split, 0)  # a·s²·b elements per s·b·h, split over t by heads
    return {
        "ln1_input": 2 * replicated, "qkv_input": gemm_in * replicated,
        "q": 2 * split, "k": 2 * kv * split, "v": 2 * kv * split,
        "softmax_output": 2 * scores, "softmax_dropout_mask": mask * scores, "softmax_dropout_output": 2 * mask * scores,
        "flash_lse": np.where(k.attention != ATTENTION.index("eager"), 4 * a / h * split, 0),
        "out_proj_input": gemm_in * split, "attention_dropout_mask": mask * replicated,
        "ln2_input": 2 * replicated, "fc1_input": gemm_in * replicated,
        # gated: the gate's and the up projection's outputs; a mixture of experts keeps its own (`moe_bytes`)
        "gelu_input": 0 if model.experts else (4 if model.gated else 2) * ffn * split,
        "gelu_output": 0 if model.experts else gemm_in * ffn * split, "mlp_dropout_mask": mask * replicated}


def activation_terms(model: Transformer, k: Knobs, recompute=None, fp8: bool = False) -> dict:
    """One layer, one micro-batch, 16-bit, tensor by tensor (Korthikanti's §4.1): {term: bytes on one TP rank},
    in the order the forward saves them; lesson 5b says what each tensor is (`training_step_memory.TERMS`).
    Each term is a multiple of s·b·h bytes: "replicated" across TP ranks (the norms' inputs and outputs, the
    dropout masks: split only under sequence parallelism), split over t (Q, K, V, the projections' and the
    MLP's inputs), or the s² scores (eager attention, split over t by heads). Eager attention keeps the
    softmax's output (and with dropout its mask and its output) unless selective recomputation drops them;
    FlashAttention keeps a row's log-sum-exp instead (4 bytes per head and token); full recomputation keeps
    the layer's input alone. `fp8`: the four GEMMs' inputs are saved in FP8, one byte instead of two."""
    rec = k.recompute if recompute is None else recompute
    sbh = _sbh(model, k)
    kept = np.where(rec == 2, 0, sbh)  # full recomputation: only the layer's input stays, the rest is rebuilt
    terms = {name: (sbh if name == "ln1_input" else kept) * c for name, c in _per_element(model, k, rec, fp8).items()}
    if model.experts:
        terms["experts"] = np.where(rec == 2, 0, moe_bytes(model, k, fp8))
    return terms


def _sbh(model: Transformer, k: Knobs):
    """Elements of one (s, b, h) activation on one rank: context parallelism keeps s/cp of the sequence."""
    return rank_tokens(model, k) * model.hidden


def layer_activation_bytes(model: Transformer, k: Knobs, recompute=None, fp8: bool = False) -> np.ndarray:
    """One layer, one micro-batch, 16-bit: Korthikanti's Table 2 (`recompute` overrides the plan's), the sum of
    `activation_terms` (added up per element first: the advisor calls this for thousands of plans at once):
    sbh(34 + 5as/h) for GPT with eager attention, sbh(10 + 24/t + 5as/(ht)) with TP. `fp8`: the four GEMMs'
    inputs are saved for the backward in FP8, one byte instead of two (Transformer Engine)."""
    rec = k.recompute if recompute is None else recompute
    per = _per_element(model, k, rec, fp8)
    sbh = _sbh(model, k)
    kept = sbh * per.pop("ln1_input") + np.where(rec == 2, 0, sbh) * sum(per.values())
    if np.any(np.asarray(rec) == 3):  # op-sac: `hybrid_op_sac`'s tensors
        kept = np.where(rec == 3, sum(op_sac_kept(model, k).values()), kept)
    return kept + np.where(rec == 2, 0, moe_bytes(model, k, fp8)) if model.experts else kept


def cp_traffic(model: Transformer, k: Knobs, a_b: int) -> tuple:
    """One layer's context-parallel (forward, backward, K,V buffer) bytes on one rank (`cp_comm`'s closed forms,
    `context_parallel_costs.layer_bytes`): a TP rank's K,V heads (kv_heads/t, at least one: Megatron replicates
    K,V heads when t > kv_heads) of its s/cp tokens; Ulysses' pieces a 1/cp of its heads."""
    d, n = model.hidden // model.heads, k.cp
    tokens = rank_tokens(model, k)
    kv = np.maximum((model.kv_heads or model.heads) / k.tp, 1)
    block = 2 * tokens * kv * d * a_b
    heads = model.heads / k.tp
    qkv, out = tokens * d * (heads + 2 * kv) / n * a_b, tokens * d * heads / n * a_b
    return layer_bytes(k.cp_comm, n, block, qkv, out)


def in_flight(k: Knobs, m, stage: int) -> np.ndarray:
    """Micro-batches (in layer-sized units of a stage) whose activations a stage holds at once: all m
    under GPipe; under 1F1B min(p − r, m) on stage r; interleaved (2(p − r − 1) + (v − 1)p + 1)/v."""
    r = {FIRST: 0, MIDDLE: 1, LAST: k.pp - 1}[stage]
    one_f_one_b = np.minimum(k.pp - r, m)
    chunks = np.minimum(2 * (k.pp - r - 1) + (k.v - 1) * k.pp + 1, m * k.v) / k.v
    return np.where(k.schedule == SCHEDULES.index("gpipe"), m,
                    np.where(k.schedule == SCHEDULES.index("interleaved"), chunks, one_f_one_b))


def activations(model: Transformer, k: Knobs, m, precision: str, stage: int) -> dict:
    """A stage's activations: its layers' and, around them, the embedding's output (first stage) or the
    final norm and fp32 logits of one micro-batch (last stage); each piece, and their sum `activations`."""
    scale = ACTIVATION_BYTES[precision] / 2  # the formulas count 16-bit values; fp32 doubles them
    layers = (k.first, k.mid, k.last)[stage]
    stored = layer_activation_bytes(model, k, fp8=precision == "fp8") * layers * in_flight(k, m, stage) * scale
    # the layer the backward recomputes holds its rebuilt tensors too: all of them (full), the unsaved (op-sac)
    whole = layer_activation_bytes(model, k, recompute=0)
    op_sac = np.maximum(0, whole - layer_activation_bytes(model, k, recompute=3)) if np.any(k.recompute == 3) else 0
    working = np.where(k.recompute == 2, whole, np.where(k.recompute == 3, op_sac, 0)) * scale
    if np.any(np.asarray(k.cp) > 1) or model.experts:  # the layer at work: K,V buffers, the all-to-all's
        working = working + cp_traffic(model, k, ACTIVATION_BYTES[precision])[2] + buffer_bytes(
            model, k, ACTIVATION_BYTES[precision])
    sbh_t = _sbh(model, k) / k.tp
    embedding = sbh_t * in_flight(k, m, FIRST) * scale
    # bytes: the final norm's fp32 input, the loss's per logit (split over t: vocab-parallel loss, loss_parallel)
    logits = sbh_t * (4 + held_per_logit(k) * model.vocab / model.hidden)
    emb = {FIRST: embedding, MIDDLE: 0, LAST: np.where(k.pp == 1, embedding, 0)}[stage]
    out = {FIRST: np.where(k.pp == 1, logits, 0), MIDDLE: 0, LAST: logits}[stage]
    extra = emb + out if stage == FIRST else out + emb
    on = layers > 0
    return {"layer_activations": stored, "working_activations": np.where(on, working, 0),  # lesson 5b's breakdown
            "embedding_activations": np.where(on, emb, 0), "logits_activations": np.where(on, out, 0),
            "activations": np.where(on, stored + working + extra, 0)}


def per_gpu(model: Transformer, plan, global_batch: int, precision: str | None = None) -> dict:
    """Bytes on the most loaded GPU: params, grads, optimizer, activations, total (GPU), cpu (host) and
    `stage` (0 first, 1 middle, 2 last: which one that is); also the first stage's transformer layers alone,
    what Korthikanti's Figure 1 plots: layer_states (their weights, gradients and optimizer state, unsharded)
    and layer_activations. `plan`: a `Plan`, or `Knobs` of arrays with `precision` given."""
    k = knobs(plan, model) if isinstance(plan, Plan) else plan
    precision = precision or plan.precision
    m = global_batch // (k.dp * k.b)
    stages = [model_states(model, k, precision, s) | activations(model, k, m, precision, s)
              for s in (FIRST, MIDDLE, LAST)]
    for s in stages:
        s["total"] = s["params"] + s["grads"] + s["optimizer"] + s["activations"]
    worst = np.argmax(np.stack(np.broadcast_arrays(*(s["total"] for s in stages))), axis=0)
    out = {key: np.choose(worst, [np.broadcast_to(s[key], np.shape(worst)) for s in stages])
           for key in ("params", "grads", "optimizer", "activations", "total", "cpu")}
    out["stage"] = worst
    out["layer_activations"] = stages[FIRST]["layer_activations"]
    out["layer_states"] = k.first * model.layer_params_per_rank(k.tp, k.ep) * sum(STATE_BYTES[precision])
    return {key: float(v) if np.ndim(v) == 0 else v for key, v in out.items()} if isinstance(plan, Plan) else out
