"""A 3-D parallel plan: how one training step of a model is cut over GPUs — TP inside each stage, PP across
stages, DP (with ZeRO) across replicas — and the one-line checks that a plan can run at all.

Teaches the knobs lesson 6 turns: tp·pp·dp = GPUs (all of them); a micro-batch of b sequences, m = B/(dp·b)
micro-batches per step; the schedule (GPipe, 1F1B, interleaved with v chunks per rank); ZeRO 0-3 over the
DP group or, with `shard` < dp, over sub-groups of it with the states replicated across them (HSDP, "ZeRO
with replicas"); Offload; sequence parallelism; activation recomputation none / selective / full / op-sac
(torchtitan's op-level selective checkpointing, `hybrid_op_sac`); the
precision (fp32, 16-bit mixed, FP8 matmuls); the attention kernel (eager, which stores the s² scores, or
flash, which never does); and what the framework overlaps with compute (`overlap`).
Layers need not divide evenly over stages: by default the most loaded stage has ceil(L/p) layers (BLOOM ran
70 on 12); `stage_layers` lists them stage by stage (Llama 3 405B: 7, fourteen 8s, 7 — one layer fewer on
the stages that also hold the embedding and the output layer).
`simlab.sim.hybrid_memory` and `simlab.sim.hybrid_time` evaluate a plan; `simlab.sim.advisor` searches them.

    >>> p = Plan(tp=8, pp=8, dp=1, microbatch=1, schedule="interleaved", chunks=3)
    >>> check_plan(PRESETS["gpt3-175b"], p, gpus=64, global_batch=64)
    >>> stage_split(PRESETS["bloom-176b"], Plan(pp=12))
    (6, 6, 6)
    >>> stage_split(PRESETS["gpt3-175b"], Plan(pp=4, stage_layers=(23, 25, 25, 23)))
    (23, 25, 23)
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import numpy as np

from .._checks import check_bool, check_choice, check_divisible, check_int, check_number
from .context_parallel_costs import VARIANTS as CP_COMMS
from .memory import PRECISIONS as LESSON_3_BYTES
from .memory import Precision
from .model import PRESETS, Transformer  # noqa: F401 — PRESETS: the doctest's models

SCHEDULES = ("gpipe", "1f1b", "interleaved")
# none; selective: Korthikanti's (eager attention's s² tensors recomputed); full: each layer's input kept alone;
# op-sac: torchtitan's selective_ac_option = "op" (every second matmul and the element-wise work recomputed).
# Appended last: the knobs index these choices, and 0-2 keep their meaning.
RECOMPUTE = ("none", "selective", "full", "op-sac")
LAYER_RECOMPUTE = RECOMPUTE[:3]  # lesson 5b's choices (one layer executed and measured: no op-level policy there)
# eager: Korthikanti's stored scores; flash: FlashAttention, no s² tensors; flash-triton: FlashAttention's Triton
# kernel (llm-foundry's attn_impl="triton"), flash's memory, slower by FlashAttention-2's paper's ratios to a Triton
# FlashAttention (`gpus.FLASH_TRITON_SLOWER`, an assumption for this kernel)
ATTENTION = ("eager", "flash", "flash-triton")
LAYER_ATTENTION = ATTENTION[:2]  # lesson 5b's choices (one layer executed and measured: torch's own kernels)
OVERLAPS = ("dp", "params", "tp")  # what a framework may hide behind compute (`Plan.overlap`)
# the loss over the vocabulary: fused (Megatron's vocab-parallel cross-entropy), fp32 (plain PyTorch's
# cross_entropy(pred.float(), labels), torchtitan's train.py @ 9dec370) or chunked (torchtitan ≥ 0.3's
# ChunkedLossWrapper: that fp32 loss on LOSS_CHUNKS slices of the sequence in turn); what each holds and moves per
# logit: `hybrid_loss`
LOSSES = ("fused", "fp32", "chunked")
LOSS_CHUNKS = 8  # ChunkedLossWrapper.Config.num_chunks's default (torchtitan 0.3.0); the sequence must divide by it
# bytes per parameter of weights, gradients and optimizer state: lesson 3's (`simlab.sim.memory`, with FP8's
# recipe); and per activation element (Korthikanti's formulas count 16-bit activations; FP8 keeps them 16-bit
# too, an upper bound: Transformer Engine may save a GEMM's input in 8 bits)
# FP8 (Transformer Engine's recipe, as NeMo runs it with `fp8_params`): the weights kept in FP8 with their transposed
# copy for the backward on Hopper (1 + 1 byte, where BF16 weights took 2), fp32 gradients, fp32 master weights and
# Adam's moments in the optimizer (TE's docs: "master weights in optimizer are in FP32"); GEMMs at FP8 speed
# bf16-optimizer: every state 16-bit — bf16 weights and gradients, and the optimizer's master copy, m and v in bf16
# too (2 + 2 + 2): apex's DistributedFusedAdam with dtype=bf16 (its `dtype`: "datatype for optimizer state", the
# parameters' local copy included unless store_params=False), as NeMo's yaml runs it for Nemotron-4 340B
# (NVIDIA/dgxc-benchmarking v25.01.1 nemotron4-340b-synth.yaml: optim dtype bf16, grad_sync_dtype bf16)
STATE_BYTES = {**LESSON_3_BYTES, "fp8": Precision(2, 4, 12), "bf16-optimizer": Precision(2, 2, 6)}
PRECISIONS = tuple(STATE_BYTES)  # fp32, mixed, mixed-fp32-grads, fp8, bf16-optimizer
ACTIVATION_BYTES = {"fp32": 4, "mixed": 2, "mixed-fp32-grads": 2, "fp8": 2, "bf16-optimizer": 2}


@dataclass(frozen=True)
class Plan:
    tp: int = 1
    pp: int = 1
    dp: int = 1
    microbatch: int = 1  # b: sequences per micro-batch
    schedule: str = "1f1b"
    chunks: int = 1  # v: model chunks per rank (interleaved only)
    zero: int = 0  # ZeRO stage over the DP group (over each shard group when `shard` < dp)
    offload: bool = False  # ZeRO-Offload: gradients and optimizer state on the host
    sequence_parallel: bool = False
    recompute: str = "none"
    precision: str = "mixed"
    attention: str = "flash"
    # what runs under compute: "dp" the gradient reduction under the backward (DDP's buckets, Megatron's
    # --overlap-grad-reduce, DeepSpeed's overlap_comm), "params" the parameter all-gathers (ZeRO-1's after the
    # step under the next forward, ZeRO-3's prefetch of the next layer), "tp" TP's forward collectives under
    # its GEMMs; comma-separated, or "none". The backward's TP all-reduce hides behind the weight-gradient
    # GEMMs in every framework the model stands for (Megatron since 2021); the course's executor hides nothing.
    overlap: str = "dp,params"
    shard: int = 0  # ZeRO's sharding group: 0 (or dp) the whole DP group; a divisor of dp: HSDP
    stage_layers: tuple = ()  # layers of each pipeline stage, first to last; () as even as can be
    # parameters per DP/ZeRO collective, (gathers, reductions): () one of each per layer, FSDP's unit; DeepSpeed's
    # ZeRO-3 prefetches 5e7 parameters at a time and reduces 5e8 (stage3_prefetch_bucket_size, reduce_bucket_size)
    bucket: tuple = ()
    # lesson 7: the sequence split over `cp` ranks (zig-zag: 2·cp chunks, chunks r and 2cp − 1 − r on rank r), their
    # K,V exchanged by `cp_comm` (`context_parallel_costs.VARIANTS`: Megatron's p2p ring, Llama 3's all-gather,
    # Ulysses' all-to-all); a mixture-of-experts model's experts over `ep` ranks carved out of the DP group (Megatron's
    # expert-model-parallel), each expert taking at most capacity·k·tokens/E tokens (`capacity` 0: dropless)
    cp: int = 1
    cp_comm: str = "ring"
    ep: int = 1
    capacity: float = 0.0
    loss: str = "fused"  # how the framework computes the loss over the vocabulary (`LOSSES`)

    def __post_init__(self):  # a list from JSON or `to_dict` becomes the tuple a frozen plan keeps
        for name in ("stage_layers", "bucket"):
            if isinstance(getattr(self, name), list):
                object.__setattr__(self, name, tuple(getattr(self, name)))

    @property
    def gpus(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    @property
    def shard_size(self) -> int:
        """GPUs one ZeRO shard group spans (dp unless HSDP)."""
        return self.shard or self.dp

    @property
    def overlaps(self) -> frozenset:
        return frozenset() if self.overlap == "none" else frozenset(self.overlap.split(","))

    def to_dict(self) -> dict:
        out = asdict(self)
        out.pop("precision")
        out["stage_layers"], out["bucket"] = list(self.stage_layers), list(self.bucket)
        return out

    def with_(self, **changes) -> "Plan":
        return replace(self, **changes)


def layers_per_stage(model: Transformer, pp: int) -> int:
    """Transformer layers on the most loaded stage of an even split: ceil(L/p)."""
    return -(-model.layers // pp)


def stage_split(model: Transformer, plan: Plan) -> tuple[int, int, int]:
    """(layers on the first stage, the most on any middle stage, layers on the last stage); without PP the
    one stage is all three. Even split: ceil(L/p) on each, what the most loaded of them holds."""
    if plan.stage_layers:
        s = plan.stage_layers
        return s[0], max(s[1:-1], default=0), s[-1]
    even = layers_per_stage(model, plan.pp)
    return even, even if plan.pp > 2 else 0, even


def microbatches(plan: Plan, global_batch: int) -> int:
    """m: micro-batches each pipeline runs per step (gradient accumulation steps when pp = 1)."""
    return global_batch // (plan.dp * plan.microbatch)


def check_overlap(overlap) -> str:
    if not isinstance(overlap, str) or overlap != "none" and not (
            overlap and set(overlap.split(",")) <= set(OVERLAPS) and len(overlap.split(",")) == len(
            set(overlap.split(",")))):
        raise ValueError(f"overlap={overlap!r}: must be 'none' or a comma-separated list of {', '.join(OVERLAPS)}")
    return overlap


def check_bucket(bucket) -> tuple:
    if bucket != () and (not isinstance(bucket, tuple) or len(bucket) != 2 or not all(
            isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in bucket)):
        raise ValueError(f"bucket={bucket!r}: must be () or (parameters per gather, per reduction), positive integers")
    return bucket


def rank_tokens(model: Transformer, k) -> np.ndarray:
    """T: tokens of one micro-batch on one rank, b·s (s/cp of the sequence under context parallelism) for the
    knobs `k`. Floats: b·s·h in int64 passes 2⁶³ within the allowed sizes (b up to 2⁴⁰) and wraps silently."""
    tokens = k.b * float(model.seq)
    return tokens if np.all(np.asarray(k.cp) == 1) else tokens / k.cp


def check_op_sac(model: Transformer, attention: str) -> None:
    """torchtitan's op-level policy (`hybrid_op_sac`) is modelled for dense layers under FlashAttention: refuse
    the rest in one line."""
    if attention != "flash":
        raise ValueError(f"recompute='op-sac': saves the fused attention kernel's output, needs attention='flash', "
                         f"got attention={attention!r}")
    if model.experts:
        raise ValueError("recompute='op-sac': modelled for dense layers (torchtitan's Llama), not a mixture of experts")


def chunks_evenly(seq: int, cp: int) -> bool:
    """Whether each rank's sequence (seq/cp) cuts into LOSS_CHUNKS equal slices, as the chunked loss needs."""
    return seq % cp == 0 and (seq // cp) % LOSS_CHUNKS == 0


def check_loss(model: Transformer, plan: Plan) -> None:
    """The chunked loss (torchtitan's ChunkedLossWrapper) cuts each rank's sequence into LOSS_CHUNKS equal slices."""
    if plan.loss == "chunked" and not chunks_evenly(model.seq, plan.cp):
        raise ValueError(f"loss='chunked': each rank's sequence (seq/cp = {model.seq}/{plan.cp}) is cut into "
                         f"{LOSS_CHUNKS} equal chunks, so it must divide by {LOSS_CHUNKS}")


def check_plan(model: Transformer, plan: Plan, gpus: int, global_batch: int) -> None:
    """One-line ValueErrors naming what cannot work (before any model is evaluated)."""
    for name in ("tp", "pp", "dp", "microbatch", "chunks", "cp", "ep"):
        check_int(name, getattr(plan, name), 1)
    check_int("zero", plan.zero, 0, 3)
    check_choice("schedule", plan.schedule, SCHEDULES)
    check_choice("recompute", plan.recompute, RECOMPUTE)
    check_choice("precision", plan.precision, PRECISIONS)
    check_choice("attention", plan.attention, ATTENTION)
    check_overlap(plan.overlap)
    check_choice("cp_comm", plan.cp_comm, CP_COMMS)
    check_number("capacity", plan.capacity, 0.0)
    check_choice("loss", plan.loss, LOSSES)
    check_bool("offload", plan.offload)
    check_bool("sequence_parallel", plan.sequence_parallel)
    check_int("shard", plan.shard, 0, plan.dp)
    check_bucket(plan.bucket)
    check_int("global_batch", global_batch, 1)
    if plan.gpus != gpus:
        product = "tp*cp*pp*dp" if plan.cp > 1 else "tp*pp*dp"
        raise ValueError(f"tp={plan.tp}: {product} = {plan.gpus} must use all gpus={gpus}")
    check_divisible("heads", model.heads, "tp", plan.tp)
    if plan.pp > model.layers:
        raise ValueError(f"pp={plan.pp}: more stages than layers={model.layers}")
    if global_batch % (plan.dp * plan.microbatch):
        raise ValueError(f"global_batch={global_batch}: must be divisible by dp × microbatch = "
                         f"{plan.dp} × {plan.microbatch}")
    check_context(model, plan)
    check_experts(model, plan)
    check_loss(model, plan)
    if plan.shard:
        check_divisible("dp", plan.dp, "shard", plan.shard)
        if plan.zero == 0:
            raise ValueError(f"shard={plan.shard}: sharding needs zero 1, 2 or 3, got zero=0")
    if plan.offload and plan.zero < 2:
        raise ValueError(f"offload=True: needs zero 2 or 3 (ZeRO-Offload builds on stage 2), got zero={plan.zero}")
    if plan.recompute == "op-sac":
        check_op_sac(model, plan.attention)
    if plan.sequence_parallel and plan.tp == 1:
        raise ValueError("sequence_parallel=True: needs tp > 1 (it splits what TP replicates)")
    if plan.schedule != "interleaved" and plan.chunks != 1:
        raise ValueError(f"chunks={plan.chunks}: only the interleaved schedule has more than one chunk per rank")
    if plan.stage_layers:
        s = plan.stage_layers
        if not isinstance(s, tuple) or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in s):
            raise ValueError(f"stage_layers={s!r}: must be a tuple of positive integers, one per stage")
        if len(s) != plan.pp or sum(s) != model.layers:
            raise ValueError(f"stage_layers={s!r}: must list pp={plan.pp} stages adding up to layers={model.layers}")
    if plan.schedule == "interleaved":
        most = max(plan.stage_layers) if plan.stage_layers else layers_per_stage(model, plan.pp)
        if most < plan.chunks:  # an end stage may hold fewer (Llama 3: a chunk with the embedding alone)
            raise ValueError(f"chunks={plan.chunks}: a stage has only {most} layers")
        check_divisible("microbatches", microbatches(plan, global_batch), "pp", plan.pp)  # Megatron's rule


def check_context(model: Transformer, plan: Plan) -> None:
    """Context parallelism's rules: the sequence cuts into 2·cp equal chunks (the zig-zag layout); Ulysses gives each
    of the cp ranks whole heads of a TP rank's share, of the queries and of the keys and values; and attention must
    be a fused kernel: Megatron-LM runs CP only inside Transformer Engine's flash/fused attention (its own
    DotProductAttention asserts "Context parallelism is only supported by TEDotProductAttention!",
    megatron/core/transformer/dot_product_attention.py @ d98e8a6), torch's context_parallel only on SDPA's flash and
    efficient kernels."""
    if plan.cp == 1:
        return
    if plan.attention != "flash":
        raise ValueError(f"cp={plan.cp}: context parallelism needs attention='flash' (Megatron and torch run it only "
                         f"inside their fused attention kernels), got attention={plan.attention!r}")
    if model.seq % (2 * plan.cp):
        raise ValueError(f"cp={plan.cp}: the sequence seq={model.seq} must split into 2·cp = {2 * plan.cp} equal "
                         "chunks (the zig-zag layout)")
    if plan.cp_comm == "ulysses":
        kv = model.kv_heads or model.heads
        for name, heads in (("heads", model.heads), ("kv_heads", kv)):
            if heads % (plan.tp * plan.cp):
                raise ValueError(f"cp={plan.cp}: Ulysses needs {name}={heads} divisible by tp·cp = "
                                 f"{plan.tp * plan.cp} (each rank attends with whole heads)")


def check_experts(model: Transformer, plan: Plan) -> None:
    """Expert parallelism's rules: only a mixture-of-experts model has experts to spread; each of the ep ranks holds
    the same number of them; the EP group is carved out of the DP group (Megatron's layout), so ep divides dp."""
    if plan.capacity and not model.experts:
        raise ValueError(f"capacity={plan.capacity}: only a mixture-of-experts model (experts > 0) routes tokens "
                         "to a capacity")
    if plan.ep == 1:
        return
    if not model.experts:
        raise ValueError(f"ep={plan.ep}: expert parallelism needs a mixture-of-experts model (experts > 0), "
                         f"{model.name} is dense")
    check_divisible("experts", model.experts, "ep", plan.ep)
    check_divisible("dp", plan.dp, "ep", plan.ep)
