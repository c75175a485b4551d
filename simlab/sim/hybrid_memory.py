"""Memory per GPU for any 3-D plan: the most loaded GPU's parameters, gradients, optimizer state and
activations, in bytes.

Teaches (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models"):
- model states: the stage's parameters over t, times bytes per parameter of each kind (`sim.memory.PRECISIONS`:
  fp32 4+4+8, mixed 2+2+12 as in the ZeRO paper, Megatron's mixed-fp32-grads 2+4+12), each kind divided
  by the DP size once ZeRO shards it (stage 1: optimizer, 2: + gradients, 3: + parameters, as
  `simlab.sim.memory`); Offload moves gradients and optimizer state to the host;
- activations of one layer and one micro-batch, 16-bit: sbh(34 + 5as/h) unsplit; with TP
  sbh(10 + 24/t + 5as/(ht)) (norms, dropouts and two inputs stay replicated: 10sbh); with TP + SP
  sbh/t·(34 + 5as/h); selective recomputation drops the 5as/h term (the softmax's s² activations);
  full recomputation keeps only each layer's input, 2sbh. For other shapes the 24 becomes the attention's
  4 + 4·kv/h and the MLP's 4·ffn/h (6·ffn/h gated);
- the first stage holds the most: its ceil(L/p) layers for min(p, m) micro-batches under 1F1B (for m
  under GPipe) — so about L layers' worth whatever p is —, ×(1 + (p-1)/(pv)) when interleaved, plus the
  embedding; without pipelining also the fp32 logits.

Every function takes a `Knobs` of numpy arrays, so the advisor evaluates thousands of plans at once.

    >>> from simlab.sim.model import PRESETS
    >>> from simlab.sim.hybrid import Plan
    >>> gib = {k: v / 2**30 for k, v in per_gpu(PRESETS["gpt3-175b"], Plan(tp=8, pp=8, schedule="interleaved",
    ...        chunks=3, precision="mixed-fp32-grads"), global_batch=64).items()}
    >>> round(gib["layer_activations"], 5)  # Korthikanti Figure 1, GPT-3 baseline
    66.84375
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .hybrid import ACTIVATION_BYTES, RECOMPUTE, SCHEDULES, STATE_BYTES, Plan
from .memory import CPU_GRAD_BYTES, HOST_ADAM_BYTES
from .model import Transformer

HOST_BYTES = HOST_ADAM_BYTES + CPU_GRAD_BYTES  # per parameter on the host under Offload (lesson 3's)


class Knobs(NamedTuple):
    """A plan's numbers as arrays (one entry per plan); recompute and schedule as indexes into
    `hybrid.RECOMPUTE` and `hybrid.SCHEDULES`."""

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


def knobs(plan: Plan) -> Knobs:
    return Knobs(*(np.asarray(x) for x in (plan.tp, plan.pp, plan.dp, plan.microbatch, plan.chunks, plan.zero,
                                            plan.offload, plan.sequence_parallel, RECOMPUTE.index(plan.recompute),
                                            SCHEDULES.index(plan.schedule))))


def stage_params(model: Transformer, k: Knobs) -> np.ndarray:
    """Parameters one GPU of the most loaded stage holds (its share of t): ceil(L/p) layers plus the
    embedding on the first stage, or the output layer on the last, whichever is more (both without PP)."""
    layers = -(-model.layers // k.pp) * model.layer_params_per_rank(k.tp)
    first = layers + model.embedding_params_per_rank(k.tp)
    last = layers + model.output_params_per_rank(k.tp, k.pp)
    return np.where(k.pp == 1, first + last - layers, np.maximum(first, last))


def model_states(model: Transformer, k: Knobs, precision: str) -> dict:
    """Weights, gradients and optimizer state per GPU; shards round up, as `simlab.sim.memory` does."""
    p_b, g_b, o_b = STATE_BYTES[precision]
    full = stage_params(model, k)
    shard = np.ceil(full / k.dp)
    params = np.where(k.zero >= 3, shard, full) * p_b
    grads = np.where(k.offload, 0, np.where(k.zero >= 2, shard, full) * g_b)
    optimizer = np.where(k.offload, 0, np.where(k.zero >= 1, shard, full) * o_b)
    layer = np.where(k.zero >= 3, model.layer_params_per_rank(k.tp) * (p_b + g_b), 0)  # ZeRO-3: a layer gathered
    layers_only = -(-model.layers // k.pp) * model.layer_params_per_rank(k.tp) * (p_b + g_b + o_b)  # no embedding
    return {"params": params + layer, "grads": grads, "optimizer": optimizer, "layer_states": layers_only,
            "cpu": np.where(k.offload, shard * HOST_BYTES, 0)}


def layer_activation_bytes(model: Transformer, k: Knobs, recompute=None) -> np.ndarray:
    """One layer, one micro-batch, 16-bit: Korthikanti's Table 2 (`recompute` overrides the plan's)."""
    s, h, a = model.seq, model.hidden, model.heads
    sbh = s * k.b * h
    split = 4 + 4 * model.kv_width / h + (6 if model.gated else 4) * model.ffn_width / h  # 24 for GPT
    replicated = np.where(k.sp, 10 / k.tp, 10)
    softmax = 5 * a * s / (h * k.tp)  # the s² term: scores, softmax, its dropout mask
    rec = k.recompute if recompute is None else recompute
    per = sbh * (replicated + split / k.tp + np.where(rec == 0, softmax, 0))
    return np.where(rec == 2, 2 * sbh, per)


def interleave_factor(k: Knobs) -> np.ndarray:
    """Korthikanti §4.2.3: interleaving v chunks stores L(1 + (p-1)/(pv)) layers' worth on the first stage."""
    return np.where(k.v > 1, 1 + (k.pp - 1) / (k.pp * k.v), 1.0)


def in_flight(k: Knobs, m) -> np.ndarray:
    """Micro-batches whose activations the first stage holds at once: all of them under GPipe, at most p
    under 1F1B (the warm-up)."""
    return np.where(k.schedule == SCHEDULES.index("gpipe"), m, np.minimum(k.pp, m))


def activations(model: Transformer, k: Knobs, m, precision: str) -> dict:
    """The first stage's activations: its layers (what Korthikanti's Figure 1 shows) and the rest."""
    scale = ACTIVATION_BYTES[precision] / 2  # the formulas count 16-bit values; fp32 doubles them
    layers = -(-model.layers // k.pp)
    stored = layer_activation_bytes(model, k) * layers * in_flight(k, m) * interleave_factor(k) * scale
    working = np.where(k.recompute == 2, layer_activation_bytes(model, k, recompute=0) * scale, 0)  # one layer
    sbh_t = model.seq * k.b * model.hidden / k.tp
    extra = sbh_t * np.minimum(k.pp, m) + np.where(k.pp == 1, 4 * sbh_t * (1 + model.vocab / model.hidden), 0)
    return {"layer_activations": stored, "activations": stored + working + extra * scale}


def per_gpu(model: Transformer, plan, global_batch: int, precision: str | None = None) -> dict:
    """Bytes on the most loaded GPU: params, grads, optimizer, activations, total (GPU) and cpu (host);
    also the transformer layers' own share, what Korthikanti's Figure 1 plots: layer_states (their
    weights, gradients and optimizer state, unsharded) and layer_activations.
    `plan`: a `Plan`, or `Knobs` of arrays with `precision` given."""
    k = knobs(plan) if isinstance(plan, Plan) else plan
    precision = precision or plan.precision
    m = global_batch // (k.dp * k.b)
    out = model_states(model, k, precision) | activations(model, k, m, precision)
    out["total"] = out["params"] + out["grads"] + out["optimizer"] + out["activations"]
    return {key: float(v) if np.ndim(v) == 0 else v for key, v in out.items()} if isinstance(plan, Plan) else out
