"""The advisor's search space: every plan of a model on a cluster, as arrays (`Knobs`) the memory and time models
evaluate at once.

Teaches what the knobs are and how they constrain each other: tp·cp·pp·dp = GPUs; tp divides the heads; cp cuts the
sequence into 2·cp equal chunks (the zig-zag layout; Ulysses also gives each of the tp·cp ranks whole heads); pp
is at most the layers; the expert-parallel group (ep) is carved out of the DP group and splits the experts evenly;
the micro-batch divides each replica's share of the batch; then ZeRO, Offload, HSDP, sequence parallelism and
recomputation on top. The framework's settings (precision, attention kernel, overlap, CP's exchange, MoE capacity)
are asked, not searched.

    >>> from simlab.sim.model import PRESETS
    >>> from simlab.sim.hardware import cluster
    >>> k = candidates(PRESETS["llama3-8b"].with_(seq=32768), cluster("h100-80gb", gpus=8), 8, {})
    >>> sorted(set(k.cp.tolist()))  # the sequence split over 1 … 8 GPUs
    [1, 2, 4, 8]
"""
from __future__ import annotations

import itertools

import numpy as np

from .hardware import Cluster
from .hybrid import (
    ATTENTION,
    CP_COMMS,
    LOSSES,
    RECOMPUTE,
    SCHEDULES,
    Plan,
    check_context,
    check_op_sac,
    chunks_evenly,
    layers_per_stage,
)
from .hybrid_memory import Knobs
from .model import Transformer

MAX_MICROBATCH = 32
LAYOUT = ("tp", "pp", "dp", "b", "schedule", "v", "first", "mid", "last", "cp", "ep")  # a layout row's columns


def _divisors(n: int) -> list[int]:
    """Every divisor of n, in O(√n)."""
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _splits(model: Transformer, pp: int) -> list[tuple[int, int, int]]:
    """(first, fullest middle, last) layers: the even split, and one layer fewer on both end stages."""
    even = layers_per_stage(model, pp)
    rows = [(even, even if pp > 2 else 0, even)]
    ends = even - 1
    if pp > 2 and ends >= 1:
        rows.append((ends, -(-(model.layers - 2 * ends) // (pp - 2)), ends))
    return rows


def context_sizes(model: Transformer, gpus: int, tp: int, cp_comm: str, loss: str = "fused",
                  attention: str = "flash") -> list[int]:
    """The cp a layout of `gpus`/tp GPUs may take: 1 unless attention is FlashAttention (the kernels frameworks run CP
    in); the sequence in 2·cp equal chunks; Ulysses also needs whole heads (of the queries and of K,V) on each of the
    tp·cp ranks (`hybrid.check_context`); the chunked loss, each rank's sequence in LOSS_CHUNKS (`hybrid.check_loss`)."""
    if attention != "flash":
        return [1]
    kv = model.kv_heads or model.heads
    return [cp for cp in _divisors(gpus // tp) if (cp == 1 or model.seq % (2 * cp) == 0 and (
        cp_comm != "ulysses" or model.heads % (tp * cp) == 0 and kv % (tp * cp) == 0))
        and (loss != "chunked" or chunks_evenly(model.seq, cp))]


def expert_sizes(model: Transformer, dp: int) -> list[int]:
    """The ep a DP group of dp ranks may carve out: divisors of dp that split the experts evenly (1 if dense)."""
    return [ep for ep in _divisors(dp) if model.experts % ep == 0] if model.experts else [1]


def _layouts(model: Transformer, c: Cluster, global_batch: int, fixed: dict, cp_comm: str = "ring",
             loss: str = "fused", attention: str = "flash") -> list[tuple]:
    """`LAYOUT` rows for every layout that divides everything evenly."""
    rows = []
    for tp in _divisors(c.gpus):
        if model.heads % tp or fixed.get("tp", tp) != tp:
            continue
        sizes = context_sizes(model, c.gpus, tp, cp_comm, loss, attention)
        for cp, pp in itertools.product(sizes, _divisors(c.gpus // tp)):
            if (c.gpus // tp) % (cp * pp) or fixed.get("cp", cp) != cp:
                continue
            dp = c.gpus // (tp * cp * pp)
            if pp > model.layers or fixed.get("pp", pp) != pp or fixed.get("dp", dp) != dp or global_batch % dp:
                continue
            eps = [ep for ep in expert_sizes(model, dp) if fixed.get("ep", ep) == ep]
            per_replica = global_batch // dp
            micro = [b for b in range(1, MAX_MICROBATCH + 1) if per_replica % b == 0]
            for split, b in itertools.product(_splits(model, pp), micro):
                if fixed.get("microbatch", b) != b:
                    continue
                m = per_replica // b
                schedules = [(1, 1)] if pp == 1 else [(0, 1), (1, 1)] + [
                    (2, v) for v in range(2, min(split[0], split[2], 8) + 1) if m % pp == 0]
                rows += [(tp, pp, dp, b, s, v, *split, cp, ep) for s, v in schedules for ep in eps
                         if fixed.get("schedule", SCHEDULES[s]) == SCHEDULES[s] and fixed.get("chunks", v) == v]
    return rows


def _memory_knobs(attention: str, fixed: dict) -> np.ndarray:
    """(zero, offload, hsdp, sp, recompute) rows: Offload needs ZeRO ≥ 2, HSDP ZeRO ≥ 1; under FlashAttention
    selective recomputation has nothing to recompute, so it is tried only when asked for; so is torchtitan's
    op-level policy (op-sac), a framework's setting rather than a plan's."""
    rows = [(z, o, h, sp, r) for z, o, h, sp, r in itertools.product(range(4), (0, 1), (0, 1), (0, 1),
                                                                       range(len(RECOMPUTE)))
            if (not o or z >= 2) and (not h or z >= 1) and fixed.get("zero", z) == z
            and fixed.get("offload", bool(o)) == bool(o) and fixed.get("sequence_parallel", bool(sp)) == bool(sp)
            and fixed.get("recompute", RECOMPUTE[r]) == RECOMPUTE[r]
            and not (attention != "eager" and RECOMPUTE[r] == "selective" and "recompute" not in fixed)
            and not (RECOMPUTE[r] == "op-sac" and "recompute" not in fixed)]
    return np.array(rows, dtype=np.int64).reshape(-1, 5)


def candidates(model: Transformer, c: Cluster, global_batch: int, fixed: dict, attention: str = "flash",
               overlap: str = "dp,params", bucket: tuple = (), cp_comm: str = "ring", capacity: float = 0.0,
               loss: str = "fused") -> Knobs:
    """Every plan, as arrays: the layouts × (ZeRO, Offload, HSDP) × sequence parallel × recomputation, layout by
    layout. The rules are checked on a (layouts, memory knobs) grid of booleans and only the plans kept are built:
    a trillion parameters on 3072 GPUs has ~10⁶ of them."""
    if fixed.get("cp", 1) > 1:
        check_context(model, Plan(cp=fixed["cp"], attention=attention, cp_comm=cp_comm))  # CP's rules, in one line
    lay = np.array(_layouts(model, c, global_batch, fixed, cp_comm, loss, attention), dtype=np.int64).reshape(
        -1, len(LAYOUT))
    if fixed.get("recompute") == "op-sac":
        check_op_sac(model, attention)
    extra = _memory_knobs(attention, fixed)
    col = {name: lay[:, i, None] for i, name in enumerate(LAYOUT)}  # (layouts, 1)
    zero, offload, hsdp, sp = (extra[None, :, i] for i in range(4))  # (1, memory knobs)
    tp, dp, cp = col["tp"], col["dp"], col["cp"]
    # HSDP shards over one node's part of a DP group (TP, then CP, fill the node first), or over the `shard` asked for
    node = np.maximum(1, c.gpus_per_node // (tp * cp)) if not fixed.get("shard") else np.full_like(tp, fixed["shard"])
    keep = (sp == 0) | (tp > 1)  # sequence parallelism splits what TP replicates
    # ZeRO shards over the DP group with its CP ranks (`hybrid_memory.zero_groups`): over one rank it shards nothing
    keep = keep & ((dp * cp > 1) | (zero == 0) | (offload == 1))
    keep &= (hsdp == 0) | ((1 < node) & (node < dp) & (dp % node == 0) & (
        (c.gpus_per_node % (tp * cp) == 0) | bool(fixed.get("shard"))))
    if fixed.get("shard"):
        keep &= (zero == 0) | (np.where(hsdp == 1, node, dp) == fixed["shard"])
    li, ei = np.nonzero(keep)  # layout-major, as the layouts were listed
    at = {name: lay[li, i] for i, name in enumerate(LAYOUT)}
    at |= {name: extra[ei, i] for i, name in enumerate(("zero", "offload", "hsdp", "sp", "recompute"))}
    shard = np.where(at["hsdp"] == 1, node[li, 0], at["dp"])
    over = set() if overlap == "none" else set(overlap.split(","))
    ones = np.ones(len(li), dtype=np.int64)
    return Knobs(at["tp"], at["pp"], at["dp"], at["b"], at["v"], at["zero"], at["offload"], at["sp"], at["recompute"],
                 at["schedule"], ones * ATTENTION.index(attention), shard, at["first"], at["mid"], at["last"],
                 ones * ("dp" in over), ones * ("params" in over), ones * ("tp" in over),
                 *(ones * b for b in (bucket or (0, 0))), at["cp"], at["ep"], ones * float(capacity),
                 ones * CP_COMMS.index(cp_comm), ones * LOSSES.index(loss))


def stage_layers(model: Transformer, pp: int, first: int, last: int) -> list[int]:
    """The explicit split of a plan whose end stages hold fewer layers ([] for the even split)."""
    if pp <= 2 or first == layers_per_stage(model, pp):
        return []
    rest, middle = model.layers - first - last, pp - 2
    return [first] + [rest // middle + (i < rest % middle) for i in range(middle)] + [last]
