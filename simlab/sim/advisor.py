"""The advisor: every way to train a model on a cluster, what does not fit and why, and what is fastest.

Teaches the primer's 适用场景 by deriving it. For a model, a cluster and a global batch, `search`
enumerates every plan — tp·pp·dp = GPUs, micro-batch, schedule and chunks, stage split (even, or one layer
fewer on the two end stages that also hold the embedding and the output layer), ZeRO stage over the whole DP
group or over one node's part of it (HSDP), Offload, sequence parallelism, recomputation — evaluates them all
at once (`hybrid_memory` and `hybrid_time` on numpy arrays) for the framework's settings (precision, attention
kernel, what it overlaps), rejects those that do not fit with the reason, ranks the rest by step time (ties:
less memory, then fewer moving parts) and explains why the obvious alternatives lose — or that they tie within
the model's error (`advisor_explain`).

    >>> from simlab.sim.model import PRESETS
    >>> from simlab.sim.hardware import cluster
    >>> r = search(PRESETS["megatron-1.7b-2021"], cluster(gpus=8), global_batch=64)
    >>> best = r["best"]["config"]  # fits on one GPU: data parallel across the node (ZeRO optional)
    >>> best["tp"], best["pp"], best["dp"], family(best)
    (1, 1, 8, 'DP+ZeRO-2')
"""
from __future__ import annotations

import collections
import itertools

import numpy as np

from .._checks import check_choice, check_int
from .advisor_explain import explain, family, rejections, representative  # noqa: F401 — `family` is advisor's API too
from .advisor_explain import families as family_names
from .gpus import check_precision
from .hardware import Cluster
from .hybrid import (
    ATTENTION,
    CP_COMMS,
    PRECISIONS,
    RECOMPUTE,
    SCHEDULES,
    Plan,
    check_bucket,
    check_overlap,
    check_plan,
    layers_per_stage,
)
from .hybrid_memory import Knobs, per_gpu
from .hybrid_time import step
from .model import Transformer

FIXABLE = ("tp", "pp", "dp", "microbatch", "chunks", "schedule", "zero", "offload", "sequence_parallel", "recompute",
           "shard")
MAX_MICROBATCH = 32


MAX_BATCH = 1 << 40  # sequences per step: far beyond any run, small enough for exact integer arithmetic


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


def _layouts(model: Transformer, c: Cluster, global_batch: int, fixed: dict) -> list[tuple]:
    """(tp, pp, dp, b, schedule index, v, first, mid, last) for every layout that divides everything evenly."""
    rows = []
    for tp in _divisors(c.gpus):
        if model.heads % tp or fixed.get("tp", tp) != tp:
            continue
        for pp in _divisors(c.gpus // tp):
            dp = c.gpus // (tp * pp)
            if pp > model.layers or fixed.get("pp", pp) != pp or fixed.get("dp", dp) != dp or global_batch % dp:
                continue
            per_replica = global_batch // dp
            micro = [b for b in range(1, MAX_MICROBATCH + 1) if per_replica % b == 0]
            for split, b in itertools.product(_splits(model, pp), micro):
                if fixed.get("microbatch", b) != b:
                    continue
                m = per_replica // b
                schedules = [(1, 1)] if pp == 1 else [(0, 1), (1, 1)] + [
                    (2, v) for v in range(2, min(split[0], split[2], 8) + 1) if m % pp == 0]
                rows += [(tp, pp, dp, b, s, v, *split) for s, v in schedules
                         if fixed.get("schedule", SCHEDULES[s]) == SCHEDULES[s] and fixed.get("chunks", v) == v]
    return rows


def candidates(model: Transformer, c: Cluster, global_batch: int, fixed: dict, attention: str = "flash",
               overlap: str = "dp,params", bucket: tuple = ()) -> Knobs:
    """Every plan, as arrays: the layouts × (ZeRO, Offload, HSDP) × sequence parallel × recomputation (under
    FlashAttention selective recomputation has nothing to recompute: it is tried only when asked for)."""
    layouts = np.array(_layouts(model, c, global_batch, fixed), dtype=np.int64).reshape(-1, 9)
    memory_knobs = [(z, o, h, sp, r) for z, o, h, sp, r in itertools.product(range(4), (0, 1), (0, 1), (0, 1), range(3))
                    if (not o or z >= 2) and (not h or z >= 1) and fixed.get("zero", z) == z
                    and fixed.get("offload", bool(o)) == bool(o) and fixed.get("sequence_parallel", bool(sp)) == bool(sp)
                    and fixed.get("recompute", RECOMPUTE[r]) == RECOMPUTE[r]
                    and not (attention == "flash" and RECOMPUTE[r] == "selective" and "recompute" not in fixed)]
    extra = np.array(memory_knobs, dtype=np.int64).reshape(-1, 5)
    rows = np.concatenate([np.repeat(layouts, len(extra), 0), np.tile(extra, (len(layouts), 1))], axis=1)
    tp, dp, zero, hsdp, sp = rows[:, 0], rows[:, 2], rows[:, 9], rows[:, 11], rows[:, 12]
    # HSDP shards over one node's part of a DP group (TP fills the node first), or over the `shard` asked for
    node = np.maximum(1, c.gpus_per_node // tp) if not fixed.get("shard") else np.full(len(rows), fixed["shard"])
    shard = np.where(hsdp == 1, node, dp)
    keep = (sp == 0) | (tp > 1)  # sequence parallelism splits what TP replicates
    keep &= (dp > 1) | (zero == 0) | (rows[:, 10] == 1)  # ZeRO over one rank shards nothing (Offload aside)
    keep &= (hsdp == 0) | ((1 < node) & (node < dp) & (dp % node == 0) & (
        (c.gpus_per_node % tp == 0) | bool(fixed.get("shard"))))
    if fixed.get("shard"):
        keep &= (zero == 0) | (shard == fixed["shard"])
    rows, shard = rows[keep], shard[keep]
    over = set() if overlap == "none" else set(overlap.split(","))
    n, ones = len(rows), np.ones(len(rows), dtype=np.int64)
    return Knobs(rows[:, 0], rows[:, 1], rows[:, 2], rows[:, 3], rows[:, 5], rows[:, 9], rows[:, 10], rows[:, 12],
                 rows[:, 13], rows[:, 4], ones * ATTENTION.index(attention), shard, rows[:, 6], rows[:, 7],
                 rows[:, 8], ones * ("dp" in over), ones * ("params" in over), ones * ("tp" in over),
                 *(ones * b for b in (bucket or (0, 0)))) if n else \
        Knobs(*(np.zeros(0, dtype=np.int64),) * len(Knobs._fields))


def _stage_layers(model: Transformer, pp: int, first: int, last: int) -> list[int]:
    """The explicit split of a plan whose end stages hold fewer layers ([] for the even split)."""
    if pp <= 2 or first == layers_per_stage(model, pp):
        return []
    rest, middle = model.layers - first - last, pp - 2
    return [first] + [rest // middle + (i < rest % middle) for i in range(middle)] + [last]


def config(k: Knobs, i: int, model: Transformer) -> dict:
    """Plan i of `k` as `Plan(**config)` takes it (precision aside)."""
    attention, over = ATTENTION[int(k.attention[i])], [name for name, on in (
        ("dp", k.overlap_dp[i]), ("params", k.overlap_params[i]), ("tp", k.overlap_tp[i])) if on]
    return {"tp": int(k.tp[i]), "pp": int(k.pp[i]), "dp": int(k.dp[i]), "chunks": int(k.v[i]),
            "schedule": SCHEDULES[int(k.schedule[i])], "zero": int(k.zero[i]), "offload": bool(k.offload[i]),
            "microbatch": int(k.b[i]), "recompute": RECOMPUTE[int(k.recompute[i])],
            "sequence_parallel": bool(k.sp[i]), "attention": attention, "overlap": ",".join(over) or "none",
            "shard": int(k.shard[i]) if k.shard[i] < k.dp[i] else 0,
            "stage_layers": _stage_layers(model, int(k.pp[i]), int(k.first[i]), int(k.last[i])),
            "bucket": [int(k.bucket_gather[i]), int(k.bucket_reduce[i])] if k.bucket_gather[i] else [],
            **_lesson7(k, i)}


def _lesson7(k: Knobs, i: int) -> dict:
    """Plan i's context- and expert-parallel knobs (a Knobs may carry them as one number for every plan)."""
    at = {name: np.broadcast_to(getattr(k, name), np.shape(k.tp))[i] for name in ("cp", "ep", "capacity", "cp_comm")}
    return {"cp": int(at["cp"]), "cp_comm": CP_COMMS[int(at["cp_comm"])], "ep": int(at["ep"]),
            "capacity": float(at["capacity"])}


def describe(mem: dict, time: dict, fits, k: Knobs, i: int, model: Transformer) -> dict:
    """One plan as the CLI prints it: config, fits, bytes per GPU, time, throughput, MFU, breakdown, hidden."""
    keys = ("params", "grads", "optimizer", "activations", "total")
    return {"config": config(k, i, model), "fits": bool(fits[i]),
            "bytes_per_gpu": {key: float(mem[key][i]) for key in keys}, "cpu_bytes_per_gpu": float(mem["cpu"][i]),
            "step_seconds": float(time["step_seconds"][i]), "tokens_per_second": float(time["tokens_per_second"][i]),
            "mfu": float(time["mfu"][i]), "breakdown": {key: float(v[i]) for key, v in time["breakdown"].items()},
            "hidden": {key: float(v[i]) for key, v in time["hidden"].items()}}


def fits(mem: dict, c: Cluster):
    """Whether plans fit: the GPU's usable memory, and the host's under Offload (arrays or numbers)."""
    return (mem["total"] <= c.gpu.usable_memory) & (mem["cpu"] * c.gpus_per_node <= c.host_memory)


def evaluate(model: Transformer, c: Cluster, global_batch: int, k: Knobs, precision: str):
    """Memory, time and fit (`fits`) of every plan in `k`."""
    mem, time = per_gpu(model, k, global_batch, precision), step(model, k, c, global_batch, precision)
    return mem, time, fits(mem, c)


def _check_fixed(name: str, value) -> None:
    """A constraint the search holds fixed, refused in one line if no plan could have it."""
    from .._checks import check_bool
    if name in ("tp", "pp", "dp", "microbatch", "chunks"):
        check_int(name, value, 1)
    elif name in ("zero", "shard"):
        check_int(name, value, 0, 3 if name == "zero" else MAX_BATCH)
    elif name in ("offload", "sequence_parallel"):
        check_bool(name, value)
    else:
        check_choice(name, value, {"schedule": SCHEDULES, "recompute": RECOMPUTE}[name])


def _settings(precision: str, attention: str, overlap: str, bucket=()) -> None:
    check_choice("precision", precision, PRECISIONS)
    check_choice("attention", attention, ATTENTION)
    check_overlap(overlap)
    check_bucket(tuple(bucket) if isinstance(bucket, list) else bucket)


def _ranked(k: Knobs, mem: dict, time: dict, fits) -> list[int]:
    """The plans that fit, fastest first (ties: less memory, then fewer moving parts)."""
    return [i for i in np.lexsort((k.schedule + k.recompute + k.zero + k.sp + (k.shard < k.dp), mem["total"],
                                   time["step_seconds"])) if fits[i]]


_EVALUATED: collections.OrderedDict = collections.OrderedDict()  # the last few questions and their answers


def _evaluated(model: Transformer, c: Cluster, global_batch: int, fixed: tuple, attention: str, overlap: str,
               bucket: tuple, precision: str):
    """Every candidate plan and its memory, time and fit, for arguments already checked: `search`, `by_family` and
    `fastest_of` on the same question (an explorer asks all of them at once) evaluate the plans once. Keyed by the
    model's and cluster's repr (a GPU holds a dict, so it does not hash); the arrays are shared, so they are made
    read-only."""
    key = (repr(model), repr(c), global_batch, fixed, attention, overlap, bucket, precision)
    if key not in _EVALUATED:
        k = candidates(model, c, global_batch, dict(fixed), attention, overlap, bucket)
        mem, time, fits = evaluate(model, c, global_batch, k, precision)
        for a in (*k, *mem.values(), *time.values(), fits):
            if isinstance(a, np.ndarray):
                a.flags.writeable = False
        _EVALUATED[key] = k, mem, time, fits
        while len(_EVALUATED) > 2:  # each holds arrays for up to ~10⁵ plans (tens of MB)
            _EVALUATED.popitem(last=False)
    _EVALUATED.move_to_end(key)
    return _EVALUATED[key]


def search(model: Transformer, c: Cluster, global_batch: int, precision: str = "mixed", top: int = 10,
           attention: str = "flash", overlap: str = "dp,params", bucket: tuple = (), **fixed) -> dict:
    """Best plan, the next `top` - 1, rejected plans by reason, the explanation with its ties and notes.
    `fixed`: any of FIXABLE; `precision`, `attention`, `overlap`, `bucket`: the framework's settings."""
    check_int("global_batch", global_batch, 1, MAX_BATCH)
    _settings(precision, attention, overlap, bucket)
    for name, value in fixed.items():
        check_choice("constraint", name, FIXABLE)
        _check_fixed(name, value)
    check_precision(c.gpu, precision)
    k, mem, time, fits = _evaluated(model, c, global_batch, tuple(sorted(fixed.items())), attention, overlap,
                                    tuple(bucket), precision)
    if len(k.tp) == 0:
        raise ValueError(f"global_batch={global_batch}: no layout of gpus={c.gpus} divides the batch, heads and "
                         f"layers evenly under the constraints {fixed or 'given'}")
    rejected = rejections(mem, fits, k, c)
    order = _ranked(k, mem, time, fits)
    best = describe(mem, time, fits, k, order[0], model) if order else None
    why = explain(best, rejected, mem, time, fits, k, c, order[0] if order else None)
    return {"best": best, "candidates": [describe(mem, time, fits, k, i, model) for i in order[:top]],
            "rejected": rejected, "plans": int(len(k.tp)), "explanation": why["lines"], "ties": why["ties"],
            "notes": why["notes"]}


def evaluate_plan(model: Transformer, c: Cluster, global_batch: int, plan: Plan) -> dict:
    """One fully given plan (tp, pp and dp fixed), checked first: the CLI's `simlab plan` without search."""
    check_plan(model, plan, c.gpus, global_batch)
    check_precision(c.gpu, plan.precision)
    mem, time = per_gpu(model, plan, global_batch), step(model, plan, c, global_batch)
    keys = ("params", "grads", "optimizer", "activations", "total")
    return {"config": plan.to_dict(), "fits": bool(fits(mem, c)), "bytes_per_gpu": {key: mem[key] for key in keys},
            "cpu_bytes_per_gpu": mem["cpu"], "usable_bytes_per_gpu": c.gpu.usable_memory, **time}


def by_family(model: Transformer, c: Cluster, global_batch: int, precision: str = "mixed",
              families: tuple | None = None, attention: str = "flash", overlap: str = "dp,params",
              bucket: tuple = ()) -> dict:
    """{family: its fastest plan that fits, else its plan needing the least memory (fits False)}, in the
    order of `families` (default: every family the search finds): the winner beside the strategies that lose,
    for `render.hybrid_plans.draw_plan_memory` / `draw_time_breakdown`."""
    check_int("global_batch", global_batch, 1, MAX_BATCH)
    _settings(precision, attention, overlap, bucket)
    check_precision(c.gpu, precision)
    k, mem, time, fits = _evaluated(model, c, global_batch, (), attention, overlap, tuple(bucket), precision)
    names = family_names(k).astype(str)
    out = {}
    for name in families if families is not None else dict.fromkeys(names):
        members = np.flatnonzero(names == name)
        if not len(members):
            continue
        out[str(name)] = describe(mem, time, fits, k, representative(members, mem, time, fits), model)
    return out


def fastest_of(model: Transformer, c: Cluster, global_batch: int, groups: dict, precision: str = "mixed") -> dict:
    """One evaluation of every plan (the framework's default settings): {"best": `search`'s best plan, name: the
    fastest plan that fits among those `groups[name]` picks (a function of the plans' `Knobs` to a boolean array),
    or None}; each plan `describe`d, with its "family" and its "ratio" of step time to the best's. What a sweep
    of the network, or a change of link, asks of the advisor at one search's cost."""
    check_int("global_batch", global_batch, 1, MAX_BATCH)
    check_choice("precision", precision, PRECISIONS)
    check_precision(c.gpu, precision)
    k, mem, time, fits = _evaluated(model, c, global_batch, (), "flash", "dp,params", (), precision)
    order = _ranked(k, mem, time, fits)
    if not order:
        return {"best": None, **dict.fromkeys(groups)}
    rank = np.full(len(k.tp), len(k.tp))
    rank[order] = np.arange(len(order))
    out, best = {}, float(time["step_seconds"][order[0]])
    for name, pick in (("best", None), *groups.items()):
        members = np.flatnonzero(fits if pick is None else fits & np.asarray(pick(k), dtype=bool))
        if not len(members):
            out[name] = None
            continue
        plan = describe(mem, time, fits, k, int(members[np.argmin(rank[members])]), model)
        out[name] = {**plan, "family": family(plan["config"]), "ratio": plan["step_seconds"] / best}
    return out
