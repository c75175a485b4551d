"""A 3-D parallel plan: how one training step of a model is cut over GPUs — TP inside each stage, PP across
stages, DP (with ZeRO) across replicas — and the one-line checks that a plan can run at all.

Teaches the knobs lesson 6 turns: tp·pp·dp = GPUs (all of them); a micro-batch of b sequences, m = B/(dp·b)
micro-batches per step; the schedule (GPipe, 1F1B, interleaved with v chunks per rank); ZeRO 0-3 over the
DP group, Offload; sequence parallelism; activation recomputation none / selective / full; precision.
Layers need not divide evenly over stages (BLOOM ran 70 layers on 12): the most loaded stage has
ceil(L/p) layers, and the first and last stages also hold the embedding and the output layer.
`simlab.sim.hybrid_memory` and `simlab.sim.hybrid_time` evaluate a plan; `simlab.sim.advisor` searches them.

    >>> p = Plan(tp=8, pp=8, dp=1, microbatch=1, schedule="interleaved", chunks=3)
    >>> check_plan(PRESETS["gpt3-175b"], p, gpus=64, global_batch=64)
    >>> layers_per_stage(PRESETS["bloom-176b"], 12)
    6
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from .._checks import check_bool, check_choice, check_divisible, check_int
from .memory import PRECISIONS as STATE_BYTES
from .model import PRESETS, Transformer  # noqa: F401  (PRESETS: the doctest's models)

SCHEDULES = ("gpipe", "1f1b", "interleaved")
RECOMPUTE = ("none", "selective", "full")
# bytes per parameter of weights, gradients and optimizer state: lesson 3's (`simlab.sim.memory`); and per
# activation element (Korthikanti's formulas count 16-bit activations)
PRECISIONS = tuple(STATE_BYTES)  # fp32, mixed, mixed-fp32-grads
ACTIVATION_BYTES = {"fp32": 4, "mixed": 2, "mixed-fp32-grads": 2}


@dataclass(frozen=True)
class Plan:
    tp: int = 1
    pp: int = 1
    dp: int = 1
    microbatch: int = 1  # b: sequences per micro-batch
    schedule: str = "1f1b"
    chunks: int = 1  # v: model chunks per rank (interleaved only)
    zero: int = 0  # ZeRO stage over the DP group
    offload: bool = False  # ZeRO-Offload: gradients and optimizer state on the host
    sequence_parallel: bool = False
    recompute: str = "none"
    precision: str = "mixed"

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp

    def to_dict(self) -> dict:
        out = asdict(self)
        out.pop("precision")
        return out

    def with_(self, **changes) -> "Plan":
        return replace(self, **changes)


def layers_per_stage(model: Transformer, pp: int) -> int:
    """Transformer layers on the most loaded stage: stages take ceil(L/p) until the layers run out."""
    return -(-model.layers // pp)


def microbatches(plan: Plan, global_batch: int) -> int:
    """m: micro-batches each pipeline runs per step (gradient accumulation steps when pp = 1)."""
    return global_batch // (plan.dp * plan.microbatch)


def check_plan(model: Transformer, plan: Plan, gpus: int, global_batch: int) -> None:
    """One-line ValueErrors naming what cannot work (before any model is evaluated)."""
    for name in ("tp", "pp", "dp", "microbatch", "chunks"):
        check_int(name, getattr(plan, name), 1)
    check_int("zero", plan.zero, 0, 3)
    check_choice("schedule", plan.schedule, SCHEDULES)
    check_choice("recompute", plan.recompute, RECOMPUTE)
    check_choice("precision", plan.precision, PRECISIONS)
    check_bool("offload", plan.offload)
    check_bool("sequence_parallel", plan.sequence_parallel)
    check_int("global_batch", global_batch, 1)
    if plan.gpus != gpus:
        raise ValueError(f"tp={plan.tp}: tp*pp*dp = {plan.gpus} must use all gpus={gpus}")
    check_divisible("heads", model.heads, "tp", plan.tp)
    if plan.pp > model.layers:
        raise ValueError(f"pp={plan.pp}: more stages than layers={model.layers}")
    if global_batch % (plan.dp * plan.microbatch):
        raise ValueError(f"global_batch={global_batch}: must be divisible by dp × microbatch = "
                         f"{plan.dp} × {plan.microbatch}")
    if plan.offload and plan.zero < 2:
        raise ValueError(f"offload=True: needs zero 2 or 3 (ZeRO-Offload builds on stage 2), got zero={plan.zero}")
    if plan.sequence_parallel and plan.tp == 1:
        raise ValueError("sequence_parallel=True: needs tp > 1 (it splits what TP replicates)")
    if plan.schedule != "interleaved" and plan.chunks != 1:
        raise ValueError(f"chunks={plan.chunks}: only the interleaved schedule has more than one chunk per rank")
    if plan.schedule == "interleaved":
        if layers_per_stage(model, plan.pp) < plan.chunks:
            raise ValueError(f"chunks={plan.chunks}: a stage has only {layers_per_stage(model, plan.pp)} layers")
        check_divisible("microbatches", microbatches(plan, global_batch), "pp", plan.pp)  # Megatron's rule
