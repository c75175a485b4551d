"""Lesson 6's plans side by side as scenes the browser draws (`render.chart.Chart`): the pictures of
`render.hybrid_plans` — memory per GPU, where a step goes — as data, so the strategy explorer answers a
knob with a few KB of JSON instead of a matplotlib figure.

- `plan_memory_scene(plans, gpu_memory)`: `draw_plan_memory`'s stacked bars (params, grads, optimizer,
  activations) per plan against the usable GPU memory (dashed), the total over each bar, a plan that does
  not fit outlined and named in red, the host's bytes under Offload as a hatched bar beside it; bars past
  MAX_OVER× the GPU cut at the top, their total written there after "↑".
- `time_breakdown_scene(plans)`: `draw_time_breakdown`'s horizontal bars of each plan's `breakdown`, its
  step time and MFU at the end ("→" where a bar runs past MAX_OVER× the fastest).

Both take the plans as `advisor.search` / `advisor.by_family` / `advisor.evaluate_plan` give them (label →
plan dict) and lay them out with the figures' own `memory_layout` and `time_layout`: the numbers are the
simulator's, and the scene and the figure cannot disagree on where a bar is cut.
"""
from __future__ import annotations

import re

from ..i18n import _
from ..sim.advisor import by_family, family
from ..sim.hybrid import Plan
from ..sim.hybrid_scenarios import Scenario
from ..sim.hybrid_time import pipeline_trace
from .chart import axis, line, rect, scene, text
from .hybrid_plans import GB, MEMORY_NAMES, NO_FIT, memory_layout, time_layout, time_name
from .pipeline_scene import gantt_scene
from .style import CPU_COLOR, EDGE_GREY, INK, MEMORY_COLOR, PAPER, SOFT_INK, TIME_COLOR, display_width

SMALL = 11  # px: the figures' 8-point labels at 100 px per inch
RIVALS = ("single GPU", "single GPU + Offload", "DDP", "DP+ZeRO-1", "DP+ZeRO-3", "TP+DP", "PP+DP", "TP+PP+DP",
          "TP+PP+DP+ZeRO-1", "TP+PP+DP+ZeRO-3")
SHOWN = 4  # bars: the winner and up to three rivals
GANTT_ACTIONS = 600  # a longer pipeline is drawn up to its 600th action (with a cursor): drawing stays fast


def bar_name(label: str, width: int = 10) -> str:
    """A plan's name under its bar, in lines of about `width` characters: broken after "best: " and after a
    "+" ("best: \nTP+PP+DP+\nZeRO-1"), so four names side by side do not run into each other (the figure
    tilts them instead). Removing the line breaks gives the name back."""
    out, line = [], ""
    for part in re.split(r"(?<=: )|(?<=[：+])", label):
        if line and (line.endswith((": ", "：")) or display_width(line + part) > width):
            out, line = out + [line], part
        else:
            line += part
    return "\n".join(out + [line])


def _bar_label(x: float, y: float, words: str, color: str | None = None) -> dict:
    """Bold words sitting on y, haloed so they read over a bar that is cut (matplotlib's white bbox)."""
    return text(x, y, words, anchor="middle", baseline="bottom", size=SMALL, bold=True, color=color, halo=True)


def plan_memory_scene(plans: dict, gpu_memory: float, *, title: str = "", width: int = 460) -> dict:
    """The scene of `draw_plan_memory(plans, gpu_memory, title=…)`; every bar's tip says its exact size."""
    n = len(plans)
    has_cpu, bar, xs, totals, cpus, gpu_line, top = memory_layout(plans, gpu_memory)
    marks = []
    for x, (name, p), total in zip(xs, plans.items(), totals):
        bottom = 0.0
        for part, color in MEMORY_COLOR.items():  # stacked from the floor, cut at the top of the picture
            height = p["bytes_per_gpu"][part] / GB
            marks.append(rect(x - bar / 2, x + bar / 2, min(bottom, top), min(bottom + height, top), fill=color,
                              tip=f"{name}: {part} {height:.3g} GB"))
            bottom += height
        y = min(total, top / 1.2) + 0.01 * top
        marks.append(_bar_label(x, y, ("↑ " if total > top else "") + f"{total:.1f} GB"))
        if not p["fits"]:
            marks.append(rect(x - bar / 2, x + bar / 2, 0, min(total, top), fill="none", stroke=NO_FIT, width=2,
                              tip=f"{name}: {_('does not fit')}"))
            marks.append(_bar_label(x, y + 0.06 * top, _("does not fit"), NO_FIT))
    if has_cpu:
        for i, v in enumerate(cpus):
            x = i + bar / 2
            marks.append(rect(x - bar / 2, x + bar / 2, 0, min(v, top), fill=PAPER, stroke=CPU_COLOR, hatch=CPU_COLOR,
                              tip=f"{list(plans)[i]}: {_('host (Offload)')} {v:.3g} GB"))
            if v:
                marks.append(text(x, min(v, top / 1.2) + 0.01 * top, f"{v:.1f}", anchor="middle", baseline="bottom",
                                  size=SMALL, color=SOFT_INK))
    usable = _("usable GPU memory ({gb} GB)").format(gb=f"{gpu_line:.3g}")
    marks.append(line([-0.5, n - 0.5], [gpu_line] * 2, INK, dash=True, width=1.2))
    legend = [[_(MEMORY_NAMES[part]), color] for part, color in MEMORY_COLOR.items()]
    legend += [[_("host (Offload)"), CPU_COLOR, "hatch"]] if has_cpu else []
    alt = [f"{name}: {total:.1f} GB" + ("" if p["fits"] else f" ({_('does not fit')})")
           for (name, p), total in zip(plans.items(), totals)]
    return scene(marks, width=width, height=420, title=title, x=axis(-0.5, n - 0.5, ticks=[(i, bar_name(name)) for i, name in enumerate(plans)]),
                 y=axis(0, top, _("GB per GPU")), legend=legend + [[usable, INK, "dash"]], alt="\n".join(alt + [usable]))


def time_breakdown_scene(plans: dict, *, title: str = "", width: int = 540) -> dict:
    """The scene of `draw_time_breakdown(plans, title=…)`: the first plan on top."""
    rows, n = list(plans.values()), len(plans)
    parts, end, scale, unit = time_layout(plans)
    right = end * scale * 1.3  # room for the text at the longest bar's end
    marks, left = [], [0.0] * n
    for part in parts:
        for i, p in enumerate(rows):
            w = p["breakdown"].get(part, 0.0) * scale
            if w > 0:  # cut at the right edge, as the figure's axes clip it
                color = TIME_COLOR.get(part, EDGE_GREY)
                marks.append(rect(min(left[i], right), min(left[i] + w, right), i - 0.3, i + 0.3, fill=color,
                                  stroke=PAPER, width=0.5, hatch=color if part == "pp_bubble" else None,
                                  tip=f"{list(plans)[i]}: {part.replace('_', ' ')} {w:.3g} {unit}"))
            left[i] += w
    totals = []
    for i, p in enumerate(rows):
        tip = max(left[i], p["step_seconds"] * scale)
        cut = tip > end * scale * 1.0001  # past the right edge
        totals.append(("→ " if cut else "") + f"{p['step_seconds'] * scale:.3g} {unit}   MFU {p['mfu']:.0%}")
        marks.append(text(min(tip, end * scale) + 0.01 * end * scale, i, totals[-1], anchor="start", size=SMALL,
                          halo=cut))
    ticks = [(i, name if p["fits"] else f"{name}\n({_('does not fit')})") for i, (name, p) in enumerate(plans.items())]
    legend = [[time_name(part), TIME_COLOR.get(part, EDGE_GREY)] + (["hatch"] if part == "pp_bubble" else [])
              for part in parts]
    return scene(marks, width=width, height=130 + 55 * n, title=title,
                 x=axis(0, right, _("time per step ({unit})").format(unit=unit)),
                 y=axis(-0.5, n - 0.5, ticks=ticks, invert=True), legend=legend,
                 alt="\n".join(f"{name}: {total}" for name, total in zip(plans, totals)))


def pipeline_window(q: Scenario, c, plan: Plan):
    """(trace, until, title) of the best plan's pipeline: lesson 4's simulator with this model's stage times,
    a long one cut after its GANTT_ACTIONS-th action (a window: drawing stays fast)."""
    trace = pipeline_trace(q.model, plan, c, q.global_batch, mesh=None, executor=False, precision="mixed")
    starts = sorted(e.start for e in trace)
    until = starts[GANTT_ACTIONS] if len(starts) > GANTT_ACTIONS else None
    m = q.global_batch // (plan.dp * plan.microbatch)
    shown = (_(", its first {n} of {total} actions").format(n=GANTT_ACTIONS, total=len(trace))
             if until is not None else "")
    title = (_("the best plan's pipeline: {schedule}, p={pp}, m={m}").format(schedule=plan.schedule, pp=plan.pp, m=m)
             + (f", v={plan.chunks}" if plan.chunks > 1 else "") + shown)
    return trace, until, title


def best_plan(result: dict) -> Plan | None:
    return Plan(**result["best"]["config"]) if result["best"] is not None else None


def compared_plans(q: Scenario, c, result: dict) -> dict:
    """label → plan dict: the winner ("best: <family>"), then the best plan of each rival family — the
    scenario's rivals, or for a question of the learner's own the fastest families, those that fit first —
    SHOWN at most (`sim.advisor.by_family`)."""
    winner = family(result["best"]["config"]) if result["best"] is not None else None
    rivals = by_family(q.model, c, q.global_batch, families=q.rivals or RIVALS)
    if not q.rivals:
        rivals = dict(sorted(rivals.items(), key=lambda kv: (not kv[1]["fits"], kv[1]["step_seconds"])))
    plans = {_("best: {winner}").format(winner=winner): result["best"]} if winner else {}
    return dict(list((plans | {name: p for name, p in rivals.items() if name != winner}).items())[:SHOWN])


def no_pipeline(plan: Plan | None) -> str:
    return _("no pipeline in the best plan (pp = 1)") if plan else _("nothing fits")


def strategy_scenes(q: Scenario, c, result: dict) -> dict:
    """The same picture as scenes for the browser (`render.chart`): {"memory", "time", "gantt": a scene or None,
    "note": the line said instead of a pipeline, or ""}."""
    plans, plan = compared_plans(q, c, result), best_plan(result)
    out = {"memory": None, "time": None, "gantt": None, "note": ""}
    if plans:
        out["memory"] = plan_memory_scene(plans, c.gpu.usable_memory, title=_("memory per GPU"))
        out["time"] = time_breakdown_scene(plans, title=_("where one step goes"))
    if plan is not None and plan.pp > 1:
        trace, until, title = pipeline_window(q, c, plan)
        out["gantt"] = gantt_scene(trace, plan.pp, until=until, span=until, title=title)
    else:
        out["note"] = no_pipeline(plan)
    return out
