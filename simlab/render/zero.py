"""Lesson 3's pictures of ZeRO: memory bars per stage, the walkthrough's grid, memory curve and offload
timeline, and a real run beside the model. The widgets built from them are in `render.zero_widgets`.

- `draw_memory_bars`: stacked bars (params / grads / optimizer) per configuration, in GB.
- `calculator_rows` / `calculator_table` / `calculator_title`: the memory calculator's numbers for one position of
  its knobs (the widget is `render.zero_widgets.memory_calculator`).
- `draw_zero_step`: who holds which block after one `ZeroStep` (a grid: GPUs × params/grads/optim).
- `draw_memory_curve`: bytes held on each GPU (and host) over the walkthrough.
- `draw_offload_timeline`: ZeRO-Offload on a GPU lane and its host's lane.
- `draw_real_vs_model`, `real_run_text`: a real run's bytes beside the model's, its events beside the walkthrough's.

The numbers come from `simlab.sim.memory` and `simlab.sim.zero`; this module only draws them. Every text is
10 pt or more and every figure at most about 9 inches wide, so at 100 px per inch nothing is under 14 px.
Words go through `_()` (simlab.i18n; Chinese in locale/zh/LC_MESSAGES/zero.po); the names of walkthrough
steps and events ("all-gather La") are the trace's names and stay as they are.
"""
from __future__ import annotations

import textwrap

from ..i18n import N_, _
from ..sim.memory import per_gpu_bytes
from ..sim.zero import KINDS, executor_names, memory_curve, to_trace, walkthrough
from .mpl import _new_ax
from .text import display_width, pad

GB = 1e9
FONT = 10  # the smallest text anywhere: 14 px at 100 px per inch
PART_COLOR = {"params": "#4c72b0", "grads": "#dd8452", "optimizer": "#55a868"}
CPU_COLOR = "#8c8c8c"
STAGE_NAMES = [N_("stage 0 (DP)"), N_("stage 1 (P_os)"), N_("stage 2 (P_os+g)"), N_("stage 3 (P_os+g+p)")]
# what the pictures call the parts of a GPU's model state (the keys stay English: they are the data's names)
PART_NAMES = {"params": N_("params"), "grads": N_("grads"), "optimizer": N_("optimizer"), "optim": N_("optim")}
OWNED_COLOR, GATHERED_COLOR = "#4c72b0", "#fdf2cc"  # own block: solid blue; someone else's: pale
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
    ax = _new_ax(ax, (1.45 * len(rows) + 2.4, 4.0))
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
                va="bottom", fontsize=FONT, fontweight="bold", gid="total")
    if has_cpu:
        cpu = np.array([rows[k]["cpu"] / GB for k in labels])
        ax.bar(x + width / 2, cpu, width, color="white", edgecolor=CPU_COLOR, hatch="//",
               label=_("CPU (offload)"), gid="cpu")
        for xi, v in zip(x + width / 2, cpu):
            if v:
                ax.text(xi, v + 0.01 * top, gb(v * GB), ha="center", va="bottom", fontsize=FONT,
                        color="#555555", gid="total")
    ax.set_xticks(x, [k.replace(" (", "\n(") for k in labels], fontsize=FONT)
    ax.tick_params(axis="y", labelsize=FONT)
    ax.set_ylabel(_("GB per GPU"), fontsize=FONT)
    ax.set_ylim(0, top * 1.15)
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=FONT, frameon=False)
    if title:
        ax.set_title(title, fontsize=FONT + 1)
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


def draw_zero_step(step, world_size: int, ax=None, describe: bool = True):
    """Grid of one ZeroStep: a column per GPU (and per host under offload), rows params/grads/optim.

    Each block sits in a fixed slot (a0 a1 a2 | b0 b1 b2 | …), so blocks appear and vanish in place
    as the player moves. Owned blocks (GPU i owns block i of every layer) are solid blue; blocks
    gathered or computed from the others are pale with a dashed edge. Wide scenes wrap into bands;
    the hosts (CPU0, CPU1, …) always start a band of their own, under the GPUs. `describe=False` leaves
    the step's description out of the title (a player shows it as a caption, so every frame has one size).
    """
    from matplotlib.patches import Rectangle
    letters, has_cpu = _scene(step)
    n, slot, gap, row_h, sep = world_size, 1.0, 0.5, 1.3, 0.4
    cell_w = len(letters) * n * slot + (len(letters) - 1) * gap + 0.6
    fit = max(1, int(MAX_WIDTH // (cell_w + sep)))
    per_band = -(-n // -(-n // fit))  # balanced bands: 4 GPUs that fit 3 a band go 2 + 2
    places, cols = [], [(f"GPU{g}", g, step.holdings[g]) for g in range(n)]
    for first in ([0, -(-n // per_band)] if has_cpu else [0]):  # the hosts start a new band
        places += [(i % per_band, first + i // per_band) for i in range(n)]
    cols += [(f"CPU{g}", g, step.cpu[g]) for g in range(n)] if has_cpu else []
    bands, band_h = places[-1][1] + 1, len(KINDS) * row_h + 1.4
    width, left = per_band * (cell_w + sep), 2.4  # left: room for the row labels
    ax = _new_ax(ax, (UNIT_IN * (width + left), 0.8 + UNIT_IN * band_h * bands))
    for (name, g, held), (c, band) in zip(cols, places):
        x0, top = c * (cell_w + sep), -band * band_h
        ax.text(x0 + cell_w / 2, top + 0.15, name, ha="center", va="bottom", fontsize=FONT, fontweight="bold")
        for r, kind in enumerate(KINDS):
            y0 = top - (r + 1) * row_h
            blocks = held.get(kind)  # a host holds no parameters: a grey cell
            ax.add_patch(Rectangle((x0, y0), cell_w, 1.1, facecolor="#f4f4f4" if blocks is not None
                                   else "#d9d9d9", edgecolor="#999999", gid="cell"))
            if c == 0:
                ax.text(x0 - 0.3, y0 + 0.55, _(PART_NAMES[kind]), ha="right", va="center", fontsize=FONT)
            for b in sorted(blocks or ()):
                owned = int(b[1:]) == g
                bx = x0 + 0.3 + letters.index(b[0]) * (n * slot + gap) + int(b[1:]) * slot
                ax.add_patch(Rectangle((bx + 0.04, y0 + 0.15), slot - 0.08, 0.8, gid="block",
                                       facecolor=OWNED_COLOR if owned else GATHERED_COLOR,
                                       edgecolor="#333333", linestyle="-" if owned else "--"))
                ax.text(bx + slot / 2, y0 + 0.55, b, ha="center", va="center", fontsize=FONT,  # "a10": 20 of 25 px
                        color="white" if owned else "#333333", fontweight="bold" if owned else "normal")
    ax.set_xlim(-left, width)
    ax.set_ylim(-bands * band_h + 0.7, 0.8)
    ax.axis("off")
    title = _("step {index}: {name}").format(index=step.index, name=step.name)
    if describe:  # wrapped to the figure's width: a long title would widen the saved picture
        title += "\n" + "\n".join(textwrap.wrap(step.description, int(11.5 * UNIT_IN * (width + left))))
    ax.set_title(title, fontsize=FONT)
    ax.add_patch(Rectangle((0, 0), 0, 0, facecolor=OWNED_COLOR, label=_("owned block")))
    ax.add_patch(Rectangle((0, 0), 0, 0, facecolor=GATHERED_COLOR, edgecolor="#333333",
                           linestyle="--", label=_("someone else's block")))
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=2, fontsize=FONT, frameon=False)
    return ax.figure


def draw_memory_curve(steps, world_size: int, ax=None):
    """Bytes of model state held after each step: one line per GPU, dotted per host (offload)."""
    ax = _new_ax(ax, (min(9.0, max(6.0, 0.4 * len(steps))), 4.2))
    x = range(len(steps))
    for g, curve in enumerate(memory_curve(steps)[:world_size]):
        ax.plot(x, curve, marker="o", markersize=4 + 2 * (world_size - g), linewidth=1.5,
                label=f"GPU{g}", zorder=3 + g)
    for g in range(world_size):
        host = [st.cpu_bytes[g] for st in steps]
        if any(host):
            ax.plot(x, host, linestyle=":", marker="s", markersize=3, label=f"CPU{g}")
    ax.set_xticks(list(x), [f"{st.index} {st.name}" for st in steps], rotation=60, ha="right", fontsize=FONT)
    ax.tick_params(axis="y", labelsize=FONT)
    ax.set_ylabel(_("bytes of model state"), fontsize=FONT)
    ax.set_ylim(0, 1.12 * max(max(c) for c in memory_curve(steps)))  # room above the peak's markers
    ax.grid(axis="y", alpha=0.3)
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(fontsize=FONT, frameon=False, loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=2 * world_size)
    return ax.figure


SHORT = {"forward": "F", "backward": "B", "reduce-scatter": "RS", "all-gather": "AG", "free": "free"}


def draw_offload_timeline(steps, gpu: int = 0, ax=None):
    """ZeRO-Offload as a timeline for one GPU and its host: one time unit per walkthrough step,
    PCIe copies drawn as arrows between the two lanes (the events come from `sim.zero.to_trace`)."""
    from matplotlib.patches import Rectangle

    n = len(steps[0].gpu_bytes)
    events = [e for e in to_trace(steps) if e.rank in (gpu, n + gpu)]
    ax = _new_ax(ax, (9, 3.4))
    colours = {"compute": "#4c72b0", "comm": "#dd8452", "cpu": "#55a868"}
    cpu_y = 1.8  # the host's lane; the gap between the lanes holds the copies' labels
    for e in events:
        if e.name.startswith(("to-cpu", "to-gpu")):  # a copy over PCIe: an arrow between the lanes
            down = e.name.startswith("to-cpu")
            ax.annotate("", xy=(e.start + 0.5, cpu_y - 0.3 if down else 0.3),
                        xytext=(e.start + 0.5, 0.3 if down else cpu_y - 0.3),
                        arrowprops={"arrowstyle": "-|>", "color": colours["comm"], "lw": 2}, gid="copy")
            ax.text(e.start + 0.62, cpu_y / 2, e.name, fontsize=FONT, va="center", rotation=90)
            continue
        y = cpu_y if e.rank == n + gpu else 0
        op, *layer = e.name.split()
        label = "Adam" if e.kind == "cpu" else "\n".join([SHORT.get(op, op), *layer])
        ax.add_patch(Rectangle((e.start, y - 0.3), e.end - e.start, 0.6, facecolor=colours.get(e.kind, "#999999"),
                               edgecolor="white", gid=e.kind))
        ax.text(e.start + 0.5, y, label, ha="center", va="center", fontsize=FONT, color="white")
    ax.set_xlim(0, max(e.end for e in events))
    ax.set_ylim(cpu_y + 0.5, -0.5)
    ax.set_yticks([0, cpu_y], [f"GPU{gpu}", _("CPU{gpu}\n(host)").format(gpu=gpu)], fontsize=FONT)
    ax.tick_params(axis="x", labelsize=FONT)
    ax.set_xlabel(_("walkthrough step  (F forward, B backward, RS reduce-scatter, AG all-gather)"), fontsize=FONT)
    ax.set_title(_("ZeRO-Offload: gradients go down, the CPU runs Adam, parameters come back up"),
                 fontsize=FONT + 1, loc="left")
    ax.spines[["top", "right"]].set_visible(False)
    return ax.figure


# ---------------------------------------------------------------- a real run beside the model

def _kept(mem: dict) -> int:
    return mem["params"] + mem["grads"] + mem["optimizer"]


def draw_real_vs_model(real: dict):
    """Two panels, one pair of bars per rank: bytes kept (device) and bytes sent in step 0, measured on the
    real run (solid) beside the model's prediction (hatched). `real`: what `parity.zero.run_zero` returns."""
    import numpy as np
    from matplotlib.figure import Figure
    n = real["world_size"]
    fig = Figure(figsize=(8.5, 3.4), layout="constrained")
    panels = [(_("bytes kept per rank"), [_kept(m) for m in real["measured_bytes_per_rank"]],
               [_kept(m) for m in real["predicted_bytes_per_rank"]]),
              (_("bytes sent in one step"), real["bytes_sent_per_rank"], real["predicted_bytes_sent_per_rank"])]
    x, same = np.arange(n), all(list(measured) == list(model) for _title, measured, model in panels)
    for ax, (title, measured, model) in zip(fig.subplots(1, 2), panels):
        ax.bar(x - 0.2, measured, 0.4, color="#4c72b0", label=_("measured (real run)"), gid="measured")
        ax.bar(x + 0.2, model, 0.4, color="white", edgecolor="#4c72b0", hatch="//", label=_("model"), gid="model")
        for xi, v in zip(x, measured):
            ax.text(xi - 0.2, v, str(v), ha="center", va="bottom", fontsize=FONT, gid="value")
        ax.set_xticks(x, [f"rank {r}" for r in range(n)], fontsize=FONT)
        ax.tick_params(axis="y", labelsize=FONT)
        ax.set_ylim(0, 1.2 * max(max(measured), max(model), 1))
        ax.set_title(title, fontsize=FONT)
        ax.spines[["top", "right"]].set_visible(False)
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncol=2, fontsize=FONT, frameon=False)
    fig.suptitle(_("ZeRO-{stage} on {n} processes: measured {relation} model").format(
        stage=real["stage"], n=n, relation="=" if same else "≠"), fontsize=FONT + 1)
    return fig


def real_run_text(real: dict, layers: int, rank: int = 0) -> str:
    """A real run in text: bytes per rank beside the model, then one rank's step-0 events beside the
    walkthrough's (the same names, the same order when the executor follows the walkthrough)."""
    n, stage = real["world_size"], real["stage"]
    header = ["rank", _("kept B (real / model)"), _("sent B (real / model)")]
    rows = [[str(r), f"{_kept(real['measured_bytes_per_rank'][r])} / {_kept(real['predicted_bytes_per_rank'][r])}",
             f"{real['bytes_sent_per_rank'][r]} / {real['predicted_bytes_sent_per_rank'][r]}"] for r in range(n)]
    widths = [max(display_width(row[c]) for row in [header] + rows) for c in (0, 1)]  # display columns: CJK is 2
    lines = [pad(a, widths[0]) + "  " + pad(b, widths[1]) + "  " + c for a, b, c in [header] + rows]
    sim = executor_names(walkthrough(stage, layers, n))
    got = [e.name for e in sorted(real["trace"], key=lambda e: e.start) if e.rank == rank and e.step == 0]
    width = max(display_width(name) for name in sim + [_("walkthrough")])
    lines += ["", pad(_("walkthrough"), width) + "  " + _("real rank {rank}").format(rank=rank)]
    for k in range(max(len(sim), len(got))):
        a, b = (sim[k] if k < len(sim) else "-"), (got[k] if k < len(got) else "-")
        lines.append(f"{a:<{width}}  {b}" + ("" if a == b else "   ≠"))
    lines.append(_("same events in the same order") if sim == got else _("the orders differ (≠)"))
    return "\n".join(lines)

