"""Time per training step for any 3-D plan, with where it goes: compute, TP communication, the pipeline's
bubble and hand-overs, DP/ZeRO collectives, Offload's PCIe traffic, the optimizer.

Teaches, on the most loaded stage's GPU (`hybrid.layers_per_stage` layers, plus the output layer):
- compute: a layer's matmuls (2 FLOPs per weight per token, and attention's s² term) at the GPU's
  achievable matmul speed, its element-wise work at HBM speed (K_ELEMENTWISE bytes moved per byte of
  activations the layer keeps); backward costs twice the forward; full recomputation adds a forward
  (+33 %), selective only the attention core (a few %);
- TP: per layer and micro-batch 2 all-reduces forward, 2 backward (with sequence parallelism each is a
  reduce-scatter + all-gather: the same bytes), 2 more when fully recomputing; the backward pair hides
  behind the weight-gradient matmuls (Megatron overlaps them); on NVLink if the TP group fits in a node;
- PP: the bubble of the chosen schedule — (p-1)/(vm+p-1) of the pipeline's time, the lesson-4 closed form
  (`simlab.sim.pipeline.closed_form_bubble`, held to the simulator by tests) — and each micro-batch's
  activation and gradient hand-over (1/t of it with Megatron's scatter/gather);
- DP/ZeRO, on the slowest link the DP group crosses: ZeRO 0 and 1 reduce the gradients (and ZeRO-1
  gathers the parameters) once per step — overlapped with the last micro-batch's backward without
  pipelining (DDP's buckets), after the flush and exposed with it (as in Megatron's published runs);
  ZeRO-2 reduce-scatters and ZeRO-3 also gathers the parameters **once per micro-batch**, hidden only as
  far as that micro-batch's compute covers it. With PP m is large: that is why the primer keeps only
  ZeRO-1 with pipelining;
- Offload: gradients down and parameters up over PCIe, Adam on the host's cores, not overlapped.
Outputs step seconds, tokens/s and MFU (model FLOPs, no recomputation, over the GPUs' peak).

    >>> from simlab.sim.model import PRESETS
    >>> from simlab.sim.hardware import cluster
    >>> from simlab.sim.hybrid import Plan
    >>> t = step(PRESETS["megatron-1t"], Plan(tp=8, pp=64, recompute="full"), cluster(gpus=512), global_batch=512)
    >>> round(t["step_seconds"], 1), round(t["mfu"], 3)  # published: 94.42 s (Korthikanti Table 5)
    (104.2, 0.386)
"""
from __future__ import annotations

import numpy as np

from .hardware import Cluster
from .hybrid import ACTIVATION_BYTES, SCHEDULES, STATE_BYTES, Plan
from .hybrid_memory import Knobs, knobs, layer_activation_bytes, stage_params
from .model import Transformer

# HBM bytes the element-wise ops move per byte of activations a layer keeps. Fitted, with the A100's matmul
# efficiency, to the two forward times of one 22B layer in Korthikanti et al. 2022 Table 4 (7.7 ms; 7.2 ms
# with sequence parallelism, which keeps fewer activations): every other published time the tests
# compare with (Table 4's backward and recompute rows, Table 5, Narayanan et al.'s Table 1) is a prediction.
K_ELEMENTWISE = 2.3
ADAM_BYTES = 32  # per parameter an optimizer step reads and writes on the GPU (memory-bound)


def _ring(steps, fraction, nbytes, alpha, bandwidth):
    """α-β time of a ring collective: `steps` latencies and `fraction` of `nbytes` over the link."""
    return steps * alpha + fraction * nbytes / bandwidth


def _links(c: Cluster, k: Knobs):
    """(α, bandwidth) of the TP, DP and PP groups: TP varies fastest in the rank grid, so a TP group stays
    inside a node when t ≤ GPUs per node; a DP group spans t·d ranks; PP neighbours are t·d ranks apart."""
    def link(inside):
        return np.where(inside, c.gpu.intra_alpha, c.inter_alpha), np.where(inside, c.gpu.intra_bandwidth,
                                                                             c.inter_bandwidth)
    one_node = c.gpus <= c.gpus_per_node
    return (link(one_node | (k.tp <= c.gpus_per_node)), link(one_node | (k.tp * k.dp <= c.gpus_per_node)),
            link(one_node | (k.tp * k.dp * k.pp <= c.gpus_per_node)))


def pipeline_factor(k: Knobs, m) -> np.ndarray:
    """The pipeline's time in units of one micro-batch's stage time: m / (1 - bubble) = m + (p-1)/v, with
    v = 1 unless interleaved (GPipe's bubble equals 1F1B's; only its memory differs)."""
    v = np.where(k.schedule == SCHEDULES.index("interleaved"), k.v, 1)
    return m + (k.pp - 1) / v


def layer_seconds(model: Transformer, k: Knobs, c: Cluster, precision: str) -> dict:
    """One layer, one micro-batch, on one GPU: forward, backward and recompute compute, and one TP
    collective (`tp_collective`; 2 in the forward, 2 in the backward, 2 more under full recomputation)."""
    gpu, s, h, a_b = c.gpu, model.seq, model.hidden, ACTIVATION_BYTES[precision]
    tokens = k.b * s
    (tp_a, tp_bw), _, _ = _links(c, k)
    matmul = model.layer_flops(tokens) / k.tp / gpu.matmul_flops
    forward = matmul + K_ELEMENTWISE * layer_activation_bytes(model, k, recompute=0) * a_b / 2 / gpu.hbm_bandwidth
    selective = (4 * tokens * s * h / k.tp / gpu.matmul_flops
                 + K_ELEMENTWISE * 5 * model.heads * s * s * k.b / k.tp * a_b / 2 / gpu.hbm_bandwidth)
    return {"matmul": matmul, "forward": forward, "backward": 2 * forward,
            "recompute": np.where(k.recompute == 2, forward, np.where(k.recompute == 1, selective, 0)),
            "tp_collective": np.where(k.tp > 1, _ring(2 * (k.tp - 1), 2 * (k.tp - 1) / k.tp, tokens * h * a_b,
                                                      tp_a, tp_bw), 0)}


def step(model: Transformer, plan, c: Cluster, global_batch: int, precision: str | None = None) -> dict:
    """Seconds per step with a breakdown, tokens/s and MFU for `plan` (a `Plan`, or `Knobs` of arrays)."""
    k = knobs(plan) if isinstance(plan, Plan) else plan
    precision = precision or plan.precision
    (p_b, g_b, _), a_b = STATE_BYTES[precision], ACTIVATION_BYTES[precision]
    gpu, s, h = c.gpu, model.seq, model.hidden
    m, tokens, layers = global_batch // (k.dp * k.b), k.b * s, -(-model.layers // k.pp)
    _, (dp_a, dp_bw), (pp_a, pp_bw) = _links(c, k)

    one = layer_seconds(model, k, c, precision)
    tc = one["tp_collective"]
    layer_compute = one["forward"] + one["backward"] + one["recompute"]
    layer_tp = 2 * tc + np.where(k.recompute == 2, 2 * tc, 0) + np.maximum(0, 2 * tc - one["matmul"])  # bwd hides
    logits = (3 * model.logits_flops(tokens) / k.tp / gpu.matmul_flops
              + K_ELEMENTWISE * 4 * tokens * model.vocab / k.tp / gpu.hbm_bandwidth)  # fp32 logits, loss
    v = np.where(k.schedule == SCHEDULES.index("interleaved"), k.v, 1)
    p2p = np.where(k.pp > 1, 2 * v * (pp_a + tokens * h * a_b / k.tp / pp_bw), 0)  # act forward, grad back
    stage_compute, stage_tp = layers * layer_compute + logits, layers * layer_tp
    stage = stage_compute + stage_tp + p2p
    pipeline = stage * pipeline_factor(k, m)

    # data parallel: gradients G and parameters W of this GPU's part, over the DP group
    params = stage_params(model, k)
    grads, weights, d = params * g_b, params * p_b, k.dp
    reduce = np.where(k.zero == 0, _ring(2 * (d - 1), 2 * (d - 1) / d, grads, dp_a, dp_bw),  # all-reduce,
                      _ring(d - 1, (d - 1) / d, grads, dp_a, dp_bw))  # or ZeRO's reduce-scatter
    gather = _ring(d - 1, (d - 1) / d, weights, dp_a, dp_bw)  # ZeRO's all-gather of the updated parameters
    # without pipelining the reduction overlaps the last micro-batch's backward (DDP's buckets); after a
    # pipeline flush it runs alone, as in Megatron's published runs
    last_backward = layers * (one["backward"] + one["recompute"])
    once = np.where(k.pp == 1, np.maximum(0, reduce - last_backward), reduce) + np.where(k.zero == 1, gather, 0)
    per_mb = reduce + np.where(k.zero == 3, 2 * gather, 0)  # ZeRO-2/3: every micro-batch, beside its compute
    many = m * np.maximum(0, per_mb - stage) + np.where(k.zero == 2, gather, 0)
    dp_time = np.where(d == 1, 0, np.where(k.zero <= 1, once, many))

    shard = np.where(k.zero >= 1, params / d, params)
    pcie = shard * (2 + p_b) / gpu.host_bandwidth  # fp16 gradients down, parameters up
    offload = np.where(k.offload, pcie + shard / (c.host_adam_rate / c.gpus_per_node), 0)
    optimizer = np.where(k.offload, 0, shard * ADAM_BYTES / gpu.hbm_bandwidth)

    total = pipeline + dp_time + offload + optimizer
    flops = model.model_flops(global_batch)
    breakdown = {"compute": m * stage_compute, "tp_comm": m * stage_tp, "pp_p2p": m * p2p,
                 "pp_bubble": pipeline - m * stage, "dp_comm": dp_time, "offload": offload, "optimizer": optimizer}
    out = {"step_seconds": total, "tokens_per_second": global_batch * s / total,
           "mfu": flops / (total * c.gpus * gpu.peak_flops), "breakdown": breakdown}
    if isinstance(plan, Plan):
        out = {key: ({b: float(x) for b, x in val.items()} if isinstance(val, dict) else float(val))
               for key, val in out.items()}
    return out
