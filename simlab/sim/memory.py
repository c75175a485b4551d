"""Per-GPU memory of data-parallel training with ZeRO: who stores what, in bytes.

Teaches:
- Training with Adam keeps three kinds of *model state* per parameter: the parameter itself, its
  gradient, and the optimizer state. In mixed precision that is 2 + 2 + K bytes with K = 12
  (an fp32 master copy, Adam's m and v): 16 bytes per parameter. In plain fp32 it is 4 + 4 + 8
  (the parameters are the master copy, so only m and v are extra).
- Plain data parallelism (stage 0) stores all of it on every GPU. ZeRO removes the redundancy in
  three stages: shard the optimizer state (1, P_os), then the gradients too (2, P_os+g), then the
  parameters too (3, P_os+g+p). A sharded state costs 1/N of its full size on each of N GPUs.
- ZeRO-Offload (built on stage 2) moves the gradients, the optimizer state (with the fp32 master
  weights) and the update itself to the CPU; the GPU keeps only the 16-bit parameters.
- Communication stays 2Ψ per step for stages 0-2 (reduce-scatter + all-gather = all-reduce) and
  grows only to 3Ψ for stage 3 (parameters gathered for forward and again for backward, plus the
  gradients' reduce-scatter).

The ZeRO paper's Figure 1 (Ψ = 7.5 B parameters, 64 GPUs, mixed precision), in GB:

    >>> [per_gpu_bytes(7_500_000_000, 64, s, precision="mixed")["total"] / 1e9 for s in range(4)]
    [120.0, 31.40625, 16.640625, 1.875]
"""
from __future__ import annotations

from typing import NamedTuple

from .._checks import check_bool, check_choice, check_int

CPU_GRAD_BYTES = 4  # offloaded gradients are kept in fp32 on the host, whatever the GPU precision
HOST_ADAM_BYTES = 12  # the host runs fp32 Adam: fp32 master copy + momentum + variance, in both precisions


class Precision(NamedTuple):
    """Bytes per parameter of each kind of model state."""

    param: int
    grad: int
    optimizer: int  # K in the paper


PRECISIONS = {
    "fp32": Precision(4, 4, 8),  # Adam m and v; the fp32 parameters are the master copy
    "mixed": Precision(2, 2, 12),  # fp16/bf16 param and grad; fp32 master + m + v
    "mixed-fp32-grads": Precision(2, 4, 12),  # Megatron's default: gradients accumulated in fp32
}


def shard_numel(numel: int, world_size: int) -> int:
    """Elements each GPU owns when a flat buffer of `numel` is split over `world_size` GPUs."""
    check_int("numel", numel, 0)
    check_int("world_size", world_size, 1)
    return -(-numel // world_size)  # ceil without floats: the last shards carry the padding


def padded_numel(numel: int, world_size: int) -> int:
    """The flat buffer padded to a multiple of `world_size`, so every shard has the same size."""
    return shard_numel(numel, world_size) * world_size


def _layers(layer_numels) -> list[int]:
    """Accept one number (the whole model as one flat buffer) or one number per layer."""
    if isinstance(layer_numels, int) and not isinstance(layer_numels, bool):
        return [check_int("layer_numels", layer_numels, 1)]
    try:
        numels = list(layer_numels)
    except TypeError:
        raise ValueError(f"layer_numels={layer_numels!r}: must be an integer or a list of integers") from None
    if not numels:
        raise ValueError("layer_numels=[]: need at least one layer")
    return [check_int(f"layer_numels[{i}]", p, 1) for i, p in enumerate(numels)]


def _check(stage, world_size, precision) -> Precision:
    check_int("stage", stage, 0, 3)
    check_int("world_size", world_size, 1)  # no upper bound: the model is closed-form arithmetic
    return PRECISIONS[check_choice("precision", precision, tuple(PRECISIONS))]  # `in` a dict fails on a list


def check_offload(offload, stage: int) -> bool:
    """ZeRO-Offload's rule, for the model, the walkthrough, the executor and the CLI alike."""
    if check_bool("offload", offload) and check_int("stage", stage, 0, 3) < 2:
        raise ValueError(f"offload=True: needs stage 2 or 3 (ZeRO-Offload builds on stage 2), "
                         f"got stage={stage}")
    return offload


def per_gpu_bytes(layer_numels, world_size: int, stage: int, offload: bool = False,
                  precision: str = "fp32", activations: int = 0) -> dict:
    """Bytes of model state on each GPU between two steps (gathered, transient buffers excluded).

    Returns `params`, `grads`, `optimizer` and `total` (GPU bytes; `total` also counts
    `activations`, a placeholder later lessons fill in) and `cpu` (host bytes, for offload).
    Each layer is sharded on its own, padded to a multiple of `world_size`.
    """
    numels = _layers(layer_numels)
    prec = _check(stage, world_size, precision)
    check_offload(offload, stage)
    check_int("activations", activations, 0)
    full = sum(numels)  # Σ P_l: a full replica
    shard = sum(shard_numel(p, world_size) for p in numels)  # Σ S_l: this GPU's own slices
    params = (shard if stage >= 3 else full) * prec.param
    grads = (shard if stage >= 2 else full) * prec.grad
    optimizer = (shard if stage >= 1 else full) * prec.optimizer
    cpu = 0
    if offload:  # gradients go down to the host and the host runs Adam on its shard
        cpu = shard * (HOST_ADAM_BYTES + CPU_GRAD_BYTES)  # fp32 training also needs a host master copy
        grads, optimizer = 0, 0
    return {"params": params, "grads": grads, "optimizer": optimizer,
            "total": params + grads + optimizer + activations, "cpu": cpu}


def comm_volume_in_psi(stage: int) -> int:
    """The paper's unit: elements each GPU moves per step, in multiples of Ψ (as N grows large).

    Stages 0-2: a reduce-scatter of gradients and an all-gather of parameters (together an
    all-reduce): 2Ψ. Stage 3: the parameters are all-gathered twice (forward and backward), and the
    gradients are still reduce-scattered: Ψ + Ψ + Ψ = 3Ψ.
    """
    return 3 if check_int("stage", stage, 0, 3) == 3 else 2


def comm_volume_per_step(layer_numels, stage: int, world_size: int, precision: str = "mixed") -> int:
    """Bytes each GPU *sends* in one step, in the ring accounting of `simlab.sim.collectives`.

    A ring reduce-scatter or all-gather over a buffer of N·S elements makes every GPU send
    (N-1) shards of S elements: (N-1)/N of the (padded) buffer. Parameters travel in the parameter
    dtype p and gradients in the gradient dtype g (2 bytes each in mixed precision, 4 in fp32), so:
    stage 0 (all-reduce = reduce-scatter + all-gather of gradients): (N-1)·ΣS·2g bytes, stages 1-2
    (gradients reduce-scattered, parameters all-gathered): (N-1)·ΣS·(g + p), stage 3 (parameters
    gathered twice): (N-1)·ΣS·(2p + g). As N grows this tends to 2Ψ and 3Ψ
    elements (`comm_volume_in_psi`). Offload adds host transfers (PCIe), not counted here.
    """
    numels = _layers(layer_numels)
    prec = _check(stage, world_size, precision)
    shard = sum(shard_numel(p, world_size) for p in numels)
    per_shard = (2 * prec.grad, prec.grad + prec.param, prec.grad + prec.param, 2 * prec.param + prec.grad)[stage]
    return (world_size - 1) * shard * per_shard


def peak_per_gpu_bytes(layer_numels, world_size: int, stage: int, offload: bool = False,
                       precision: str = "mixed") -> int:
    """GPU bytes of model state at the step's peak: `per_gpu_bytes` plus what a step holds for a moment.

    Stages 2 and 3 hold one layer's *full* gradient between its backward and its reduce-scatter (the
    steady state keeps only the own shard of it, or nothing under offload); stage 3 also holds that
    layer's gathered parameters. The largest layer sets the peak. This is `sim.zero.peak_bytes` for
    any model (the walkthrough's peak, step by step, equals it: tests/sim/test_zero.py)."""
    numels = _layers(layer_numels)
    prec = _check(stage, world_size, precision)
    steady = per_gpu_bytes(numels, world_size, stage, offload, precision)["total"]
    largest = max(padded_numel(p, world_size) for p in numels)  # N·S: a gathered layer, padding included
    own = shard_numel(max(numels), world_size)
    grads = (largest - (0 if offload else own)) * prec.grad if stage >= 2 else 0
    params = (largest - own) * prec.param if stage == 3 else 0
    return steady + grads + params


def smallest_world_size(layer_numels, stage: int, capacity: int, offload: bool = False,
                        precision: str = "mixed", limit: int = 1 << 20) -> int | None:
    """The fewest GPUs whose peak (`peak_per_gpu_bytes`) fits in `capacity` bytes, or None if no number
    up to `limit` does (stages 0-2 keep full parameters on every GPU: more GPUs cannot shrink those)."""
    check_int("capacity", capacity, 1)
    check_int("limit", limit, 1)

    def fits(n):
        return peak_per_gpu_bytes(layer_numels, n, stage, offload, precision) <= capacity

    if not fits(limit):
        return None
    low, high = 1, limit  # the peak never grows with N (but for a few padding elements): bisect
    while low < high:
        mid = (low + high) // 2
        low, high = (low, mid) if fits(mid) else (mid + 1, high)
    return low
