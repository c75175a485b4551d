"""The advisor: every way to train a model on a cluster, what does not fit and why, and what is fastest.

Teaches the primer's 适用场景 by deriving it. For a model, a cluster and a global batch, `search`
enumerates every plan (`advisor_space`) — tp·cp·pp·dp = GPUs (context parallelism where the sequence cuts into
2·cp chunks), expert parallelism carved out of DP for a mixture of experts, micro-batch, schedule and chunks,
stage split (even, or one layer fewer on the two end stages that also hold the embedding and the output layer),
ZeRO stage over the whole DP group or over one node's part of it (HSDP), Offload, sequence parallelism,
recomputation — evaluates them all at once (`hybrid_memory` and `hybrid_time` on numpy arrays) for the
framework's settings (precision, attention kernel, what it overlaps, how CP exchanges K,V, the experts'
capacity), rejects those that do not fit with the reason, ranks the rest by step time (ties: less memory, then
fewer moving parts) and explains why the obvious alternatives lose — or that they tie within the model's error
(`advisor_explain`).

    >>> from simlab.sim.model import PRESETS
    >>> from simlab.sim.hardware import cluster
    >>> r = search(PRESETS["megatron-1.7b-2021"], cluster(gpus=8), global_batch=64)
    >>> best = r["best"]["config"]  # fits on one GPU: data parallel across the node (ZeRO optional)
    >>> best["tp"], best["pp"], best["dp"], family(best)
    (1, 1, 8, 'DP+ZeRO-2')
"""
from __future__ import annotations

import collections

import numpy as np

from .._checks import check_choice, check_int, check_number
from .advisor_explain import explain, family, family_codes, lesson7_lines, rejections, representative  # noqa: F401 — the advisor's API too
from .advisor_explain import families as family_names
from .advisor_space import _divisors, candidates, stage_layers  # noqa: F401 — `candidates`: advisor's API too
from .gpus import check_precision
from .hardware import Cluster
from .hybrid import (
    ATTENTION,
    CP_COMMS,
    LOSSES,
    PRECISIONS,
    RECOMPUTE,
    SCHEDULES,
    Plan,
    check_bucket,
    check_experts,
    check_loss,
    check_overlap,
    check_plan,
)
from .hybrid_memory import Knobs, per_gpu
from .hybrid_time import step
from .model import Transformer

FIXABLE = ("tp", "pp", "dp", "microbatch", "chunks", "schedule", "zero", "offload", "sequence_parallel", "recompute",
           "shard", "cp", "ep")
MAX_BATCH = 1 << 40  # sequences per step: far beyond any run, small enough for exact integer arithmetic


def config(k: Knobs, i: int, model: Transformer) -> dict:
    """Plan i of `k` as `Plan(**config)` takes it (precision aside)."""
    attention, over = ATTENTION[int(k.attention[i])], [name for name, on in (
        ("dp", k.overlap_dp[i]), ("params", k.overlap_params[i]), ("tp", k.overlap_tp[i])) if on]
    return {"tp": int(k.tp[i]), "pp": int(k.pp[i]), "dp": int(k.dp[i]), "chunks": int(k.v[i]),
            "schedule": SCHEDULES[int(k.schedule[i])], "zero": int(k.zero[i]), "offload": bool(k.offload[i]),
            "microbatch": int(k.b[i]), "recompute": RECOMPUTE[int(k.recompute[i])],
            "sequence_parallel": bool(k.sp[i]), "attention": attention, "overlap": ",".join(over) or "none",
            "shard": int(k.shard[i]) if k.shard[i] < k.dp[i] else 0,
            "stage_layers": stage_layers(model, int(k.pp[i]), int(k.first[i]), int(k.last[i])),
            "bucket": [int(k.bucket_gather[i]), int(k.bucket_reduce[i])] if k.bucket_gather[i] else [],
            **_settings_of(k, i)}


def _settings_of(k: Knobs, i: int) -> dict:
    """Plan i's context- and expert-parallel knobs and its loss (a Knobs may carry them as one number for every
    plan)."""
    at = {name: np.broadcast_to(getattr(k, name), np.shape(k.tp))[i]
          for name in ("cp", "ep", "capacity", "cp_comm", "loss")}
    return {"cp": int(at["cp"]), "cp_comm": CP_COMMS[int(at["cp_comm"])], "ep": int(at["ep"]),
            "capacity": float(at["capacity"]), "loss": LOSSES[int(at["loss"])]}


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
    """Memory, time and fit (`fits`) of every plan in `k`. Memory first: the time of a plan that does not fit is
    never asked, so only those that fit are timed — and the least hungry of each family that fits nowhere, which
    `by_family` shows beside the winners; every other plan's time is NaN."""
    mem = per_gpu(model, k, global_batch, precision)
    ok = fits(mem, c)
    codes, _names = family_codes(k)
    by_family = np.argsort(codes, kind="stable")
    starts = np.flatnonzero(np.r_[True, np.diff(codes[by_family]) != 0][:len(codes)])
    timed = ok.copy()
    for members in np.split(by_family, starts[1:]) if len(codes) else []:  # each family's least hungry
        timed[members[np.argmin(mem["total"][members])]] = True
    at = np.flatnonzero(timed)
    some = step(model, Knobs(*(np.broadcast_to(a, ok.shape)[at] for a in k)), c, global_batch, precision)

    def spread(values):  # the timed plans' values, in place among all plans
        out = np.full(ok.shape, np.nan)
        out[at] = np.broadcast_to(values, at.shape)
        return out
    time = {key: {name: spread(v) for name, v in val.items()} if isinstance(val, dict) else spread(val)
            for key, val in some.items()}
    return mem, time, ok


def _check_fixed(name: str, value) -> None:
    """A constraint the search holds fixed, refused in one line if no plan could have it."""
    from .._checks import check_bool
    if name in ("tp", "pp", "dp", "microbatch", "chunks", "cp", "ep"):
        check_int(name, value, 1)
    elif name in ("zero", "shard"):
        check_int(name, value, 0, 3 if name == "zero" else MAX_BATCH)
    elif name in ("offload", "sequence_parallel"):
        check_bool(name, value)
    else:
        check_choice(name, value, {"schedule": SCHEDULES, "recompute": RECOMPUTE}[name])


def _settings(precision: str, attention: str, overlap: str, bucket=(), cp_comm: str = "ring", capacity=0.0,
              model: Transformer | None = None, loss: str = "fused") -> tuple:
    """The framework's settings checked, in one line naming the bad one; returns (cp_comm, capacity, loss) as
    keyed."""
    check_choice("precision", precision, PRECISIONS)
    check_choice("attention", attention, ATTENTION)
    check_overlap(overlap)
    check_bucket(tuple(bucket) if isinstance(bucket, list) else bucket)
    check_choice("cp_comm", cp_comm, CP_COMMS)
    check_number("capacity", capacity, 0.0)
    if capacity and model is not None:
        check_experts(model, Plan(capacity=capacity))  # a dense model routes nothing to a capacity
    check_choice("loss", loss, LOSSES)
    if model is not None:
        check_loss(model, Plan(loss=loss))  # chunked: the sequence in LOSS_CHUNKS (each cp divides it further)
    return cp_comm, float(capacity), loss


def _ranked(k: Knobs, mem: dict, time: dict, fits) -> list[int]:
    """The plans that fit, fastest first (ties: less memory, then fewer moving parts)."""
    at = np.flatnonzero(fits)  # only these are timed (`evaluate`)
    parts = (k.schedule + k.recompute + k.zero + k.sp + (k.shard < k.dp) + (k.cp > 1) + (k.ep > 1))[at]
    return at[np.lexsort((parts, mem["total"][at], time["step_seconds"][at]))].tolist()


_EVALUATED: collections.OrderedDict = collections.OrderedDict()  # the last few questions and their answers


def _evaluated(model: Transformer, c: Cluster, global_batch: int, fixed: tuple, attention: str, overlap: str,
               bucket: tuple, precision: str, settings: tuple = ("ring", 0.0, "fused")):
    """Every candidate plan and its memory, time and fit, for arguments already checked: `search`, `by_family` and
    `fastest_of` on the same question (an explorer asks all of them at once) evaluate the plans once. Keyed by the
    model's and cluster's repr (a GPU holds a dict, so it does not hash); the arrays are shared, so they are made
    read-only. `settings`: (cp_comm, capacity, loss), as `_settings` returns them."""
    key = (repr(model), repr(c), global_batch, fixed, attention, overlap, bucket, precision, settings)
    if key not in _EVALUATED:
        k = candidates(model, c, global_batch, dict(fixed), attention, overlap, bucket, *settings)
        for a in k:
            a.flags.writeable = False  # before `evaluate`: its family codes are kept for these arrays
        mem, time, fits = evaluate(model, c, global_batch, k, precision)
        for a in (*mem.values(), *time.values(), fits):
            if isinstance(a, np.ndarray):
                a.flags.writeable = False
        _EVALUATED[key] = k, mem, time, fits
        while len(_EVALUATED) > 2:  # each holds arrays for up to ~10⁶ plans (hundreds of MB)
            _EVALUATED.popitem(last=False)
    _EVALUATED.move_to_end(key)
    return _EVALUATED[key]


def search(model: Transformer, c: Cluster, global_batch: int, precision: str = "mixed", top: int = 10,
           attention: str = "flash", overlap: str = "dp,params", bucket: tuple = (), cp_comm: str = "ring",
           capacity: float = 0.0, loss: str = "fused", **fixed) -> dict:
    """Best plan, the next `top` - 1, rejected plans by reason, the explanation with its ties and notes.
    `fixed`: any of FIXABLE; `precision`, `attention`, `overlap`, `bucket`, `cp_comm` (how CP exchanges K,V),
    `capacity` (a mixture of experts' capacity factor, 0 dropless) and `loss` (`hybrid.LOSSES`): the framework's
    settings."""
    check_int("global_batch", global_batch, 1, MAX_BATCH)
    settings = _settings(precision, attention, overlap, bucket, cp_comm, capacity, model, loss)
    for name, value in fixed.items():
        check_choice("constraint", name, FIXABLE)
        _check_fixed(name, value)
    check_precision(c.gpu, precision)
    k, mem, time, fits = _evaluated(model, c, global_batch, tuple(sorted(fixed.items())), attention, overlap,
                                    tuple(bucket), precision, settings)
    if len(k.tp) == 0:
        raise ValueError(f"global_batch={global_batch}: no layout of gpus={c.gpus} divides the batch, heads and "
                         f"layers evenly under the constraints {fixed or 'given'}")
    rejected = rejections(mem, fits, k, c)
    order = _ranked(k, mem, time, fits)
    best = describe(mem, time, fits, k, order[0], model) if order else None
    why = explain(best, rejected, mem, time, fits, k, c, order[0] if order else None)
    return {"best": best, "candidates": [describe(mem, time, fits, k, i, model) for i in order[:top]],
            "rejected": rejected, "plans": int(len(k.tp)), "explanation": why["lines"] + lesson7_lines(
                best, mem, time, fits, k, model, c), "ties": why["ties"], "notes": why["notes"]}


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
              bucket: tuple = (), cp_comm: str = "ring", capacity: float = 0.0, loss: str = "fused") -> dict:
    """{family: its fastest plan that fits, else its plan needing the least memory (fits False)}, in the
    order of `families` (default: every family the search finds): the winner beside the strategies that lose,
    for `render.hybrid_plans.draw_plan_memory` / `draw_time_breakdown`."""
    check_int("global_batch", global_batch, 1, MAX_BATCH)
    settings = _settings(precision, attention, overlap, bucket, cp_comm, capacity, model, loss)
    check_precision(c.gpu, precision)
    k, mem, time, fits = _evaluated(model, c, global_batch, (), attention, overlap, tuple(bucket), precision, settings)
    names = family_names(k).astype(str)
    out = {}
    for name in families if families is not None else dict.fromkeys(names):
        members = np.flatnonzero(names == name)
        if not len(members):
            continue
        out[str(name)] = describe(mem, time, fits, k, representative(members, mem, time, fits), model)
    return out


def fastest_of(model: Transformer, c: Cluster, global_batch: int, groups: dict, precision: str = "mixed",
               cp_comm: str = "ring", capacity: float = 0.0, loss: str = "fused", **fixed) -> dict:
    """One evaluation of every plan (flash attention, DP and parameter overlap; `loss` as `search`'s): {"best":
    `search`'s best plan, name: the fastest plan that fits among those `groups[name]` picks (a function of the
    plans' `Knobs` to a boolean array), or None}; each plan `describe`d, with its "family" and its "ratio" of step
    time to the best's. What a sweep of the network, or a change of link, asks of the advisor at one search's cost."""
    check_int("global_batch", global_batch, 1, MAX_BATCH)
    settings = _settings(precision, "flash", "dp,params", (), cp_comm, capacity, model, loss)
    for name, value in fixed.items():
        check_choice("constraint", name, FIXABLE)
        _check_fixed(name, value)
    check_precision(c.gpu, precision)
    k, mem, time, fits = _evaluated(model, c, global_batch, tuple(sorted(fixed.items())), "flash", "dp,params", (),
                                    precision, settings)
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


def versus(model: Transformer, c: Cluster, global_batch: int, pick, precision: str = "mixed", cp_comm: str = "ring",
           capacity: float = 0.0, loss: str = "fused") -> dict:
    """One evaluation of every plan, split in two by `pick` (a function of the plans' `Knobs` to a boolean array):
    {"best": the fastest plan that fits (None if none does), "with": the plan standing for those `pick` keeps,
    "without": for the rest} — each the fastest that fits, else the least hungry (fits False), else None where the
    side is empty; each `describe`d with its "family"; `loss` as `search`'s. What `advisor_sweep` asks at each point
    of a sweep."""
    check_int("global_batch", global_batch, 1, MAX_BATCH)
    settings = _settings(precision, "flash", "dp,params", (), cp_comm, capacity, model, loss)
    check_precision(c.gpu, precision)
    k, mem, time, fits = _evaluated(model, c, global_batch, (), "flash", "dp,params", (), precision, settings)
    order = _ranked(k, mem, time, fits)
    rank = np.full(len(k.tp), len(k.tp))
    rank[order] = np.arange(len(order))  # ties broken as the search breaks them
    side = np.asarray(pick(k), dtype=bool)

    def plan(members):
        if not len(members):
            return None
        fitting = members[fits[members]]
        i = fitting[np.argmin(rank[fitting])] if len(fitting) else members[np.argmin(mem["total"][members])]
        return {**(d := describe(mem, time, fits, k, int(i), model)), "family": family(d["config"])}
    return {"best": plan(np.array(order[:1], dtype=np.int64)), "with": plan(np.flatnonzero(side)),
            "without": plan(np.flatnonzero(~side))}
