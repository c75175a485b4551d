"""Lesson 3's pictures of ZeRO: memory bars per stage, the walkthrough's grid, memory curve and offload
timeline. A real run beside the model is `render.zero_run`'s; the widgets built from them are in
`render.zero_widgets`.

- `draw_memory_bars`: stacked bars (params / grads / optimizer) per configuration, in GB.
- `calculator_rows` / `calculator_table` / `calculator_title`: the memory calculator's numbers for one position of
  its knobs (the widget is `render.zero_widgets.memory_calculator`).
- `draw_zero_step`: who holds which block after one `ZeroStep` (a grid: GPUs × params/grads/optim).
- `draw_memory_curve`: bytes held on each GPU (and host) over the walkthrough.
- `draw_offload_timeline`: ZeRO-Offload on a GPU lane and its host's lane.

The numbers come from `simlab.sim.memory` and `simlab.sim.zero`; this module only draws them. Every text is
10 pt or more and every figure at most about 9 inches wide, so at 100 px per inch nothing is under 14 px.
Words go through `_()` (simlab.i18n; Chinese in locale/zh/LC_MESSAGES/zero.po); the names of walkthrough
steps and events ("all-gather La") are the trace's names and stay as they are.
"""
from __future__ import annotations

import textwrap

from ..i18n import N_, _
from ..sim.memory import per_gpu_bytes
from ..sim.zero import KINDS, memory_curve, to_trace
from .style import (
    CPU_COLOR,
    EDGE_GREY,
    EMPTY_GREY,
    GATHERED_COLOR,
    INK,
    MIN_FONT,
    OFFLOAD_COLOR,
    OWNED_COLOR,
    PAPER_GREY,
    PART_COLOR,
    SOFT_INK,
    display_width,
    new_ax,
)

GB = 1e9
STAGE_NAMES = [N_("stage 0 (DP)"), N_("stage 1 (P_os)"), N_("stage 2 (P_os+g)"), N_("stage 3 (P_os+g+p)")]
# what the pictures call the parts of a GPU's model state (the keys stay English: they are the data's names)
PART_NAMES = {"params": N_("params"), "grads": N_("grads"), "optimizer": N_("optimizer"), "optim": N_("optim")}
UNIT_IN = 0.25  # inches per block slot of the step grid
MAX_WIDTH = 33  # block slots per band of the step grid (about 9 inches with the labels); wider scenes wrap


def gb(nbytes) -> str:
    """Bytes as GB to 3 significant digits: 31406250000 → '31.4', 1875000000 → '1.88', 120e9 → '120'."""
    x = nbytes / GB
    if x == 0 or x >= 100:
        return f"{x:.0f}"
    return f"{x:.3g}" if x >= 0.001 else "<0.001"


def draw_memory_bars(rows: dict, ax=None, title=None):
    """One stacked bar per configuration (label → `per_gpu_bytes` dict), with its total on top.

    Host memory (offload) gets its own hatched grey bar beside the GPU bar. The legend sits outside the
    axes, so it never covers a bar or its label."""
    import numpy as np
    ax = new_ax(ax, (1.45 * len(rows) + 2.4, 4.0))
    labels, x = list(rows), np.arange(len(rows))
    has_cpu = any(r.get("cpu", 0) for r in rows.values())
    width = 0.38 if has_cpu else 0.6
    gpu_x = x - width / 2 if has_cpu else x
    bottom = np.zeros(len(rows))
    for part, color in PART_COLOR.items():
        heights = np.array([rows[k][part] / GB for k in labels])
        ax.bar(gpu_x, heights, width, bottom=bottom, color=color, label=_(PART_NAMES[part]), gid=part)
        bottom += heights
    top = max(bottom.max(), max(r.get("cpu", 0) for r in rows.values()) / GB) or 1.0
    for xi, k in zip(gpu_x, labels):
        ax.text(xi, rows[k]["total"] / GB + 0.01 * top, gb(rows[k]["total"]), ha="center",
                va="bottom", fontsize=MIN_FONT, fontweight="bold", gid="total")
    if has_cpu:
        cpu = np.array([rows[k]["cpu"] / GB for k in labels])
        ax.bar(x + width / 2, cpu, width, color="white", edgecolor=CPU_COLOR, hatch="//",
               label=_("CPU (offload)"), gid="cpu")
        for xi, v in zip(x + width / 2, cpu):
            if v:
                ax.text(xi, v + 0.01 * top, gb(v * GB), ha="center", va="bottom", fontsize=MIN_FONT,
                        color=SOFT_INK, gid="total")
    ax.set_xticks(x, [k.replace(" (", "\n(") for k in labels], fontsize=MIN_FONT)
    ax.tick_params(axis="y", labelsize=MIN_FONT)
    ax.set_ylabel(_("GB per GPU"), fontsize=MIN_FONT)
    ax.set_ylim(0, top * 1.15)
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=MIN_FONT, frameon=False)
    if title:
        ax.set_title(title, fontsize=MIN_FONT + 1)
    return ax.figure


def calculator_rows(params: float, gpus: int, precision: str = "mixed", offload: bool = False) -> dict:
    """label → `per_gpu_bytes` for stages 0-3 (offload only where ZeRO allows it: stages 2, 3)."""
    psi = max(1, int(round(params)))
    return {_(name) + (_(" +offload") if offload and s >= 2 else ""):
            per_gpu_bytes(psi, gpus, s, offload=offload and s >= 2, precision=precision)
            for s, name in enumerate(STAGE_NAMES)}


def calculator_table(rows: dict) -> list[dict]:
    """The calculator's rows as GB strings, one dict per configuration (for `table_html` and text); the
    column names (the dicts' keys) are in the language in force."""
    columns = [(_(PART_NAMES[key]), key) for key in ("params", "grads", "optimizer")]
    columns += [(_("GPU total"), "total"), ("CPU", "cpu")]
    return [{"": k, **{c: gb(r[key]) for c, key in columns}} for k, r in rows.items()]


def calculator_title(params: float, gpus: int, precision: str) -> str:
    return _("Ψ = {params} B parameters, {gpus} GPU{s}, {precision} precision").format(
        params=f"{params / 1e9:.3g}", gpus=gpus, s="s" if gpus != 1 else "", precision=precision)


def _scene(step):
    """Layer letters in use, and whether the hosts hold anything (offload)."""
    held = [b for h in step.holdings + step.cpu for s in h.values() for b in s]
    letters = sorted({b[0] for b in held})
    return letters, any(h["grads"] or h["optim"] for h in step.cpu)


def grid_layout(step, world_size: int) -> dict:
    """Where everything of `draw_zero_step`'s grid sits, in its units (a block slot is 1 wide): the GPU and host
    columns (name, x0, top), the cells (x0, y0, holds anything), the row labels (kind, y0), the blocks
    (name, x, y0, owned). The matplotlib figure and the browser's chart (`render.zero_widgets`) both draw it."""
    letters, has_cpu = _scene(step)
    n, slot, gap, row_h, sep = world_size, 1.0, 0.5, 1.3, 0.4
    cell_w = len(letters) * n * slot + (len(letters) - 1) * gap + 0.6
    fit = max(1, int(MAX_WIDTH // (cell_w + sep)))
    per_band = -(-n // -(-n // fit))  # balanced bands: 4 GPUs that fit 3 a band go 2 + 2
    places, cols = [], [(f"GPU{g}", g, step.holdings[g]) for g in range(n)]
    for first in ([0, -(-n // per_band)] if has_cpu else [0]):  # the hosts start a new band
        places += [(i % per_band, first + i // per_band) for i in range(n)]
    cols += [(f"CPU{g}", g, step.cpu[g]) for g in range(n)] if has_cpu else []
    band_h = len(KINDS) * row_h + 1.4
    out = {"width": per_band * (cell_w + sep), "left": 2.4, "bands": places[-1][1] + 1, "band_h": band_h,
           "cell_w": cell_w, "slot": slot, "columns": [], "cells": [], "rows": [], "blocks": []}  # left: row labels
    for (name, g, held), (c, band) in zip(cols, places):
        x0, top = c * (cell_w + sep), -band * band_h
        out["columns"].append((name, x0, top))
        for r, kind in enumerate(KINDS):
            y0 = top - (r + 1) * row_h
            blocks = held.get(kind)  # a host holds no parameters: a grey cell
            out["cells"].append((x0, y0, blocks is not None))
            if c == 0:
                out["rows"].append((kind, y0))
            for b in sorted(blocks or ()):
                bx = x0 + 0.3 + letters.index(b[0]) * (n * slot + gap) + int(b[1:]) * slot
                out["blocks"].append((b, bx, y0, int(b[1:]) == g))
    return out


def draw_zero_step(step, world_size: int, ax=None, describe: bool = True):
    """Grid of one ZeroStep: a column per GPU (and per host under offload), rows params/grads/optim.

    Each block sits in a fixed slot (a0 a1 a2 | b0 b1 b2 | …), so blocks appear and vanish in place
    as the player moves. Owned blocks (GPU i owns block i of every layer) are solid blue; blocks
    gathered or computed from the others are pale with a dashed edge. Wide scenes wrap into bands;
    the hosts (CPU0, CPU1, …) always start a band of their own, under the GPUs. `describe=False` leaves
    the step's description out of the title (a player shows it as a caption, so every frame has one size).
    """
    from matplotlib.patches import Rectangle
    g = grid_layout(step, world_size)
    width, left, bands, band_h = g["width"], g["left"], g["bands"], g["band_h"]
    ax = new_ax(ax, (UNIT_IN * (width + left), 0.8 + UNIT_IN * band_h * bands))
    for name, x0, top in g["columns"]:
        ax.text(x0 + g["cell_w"] / 2, top + 0.15, name, ha="center", va="bottom", fontsize=MIN_FONT, fontweight="bold")
    for x0, y0, full in g["cells"]:
        ax.add_patch(Rectangle((x0, y0), g["cell_w"], 1.1, facecolor=PAPER_GREY if full else EMPTY_GREY,
                               edgecolor=EDGE_GREY, gid="cell"))
    for kind, y0 in g["rows"]:
        ax.text(-0.3, y0 + 0.55, _(PART_NAMES[kind]), ha="right", va="center", fontsize=MIN_FONT)
    for b, bx, y0, owned in g["blocks"]:
        ax.add_patch(Rectangle((bx + 0.04, y0 + 0.15), g["slot"] - 0.08, 0.8, gid="block",
                               facecolor=OWNED_COLOR if owned else GATHERED_COLOR,
                               edgecolor=INK, linestyle="-" if owned else "--"))
        ax.text(bx + g["slot"] / 2, y0 + 0.55, b, ha="center", va="center", fontsize=MIN_FONT,  # "a10": 20 of 25 px
                color="white" if owned else INK, fontweight="bold" if owned else "normal")
    ax.set_xlim(-left, width)
    ax.set_ylim(-bands * band_h + 0.7, 0.8)
    ax.axis("off")
    title = _("step {index}: {name}").format(index=step.index, name=step.name)
    if describe:  # wrapped to the figure's width: a long title would widen the saved picture
        said = _(step.description)  # the walkthrough's Message, in the reader's language
        columns = int(11.5 * UNIT_IN * (width + left)) // (2 if display_width(said) > len(said) else 1)  # CJK: 2 wide
        title += "\n" + "\n".join(textwrap.wrap(said, columns))
    ax.set_title(title, fontsize=MIN_FONT)
    ax.add_patch(Rectangle((0, 0), 0, 0, facecolor=OWNED_COLOR, label=_("owned block")))
    ax.add_patch(Rectangle((0, 0), 0, 0, facecolor=GATHERED_COLOR, edgecolor=INK,
                           linestyle="--", label=_("someone else's block")))
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=2, fontsize=MIN_FONT, frameon=False)
    return ax.figure


def draw_memory_curve(steps, world_size: int, ax=None):
    """Bytes of model state held after each step: one line per GPU, dotted per host (offload)."""
    ax = new_ax(ax, (min(9.0, max(6.0, 0.4 * len(steps))), 4.2))
    x = range(len(steps))
    for g, curve in enumerate(memory_curve(steps)[:world_size]):
        ax.plot(x, curve, marker="o", markersize=4 + 2 * (world_size - g), linewidth=1.5,
                label=f"GPU{g}", zorder=3 + g)
    for g in range(world_size):
        host = [st.cpu_bytes[g] for st in steps]
        if any(host):
            ax.plot(x, host, linestyle=":", marker="s", markersize=3, label=f"CPU{g}")
    ax.set_xticks(list(x), [f"{st.index} {st.name}" for st in steps], rotation=60, ha="right", fontsize=MIN_FONT)
    ax.tick_params(axis="y", labelsize=MIN_FONT)
    ax.set_ylabel(_("bytes of model state"), fontsize=MIN_FONT)
    ax.set_ylim(0, 1.12 * max(max(c) for c in memory_curve(steps)))  # room above the peak's markers
    ax.grid(axis="y", alpha=0.3)
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(fontsize=MIN_FONT, frameon=False, loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=2 * world_size)
    return ax.figure


SHORT = {"forward": "F", "backward": "B", "reduce-scatter": "RS", "all-gather": "AG", "free": "free"}


def draw_offload_timeline(steps, gpu: int = 0, ax=None):
    """ZeRO-Offload as a timeline for one GPU and its host: one time unit per walkthrough step,
    PCIe copies drawn as arrows between the two lanes (the events come from `sim.zero.to_trace`)."""
    from matplotlib.patches import Rectangle

    n = len(steps[0].gpu_bytes)
    events = [e for e in to_trace(steps) if e.rank in (gpu, n + gpu)]
    ax = new_ax(ax, (9, 3.4))
    cpu_y = 1.8  # the host's lane; the gap between the lanes holds the copies' labels
    for e in events:
        if e.name.startswith(("to-cpu", "to-gpu")):  # a copy over PCIe: an arrow between the lanes
            down = e.name.startswith("to-cpu")
            ax.annotate("", xy=(e.start + 0.5, cpu_y - 0.3 if down else 0.3),
                        xytext=(e.start + 0.5, 0.3 if down else cpu_y - 0.3),
                        arrowprops={"arrowstyle": "-|>", "color": OFFLOAD_COLOR["comm"], "lw": 2}, gid="copy")
            ax.text(e.start + 0.62, cpu_y / 2, e.name, fontsize=MIN_FONT, va="center", rotation=90)
            continue
        y = cpu_y if e.rank == n + gpu else 0
        op, *layer = e.name.split()
        label = "Adam" if e.kind == "cpu" else "\n".join([SHORT.get(op, op), *layer])
        ax.add_patch(Rectangle((e.start, y - 0.3), e.end - e.start, 0.6, facecolor=OFFLOAD_COLOR.get(e.kind, EDGE_GREY),
                               edgecolor="white", gid=e.kind))
        ax.text(e.start + 0.5, y, label, ha="center", va="center", fontsize=MIN_FONT, color="white")
    ax.set_xlim(0, max(e.end for e in events))
    ax.set_ylim(cpu_y + 0.5, -0.5)
    ax.set_yticks([0, cpu_y], [f"GPU{gpu}", _("CPU{gpu}\n(host)").format(gpu=gpu)], fontsize=MIN_FONT)
    ax.tick_params(axis="x", labelsize=MIN_FONT)
    ax.set_xlabel(_("walkthrough step  (F forward, B backward, RS reduce-scatter, AG all-gather)"), fontsize=MIN_FONT)
    ax.set_title(_("ZeRO-Offload: gradients go down, the CPU runs Adam, parameters come back up"),
                 fontsize=MIN_FONT + 1, loc="left")
    ax.spines[["top", "right"]].set_visible(False)
    return ax.figure
