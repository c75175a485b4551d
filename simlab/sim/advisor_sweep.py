"""When does context parallelism, or expert parallelism, become worth it? The advisor asked along a sweep.

Teaches that CP and EP are answers to a size, not fashions: as the sequence grows, one sequence's activations
outgrow a GPU (and attention's s² compute outgrows the K,V exchange that CP adds), so the best plan turns to CP;
as a mixture of experts gains experts, their weights outgrow a GPU while the compute per token stays, so the best
plan spreads them (EP). At each point of the sweep `advisor.versus` splits every plan in two — with the knob above 1
and without — and the row says which side wins, by how much, and why the other loses: it does not fit (how much
memory its least hungry plan needs and which part of it is most), or it is slower (and in which part of the step).

    >>> from simlab.sim.model import PRESETS
    >>> from simlab.sim.hardware import cluster
    >>> rows = when_cp(PRESETS["llama3-8b"], cluster("h100-80gb", gpus=8), global_tokens=1 << 20, seqs=[32768])
    >>> rows[0]["seq"], rows[0]["global_batch"], rows[0]["knob"]  # 2²⁰ tokens a step: 32 sequences of 32K
    (32768, 32, 'cp')
"""
from __future__ import annotations

from .._checks import check_int
from .advisor import MAX_BATCH, versus
from .advisor_explain import MODEL_ERROR
from .hardware import Cluster
from .message import Message
from .model import Transformer

MAX_POINTS = 32  # points of one sweep: each is a whole search


def _points(name: str, values) -> list[int]:
    """A sweep's values: 1 to MAX_POINTS positive whole numbers, refused in one line naming the argument."""
    values = [values] if isinstance(values, int) else values
    try:
        values = list(values)
    except TypeError:
        raise ValueError(f"{name}={values!r}: must be a list of positive whole numbers") from None
    if not 1 <= len(values) <= MAX_POINTS:
        raise ValueError(f"{name}={values!r}: must list 1 to {MAX_POINTS} values")
    return [check_int(name, v, 1) for v in values]


def _why(knob: str, best: dict, rival: dict | None) -> Message:
    """Why the side without the winner's choice loses: it does not fit (the least any of its plans needs, and the
    largest part of that), or it is slower (by how much, and where the step's time differs most)."""
    if best is None:
        return Message("nothing fits")
    size = best["config"][knob]
    other = Message("{knob} 1", knob=knob) if size > 1 else Message("{knob} > 1", knob=knob)
    if rival is None:
        return Message("{other}: no such plan", other=other)
    if not rival["fits"]:
        parts = {k: v for k, v in rival["bytes_per_gpu"].items() if k != "total"}
        part = max(parts, key=parts.get)
        return Message("{other} does not fit: at least {need:.0f} GB per GPU, {amount:.0f} GB of it {part}",
                       other=other, need=rival["bytes_per_gpu"]["total"] / 1e9, amount=parts[part] / 1e9, part=part)
    ratio = rival["step_seconds"] / best["step_seconds"]
    if ratio <= 1 + MODEL_ERROR:
        return Message("{other}: {ratio:.2f}×, a tie within the model's error (±{error:.0%})", other=other,
                       ratio=ratio, error=MODEL_ERROR)
    part = max(best["breakdown"], key=lambda name: rival["breakdown"][name] - best["breakdown"][name])
    return Message("{other} is {ratio:.2f}× slower, mostly {part}", other=other, ratio=ratio, part=part)


def _row(name: str, value: int, knob: str, batch: int, split: dict) -> dict:
    """One point of a sweep as a plain dict: the best plan, the best of the other side ("rival") and why it loses."""
    best = split["best"]
    rival = None if best is None else split["without" if best["config"][knob] > 1 else "with"]
    row = {name: value, "knob": knob, "global_batch": batch, "fits": best is not None,
           "family": best and best["family"], knob: best and best["config"][knob],
           "step_seconds": best and best["step_seconds"], "gb_per_gpu": best and best["bytes_per_gpu"]["total"] / 1e9,
           "mfu": best and best["mfu"], "config": best and best["config"],
           f"rival_{knob}": rival and rival["config"][knob], "rival_fits": bool(rival and rival["fits"]),
           "rival_seconds": rival["step_seconds"] if rival and rival["fits"] else None,
           "rival_gb_per_gpu": rival and rival["bytes_per_gpu"]["total"] / 1e9,
           "ratio": rival["step_seconds"] / best["step_seconds"] if rival and rival["fits"] else None}
    return row | {"why": _why(knob, best, rival)}


def when_cp(model: Transformer, c: Cluster, global_tokens: int | None = None, seqs=(8192, 32768, 131072),
            global_batch: int | None = None, precision: str = "mixed", cp_comm: str = "ring",
            loss: str = "fused") -> list[dict]:
    """For each sequence length in `seqs`: the best plan (does it use CP, and how much) against the best with cp = 1
    (or, where the best has none, the best with CP), and why that one loses. Each step holds `global_tokens` tokens
    (the batch shrinks as sequences grow: `global_tokens` / seq sequences), or `global_batch` sequences; `loss` as
    `advisor.search`'s (torchtitan's chunked loss splits each sequence in `hybrid.LOSS_CHUNKS`)."""
    seqs = _points("seqs", seqs)
    if (global_tokens is None) == (global_batch is None):
        raise ValueError(f"global_tokens={global_tokens}: give global_tokens or global_batch, one of them")
    rows = []
    for seq in seqs:
        if global_tokens is not None:
            check_int("global_tokens", global_tokens, seq, MAX_BATCH)
            if global_tokens % seq:
                raise ValueError(f"global_tokens={global_tokens}: must be a whole number of sequences of seq={seq}")
        batch = global_batch if global_batch is not None else global_tokens // seq
        split = versus(model.with_(seq=seq), c, batch, lambda k: k.cp > 1, precision, cp_comm=cp_comm, loss=loss)
        rows.append(_row("seq", seq, "cp", batch, split))
    return rows


def when_ep(model, c: Cluster, global_batch: int, experts=(8, 16, 32, 64), precision: str = "mixed",
            capacity: float = 0.0, loss: str = "fused") -> list[dict]:
    """For each number of experts: the best plan (does it use EP, and how much) against the best with ep = 1 (or,
    where the best has none, the best with EP), and why that one loses. `model`: a mixture of experts, whose
    `experts` the sweep changes (`top_k` and `expert_ffn` stay), or a function from a number of experts to a model;
    `loss` as `advisor.search`'s."""
    counts = _points("experts", experts)
    if not callable(model) and not getattr(model, "experts", 0):
        raise ValueError(f"model={getattr(model, 'name', model)!r}: must be a mixture of experts (experts > 0), or a "
                         "function from a number of experts to one")
    rows = []
    for e in counts:
        m = model(e) if callable(model) else model.with_(experts=e)
        if not isinstance(m, Transformer) or not m.experts:
            raise ValueError(f"model={getattr(m, 'name', m)!r}: must be a mixture of experts (experts > 0)")
        split = versus(m, c, global_batch, lambda k: k.ep > 1, precision, capacity=capacity, loss=loss)
        rows.append(_row("experts", e, "ep", global_batch, split))
    return rows
