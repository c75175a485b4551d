"""Lesson 6's plans side by side: memory per GPU and time per step, one bar per plan.

- `draw_plan_memory`: stacked bars per plan (params / grads / optimizer / activations) against the GPU.
- `draw_time_breakdown`: where each plan's step goes (compute, TP, the pipeline, DP/ZeRO, Offload …).

The plans are `advisor.search`'s or `advisor.evaluate_plan`'s dicts (numbers from `sim.hybrid_memory` and
`sim.hybrid_time`); the strategy explorer (`render.hybrid_widgets`) draws both for the plans it compares.
`memory_layout` and `time_layout` say where the bars go and where they are cut, once, for these figures and
for the same pictures drawn in the browser (`render.hybrid_scene`).
"""
from __future__ import annotations

from ..i18n import N_, _
from .style import (
    CPU_COLOR,
    EDGE_GREY,
    MATCH_COLOR,
    MEMORY_COLOR,
    MIN_FONT,
    SOFT_INK,
    TIME_COLOR,
    new_ax,
    time_unit,
)
from .zero import GB, PART_NAMES

MAX_OVER = 4  # bars taller than 4× the GPU's memory are cut at the top (and labelled) so the line stays visible
NO_FIT = MATCH_COLOR[False]  # a plan that does not fit: outlined and named in red
# the legend's words for the parts of a GPU's memory (lesson 3's, and 5b's activations) and of a step's time
MEMORY_NAMES = {**PART_NAMES, "activations": N_("activations")}
TIME_NAMES = {"compute": N_("compute"), "tp_comm": N_("tp comm"), "pp_p2p": N_("pp p2p"), "pp_bubble": N_("pp bubble"),
              "dp_comm": N_("dp comm"), "overlap": N_("overlap"), "offload": N_("offload"), "optimizer": N_("optimizer"),
              "cp_comm": N_("cp comm"), "ep_comm": N_("ep comm")}


def memory_layout(plans: dict, gpu_memory: float):
    """Where `draw_plan_memory` and `plan_memory_scene` put the bars: (has_cpu, bar width, x of each GPU bar,
    totals and host bytes in GB, the GPU's line in GB, the top of the picture)."""
    rows, n = list(plans.values()), len(plans)
    has_cpu = any(p["cpu_bytes_per_gpu"] for p in rows)
    width = 0.38 if has_cpu else 0.6  # a host bar beside each GPU bar: both narrower
    xs = [i - width / 2 if has_cpu else i for i in range(n)]
    totals = [p["bytes_per_gpu"]["total"] / GB for p in rows]
    cpus = [p["cpu_bytes_per_gpu"] / GB for p in rows]
    line = gpu_memory / GB
    return has_cpu, width, xs, totals, cpus, line, min(max(totals + cpus + [line]), MAX_OVER * line) * 1.2


def time_layout(plans: dict):
    """The time bars' common scale: (the nonzero parts of the breakdowns in order, the right edge in seconds —
    MAX_OVER× the fastest at most —, and `time_unit`'s scale and unit for it)."""
    rows = list(plans.values())
    parts = [k for k in dict.fromkeys(k for p in rows for k in p["breakdown"])
             if any(p["breakdown"].get(k, 0) > 0 for p in rows)]
    longest = max([p["step_seconds"] for p in rows] + [sum(p["breakdown"].values()) for p in rows]) or 1.0
    end = min(longest, MAX_OVER * (min(p["step_seconds"] for p in rows) or longest))
    return (parts, end) + time_unit(end)


def time_name(part: str) -> str:
    """A part of a step's time as a legend says it, in the language in force ("tp_comm" → "tp comm", "TP 通信")."""
    return _(TIME_NAMES[part]) if part in TIME_NAMES else part.replace("_", " ")


def plan_label(name: str, plan: dict, *lines: str) -> str:
    """A plan's name on a figure's axis, then `lines`, then "(does not fit)" if the simulator says so."""
    return "\n".join([name, *lines] + ([] if plan["fits"] else [f"({_('does not fit')})"]))


def draw_plan_memory(plans: dict, gpu_memory: float, ax=None, title=None):
    """One stacked bar per plan (label → a plan dict of `advisor.search` or `advisor.evaluate_plan`), in GB
    per GPU, against `gpu_memory` (dashed: what tensors can use, `GPU.usable_memory`); a plan the simulator
    says does not fit is outlined in red and says so under its name. Host bytes (Offload) get a hatched bar beside it. Bars
    past MAX_OVER× the GPU are cut at the top, so the line stays readable, and their total is written there.
    Returns the Figure."""
    rows, n = list(plans.values()), len(plans)
    ax = new_ax(ax, (1.5 * n + 3.2, 4.2))
    has_cpu, width, xs, totals, cpus, line, top = memory_layout(plans, gpu_memory)
    bottom = [0.0] * n
    for part, color in MEMORY_COLOR.items():
        heights = [p["bytes_per_gpu"][part] / GB for p in rows]
        ax.bar(xs, heights, width, bottom=bottom, color=color, label=_(MEMORY_NAMES[part]), gid=part)
        bottom = [b + h for b, h in zip(bottom, heights)]
    label = dict(ha="center", va="bottom", fontsize=MIN_FONT, fontweight="bold",  # readable over a cut bar too
                 bbox=dict(facecolor="white", edgecolor="none", pad=1, alpha=0.85))
    for x, total, p in zip(xs, totals, rows):
        y = min(total, top / 1.2) + 0.01 * top
        ax.text(x, y, ("↑ " if total > top else "") + f"{total:.1f}", **label)  # GB: the axis says so
        if not p["fits"]:
            ax.bar(x, total, width, fill=False, edgecolor=NO_FIT, linewidth=2, gid="no-fit")
    if has_cpu:
        ax.bar([i + width / 2 for i in range(n)], cpus, width, color="white", edgecolor=CPU_COLOR, hatch="//",
               label=_("host (Offload)"), gid="cpu")
        for i, v in enumerate(cpus):
            if v:
                ax.text(i + width / 2, min(v, top / 1.2) + 0.01 * top, f"{v:.1f}", ha="center", va="bottom",
                        fontsize=MIN_FONT, color=SOFT_INK)
    ax.axhline(line, color="black", linestyle="--", linewidth=1.2, gid="gpu_memory",
               label=_("usable GPU memory ({gb} GB)").format(gb=f"{line:.3g}"))
    # slanted and anchored at their right end: side by side, long plan names (and 最佳：…) collided
    # a plan that does not fit says so under its name, in red (above its bar, the words ran into the legend)
    ax.set_xticks(range(n), [plan_label(k, p) for k, p in plans.items()], fontsize=MIN_FONT, rotation=30, ha="right",
                  rotation_mode="anchor")
    for tick, p in zip(ax.get_xticklabels(), rows):
        tick.set_color("black" if p["fits"] else NO_FIT)
    ax.tick_params(axis="y", labelsize=MIN_FONT)
    ax.set_ylabel(_("GB per GPU"), fontsize=MIN_FONT)
    ax.set_ylim(0, top)
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=MIN_FONT, frameon=False)
    if title:
        ax.set_title(title, fontsize=MIN_FONT + 1)
    return ax.figure


def draw_time_breakdown(plans: dict, ax=None, title=None):
    """Where each plan's step goes: a horizontal stacked bar per plan (the first on top) of `breakdown`'s
    nonzero parts, its step time and MFU under its name; a plan that does not fit is named in red. Bars over
    MAX_OVER× the fastest run off the right edge (an arrow there says so). Returns the Figure."""
    rows, n = list(plans.values()), len(plans)
    ax = new_ax(ax, (9, 1.3 + 0.7 * n))  # 0.7 inch a row: a name, its time, maybe "(does not fit)"
    parts, end, scale, unit = time_layout(plans)
    left = [0.0] * n
    for part in parts:
        widths = [p["breakdown"].get(part, 0.0) * scale for p in rows]
        ax.barh(range(n), widths, 0.6, left=left, color=TIME_COLOR.get(part, EDGE_GREY), gid=part,
                hatch="//" if part == "pp_bubble" else None, edgecolor="white", linewidth=0.5,
                label=time_name(part))
        left = [a + w for a, w in zip(left, widths)]
    for i, p in enumerate(rows):
        if max(left[i], p["step_seconds"] * scale) > end * scale * 1.0001:  # runs off the right edge: say so there
            ax.text(end * scale, i, "→", ha="right", va="center", fontsize=MIN_FONT, color="white", gid="cut")
    # each plan's step time and MFU under its name (written after its bar, they ran into the legend or the axis)
    ax.set_yticks(range(n), [plan_label(k, p, f"{p['step_seconds'] * scale:.3g} {unit}   MFU {p['mfu']:.0%}")
                             for k, p in plans.items()], fontsize=MIN_FONT)
    for tick, p in zip(ax.get_yticklabels(), rows):
        tick.set_color("black" if p["fits"] else NO_FIT)
    ax.set_ylim(n - 0.5, -0.5)
    ax.set_xlim(0, end * scale)
    ax.tick_params(axis="x", labelsize=MIN_FONT)
    ax.set_xlabel(_("time per step ({unit})").format(unit=unit), fontsize=MIN_FONT)
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=MIN_FONT, frameon=False)
    if title:
        ax.set_title(title, fontsize=MIN_FONT + 1)
    return ax.figure
