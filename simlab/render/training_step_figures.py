"""Lesson 5b's figures: where one step's memory goes (by kind of state and by activation term, against what the
GPU can give), one layer's activations under each kernel and recomputation, what recomputation saves and costs,
micro-batching, the precision recipes, and the roofline. Numbers are the engine's (`sim.training_step*`); the
explorer (`render.training_step_widgets`) draws the same memory bar in the browser from `memory_segments`.
"""
from __future__ import annotations

from ..i18n import N_, _
from ..sim.training_step import microbatching, one_step
from ..sim.training_step_memory import RECIPES, STATE_PARTS, activation_terms, state_recipe
from .style import (
    INK,
    KIND_COLOR,
    MACHINE_COLOR,
    MATCH_COLOR,
    RESERVE_COLOR,
    SOFT_INK,
    STATE_COLOR,
    STEP_EXTRA_COLOR,
    STEP_PHASE_COLOR,
    TERM_COLOR,
    TERM_GROUP,
    TERM_GROUP_COLOR,
    new_ax,
)
from .training_step import LABEL, MODES

GB, MB = 1e9, 1e6
GROUP_LABEL = {"norm inputs": N_("norm inputs"), "GEMM inputs": N_("GEMM inputs"), "Q, K, V": N_("Q, K, V"),
               "s² scores": N_("s² scores (softmax, its dropout)"), "flash log-sum-exp": N_("flash log-sum-exp"),
               "GeLU in and out": N_("GeLU in and out"), "dropout masks": N_("dropout masks")}
RESERVE = ("fragmentation", "nccl", "cuda_context")  # at the right end of the GPU's bar
PHASES = ("forward", "backward", "recompute", "output_layer", "optimizer")
NO_FIT = MATCH_COLOR[False]
THIS_MACHINE = N_("this machine")  # the roofline's name for the machine the lesson runs on, said through _()


def memory_segments(step: dict) -> list[tuple]:
    """(key, label, bytes, colour) of one step's memory (`one_step`) in the order a bar stacks them: the model
    states, each stored activation term over all layers (its group's colour and name), then the activations around
    the layers. Nothing is left out: they add up to step["memory"]["total"]."""
    mem = step["memory"]
    out = [(part, _(LABEL[part]), mem[part], STATE_COLOR[part]) for part in STATE_PARTS]
    out += [(term, _(GROUP_LABEL[TERM_GROUP[term]]), nbytes, TERM_COLOR[term])
            for term, nbytes in step["activation_terms"].items()]
    out += [(part, _(LABEL[part]), mem[part], STEP_EXTRA_COLOR[part]) for part in ("working", "embedding", "logits")]
    return [s for s in out if s[2] > 0]


def capacity_segments(step: dict) -> list[tuple]:
    """(key, label, bytes, colour) of the GPU's memory: what tensors can use, then what they cannot."""
    mem = step["memory"]
    return [("usable", _("usable"), mem["usable"], RESERVE_COLOR["free"])] + [
        (part, _(LABEL[part]), mem[part], RESERVE_COLOR[part]) for part in RESERVE if mem[part] > 0]


def legend_entries(segments) -> list[tuple]:
    """(label, colour) once per label, in stacking order."""
    return list(dict.fromkeys((label, colour) for _key, label, _b, colour in segments))


def draw_memory_bar(step: dict, ax=None):
    """One step's memory, one bar stacked by kind and term, above the GPU's memory cut into what tensors can use
    and what they cannot; a dashed line at the usable edge; a step that does not fit is outlined in red."""
    from matplotlib.patches import Patch
    ax = new_ax(ax, (11, 4.0))  # the bars, and the legend under them
    mem = step["memory"]
    for y, segments in ((1, memory_segments(step)), (0, capacity_segments(step))):
        left = 0.0
        for _key, _label, nbytes, colour in segments:
            ax.barh(y, nbytes / GB, 0.6, left=left, color=colour, edgecolor="white", linewidth=0.6)
            left += nbytes / GB
    if not mem["fits"]:
        ax.barh(1, mem["total"] / GB, 0.6, fill=False, edgecolor=NO_FIT, linewidth=2, gid="no-fit")
    ax.axvline(mem["usable"] / GB, color=INK, linestyle="--", linewidth=1.2, gid="usable")
    verdict = (_("fits: {free:.1f} GB free") if mem["fits"] else _("does not fit: {free:.1f} GB over")).format(
        free=abs(mem["free"]) / GB)
    ax.text(0, 1.38, f"{mem['total'] / GB:.1f} GB — {verdict}", ha="left", va="bottom", fontsize=10,
            color=INK if mem["fits"] else NO_FIT)
    c = step["config"]
    ax.set_yticks([0, 1], [_("the GPU ({gpu})").format(gpu=c["gpu"]), _("one step")])
    ax.set_xlabel("GB")
    ax.set_xlim(0, max(mem["total"], mem["capacity"]) / GB * 1.05)
    ax.set_ylim(-0.5, 1.8)
    ax.spines[["top", "right"]].set_visible(False)
    handles = [Patch(color=colour, label=label) for label, colour in
               legend_entries(memory_segments(step) + capacity_segments(step))]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.35), ncol=3, fontsize=10,
              frameon=False)  # under the bars: one column beside them stood taller than the figure at 10 pt
    ax.set_title(_("{model}, b = {b}, {attention} attention, recompute {recompute}, {precision}").format(
        model=c["model"], b=c["microbatch"], attention=c["attention"], recompute=c["recompute"],
        precision=c["precision"]), fontsize=10, loc="left")
    return ax.figure


def draw_activation_modes(model, microbatch: int = 1, ax=None):
    """One layer's stored activations under each attention kernel and recomputation (`MODES`), one bar each,
    stacked by term, in MB."""
    from matplotlib.patches import Patch
    ax = new_ax(ax, (9, 4.2))
    seen = {}
    for x, (attention, recompute) in enumerate(MODES):
        bottom = 0.0
        terms = activation_terms(model, microbatch, attention=attention, recompute=recompute)
        for term, nbytes in terms.items():
            if nbytes:
                ax.bar(x, nbytes / MB, 0.6, bottom=bottom, color=TERM_COLOR[term], edgecolor="white", linewidth=0.5)
                bottom += nbytes / MB
                seen[TERM_GROUP[term]] = TERM_COLOR[term]
        ax.text(x, bottom, f"{bottom:,.0f} MB", ha="center", va="bottom", fontsize=10, color=INK)
    ax.set_xticks(range(len(MODES)), [_("{attention} attention,\nrecompute {recompute}").format(attention=a, recompute=r)
                                      for a, r in MODES], fontsize=10)  # mode_name on two lines
    ax.set_ylabel(_("MB per layer"))
    ax.spines[["top", "right"]].set_visible(False)
    handles = [Patch(color=TERM_GROUP_COLOR[g], label=_(GROUP_LABEL[g])) for g in TERM_GROUP_COLOR if g in seen]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=10, frameon=False)
    ax.set_title(_("{model}: one layer's activations, b = {b}, s = {s}").format(
        model=model.name, b=microbatch, s=model.seq), fontsize=10, loc="left")
    return ax.figure


def draw_recompute(model, gpu: str, microbatch: int, microbatches: int = 1, attention: str = "eager"):
    """What recomputation saves and what it costs: per mode the step's memory (model states, activations)
    against the usable memory, and its time by phase."""
    from matplotlib.figure import Figure
    fig = Figure(figsize=(11, 3.8), layout="constrained")
    memory, time = fig.subplots(1, 2)
    modes = ("none", "selective", "full")
    steps = [one_step(model, gpu, microbatch, microbatches, attention=attention, recompute=r) for r in modes]
    for x, s in enumerate(steps):
        mem = s["memory"]
        states = sum(mem[p] for p in STATE_PARTS)
        memory.bar(x, states / GB, 0.6, color=STATE_COLOR["params"], label=_("model states") if x == 0 else None)
        memory.bar(x, mem["activations"] / GB, 0.6, bottom=states / GB, color=TERM_GROUP_COLOR["GEMM inputs"],
                   label=_("activations") if x == 0 else None)
        memory.text(x, mem["total"] / GB, f"{mem['total'] / GB:.1f} GB", ha="center", va="bottom", fontsize=10,
                    color=INK if mem["fits"] else NO_FIT)
        left = 0.0
        for phase in PHASES:
            time.barh(x, s["time"][phase], 0.6, left=left, color=STEP_PHASE_COLOR[phase],
                      label=_(LABEL[phase]) if x == 0 else None)
            left += s["time"][phase]
        time.text(left, x, f" {left:.2f} s", va="center", fontsize=10, color=INK)
    memory.axhline(steps[0]["memory"]["usable"] / GB, color=INK, linestyle="--", linewidth=1.2,
                   label=_("usable ({gpu})").format(gpu=steps[0]["config"]["gpu"]))
    memory.set_xticks(range(3), modes)
    top = max(max(s["memory"]["total"] for s in steps), steps[0]["memory"]["usable"]) / GB
    memory.set_ylim(0, top * 1.15)  # room for the tallest bar's label under the title
    memory.set_ylabel(_("GB per GPU"))
    memory.legend(fontsize=10, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=3)
    memory.set_title(_("memory saved"), fontsize=10, loc="left")
    time.set_yticks(range(3), modes)
    time.invert_yaxis()
    time.set_xlabel(_("seconds per step"))
    time.set_xlim(0, max(s["time"]["step_seconds"] for s in steps) * 1.25)
    time.legend(fontsize=10, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=3)
    time.set_title(_("time paid"), fontsize=10, loc="left")
    for ax in (memory, time):
        ax.spines[["top", "right"]].set_visible(False)
    fig.suptitle(_("{model} on one {gpu}: b = {b}, m = {m}, {attention} attention").format(
        model=steps[0]["config"]["model"], gpu=steps[0]["config"]["gpu"], b=microbatch, m=microbatches,
        attention=attention), fontsize=10, x=0.01, ha="left")
    return fig


def draw_microbatching(model, global_batch: int, dp: int, microbatch_sizes):
    """One global batch in micro-batches of each size b: the activations one GPU holds (against all its samples
    at once), and the gradient bytes a rank sends per step (once) against after every micro-batch."""
    from matplotlib.figure import Figure
    fig = Figure(figsize=(11, 3.6), layout="constrained")
    memory, sent = fig.subplots(1, 2)
    rows = [microbatching(model, global_batch, b, dp=dp) for b in microbatch_sizes]
    xs = range(len(rows))
    names = [f"b={r['microbatch']}\nm={r['microbatches']}" for r in rows]
    memory.bar(xs, [r["activation_bytes"] / GB for r in rows], 0.6, color=TERM_GROUP_COLOR["GEMM inputs"])
    memory.axhline(rows[0]["activation_bytes_whole_batch"] / GB, color=INK, linestyle="--", linewidth=1.2,
                   label=_("all {n} samples at once").format(n=rows[0]["samples_per_rank"]))
    memory.set_ylabel(_("activations per GPU (GB)"))
    memory.legend(fontsize=10, frameon=False, loc="upper left")
    memory.set_ylim(0, rows[0]["activation_bytes_whole_batch"] / GB * 1.25)
    width = 0.38
    sent.bar([x - width / 2 for x in xs], [r["bytes_per_rank_per_step"] / GB for r in rows], width,
             color=KIND_COLOR["dp"], label=_("one all-reduce per step"))
    sent.bar([x + width / 2 for x in xs], [r["bytes_if_reduced_every_microbatch"] / GB for r in rows], width,
             color=RESERVE_COLOR["cuda_context"], label=_("one after every micro-batch"))
    sent.set_ylabel(_("GB each rank sends per step"))
    sent.legend(fontsize=10, frameon=False, loc="upper right")
    for ax, title in ((memory, _("memory: grows with b, not m")), (sent, _("bytes: once per step"))):
        ax.set_xticks(list(xs), names, fontsize=10)
        ax.spines[["top", "right"]].set_visible(False)
        ax.set_title(title, fontsize=10, loc="left")
    fig.suptitle(_("{model}: B = b·m·dp = {B} on dp = {dp}").format(model=model.name, B=global_batch, dp=dp),
                 fontsize=10, x=0.01, ha="left")
    return fig


def draw_precision(ax=None):
    """Bytes per parameter of each precision recipe, stacked by what they hold."""
    ax = new_ax(ax, (8, 3.6))
    for x, precision in enumerate(RECIPES):
        recipe, bottom = state_recipe(precision), 0
        for part in STATE_PARTS:
            if recipe[part]:
                ax.bar(x, recipe[part], 0.6, bottom=bottom, color=STATE_COLOR[part], edgecolor="white",
                       label=_(LABEL[part]) if x == 0 or part == "master" and bottom == 4 else None)
                bottom += recipe[part]
        ax.text(x, bottom, f"{recipe['total']} B", ha="center", va="bottom", fontsize=10, color=INK)
    ax.set_xticks(range(len(RECIPES)), list(RECIPES))
    ax.set_ylabel(_("bytes per parameter"))
    ax.spines[["top", "right"]].set_visible(False)
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    ax.legend(unique.values(), unique.keys(), loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=10, frameon=False)
    return ax.figure


def draw_roofline(machines: dict, rows: dict, ax=None):
    """Each machine's roofline (attainable FLOP/s = min(peak, intensity × bandwidth), log-log) with its balance
    point, and the layer's GEMMs placed on it (`layer_roofline` rows per machine name)."""
    import numpy as np
    ax = new_ax(ax, (9, 4.6))
    points = [r["intensity"] for rs in rows.values() for r in rs]
    xs = np.logspace(np.log10(min(points + [1.0]) / 2), np.log10(max(points) * 2), 200)
    for name, gpu in machines.items():
        colour = MACHINE_COLOR.get(name, SOFT_INK)
        balance = gpu.peak_flops / gpu.hbm_bandwidth
        ax.plot(xs, np.minimum(gpu.peak_flops, xs * gpu.hbm_bandwidth), color=colour, linewidth=1.6,
                label=_("{name}: balance {balance:.0f} FLOP/B").format(name=_(name), balance=balance))
        ax.axvline(balance, color=colour, linestyle=":", linewidth=1)
        near = {}  # GEMMs of about the same intensity share one label: "qkv, fc1, fc2"
        for r in rows[name]:
            ax.plot(r["intensity"], r["attainable_flops"], "o", color=colour, markersize=5)
            near.setdefault(round(float(np.log10(r["intensity"])) * 3), []).append(r)
        for group in near.values():
            ax.annotate(", ".join(r["name"] for r in group), (group[0]["intensity"], group[0]["attainable_flops"]),
                        textcoords="offset points", xytext=(0, -13), ha="center", fontsize=10, color=colour)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(_("arithmetic intensity (FLOP per byte moved)"))
    ax.set_ylabel(_("attainable FLOP/s"))
    ax.legend(fontsize=10, frameon=False, loc="lower right")
    ax.spines[["top", "right"]].set_visible(False)
    return ax.figure
