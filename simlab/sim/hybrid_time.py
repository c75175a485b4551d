"""Time per training step for any 3-D plan, with where it goes — and what a framework hides behind compute.

Teaches, from one layer's time (`simlab.sim.hybrid_layer`) up:
- a stage's time per micro-batch: its layers' compute and exposed TP communication, the embedding on the
  first stage, the output layer and loss on the last, and each micro-batch's hand-over to the next stage (1/t
  of the activation with Megatron's scatter/gather, `network.send`). TP's backward collectives hide behind the
  weight-gradient GEMMs (Megatron does this since 2021); with overlap "tp" the forward's hide behind its GEMMs;
- the pipeline: the slowest stage sets the pace, m·t_max, and filling and draining the pipe adds the other
  stages' time once, (Σ t_stage − t_max)/v — for equal stages (p − 1)/v stage times, lesson 4's bubble
  (`simlab.sim.pipeline.closed_form_bubble`, held to the simulator by tests). Unequal stages (Llama 3's
  first and last with one layer fewer) shorten the slowest;
- DP/ZeRO over the DP group, or under HSDP over each shard group (then an all-reduce across the replicas):
  ZeRO 0 all-reduces the gradients once per step, ZeRO 1 reduce-scatters them and all-gathers the updated
  parameters once per step, ZeRO 2 reduce-scatters once **per micro-batch**, ZeRO 3 also gathers the
  parameters for each micro-batch's forward and again for its backward. With overlap "dp" a reduction runs
  under the backward (DDP's buckets: it can hide behind one micro-batch's backward), with "params" a gather
  under the forward (ZeRO-1: the next step's first; ZeRO-3: prefetched a layer ahead, so only the first
  layer's gather waits). What does not fit under the compute is exposed; the breakdown shows exposed time and
  `hidden` what ran underneath. With PP, m is large: that is why the primer keeps only ZeRO-1 with pipelining;
- Offload: gradients down and parameters up over PCIe, Adam on the host's cores, not overlapped; the optimizer
  (fused Adam, 32 bytes per parameter of the GPU's shard at HBM speed).
- lesson 7: context parallelism's K,V traffic per layer (`hybrid_layer.cp_seconds`: the ring's hops hide under the
  attention of the block already held, all-gather and Ulysses are exposed) in `cp_comm`, a mixture of experts'
  all-to-alls (4 per layer, exposed) in `ep_comm`; dense gradients reduced over dp·cp, the experts' over the
  expert-data-parallel group (dp·cp/ep ranks, tp·ep apart).
`executor=True` models the course's own executor instead: nothing overlapped, Adam unfused.
Outputs step seconds, tokens/s and MFU (model FLOPs, no recomputation, over the GPUs' peak in the plan's precision;
a mixture of experts counts the top_k experts a token meets, as MoE papers report).

    >>> from simlab.sim.model import PRESETS
    >>> from simlab.sim.hardware import cluster
    >>> from simlab.sim.hybrid import Plan
    >>> t = step(PRESETS["megatron-1t"], Plan(tp=8, pp=64, recompute="full", attention="eager", overlap="none"),
    ...          cluster(gpus=512), global_batch=512)
    >>> round(t["step_seconds"], 1), round(t["mfu"], 3)  # published: 94.42 s (Korthikanti Table 5)
    (96.8, 0.413)
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..trace import Trace
from .hardware import Cluster
from .hybrid import ACTIVATION_BYTES, SCHEDULES, STATE_BYTES, Plan, rank_tokens
from .hybrid_layer import cp_seconds, ep_seconds, layer_seconds, output_seconds
from .hybrid_memory import FIRST, LAST, MIDDLE, Knobs, knobs, stage_params, zero_groups
from .model import Transformer
from .network import all_gather, all_reduce, reduce_scatter, send

ADAM_BYTES = 32  # per parameter a fused optimizer step reads and writes on the GPU (memory-bound)
# The course's executor, fp32 and unfused: Adam's seven in-place or temporary passes (`exec.zero.adam_update`:
# lerp 12, mul 8, addcmul 12, sqrt 8, div 8, add 8, addcdiv 16 bytes per parameter) plus DataParallelAdam's
# gather of gradients and parameters into flat buffers, the 1/N scaling and the copy back (4 × 8).
EXECUTOR_ADAM_BYTES = 72 + 32
OPS_PER_TENSOR, OPS_ADAM, TENSORS_PER_LAYER, TENSORS_OUTSIDE = 8, 16, 16, 5


def pipeline_factor(k: Knobs, m) -> np.ndarray:
    """The pipeline's time in units of one micro-batch's stage time, for equal stages: m + (p-1)/v, with
    v = 1 unless interleaved (GPipe's bubble equals 1F1B's; only its memory differs)."""
    return m + (k.pp - 1) / _chunks(k)


def _chunks(k: Knobs):
    return np.where(k.schedule == SCHEDULES.index("interleaved"), k.v, 1)


def _exposed(comm, under, hides):
    """What of `comm` seconds is left when it may run under `under` seconds of compute (if `hides`)."""
    return np.where(hides, np.maximum(0, comm - under), comm)


def _overlaps(k: Knobs, executor: bool):
    """(dp, params, tp): what may hide behind compute; the course's executor hides nothing."""
    return tuple(np.asarray(x, dtype=bool) & (not executor) for x in (k.overlap_dp, k.overlap_params, k.overlap_tp))


def _stages(model, k, c, precision, executor):
    """Per micro-batch: compute and exposed TP seconds of the first, fullest middle and last stage, the
    hand-over, every stage's time added up, and one layer's pieces and hidden TP seconds."""
    one, edge = layer_seconds(model, k, c, precision), output_seconds(model, k, c, precision)
    tc = one["tp_collective"]
    # the forward's two TP collectives again: both under full recomputation, one's worth under op-sac (the
    # collectives feeding the recomputed matmuls; `hybrid_op_sac`)
    tp_again = (k.recompute == 2) + 0.5 * (k.recompute == 3)
    tp_fwd = _exposed(2 * tc, one["gemm"], _overlaps(k, executor)[2]) * (1 + tp_again)
    tp_bwd = _exposed(2 * tc, one["wgrad"], not executor)
    tp_layer = tp_fwd + tp_bwd
    hidden_layer = 2 * tc * (2 + tp_again) - tp_layer
    # lesson 7: context parallelism's K,V traffic (the ring's hops partly under attention; the executor hides
    # nothing) and expert parallelism's all-to-alls, the forward's again under full recomputation
    again = 1 + (k.recompute == 2)
    cp, a_b = cp_seconds(model, k, c, ACTIVATION_BYTES[precision], one["attention"]), ACTIVATION_BYTES[precision]
    cp_hidden = 0.0 if executor else cp["hidden"] * again
    cp_layer = cp["forward"] * again + cp["backward"] + (cp["hidden"] * again - cp_hidden)
    ep_layer = ep_seconds(model, k, c, a_b) * (1 + again)
    # compute beside a hidden collective loses NCCL's SMs (`gpus.NCCL_SMS`)
    per_layer = one["forward"] + one["backward"] + one["recompute"] + hidden_layer * c.gpu.overlap_cost
    if np.any(np.asarray(k.cp) > 1):
        per_layer = per_layer + cp_hidden * c.gpu.overlap_cost
    compute = {FIRST: k.first * per_layer + np.where(k.pp == 1, edge["logits"], 0), MIDDLE: k.mid * per_layer,
               LAST: k.last * per_layer + edge["logits"]}
    tp = {FIRST: k.first * tp_layer + edge["edges"], MIDDLE: k.mid * tp_layer,
          LAST: k.last * tp_layer + np.where(k.pp == 1, 0, edge["edges"])}
    cp_ep = {s: (n * cp_layer, n * ep_layer) for s, n in zip((FIRST, MIDDLE, LAST), (k.first, k.mid, k.last))}
    stride, act = k.tp * k.cp * k.dp, rank_tokens(model, k) * model.hidden * ACTIVATION_BYTES[precision]
    p2p = np.where(k.pp > 1, 2 * _chunks(k) * send(c, stride, k.pp, act / k.tp), 0)
    total = (model.layers * (per_layer + tp_layer + cp_layer + ep_layer) + edge["logits"] + edge["edges"]
             + np.where(k.pp > 1, k.pp * p2p, 0))
    return one, compute, tp, cp_ep, p2p, total, (hidden_layer, cp_hidden)


def _dp_time(model, k, c, precision, one, layers, m, executor):
    """(exposed, hidden) seconds of the DP/ZeRO collectives in one step, on the stage holding most parameters."""
    p_b, g_b, _ = STATE_BYTES[precision]
    params = np.maximum(np.maximum(stage_params(model, k, FIRST), stage_params(model, k, MIDDLE)),
                        stage_params(model, k, LAST))
    experts = layers * model.expert_params_per_rank(k.tp, k.ep)  # 0 for a dense model
    dense = params - experts if model.experts else params
    # the dense gradients' group is DP with its CP ranks (tp apart, dp·cp of them); HSDP shards inside it
    group, s, replicas = k.dp * k.cp, k.shard * k.cp, k.dp // k.shard
    grads, weights = dense * g_b, dense * p_b
    # frameworks reduce and gather piece by piece — one per layer (FSDP's units), or per bucket of parameters
    # (DeepSpeed's, `Plan.bucket`) — each paying its latency; the course's executor sends one flat buffer
    def pieces(bucket):
        return 1 if executor else np.where(bucket > 0, np.maximum(1, np.ceil(params / np.maximum(bucket, 1))),
                                           np.maximum(layers, 1))
    n, g = pieces(k.bucket_reduce), pieces(k.bucket_gather)
    across = np.where(replicas > 1, n * all_reduce(c, k.tp * s, replicas, grads / s / n), 0)  # HSDP's replica sum
    reduce = np.where(k.zero == 0, n * all_reduce(c, k.tp, group, grads / n),
                      n * reduce_scatter(c, k.tp, s, grads / n) + across)
    gather = g * all_gather(c, k.tp, s, weights / g)
    if model.experts:  # the experts' over the expert-data-parallel group: dp·cp/ep ranks, tp·ep apart (Megatron's
        # expert grid tp-ep-dp), sharded by ZeRO over it (`hybrid_memory.zero_groups`)
        e_group, e_stride = group / k.ep, k.tp * k.ep
        e_shard = zero_groups(k)[1]
        e_grads, e_weights = experts * g_b, experts * p_b
        reduce = reduce + np.where(k.zero == 0, n * all_reduce(c, e_stride, e_group, e_grads / n),
                                   n * reduce_scatter(c, e_stride, e_shard, e_grads / n))
        gather = gather + g * all_gather(c, e_stride, e_shard, e_weights / g)
    forward, backward = layers * one["forward"], layers * (one["backward"] + one["recompute"])
    dp, params_, _ = _overlaps(k, executor)
    once = _exposed(reduce, backward, dp) + np.where(k.zero >= 1, _exposed(gather, forward, params_), 0)
    zero2 = m * _exposed(reduce, backward, dp) + _exposed(gather, forward, params_)
    first_layer = gather / g  # ZeRO-3 prefetches each piece's gather but the first
    zero3_fwd = np.where(params_, np.maximum(first_layer, gather - forward), gather)
    both = np.where(params_, gather, 0) + np.where(dp, reduce, 0)  # what may run under the backward
    zero3_bwd = np.maximum(0, both - backward) + np.where(params_, 0, gather) + np.where(dp, 0, reduce)
    zero3 = m * (zero3_fwd + zero3_bwd)
    exposed = np.where(group == 1, 0, np.where(k.zero <= 1, once, np.where(k.zero == 2, zero2, zero3)))
    sent = np.where(k.zero <= 1, reduce + np.where(k.zero == 1, gather, 0),
                    np.where(k.zero == 2, m * reduce + gather, m * (2 * gather + reduce)))
    return exposed, np.where(group == 1, 0, sent - exposed), params, experts


def step(model: Transformer, plan, c: Cluster, global_batch: int, precision: str | None = None,
         executor: bool = False) -> dict:
    """Seconds per step with a breakdown of exposed time (compute, tp_comm, pp_p2p, cp_comm, ep_comm, pp_bubble,
    dp_comm, overlap, offload, optimizer; they add up to the step), `hidden` (TP, CP and DP time that ran under
    compute: tp_comm, cp_comm, dp_comm), tokens/s
    and MFU for `plan` (a `Plan`, or `Knobs` of arrays). `executor`: the course's own executor
    (`simlab.exec.hybrid`, what `parity.hybrid` predicts), which overlaps nothing and runs Adam unfused."""
    k = knobs(plan, model) if isinstance(plan, Plan) else plan
    precision = precision or plan.precision
    gpu, m = c.gpu, global_batch // (k.dp * k.b)
    one, compute, tp, cp_ep, p2p, total, (tp_hidden, cp_hidden) = _stages(model, k, c, precision, executor)
    stage_time = [compute[s] + tp[s] + p2p + cp_ep[s][0] + cp_ep[s][1] for s in (FIRST, MIDDLE, LAST)]
    slowest = np.argmax(np.stack(np.broadcast_arrays(*stage_time)), axis=0)

    def pick(d):  # the slowest stage's value of a {stage: seconds} dict
        return np.choose(slowest, [d[FIRST], d[MIDDLE], d[LAST]])
    t_max = pick(dict(enumerate(stage_time)))
    pipeline = m * t_max + np.maximum(0, total - t_max) / _chunks(k)
    layers = pick({FIRST: k.first, MIDDLE: k.mid, LAST: k.last})
    dp_exposed, dp_hidden, params, experts = _dp_time(model, k, c, precision, one, layers, m, executor)

    p_b = STATE_BYTES[precision][0]
    dense_group, expert_group = zero_groups(k)
    sharded = (params - experts) / dense_group + experts / expert_group if model.experts else params / dense_group
    shard = np.where(k.zero >= 1, sharded, params)
    offload = np.where(k.offload, shard * (2 + p_b) / gpu.host_bandwidth  # gradients down, parameters up
                       + shard / (c.host_adam_rate / c.gpus_per_node), 0)
    tensors = layers * TENSORS_PER_LAYER + TENSORS_OUTSIDE
    optimizer = np.where(k.offload, 0, shard * (EXECUTOR_ADAM_BYTES if executor else ADAM_BYTES) / gpu.hbm_bandwidth
                         + (OPS_PER_TENSOR * tensors + OPS_ADAM) * gpu.op_overhead)

    overlap = dp_hidden * gpu.overlap_cost  # compute slowed while the DP collectives ran beside it
    seconds = pipeline + dp_exposed + offload + optimizer + overlap
    peak = gpu.peak_flops_fp8 if precision == "fp8" and gpu.peak_flops_fp8 else gpu.peak_flops
    breakdown = {"compute": m * pick(compute), "tp_comm": m * pick(tp), "pp_p2p": m * p2p,
                 "cp_comm": m * pick({s: cp_ep[s][0] for s in cp_ep}), "ep_comm": m * pick({s: cp_ep[s][1] for s in cp_ep}),
                 "pp_bubble": pipeline - m * t_max, "dp_comm": dp_exposed, "overlap": overlap, "offload": offload,
                 "optimizer": optimizer}
    out = {"step_seconds": seconds, "tokens_per_second": global_batch * model.seq / seconds,
           "mfu": model.model_flops(global_batch) / (seconds * c.gpus * peak), "breakdown": breakdown,
           "hidden": {"tp_comm": m * layers * tp_hidden, "cp_comm": m * layers * cp_hidden, "dp_comm": dp_hidden}}
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
    from .pipeline_schedules import make_schedule
    t = step(model, plan, c, global_batch, precision, executor)
    m = global_batch // (plan.dp * plan.microbatch)
    parts = ("compute", "tp_comm", "pp_p2p", "cp_comm", "ep_comm")  # a stage's time per micro-batch, CP's and EP's too
    stage = sum(t["breakdown"][part] for part in parts) / m
    per_chunk = stage / plan.chunks
    sim = simulate(make_schedule(plan.schedule, plan.pp, m, plan.chunks), t_f=per_chunk / 3, t_b=2 * per_chunk / 3)
    if mesh is None:
        return sim
    return Trace(replace(e, rank=rank) for rank in range(mesh.world_size) for e in sim.for_rank(mesh.coords(rank)[0]))
