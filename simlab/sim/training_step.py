"""Lesson 5b: one training step on one GPU — where its memory goes and where its time goes — and how
micro-batches make a global batch. Every number is lesson 6's model (`hybrid_memory.per_gpu`,
`hybrid_time.step`) for the plan tp = pp = dp = 1: what `simlab plan --gpus 1` says, broken into parts.

Teaches:
- memory (`one_step(...)["memory"]`): model states (weights, gradients, the fp32 master copy, Adam's m and v:
  `training_step_memory.state_recipe`), activations (every layer's stored tensors for one micro-batch, term by
  term; under full recomputation one layer rebuilt during its backward; the embedding's output; the final
  norm's input and the fp32 logits), against what the GPU can really give tensors: its memory as torch reports
  it, less the CUDA context, NCCL's buffers and the allocator's fragmentation (`gpus.GPU.usable_memory`);
- time (`one_step(...)["time"]`): forward, backward (about twice the forward: two GEMMs per GEMM), what
  recomputation repeats, the output layer and loss, the optimizer (memory-bound), and MFU/HFU;
- micro-batching (`microbatching`): a global batch B = b·m·dp — b sequences per micro-batch, m micro-batches
  accumulated on each of dp replicas. Activations scale with b, not m (one micro-batch's at a time, without
  pipelining), so accumulation buys a big batch in the memory of a small one; the gradients are all-reduced
  once per step (plain DP and ZeRO-1), not once per micro-batch (m× the bytes); ZeRO-2/3 reduce-scatter
  every micro-batch, since no GPU keeps the whole gradient to accumulate into.

    >>> out = one_step("gpt3-175b", "a100-80gb", microbatch=1, microbatches=8)
    >>> from simlab.sim.model import PRESETS
    >>> out["memory"]["total"] > out["memory"]["usable"], out["memory"]["params"] == 2 * PRESETS["gpt3-175b"].params
    (True, True)
"""
from __future__ import annotations

import math

import numpy as np

from .._checks import check_int
from .advisor import MAX_BATCH
from .gpus import CUDA_CONTEXT, FRAGMENTATION, GPU, GPUS, NCCL_BUFFERS, check_precision
from .hardware import Cluster, cluster
from .hybrid import STATE_BYTES, Plan, check_plan, microbatches
from .hybrid_layer import layer_seconds, output_seconds
from .hybrid_memory import FIRST, activations, knobs, per_gpu
from .hybrid_time import step
from .memory import shard_numel
from .model import Transformer
from .training_step_flops import step_flops
from .training_step_memory import STATE_PARTS, activation_terms, check_model, state_recipe


def _model(model, seq=None) -> Transformer:
    model = check_model(model)
    return model if seq is None else model.with_(seq=check_int("seq", seq, 1))


def _cluster(gpu) -> Cluster:
    if isinstance(gpu, GPU):
        return Cluster(gpu, 1, 1, 1600.0)  # one GPU: the network never carries anything
    if not isinstance(gpu, str) or gpu not in GPUS:
        raise ValueError(f"gpu={gpu!r}: must be one of {', '.join(GPUS)} or a simlab.sim.gpus.GPU")
    return cluster(gpu, gpus=1)


def _finite(out, model: Transformer):
    """`out` if every number in it is finite; else one line naming the model: a shape so large that its bytes or
    seconds overflow a float (numpy's overflow warnings are silenced where this is called, then refused here)."""
    def numbers(x):
        if isinstance(x, dict):
            for v in x.values():
                yield from numbers(v)
        elif isinstance(x, (int, float)) and not isinstance(x, bool):
            yield x
    if all(math.isfinite(x) for x in numbers(out)):
        return out
    raise ValueError(f"model={model.name!r}: its numbers overflow a float (layers={model.layers}, "
                     f"hidden={model.hidden}, seq={model.seq}, vocab={model.vocab}); choose a smaller shape or GPU figures")


def microbatching(model, global_batch: int, microbatch: int, *, dp: int = 1, zero: int = 0,
                  precision: str = "mixed") -> dict:
    """B = b·m·dp: microbatches (m), samples_per_rank (b·m); activation_bytes (one GPU's with micro-batches of b)
    against activation_bytes_whole_batch (the same GPU taking its b·m samples at once: m = 1); gradient_bytes
    (one replica's gradients); reductions_per_step (1 under plain DP and ZeRO-1, m under ZeRO-2/3);
    bytes_per_rank_per_step (ring accounting, lesson 3's `memory.comm_volume_per_step` with its gradient part m
    times under ZeRO-2/3); bytes_if_reduced_every_microbatch (the gradients reduced after every micro-batch)."""
    model = _model(model)
    check_int("global_batch", global_batch, 1, MAX_BATCH)
    check_int("dp", dp, 1)
    check_int("zero", zero, 0, 3)
    plan = Plan(dp=dp, microbatch=microbatch, zero=zero, precision=precision, overlap="none")
    check_plan(model, plan, gpus=dp, global_batch=global_batch)  # b·m·dp: refused in one line if B is not
    m = microbatches(plan, global_batch)
    param_b, grad_b, _ = STATE_BYTES[precision]
    ring = (dp - 1) * shard_numel(model.params, dp)  # elements one rank sends per reduce-scatter or all-gather
    # bytes per element of `ring` (lesson 3's stages): the gradients' reduction — an all-reduce (reduce-scatter +
    # all-gather) under plain DP, a reduce-scatter under ZeRO — and the updated parameters' all-gather (ZeRO 1-2);
    # ZeRO-3 gathers the parameters for every micro-batch's forward and backward instead
    reduce, gather = (2 * grad_b, 0) if zero == 0 else (grad_b, param_b)
    every = m * (reduce + 2 * param_b) if zero == 3 else m * reduce + gather  # a reduction after each micro-batch
    per_step = reduce + gather if zero <= 1 else every
    with np.errstate(all="ignore"):  # overflow is refused below, in one line
        whole, part = (per_gpu(model, p, global_batch) for p in (plan.with_(microbatch=global_batch // dp), plan))
    return _finite({"global_batch": global_batch, "microbatch": microbatch, "microbatches": m, "dp": dp, "zero": zero,
            "samples_per_rank": global_batch // dp,
            "activation_bytes": part["activations"],
            "activation_bytes_whole_batch": whole["activations"], "gradient_bytes": model.params * grad_b,
            "reductions_per_step": 1 if zero <= 1 else m,
            "bytes_per_rank_per_step": ring * per_step, "bytes_if_reduced_every_microbatch": ring * every}, model)


def _memory(model: Transformer, plan: Plan, c: Cluster, global_batch: int, m: int) -> dict:
    mem = per_gpu(model, plan, global_batch)
    k = knobs(plan, model)
    act = activations(model, k, m, plan.precision, FIRST)  # one GPU: the first stage is the only one
    parts = {name: model.params * b for name, b in state_recipe(plan.precision).items() if name in STATE_PARTS}
    capacity = c.gpu.memory
    reserved = {"cuda_context": CUDA_CONTEXT, "nccl": NCCL_BUFFERS} if c.gpu.roofline else {}  # a CPU: none
    fragmentation = (capacity - sum(reserved.values())) * FRAGMENTATION if c.gpu.roofline else 0.0
    out = parts | {"optimizer": mem["optimizer"], "layer_activations": mem["layer_activations"],
                   "working": float(act["working_activations"]), "embedding": float(act["embedding_activations"]),
                   "logits": float(act["logits_activations"]), "activations": mem["activations"], "total": mem["total"],
                   "capacity": capacity, "cuda_context": reserved.get("cuda_context", 0.0),
                   "nccl": reserved.get("nccl", 0.0), "fragmentation": fragmentation, "usable": c.gpu.usable_memory}
    return out | {"free": out["usable"] - out["total"], "fits": bool(out["total"] <= out["usable"])}


def _time(model: Transformer, plan: Plan, c: Cluster, global_batch: int, m: int) -> dict:
    k = knobs(plan, model)
    one, edge = layer_seconds(model, k, c, plan.precision), output_seconds(model, k, c, plan.precision)
    t = step(model, plan, c, global_batch)
    per = {part: float(m * model.layers * one[part]) for part in ("forward", "backward", "recompute")}
    return per | {"output_layer": float(m * edge["logits"]), "optimizer": t["breakdown"]["optimizer"],
                  "step_seconds": t["step_seconds"], "tokens_per_second": t["tokens_per_second"], "mfu": t["mfu"]}


def one_step(model, gpu="a100-80gb", microbatch: int = 1, microbatches: int = 1, *, seq: int | None = None,
             attention: str = "flash", recompute: str = "none", precision: str = "mixed") -> dict:
    """One training step of `model` (a preset name or a `Transformer`) on one `gpu` (a preset name or a `GPU`):
    `microbatches` micro-batches of `microbatch` sequences of `seq` tokens (default the model's) accumulated into
    one optimizer step. Returns "config"; "memory" (bytes: params, grads, master, adam_m, adam_v, optimizer;
    layer_activations, working, embedding, logits, activations; total; capacity, cuda_context, nccl, fragmentation,
    usable, free; fits); "activation_terms" (bytes of each stored tensor over all layers, adding up to
    layer_activations); "time" (seconds: forward, backward, recompute, output_layer, optimizer — adding up to
    step_seconds —, tokens_per_second); "flops" (`training_step_flops.step_flops`); "mfu" and "hfu"."""
    model, c = _model(model, seq), _cluster(gpu)
    check_int("microbatch", microbatch, 1, MAX_BATCH)
    check_int("microbatches", microbatches, 1, MAX_BATCH // microbatch)  # the global batch stays below 2⁴⁰
    plan = Plan(microbatch=microbatch, attention=attention, recompute=recompute, precision=precision, overlap="none")
    global_batch = microbatch * microbatches
    check_plan(model, plan, gpus=1, global_batch=global_batch)
    check_precision(c.gpu, precision)
    with np.errstate(all="ignore"):  # a shape too big for floats is refused below, in one line
        memory = _memory(model, plan, c, global_batch, microbatches)
        terms = activation_terms(model, microbatch, attention=attention, recompute=recompute, precision=precision)
        time = _time(model, plan, c, global_batch, microbatches)
    flops = step_flops(model, global_batch, recompute=recompute, attention=attention)
    mfu = time.pop("mfu")
    config = {"model": model.name, "gpu": c.gpu.name, "microbatch": microbatch, "microbatches": microbatches,
              "global_batch": global_batch, "seq": model.seq, "attention": attention, "recompute": recompute,
              "precision": precision}
    return _finite({"config": config, "memory": memory,
                    "activation_terms": {name: b * model.layers for name, b in terms.items()}, "time": time,
                    "flops": flops, "mfu": mfu,  # HFU ≥ MFU even in floats: the ratio (≥ 1) first
                    "hfu": mfu * (flops["hardware_flops"] / flops["model_flops"])}, model)
