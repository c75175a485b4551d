"""The advisor: every way to train a model on a cluster, what does not fit and why, and what is fastest.

Teaches the primer's 适用场景 by deriving it. For a model, a cluster and a global batch, `search`
enumerates every plan — tp·pp·dp = GPUs, micro-batch, schedule and chunks, ZeRO stage, Offload, sequence
parallelism, recomputation — evaluates them all at once (`hybrid_memory` and `hybrid_time` on numpy
arrays), rejects those that do not fit with the reason, ranks the rest by step time (ties: less memory,
then fewer moving parts) and explains why the obvious alternatives lose.

    >>> from simlab.sim.model import PRESETS
    >>> from simlab.sim.hardware import cluster
    >>> r = search(PRESETS["megatron-1.7b-2021"], cluster(gpus=8), global_batch=64)
    >>> best = r["best"]["config"]  # fits on one GPU: data parallel across the node (ZeRO optional)
    >>> best["tp"], best["pp"], best["dp"], family(best)
    (1, 1, 8, 'DP+ZeRO-3')
"""
from __future__ import annotations

import itertools

import numpy as np

from .._checks import check_choice, check_int
from .hardware import Cluster
from .hybrid import PRECISIONS, RECOMPUTE, SCHEDULES, Plan, check_plan
from .hybrid_memory import Knobs, per_gpu
from .hybrid_time import step
from .model import Transformer

FIXABLE = ("tp", "pp", "dp", "microbatch", "chunks", "schedule", "zero", "offload", "sequence_parallel", "recompute")
MAX_MICROBATCH = 32
MODERN = ("modern practice differs from the primer here: on fast networks Llama 3 and TorchTitan shard the DP "
          "dimension with FSDP (ZeRO-3) under TP and PP, hiding its per-micro-batch gathers behind compute; "
          "compare the TP+PP+DP+ZeRO-3 line above")


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _layouts(model: Transformer, c: Cluster, global_batch: int, fixed: dict) -> list[tuple]:
    """(tp, pp, dp, b, schedule index, v) for every layout of the GPUs that divides everything evenly."""
    rows = []
    for tp in _divisors(c.gpus):
        if model.heads % tp or fixed.get("tp", tp) != tp:
            continue
        for pp in _divisors(c.gpus // tp):
            dp = c.gpus // (tp * pp)
            if pp > model.layers or fixed.get("pp", pp) != pp or fixed.get("dp", dp) != dp or global_batch % dp:
                continue
            per_replica, stage_layers = global_batch // dp, -(-model.layers // pp)
            for b in (d for d in _divisors(per_replica) if d <= MAX_MICROBATCH and fixed.get("microbatch", d) == d):
                m = per_replica // b
                schedules = [(1, 1)] if pp == 1 else [(0, 1), (1, 1)] + [
                    (2, v) for v in range(2, min(stage_layers, 8) + 1) if m % pp == 0]
                rows += [(tp, pp, dp, b, s, v) for s, v in schedules
                         if fixed.get("schedule", SCHEDULES[s]) == SCHEDULES[s] and fixed.get("chunks", v) == v]
    return rows


def candidates(model: Transformer, c: Cluster, global_batch: int, fixed: dict) -> Knobs:
    """Every plan, as arrays: the layouts × (ZeRO, Offload) × sequence parallel × recomputation."""
    layouts = np.array(_layouts(model, c, global_batch, fixed), dtype=np.int64).reshape(-1, 6)
    memory_knobs = [(z, o, sp, r) for z, o, sp, r in itertools.product(range(4), (0, 1), (0, 1), range(3))
                    if (not o or z >= 2) and fixed.get("zero", z) == z and fixed.get("offload", bool(o)) == bool(o)
                    and fixed.get("sequence_parallel", bool(sp)) == bool(sp)
                    and fixed.get("recompute", RECOMPUTE[r]) == RECOMPUTE[r]]
    extra = np.array(memory_knobs, dtype=np.int64).reshape(-1, 4)
    rows = np.concatenate([np.repeat(layouts, len(extra), 0), np.tile(extra, (len(layouts), 1))], axis=1)
    tp, dp, zero, sp = rows[:, 0], rows[:, 2], rows[:, 6], rows[:, 8]
    keep = (sp == 0) | (tp > 1)  # sequence parallelism splits what TP replicates
    keep &= (dp > 1) | (zero == 0) | (rows[:, 7] == 1)  # ZeRO over one rank shards nothing (Offload aside)
    rows = rows[keep]
    return Knobs(*(rows[:, i] for i in (0, 1, 2, 3, 5, 6, 7, 8, 9, 4)))


def family(config: dict) -> str:
    """A plan's kind in the primer's words: 'DDP', 'TP+PP+DP+ZeRO-1', 'single GPU + Offload' …"""
    parts = [name for name, on in (("TP", config["tp"] > 1), ("PP", config["pp"] > 1), ("DP", config["dp"] > 1))
             if on]
    if config["zero"]:
        parts.append(f"ZeRO-{config['zero']}" if config["dp"] > 1 else "ZeRO")
    if config["offload"]:
        parts.append("Offload")
    if parts == ["DP"]:
        return "DDP"
    return "+".join(parts) if parts and parts != ["ZeRO", "Offload"] else (
        "single GPU + Offload" if config["offload"] else "single GPU")


def _families(k: Knobs) -> np.ndarray:
    """`family` of every plan, computed once per distinct kind rather than per plan."""
    code = (k.tp > 1) + 2 * (k.pp > 1) + 4 * (k.dp > 1) + 8 * k.zero + 32 * k.offload
    _, first, inverse = np.unique(code, return_index=True, return_inverse=True)
    return np.array([family(_config(k, i)) for i in first])[inverse.reshape(-1)]


def _config(k: Knobs, i: int) -> dict:
    return {"tp": int(k.tp[i]), "pp": int(k.pp[i]), "dp": int(k.dp[i]), "chunks": int(k.v[i]),
            "schedule": SCHEDULES[int(k.schedule[i])], "zero": int(k.zero[i]), "offload": bool(k.offload[i]),
            "microbatch": int(k.b[i]), "recompute": RECOMPUTE[int(k.recompute[i])],
            "sequence_parallel": bool(k.sp[i])}


def describe(mem: dict, time: dict, fits, k: Knobs, i: int) -> dict:
    """One plan as the CLI prints it: config, fits, bytes per GPU, time, throughput, MFU, breakdown."""
    keys = ("params", "grads", "optimizer", "activations", "total")
    return {"config": _config(k, i), "fits": bool(fits[i]), "bytes_per_gpu": {key: float(mem[key][i]) for key in keys},
            "cpu_bytes_per_gpu": float(mem["cpu"][i]), "step_seconds": float(time["step_seconds"][i]),
            "tokens_per_second": float(time["tokens_per_second"][i]), "mfu": float(time["mfu"][i]),
            "breakdown": {key: float(v[i]) for key, v in time["breakdown"].items()}}


def evaluate(model: Transformer, c: Cluster, global_batch: int, k: Knobs, precision: str):
    """Memory, time and fit of every plan in `k`; `fits` also checks the host's memory under Offload."""
    mem, time = per_gpu(model, k, global_batch, precision), step(model, k, c, global_batch, precision)
    fits = (mem["total"] <= c.gpu.memory) & (mem["cpu"] * c.gpus_per_node <= c.host_memory)
    return mem, time, fits


def search(model: Transformer, c: Cluster, global_batch: int, precision: str = "mixed", top: int = 10,
           **fixed) -> dict:
    """Best plan, the next `top` - 1, rejected plans by reason, and the explanation. `fixed`: any of FIXABLE."""
    check_int("global_batch", global_batch, 1)
    check_choice("precision", precision, PRECISIONS)
    for name in fixed:
        check_choice("constraint", name, FIXABLE)
    k = candidates(model, c, global_batch, fixed)
    if len(k.tp) == 0:
        raise ValueError(f"global_batch={global_batch}: no layout of gpus={c.gpus} divides the batch, heads and "
                         f"layers evenly under the constraints {fixed or 'given'}")
    mem, time, fits = evaluate(model, c, global_batch, k, precision)
    rejected = _rejections(mem, fits, k, c)
    order = [i for i in np.lexsort((k.schedule + k.recompute + k.zero + k.sp, mem["total"], time["step_seconds"]))
             if fits[i]]
    out = {"best": describe(mem, time, fits, k, order[0]) if order else None,
           "candidates": [describe(mem, time, fits, k, i) for i in order[:top]], "rejected": rejected,
           "plans": int(len(k.tp))}
    out["explanation"], out["notes"] = explain(out, mem, time, fits, k, c)
    return out


def _rejections(mem: dict, fits, k: Knobs, c: Cluster) -> dict:
    """{reason: count}. A family none of whose plans fit gets the least memory any of them would need
    ("pure DP: 142 GB > 80 GB"); where some fit, the rest are counted as settings that are too big."""
    gb = lambda b: f"{b / 1e9:.3g} GB"  # noqa: E731
    names, gpu_over = _families(k), mem["total"] > c.gpu.memory
    out = {}
    for name in dict.fromkeys(names[~fits]):
        mine = names == name
        if fits[mine].any():
            reason = f"{name}: some micro-batch/recompute settings need more than {gb(c.gpu.memory)}"
        elif gpu_over[mine].all():
            reason = f"{'pure DP' if name == 'DDP' else name}: {gb(mem['total'][mine].min())} > {gb(c.gpu.memory)}"
        else:
            reason = f"{name}: host {gb((mem['cpu'][mine] * c.gpus_per_node).min())} > {gb(c.host_memory)} per node"
        out[reason] = int((mine & ~fits).sum())
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def explain(result: dict, mem: dict, time: dict, fits, k: Knobs, c: Cluster) -> tuple[list, list]:
    """Why the best plan wins (where its time goes) and why each obvious alternative loses."""
    best = result["best"]
    if best is None:
        return ["nothing fits: " + (next(iter(result["rejected"]), "") or "no plan")], []
    total, parts = best["step_seconds"], best["breakdown"]
    lines = [f"best: {family(best['config'])} — {total:.3g} s per step, MFU {best['mfu']:.0%}; time goes to "
             + ", ".join(f"{name} {v / total:.0%}" for name, v in sorted(parts.items(), key=lambda kv: -kv[1])
                         if v / total >= 0.01)]
    names = _families(k)
    alternatives = ["DDP", "DP+ZeRO-1", "DP+ZeRO-3", "TP", "PP", "TP+PP", "TP+PP+DP", "TP+PP+DP+ZeRO-1",
                    "TP+PP+DP+ZeRO-3", "single GPU + Offload"]
    for alt in alternatives:
        members = np.flatnonzero(names == alt)
        if not len(members) or alt == family(best["config"]):
            continue
        i = _representative(members, mem, time, fits)
        if not fits[i]:
            lines.append(f"{alt}: does not fit (needs {mem['total'][i] / 1e9:.0f} GB per GPU)")
            continue
        worst = max(time["breakdown"], key=lambda name: time["breakdown"][name][i] - parts[name])
        lines.append(f"{alt}: {time['step_seconds'][i] / total:.2f}× slower, mostly {worst}")
    return lines, _notes(best["config"], c)


def _representative(members, mem: dict, time: dict, fits) -> int:
    """The plan that stands for a family: its fastest that fits, else the one needing the least memory."""
    fitting = members[fits[members]]
    if len(fitting):
        return fitting[np.argmin(time["step_seconds"][fitting])]
    return members[np.argmin(mem["total"][members])]


def _notes(config: dict, c: Cluster) -> list[str]:
    """Where the derived plan and today's practice (or the primer) part ways."""
    if c.gpus <= c.gpus_per_node:
        return []
    if config["zero"] == 3 and config["tp"] > 1:
        return ["this is FSDP (ZeRO-3) + TP, as TorchTitan and Llama 3 train today; the primer's guide says "
                "ZeRO, or PP+TP+DP, for many nodes on a fast network"]
    if config["pp"] > 1 and config["dp"] > 1 and config["zero"] <= 1:
        return [MODERN]
    return []


def evaluate_plan(model: Transformer, c: Cluster, global_batch: int, plan: Plan) -> dict:
    """One fully given plan (tp, pp and dp fixed), checked first: the CLI's `simlab plan` without search."""
    check_plan(model, plan, c.gpus, global_batch)
    mem, time = per_gpu(model, plan, global_batch), step(model, plan, c, global_batch)
    fits = mem["total"] <= c.gpu.memory and mem["cpu"] * c.gpus_per_node <= c.host_memory
    keys = ("params", "grads", "optimizer", "activations", "total")
    return {"config": plan.to_dict(), "fits": bool(fits), "bytes_per_gpu": {key: mem[key] for key in keys},
            "cpu_bytes_per_gpu": mem["cpu"], **time}


def by_family(model: Transformer, c: Cluster, global_batch: int, precision: str = "mixed",
              families: tuple | None = None) -> dict:
    """{family: its fastest plan that fits, else its plan needing the least memory (fits False)}, in the
    order of `families` (default: every family the search finds): the winner beside the strategies that lose,
    for `render.hybrid.draw_plan_memory` / `draw_time_breakdown`."""
    check_int("global_batch", global_batch, 1)
    k = candidates(model, c, global_batch, {})
    mem, time, fits = evaluate(model, c, global_batch, k, precision)
    names = _families(k).astype(str)
    out = {}
    for name in families if families is not None else dict.fromkeys(names):
        members = np.flatnonzero(names == name)
        if not len(members):
            continue
        out[str(name)] = describe(mem, time, fits, k, _representative(members, mem, time, fits))
    return out
