"""Lesson 6's plans side by side: memory per GPU and time per step, one bar per plan.

- `draw_plan_memory`: stacked bars per plan (params / grads / optimizer / activations) against the GPU.
- `draw_time_breakdown`: where each plan's step goes (compute, TP, the pipeline, DP/ZeRO, Offload …).

The plans are `advisor.search`'s or `advisor.evaluate_plan`'s dicts (numbers from `sim.hybrid_memory` and
`sim.hybrid_time`); the strategy explorer (`render.hybrid_widgets`) draws both for the plans it compares.
`memory_layout` and `time_layout` say where the bars go and where they are cut, once, for these figures and
for the same pictures drawn in the browser (`render.hybrid_scene`).
"""
from __future__ import annotations

from ..i18n import _
from .style import CPU_COLOR, EDGE_GREY, MATCH_COLOR, MEMORY_COLOR, SOFT_INK, TIME_COLOR, new_ax, time_unit
from .zero import GB

MAX_OVER = 4  # bars taller than 4× the GPU's memory are cut at the top (and labelled) so the line stays visible
NO_FIT = MATCH_COLOR[False]  # a plan that does not fit: outlined and named in red


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


def draw_plan_memory(plans: dict, gpu_memory: float, ax=None, title=None):
    """One stacked bar per plan (label → a plan dict of `advisor.search` or `advisor.evaluate_plan`), in GB
    per GPU, against `gpu_memory` (dashed: what tensors can use, `GPU.usable_memory`); a plan the simulator
    says does not fit is outlined in red and says so. Host bytes (Offload) get a hatched bar beside it. Bars
    past MAX_OVER× the GPU are cut at the top, so the line stays readable, and their total is written there.
    Returns the Figure."""
    rows, n = list(plans.values()), len(plans)
    ax = new_ax(ax, (1.5 * n + 3.2, 4.2))
    has_cpu, width, xs, totals, cpus, line, top = memory_layout(plans, gpu_memory)
    bottom = [0.0] * n
    for part, color in MEMORY_COLOR.items():
        heights = [p["bytes_per_gpu"][part] / GB for p in rows]
        ax.bar(xs, heights, width, bottom=bottom, color=color, label=part, gid=part)
        bottom = [b + h for b, h in zip(bottom, heights)]
    label = dict(ha="center", va="bottom", fontsize=8, fontweight="bold",  # readable over a cut bar too
                 bbox=dict(facecolor="white", edgecolor="none", pad=1, alpha=0.85))
    for x, total, p in zip(xs, totals, rows):
        y = min(total, top / 1.2) + 0.01 * top
        ax.text(x, y, ("↑ " if total > top else "") + f"{total:.1f} GB", **label)
        if not p["fits"]:
            ax.bar(x, total, width, fill=False, edgecolor=NO_FIT, linewidth=2, gid="no-fit")
            ax.text(x, y + 0.06 * top, _("does not fit"), color=NO_FIT, **label)
    if has_cpu:
        ax.bar([i + width / 2 for i in range(n)], cpus, width, color="white", edgecolor=CPU_COLOR, hatch="//",
               label=_("host (Offload)"), gid="cpu")
        for i, v in enumerate(cpus):
            if v:
                ax.text(i + width / 2, min(v, top / 1.2) + 0.01 * top, f"{v:.1f}", ha="center", va="bottom",
                        fontsize=7, color=SOFT_INK)
    ax.axhline(line, color="black", linestyle="--", linewidth=1.2, gid="gpu_memory",
               label=_("usable GPU memory ({gb} GB)").format(gb=f"{line:.3g}"))
    ax.set_xticks(range(n), list(plans), fontsize=8)
    ax.set_ylabel(_("GB per GPU"))
    ax.set_ylim(0, top)
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    if title:
        ax.set_title(title, fontsize=10)
    return ax.figure


def draw_time_breakdown(plans: dict, ax=None, title=None):
    """Where each plan's step goes: a horizontal stacked bar per plan (the first on top) of `breakdown`'s
    nonzero parts, its step time and MFU at its end; a plan that does not fit is named in red. Bars over
    MAX_OVER× the fastest run off the right edge (their time written there, after an arrow). Returns the Figure."""
    rows, n = list(plans.values()), len(plans)
    ax = new_ax(ax, (9, 1.3 + 0.55 * n))
    parts, end, scale, unit = time_layout(plans)
    left = [0.0] * n
    for part in parts:
        widths = [p["breakdown"].get(part, 0.0) * scale for p in rows]
        ax.barh(range(n), widths, 0.6, left=left, color=TIME_COLOR.get(part, EDGE_GREY), gid=part,
                hatch="//" if part == "pp_bubble" else None, edgecolor="white", linewidth=0.5,
                label=part.replace("_", " "))
        left = [a + w for a, w in zip(left, widths)]
    for i, p in enumerate(rows):
        tip = max(left[i], p["step_seconds"] * scale)
        cut = tip > end * scale * 1.0001  # past the right edge
        ax.text(min(tip, end * scale) + 0.01 * end * scale, i, ("→ " if cut else "")
                + f"{p['step_seconds'] * scale:.3g} {unit}   MFU {p['mfu']:.0%}", va="center", fontsize=8, gid="total",
                bbox=dict(facecolor="white", edgecolor="none", pad=1, alpha=0.85) if cut else None)
    ax.set_yticks(range(n), [k if p["fits"] else f"{k}\n({_('does not fit')})" for k, p in plans.items()], fontsize=8)
    for tick, p in zip(ax.get_yticklabels(), rows):
        tick.set_color("black" if p["fits"] else NO_FIT)
    ax.set_ylim(n - 0.5, -0.5)
    ax.set_xlim(0, end * scale * 1.3)  # room for the text at the longest bar's end
    ax.set_xlabel(_("time per step ({unit})").format(unit=unit))
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    if title:
        ax.set_title(title, fontsize=10)
    return ax.figure
