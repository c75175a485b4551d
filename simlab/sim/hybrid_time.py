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
- fixed costs per operation (`GPU.op_overhead`, 0 on the datasheet GPUs): the counted aten calls of each
  layer, the embedding, head and loss, and the optimizer — what dominates lesson 6's tiny model on a CPU.
`executor=True` models the course's own executor instead of Megatron: nothing overlapped, Adam unfused.
Outputs step seconds, tokens/s and MFU (model FLOPs, no recomputation, over the GPUs' peak).

    >>> from simlab.sim.model import PRESETS
    >>> from simlab.sim.hardware import cluster
    >>> from simlab.sim.hybrid import Plan
    >>> t = step(PRESETS["megatron-1t"], Plan(tp=8, pp=64, recompute="full"), cluster(gpus=512), global_batch=512)
    >>> round(t["step_seconds"], 1), round(t["mfu"], 3)  # published: 94.42 s (Korthikanti Table 5)
    (104.8, 0.384)
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..trace import Trace
from .hardware import Cluster
from .hybrid import ACTIVATION_BYTES, SCHEDULES, STATE_BYTES, Plan
from .hybrid_memory import Knobs, knobs, layer_activation_bytes, stage_params
from .model import Transformer

# HBM bytes the element-wise ops move per byte of activations a layer keeps. Fitted, with the A100's matmul
# efficiency, to the two forward times of one 22B layer in Korthikanti et al. 2022 Table 4 (7.7 ms; 7.2 ms
# with sequence parallelism, which keeps fewer activations): every other published time the tests
# compare with (Table 4's backward and recompute rows, Table 5, Narayanan et al.'s Table 1) is a prediction.
K_ELEMENTWISE = 2.3
ADAM_BYTES = 32  # per parameter a fused optimizer step reads and writes on the GPU (memory-bound)
# The course's executor, fp32 and unfused: Adam's seven in-place or temporary passes (`exec.zero.adam_update`:
# lerp 12, mul 8, addcmul 12, sqrt 8, div 8, add 8, addcdiv 16 bytes per parameter) plus DataParallelAdam's
# gather of gradients and parameters into flat buffers, the 1/N scaling and the copy back (4 × 8).
EXECUTOR_ADAM_BYTES = 72 + 32
# Fixed costs, in operations (torch's aten calls) of `GPU.op_overhead` seconds each: nothing on a GPU's big
# layers (the datasheet presets have op_overhead = 0), most of the step for lesson 6's tiny model on a CPU.
# Counted on the course's own GPT (`simlab.exec.models`) by tests/exec/test_hybrid_ops.py, which fails if the
# model's code changes its count: per layer forward and backward, the embedding + head + loss around them,
# and per parameter tensor in the optimizer (gather into the flat buffer, scatter back) plus Adam's own.
OPS_LAYER = {"forward": 39, "backward": 96}
OPS_OUTSIDE = {"forward": 13, "backward": 17}
OPS_PER_TENSOR, OPS_ADAM, TENSORS_PER_LAYER, TENSORS_OUTSIDE = 8, 16, 16, 5


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
    work = matmul + K_ELEMENTWISE * layer_activation_bytes(model, k, recompute=0) * a_b / 2 / gpu.hbm_bandwidth
    forward = work + OPS_LAYER["forward"] * gpu.op_overhead
    backward = 2 * work + OPS_LAYER["backward"] * gpu.op_overhead
    selective = (4 * tokens * s * h / k.tp / gpu.matmul_flops
                 + K_ELEMENTWISE * 5 * model.heads * s * s * k.b / k.tp * a_b / 2 / gpu.hbm_bandwidth)
    return {"matmul": matmul, "forward": forward, "backward": backward,
            "recompute": np.where(k.recompute == 2, forward, np.where(k.recompute == 1, selective, 0)),
            "tp_collective": np.where(k.tp > 1, _ring(2 * (k.tp - 1), 2 * (k.tp - 1) / k.tp, tokens * h * a_b,
                                                      tp_a, tp_bw), 0)}


def step(model: Transformer, plan, c: Cluster, global_batch: int, precision: str | None = None,
         executor: bool = False) -> dict:
    """Seconds per step with a breakdown, tokens/s and MFU for `plan` (a `Plan`, or `Knobs` of arrays).
    `executor`: False models a production framework — Megatron hides the backward's TP all-reduces behind
    the weight-gradient matmuls, DDP the gradient reduction behind the last backward, Adam is fused; True
    models the course's own executor (`simlab.exec.hybrid`, what `parity.hybrid` predicts), which runs every
    collective in turn and Adam as separate passes (EXECUTOR_ADAM_BYTES)."""
    k = knobs(plan) if isinstance(plan, Plan) else plan
    precision = precision or plan.precision
    (p_b, g_b, _), a_b = STATE_BYTES[precision], ACTIVATION_BYTES[precision]
    gpu, s, h = c.gpu, model.seq, model.hidden
    m, tokens, layers = global_batch // (k.dp * k.b), k.b * s, -(-model.layers // k.pp)
    _, (dp_a, dp_bw), (pp_a, pp_bw) = _links(c, k)

    one = layer_seconds(model, k, c, precision)
    tc = one["tp_collective"]
    layer_compute = one["forward"] + one["backward"] + one["recompute"]
    hidden_bwd = np.maximum(0, 2 * tc - one["matmul"]) if not executor else 2 * tc  # the backward's pair hides
    layer_tp = 2 * tc + np.where(k.recompute == 2, 2 * tc, 0) + hidden_bwd
    logits = (3 * model.logits_flops(tokens) / k.tp / gpu.matmul_flops
              + K_ELEMENTWISE * 4 * tokens * model.vocab / k.tp / gpu.hbm_bandwidth  # fp32 logits, loss
              + sum(OPS_OUTSIDE.values()) * gpu.op_overhead)
    v = np.where(k.schedule == SCHEDULES.index("interleaved"), k.v, 1)
    p2p = np.where(k.pp > 1, 2 * v * (pp_a + tokens * h * a_b / k.tp / pp_bw), 0)  # act forward, grad back
    # the vocabulary-parallel embedding all-reduces its (b, s, h) output; the loss its max, sum and target
    # logit per token (4 bytes each): small beside the layers', not beside a tiny model's
    (tp_a, tp_bw), _, _ = _links(c, k)
    edge_tp = np.where(k.tp > 1, _ring(2 * (k.tp - 1), 2 * (k.tp - 1) / k.tp, tokens * h * a_b, tp_a, tp_bw)
                       + 3 * _ring(2 * (k.tp - 1), 2 * (k.tp - 1) / k.tp, tokens * 4, tp_a, tp_bw), 0)
    stage_compute, stage_tp = layers * layer_compute + logits, layers * layer_tp + edge_tp
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
    overlapped = np.maximum(0, reduce - last_backward) if not executor else reduce
    once = np.where(k.pp == 1, overlapped, reduce) + np.where(k.zero == 1, gather, 0)
    per_mb = reduce + np.where(k.zero == 3, 2 * gather, 0)  # ZeRO-2/3: every micro-batch, beside its compute
    many = m * np.maximum(0, per_mb - stage) + np.where(k.zero == 2, gather, 0)
    dp_time = np.where(d == 1, 0, np.where(k.zero <= 1, once, many))

    shard = np.where(k.zero >= 1, params / d, params)
    pcie = shard * (2 + p_b) / gpu.host_bandwidth  # fp16 gradients down, parameters up
    offload = np.where(k.offload, pcie + shard / (c.host_adam_rate / c.gpus_per_node), 0)
    tensors = layers * TENSORS_PER_LAYER + TENSORS_OUTSIDE
    optimizer = np.where(k.offload, 0, shard * (EXECUTOR_ADAM_BYTES if executor else ADAM_BYTES) / gpu.hbm_bandwidth
                         + (OPS_PER_TENSOR * tensors + OPS_ADAM) * gpu.op_overhead)

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


def pipeline_trace(model: Transformer, plan: Plan, c: Cluster, global_batch: int, mesh, executor: bool = True,
                   precision: str = "fp32"):
    """The predicted pipeline part of a step, per global rank of `mesh` (per stage if `mesh` is None): lesson
    4's simulator (`simlab.sim.pipeline.simulate`) stepping the plan's schedule with each chunk's forward and
    backward seconds from this model (a micro-batch's stage time, split 1 : 2 and over the v chunks,
    hand-over included); every rank of a pipeline stage gets its stage's timeline. The real run's trace is
    drawn beside it (`render.hybrid_run`)."""
    from .pipeline import simulate
    from .schedules import make_schedule
    t = step(model, plan, c, global_batch, precision, executor)
    m = global_batch // (plan.dp * plan.microbatch)
    stage = (t["breakdown"]["compute"] + t["breakdown"]["tp_comm"] + t["breakdown"]["pp_p2p"]) / m
    per_chunk = stage / plan.chunks
    sim = simulate(make_schedule(plan.schedule, plan.pp, m, plan.chunks), t_f=per_chunk / 3, t_b=2 * per_chunk / 3)
    if mesh is None:
        return sim
    return Trace(replace(e, rank=rank) for rank in range(mesh.world_size) for e in sim.for_rank(mesh.coords(rank)[0]))
