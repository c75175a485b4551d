"""The advisor's words: what kind of plan each is, why the best one wins, where it is only a tie within the
model's error, what would decide it, and why the rest were rejected.

Teaches that a prediction is worth only its validated error. `MODEL_ERROR` is the model's median error on
the published runs it is checked against (`simlab.sim.published`, a test holds the constant to the table):
where a rival family's best plan is within it of the winner, the advisor says "tie within the model's error"
and names the measurement that would decide — the part of the step where the two plans differ most.

Every sentence here is a `simlab.sim.message.Message`: English as a string (the CLI's JSON, the tests), and said in
the reader's language by the layer that prints it (`render.hybrid_advisor.advisor_text` through `simlab.i18n._`).
"""
from __future__ import annotations

import numpy as np

from .hybrid_memory import Knobs
from .message import Message

MODEL_ERROR = 0.12  # the median |error| of the model on the published runs (tests/sim/test_published.py)
MODERN = Message("modern practice differs from the primer here: on fast networks Llama 3 and TorchTitan shard the DP "
                 "dimension with FSDP (ZeRO-3) under TP and PP, hiding its per-micro-batch gathers behind compute; "
                 "compare the TP+PP+DP+ZeRO-3 line above")
# what to measure when two plans differ most in this part of the step (Messages: a renderer translates them)
DECIDES = {"compute": Message("measure the GEMMs at these shapes (micro-batch and TP size) on your GPU"),
           "tp_comm": Message("measure the TP all-reduce on your NVLink"),
           "pp_p2p": Message("measure the point-to-point bandwidth between pipeline stages"),
           "pp_bubble": Message("measure the pipeline's bubble (stage balance and micro-batches)"),
           "dp_comm": Message("measure the DP all-gather and reduce-scatter on your network"),
           "overlap": Message("measure how much compute slows while collectives run beside it"),
           "offload": Message("measure PCIe and CPU Adam on your host"),
           "optimizer": Message("time the optimizer step"),
           "cp_comm": Message("measure context parallelism's K,V exchange between the GPUs of a CP group"),
           "ep_comm": Message("measure the experts' all-to-all (tokens out to their experts and back)")}
ALTERNATIVES = ("DDP", "DP+ZeRO-1", "DP+ZeRO-3", "DP+ZeRO-3 (HSDP)", "TP", "PP", "TP+PP", "TP+DP+ZeRO-3",
                "TP+PP+DP", "TP+PP+DP+ZeRO-1", "TP+PP+DP+ZeRO-3", "single GPU + Offload")
# the families named in words, not in the TP+PP+DP letters every language keeps: said through the catalog
WORDED = {"single GPU": Message("single GPU"), "single GPU + Offload": Message("single GPU + Offload"),
          "pure DP": Message("pure DP")}


def worded(name: str) -> str:
    """A family's name as a renderer shows it: a Message where it is words ("single GPU"), else as it is."""
    return WORDED.get(name, name)


def family(config: dict) -> str:
    """A plan's kind in the primer's words: 'DDP', 'TP+PP+DP+ZeRO-1', 'DP+ZeRO-3 (HSDP)', 'single GPU + Offload' …;
    lesson 7's in Megatron's order of the grid: 'TP+CP+PP+DP', 'DP+EP+ZeRO-1' (the EP group is carved out of DP)."""
    parts = [name for name, on in (("TP", config["tp"] > 1), ("CP", config.get("cp", 1) > 1), ("PP", config["pp"] > 1),
                                   ("DP", config["dp"] > 1), ("EP", config.get("ep", 1) > 1)) if on]
    if config["zero"]:  # ZeRO shards over the DP group with its CP ranks (`hybrid_memory.zero_groups`)
        parts.append(f"ZeRO-{config['zero']}" if config["dp"] * config.get("cp", 1) > 1 else "ZeRO")
    if config["offload"]:
        parts.append("Offload")
    if parts == ["DP"]:
        return "DDP"
    name = "+".join(parts) if parts and parts != ["ZeRO", "Offload"] else (
        "single GPU + Offload" if config["offload"] else "single GPU")
    return name + (" (HSDP)" if 0 < config.get("shard", 0) < config["dp"] else "")


def _lesson7(k: Knobs) -> tuple[np.ndarray, np.ndarray]:
    """(cp, ep) of every plan (a Knobs may carry either as one number for all)."""
    return np.broadcast_to(k.cp, np.shape(k.tp)), np.broadcast_to(k.ep, np.shape(k.tp))


_CODES: list = []  # the last plans' family codes, with their `tp` array: the advisor asks three times per search


def family_codes(k: Knobs) -> tuple[np.ndarray, list[str]]:
    """(an integer per plan, the family name of each integer): kinds compared as numbers, named once each. The
    last answer is kept for the same (read-only) arrays."""
    if _CODES and _CODES[0] is k.tp and not k.tp.flags.writeable:
        return _CODES[1]
    hsdp = (k.shard < k.dp) & (k.zero > 0)
    cp, ep = _lesson7(k)
    code = (k.tp > 1) + 2 * (k.pp > 1) + 4 * (k.dp > 1) + 8 * k.zero + 32 * k.offload + 64 * hsdp + 128 * (cp > 1) \
        + 256 * (ep > 1)
    _, first, inverse = np.unique(code, return_index=True, return_inverse=True)
    names = [family({"tp": int(k.tp[i]), "pp": int(k.pp[i]), "dp": int(k.dp[i]), "zero": int(k.zero[i]),
                     "offload": bool(k.offload[i]), "shard": int(k.shard[i]) if hsdp[i] else 0, "cp": int(cp[i]),
                     "ep": int(ep[i])}) for i in first]
    _CODES[:] = [k.tp, (inverse.reshape(-1), names)]
    return _CODES[1]


def families(k: Knobs) -> np.ndarray:
    """`family` of every plan (strings; `family_codes` is the fast form)."""
    codes, names = family_codes(k)
    return np.array(names)[codes]


def rejections(mem: dict, fits, k: Knobs, c) -> dict:
    """{reason: count}. A family none of whose plans fit gets the least memory any of them would need
    ("pure DP: 142 GB > 73.5 GB usable"); where some fit, the rest are counted as settings that are too big."""
    gb = lambda b: f"{b / 1e9:.3g} GB"  # noqa: E731 — a local formatter
    usable = gb(c.gpu.usable_memory)
    codes, names = family_codes(k)
    # per family code, counted once over all plans (no pass over every plan per family): plans, those that fit, those
    # over the GPU's memory, and the least GPU and host memory any of them needs
    n = len(names)
    plans, fit = np.bincount(codes, minlength=n), np.bincount(codes, weights=fits, minlength=n)
    over = np.bincount(codes, weights=mem["total"] > c.gpu.usable_memory, minlength=n)
    order = np.argsort(codes, kind="stable")
    starts = np.searchsorted(codes[order], np.arange(n))
    least = {key: np.minimum.reduceat(np.broadcast_to(mem[key], codes.shape)[order], starts) if n else np.zeros(0)
             for key in ("total", "cpu")}
    out, names = {}, np.array(names)
    for name in dict.fromkeys(names[plans > fit]):  # one family name may stand for several codes
        mine = np.flatnonzero(names == name)
        if fit[mine].sum():
            reason = Message("{name}: some micro-batch/recompute settings need more than {usable} usable",
                             name=worded(name), usable=usable)
        elif over[mine].sum() == plans[mine].sum():
            reason = Message("{name}: {need} > {usable} usable", name=worded("pure DP" if name == "DDP" else name),
                             need=gb(least["total"][mine].min()), usable=usable)
        else:
            reason = Message("{name}: host {need} > {host} per node", name=worded(name),
                             need=gb(least["cpu"][mine].min() * c.gpus_per_node), host=gb(c.host_memory))
        out[reason] = int(round((plans[mine] - fit[mine]).sum()))
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def representative(members, mem: dict, time: dict, fits) -> int:
    """The plan that stands for a family: its fastest that fits, else the one needing the least memory."""
    fitting = members[fits[members]]
    if len(fitting):
        return fitting[np.argmin(time["step_seconds"][fitting])]
    return members[np.argmin(mem["total"][members])]


def _decider(time: dict, i: int, j: int) -> str:
    """The part of the step where plans i and j differ most, as a measurement to make."""
    part = max(time["breakdown"], key=lambda name: abs(time["breakdown"][name][i] - time["breakdown"][name][j]))
    return DECIDES.get(part) or Message("measure {part}", part=part)


def explain(best: dict | None, rejected: dict, mem: dict, time: dict, fits, k: Knobs, c, best_index) -> dict:
    """{"lines": why the best plan wins and why each obvious alternative loses, "ties": the families within
    MODEL_ERROR of the best (with what would decide), "notes": where the plan and today's practice part}."""
    if best is None:
        return {"lines": [Message("nothing fits: {why}", why=next(iter(rejected), "") or Message("no plan"))],
                "ties": [], "notes": []}
    total, parts = best["step_seconds"], best["breakdown"]
    lines = [Message("best: {family} — {seconds:.3g} s per step, MFU {mfu:.0%}; time goes to {parts}",
                     family=worded(family(best["config"])), seconds=total, mfu=best["mfu"],
                     parts=", ".join(f"{name} {v / total:.0%}" for name, v in
                                     sorted(parts.items(), key=lambda kv: -kv[1]) if v / total >= 0.01))]
    codes, names = family_codes(k)
    ties, order = [], np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(len(names) + 1))
    members_of = {name: order[bounds[i]:bounds[i + 1]] for i, name in enumerate(names)}
    for alt in dict.fromkeys(ALTERNATIVES + tuple(names)):
        members = members_of.get(alt, np.zeros(0, dtype=int))
        if not len(members) or alt == family(best["config"]):
            continue
        i = representative(members, mem, time, fits)
        ratio = time["step_seconds"][i] / total
        if fits[i] and ratio <= 1 + MODEL_ERROR:
            ties.append({"family": alt, "ratio": float(ratio), "decide": _decider(time, best_index, i)})
        if alt not in ALTERNATIVES:
            continue
        if not fits[i]:
            lines.append(Message("{family}: does not fit (needs {gb:.0f} GB per GPU)", family=worded(alt),
                                 gb=mem["total"][i] / 1e9))
            continue
        worst = max(time["breakdown"], key=lambda name: time["breakdown"][name][i] - parts[name])
        lines.append(Message("{family}: {ratio:.2f}× slower, mostly {part}", family=worded(alt), ratio=ratio,
                             part=worst) if ratio > 1 + MODEL_ERROR else
                     Message("{family}: {ratio:.2f}×, a tie within the model's error (±{error:.0%})",
                             family=worded(alt), ratio=ratio, error=MODEL_ERROR))
    return {"lines": lines, "ties": ties, "notes": notes(best["config"], c, ties)}


def tie_line(ties: list) -> str:
    """One sentence: which families tie with the best, and what would decide between them."""
    if not ties:
        return ""
    names = Message.listing(Message("{family} ({ratio:.2f}×)", family=worded(t["family"]), ratio=t["ratio"])
                            for t in ties[:4])
    return Message("tie within the model's error (±{error:.0%}): {names}{more}; to decide, {decide}",
                   error=MODEL_ERROR, names=names, more=" …" if len(ties) > 4 else "", decide=ties[0]["decide"])


def notes(config: dict, c, ties: list) -> list[str]:
    """Where the derived plan and today's practice (or the primer) part ways — only where it applies."""
    if c.gpus <= c.gpus_per_node:
        return []
    if config["zero"] == 3 and config["tp"] > 1:
        return [Message("this is FSDP (ZeRO-3) + TP, as TorchTitan and Llama 3 train today; the primer's guide says "
                        "ZeRO, or PP+TP+DP, for many nodes on a fast network")]
    fsdp_ties = any(t["family"].startswith("TP+PP+DP+ZeRO-3") for t in ties)
    if config["pp"] > 1 and config["dp"] > 1 and config["zero"] <= 1 and fsdp_ties:
        return [MODERN]
    return []



def _lesson7_line(feature: str, on, seq: int, best: dict, mem: dict, time: dict, fits, usable: float):
    """Why `feature` ("CP" or "EP") wins or loses: the best plan against the best of the other side (without it if
    the best uses it, else with it) — how much slower that is and where its time goes, or, where none of that side
    fits, how much memory the least hungry of them needs and which part of it is most."""
    knob = feature.lower()
    uses = best["config"][knob] > 1
    members = np.flatnonzero(~on if uses else on)
    if not len(members):
        return None
    i = representative(members, mem, time, fits)
    size = best["config"][knob]
    if not fits[i]:
        if not uses:
            return Message("{family}: does not fit (needs {gb:.0f} GB per GPU)", family=feature,
                           gb=mem["total"][i] / 1e9)
        part = max(("params", "grads", "optimizer", "activations"), key=lambda key: mem[key][i])
        return Message("{feature} wins ({knob} {size}): without it nothing fits — the least any plan needs is "
                       "{need:.0f} GB per GPU, {amount:.0f} GB of it {part} (seq {seq}), > {usable:.0f} GB usable",
                       feature=feature, knob=knob, size=size, need=mem["total"][i] / 1e9,
                       amount=mem[part][i] / 1e9, part=part, seq=seq, usable=usable / 1e9)
    ratio = time["step_seconds"][i] / best["step_seconds"]
    worse = max(time["breakdown"], key=lambda name: time["breakdown"][name][i] - best["breakdown"][name])
    if ratio <= 1 + MODEL_ERROR:
        return Message("{feature}: with it and without, {ratio:.2f}×, a tie within the model's error (±{error:.0%})",
                       feature=feature, ratio=ratio, error=MODEL_ERROR)
    if uses:
        return Message("{feature} wins ({knob} {size}): without it the best plan is {ratio:.2f}× slower, mostly "
                       "{part}", feature=feature, knob=knob, size=size, ratio=ratio, part=worse)
    return Message("{feature} loses: its best plan is {ratio:.2f}× slower, mostly {part}", feature=feature,
                   ratio=ratio, part=worse)


def lesson7_lines(best: dict | None, mem: dict, time: dict, fits, k: Knobs, model, c) -> list:
    """Why context parallelism and expert parallelism win or lose, where the search tried them (`_lesson7_line`)."""
    if best is None:
        return []
    cp, ep = _lesson7(k)
    lines = [_lesson7_line(feature, on, model.seq, best, mem, time, fits, c.gpu.usable_memory)
             for feature, on in (("CP", cp > 1), ("EP", ep > 1)) if on.any()]
    return [line for line in lines if line is not None]
