"""Lesson 3's pictures of ZeRO: memory bars per stage, a calculator, and a step-by-step walkthrough.

- `draw_memory_bars`: stacked bars (params / grads / optimizer) per configuration, in GB.
- `memory_calculator`: knobs (model size, GPUs, precision, offload) → bars for stages 0-3.
- `draw_zero_step`: who holds which block after one `ZeroStep` (a grid: GPUs × params/grads/optim).
- `draw_memory_curve`: bytes held on each GPU (and host) over the walkthrough.
- `walkthrough_player`: Play + slider over the walkthrough, as text or as pictures.

The numbers come from `simlab.sim.memory` and `simlab.sim.zero`; this module only draws them.
The pure helpers (`calculator_frame`, `walkthrough_frame`) need no browser, so tests can check them.
"""
from __future__ import annotations

import html

from ..sim.memory import per_gpu_bytes
from ..sim.zero import KINDS, holdings_text, memory_curve, to_trace
from .mpl import _new_ax, figure_png

GB = 1e9
PART_COLOR = {"params": "#4c72b0", "grads": "#dd8452", "optimizer": "#55a868"}
CPU_COLOR = "#8c8c8c"
STAGE_NAMES = ["stage 0 (DP)", "stage 1 (P_os)", "stage 2 (P_os+g)", "stage 3 (P_os+g+p)"]
OWNED_COLOR, GATHERED_COLOR = "#4c72b0", "#fdf2cc"  # own block: solid blue; someone else's: pale
MAX_WIDTH = 56  # block slots per band of the step grid (about 21 inches); wider scenes wrap


def gb(nbytes) -> str:
    """Bytes as GB with the decimals it needs: 31406250000 → '31.40625'."""
    return f"{nbytes / GB:.6f}".rstrip("0").rstrip(".")


def draw_memory_bars(rows: dict, ax=None, title=None):
    """One stacked bar per configuration (label → `per_gpu_bytes` dict), with its total on top.

    Host memory (offload) gets its own hatched grey bar beside the GPU bar.
    """
    import numpy as np
    ax = _new_ax(ax, (1.9 * len(rows) + 2.5, 4.2))
    labels, x = list(rows), np.arange(len(rows))
    has_cpu = any(r.get("cpu", 0) for r in rows.values())
    width = 0.38 if has_cpu else 0.6
    gpu_x = x - width / 2 if has_cpu else x
    bottom = np.zeros(len(rows))
    for part, color in PART_COLOR.items():
        heights = np.array([rows[k][part] / GB for k in labels])
        ax.bar(gpu_x, heights, width, bottom=bottom, color=color, label=part, gid=part)
        bottom += heights
    top = max(bottom.max(), max(r.get("cpu", 0) for r in rows.values()) / GB) or 1.0
    for xi, k in zip(gpu_x, labels):
        ax.text(xi, rows[k]["total"] / GB + 0.01 * top, gb(rows[k]["total"]), ha="center",
                va="bottom", fontsize=9, fontweight="bold")
    if has_cpu:
        cpu = np.array([rows[k]["cpu"] / GB for k in labels])
        ax.bar(x + width / 2, cpu, width, color="white", edgecolor=CPU_COLOR, hatch="//",
               label="CPU (offload)", gid="cpu")
        for xi, v in zip(x + width / 2, cpu):
            if v:
                ax.text(xi, v + 0.01 * top, gb(v * GB), ha="center", va="bottom", fontsize=8,
                        color="#555555")
    ax.set_xticks(x, labels, fontsize=9)
    ax.set_ylabel("GB per GPU")
    ax.set_ylim(0, top * 1.15)
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(loc="upper right", fontsize=8, frameon=False)
    if title:
        ax.set_title(title, fontsize=10)
    return ax.figure


def calculator_rows(params: float, gpus: int, precision: str = "mixed", offload: bool = False) -> dict:
    """label → `per_gpu_bytes` for stages 0-3 (offload only where ZeRO allows it: stages 2, 3)."""
    psi = max(1, int(round(params)))
    return {name + (" +offload" if offload and s >= 2 else ""):
            per_gpu_bytes(psi, gpus, s, offload=offload and s >= 2, precision=precision)
            for s, name in enumerate(STAGE_NAMES)}


def _table(rows: dict) -> list[list[str]]:
    head = ["", "params", "grads", "optimizer", "GPU total", "CPU"]
    return [head] + [[k] + [gb(r[c]) for c in ("params", "grads", "optimizer", "total", "cpu")]
                     for k, r in rows.items()]


def calculator_frame(params: float, gpus: int, precision: str = "mixed", offload: bool = False):
    """(figure, text) for one position of the calculator's knobs; the text is in GB per GPU."""
    rows = calculator_rows(params, gpus, precision, offload)
    title = f"Ψ = {params / 1e9:.3g} B parameters, {gpus} GPUs, {precision} precision"
    fig = draw_memory_bars(rows, title=title)
    table = _table(rows)
    widths = [max(len(r[c]) for r in table) for c in range(len(table[0]))]
    lines = [title + " (GB per GPU)"]
    lines += ["  ".join(v.rjust(w) if c else v.ljust(w) for c, (v, w) in enumerate(zip(r, widths)))
              for r in table]
    return fig, "\n".join(lines)


def memory_calculator(params: float = 7.5e9, gpus: int = 64, precision: str = "mixed"):
    """Knobs → bars for stages 0-3 (PNG in an Image widget) and the same numbers as a table."""
    import ipywidgets as w
    size = w.FloatLogSlider(value=params, base=10, min=6, max=12, step=0.05, description="params",
                            readout_format=".3g")
    n = w.IntSlider(value=gpus, min=1, max=1024, description="GPUs")
    prec = w.Dropdown(options=["mixed", "fp32"], value=precision, description="precision")
    off = w.Checkbox(value=False, description="offload (stages 2, 3)")
    image, table = w.Image(format="png"), w.HTML()

    def show(_=None) -> None:
        fig, _text = calculator_frame(size.value, n.value, prec.value, off.value)
        image.value = figure_png(fig)
        cells = _table(calculator_rows(size.value, n.value, prec.value, off.value))
        body = "".join("<tr>" + "".join(f"<td style='padding:0 8px;text-align:right'>{html.escape(v)}</td>"
                                        for v in r) + "</tr>" for r in cells)
        table.value = f"<table><caption>GB per GPU</caption>{body}</table>"

    for knob in (size, n, prec, off):
        knob.observe(show, names="value")
    show()
    return w.VBox([w.HBox([size, n]), w.HBox([prec, off]), image, table])


def _scene(step):
    """Layer letters in use, and whether the hosts hold anything (offload)."""
    held = [b for h in step.holdings + step.cpu for s in h.values() for b in s]
    letters = sorted({b[0] for b in held})
    return letters, any(h["grads"] or h["optim"] for h in step.cpu)


def draw_zero_step(step, world_size: int, ax=None):
    """Grid of one ZeroStep: a column per GPU (and per host under offload), rows params/grads/optim.

    Each block sits in a fixed slot (a0 a1 a2 | b0 b1 b2 | …), so blocks appear and vanish in place
    as the player moves. Owned blocks (GPU i owns block i of every layer) are solid blue; blocks
    gathered or computed from the others are pale with a dashed edge. Wide scenes wrap into bands;
    the hosts (CPU0, CPU1, …) always start a band of their own, under the GPUs.
    """
    from matplotlib.patches import Rectangle
    letters, has_cpu = _scene(step)
    n, slot, gap, row_h = world_size, 1.0, 0.5, 1.3
    cell_w = len(letters) * n * slot + (len(letters) - 1) * gap + 0.6
    fit = max(1, int(MAX_WIDTH // (cell_w + 0.5)))
    per_band = -(-n // -(-n // fit))  # balanced bands: 4 GPUs that fit 3 a band go 2 + 2
    places, cols = [], [(f"GPU{g}", g, step.holdings[g]) for g in range(n)]
    for first in ([0, -(-n // per_band)] if has_cpu else [0]):  # the hosts start a new band
        places += [(i % per_band, first + i // per_band) for i in range(n)]
    cols += [(f"CPU{g}", g, step.cpu[g]) for g in range(n)] if has_cpu else []
    bands, band_h = places[-1][1] + 1, len(KINDS) * row_h + 1.4
    width = per_band * (cell_w + 0.5)
    ax = _new_ax(ax, (1.0 + 0.38 * width, 0.9 + 0.3 * band_h * bands))
    for (name, g, held), (c, band) in zip(cols, places):
        x0, top = c * (cell_w + 0.5), -band * band_h
        ax.text(x0 + cell_w / 2, top + 0.15, name, ha="center", va="bottom", fontsize=10, fontweight="bold")
        for r, kind in enumerate(KINDS):
            y0 = top - (r + 1) * row_h
            blocks = held.get(kind)  # a host holds no parameters: a grey cell
            ax.add_patch(Rectangle((x0, y0), cell_w, 1.1, facecolor="#f4f4f4" if blocks is not None
                                   else "#d9d9d9", edgecolor="#999999", gid="cell"))
            if c == 0:
                ax.text(x0 - 0.3, y0 + 0.55, kind, ha="right", va="center", fontsize=10)
            for b in sorted(blocks or ()):
                owned = int(b[1:]) == g
                bx = x0 + 0.3 + letters.index(b[0]) * (n * slot + gap) + int(b[1:]) * slot
                ax.add_patch(Rectangle((bx + 0.05, y0 + 0.2), slot - 0.1, 0.7, gid="block",
                                       facecolor=OWNED_COLOR if owned else GATHERED_COLOR,
                                       edgecolor="#333333", linestyle="-" if owned else "--"))
                ax.text(bx + slot / 2, y0 + 0.55, b, ha="center", va="center", fontsize=7 if n > 9 else 8,
                        color="white" if owned else "#333333", fontweight="bold" if owned else "normal")
    ax.set_xlim(-2.4, width)
    ax.set_ylim(-bands * band_h + 0.7, 0.8)
    ax.axis("off")
    ax.set_title(f"step {step.index}: {step.name}\n{step.description}", fontsize=10)
    ax.add_patch(Rectangle((0, 0), 0, 0, facecolor=OWNED_COLOR, label="owned block"))
    ax.add_patch(Rectangle((0, 0), 0, 0, facecolor=GATHERED_COLOR, edgecolor="#333333",
                           linestyle="--", label="someone else's block (gathered / full)"))
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=2, fontsize=8, frameon=False)
    return ax.figure


def draw_memory_curve(steps, world_size: int, ax=None):
    """Bytes of model state held after each step: one line per GPU, dotted per host (offload)."""
    ax = _new_ax(ax, (max(6, 0.42 * len(steps)), 3.8))
    x = range(len(steps))
    for g, curve in enumerate(memory_curve(steps)[:world_size]):
        ax.plot(x, curve, marker="o", markersize=4 + 2 * (world_size - g), linewidth=1.5,
                label=f"GPU{g}", zorder=3 + g)
    for g in range(world_size):
        host = [st.cpu_bytes[g] for st in steps]
        if any(host):
            ax.plot(x, host, linestyle=":", marker="s", markersize=3, label=f"CPU{g}")
    ax.set_xticks(list(x), [f"{st.index} {st.name}" for st in steps], rotation=60, ha="right", fontsize=8)
    ax.set_ylabel("bytes of model state")
    ax.set_ylim(bottom=0)
    ax.grid(axis="y", alpha=0.3)
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_title("memory over one training step", fontsize=10)
    return ax.figure


def walkthrough_frame(k: int, steps) -> str:
    """The text the player shows at step k: `holdings_text` of that step."""
    return holdings_text(steps[k])


def walkthrough_player(steps, world_size: int, mode: str = "text", interval_ms: int = 1200):
    """Play + slider (jslink'ed) over the walkthrough; text in a <pre> or `draw_zero_step` as PNG."""
    import ipywidgets as w
    if mode not in ("text", "plot"):
        raise ValueError(f"mode={mode!r}: must be 'text' or 'plot'")
    last = len(steps) - 1
    play = w.Play(value=0, min=0, max=last, step=1, interval=interval_ms, description="play")
    slider = w.IntSlider(value=0, min=0, max=last, description="step")
    w.jslink((play, "value"), (slider, "value"))  # Play drives the slider even without a kernel
    view = w.HTML() if mode == "text" else w.Image(format="png")

    def show(k: int) -> None:
        if mode == "text":
            view.value = f"<pre style='line-height:1.25'>{html.escape(walkthrough_frame(k, steps))}</pre>"
        else:
            view.value = figure_png(draw_zero_step(steps[k], world_size))

    slider.observe(lambda change: show(change["new"]), names="value")
    show(0)
    return w.VBox([w.HBox([play, slider]), view])


def draw_offload_timeline(steps, gpu: int = 0, ax=None):
    """ZeRO-Offload as a timeline for one GPU and its host: one time unit per walkthrough step,
    PCIe copies drawn as arrows between the two lanes (the events come from `sim.zero.to_trace`)."""
    from matplotlib.patches import Rectangle

    n = len(steps[0].gpu_bytes)
    events = [e for e in to_trace(steps) if e.rank in (gpu, n + gpu)]
    ax = _new_ax(ax, (12, 2.4))
    colours = {"compute": "#4c72b0", "comm": "#dd8452", "cpu": "#55a868"}
    for e in events:
        if e.name.startswith(("to-cpu", "to-gpu")):  # a copy over PCIe: an arrow between the lanes
            down = e.name.startswith("to-cpu")
            ax.annotate("", xy=(e.start + 0.5, 1 if down else 0), xytext=(e.start + 0.5, 0 if down else 1),
                        arrowprops={"arrowstyle": "-|>", "color": colours["comm"], "lw": 2}, gid="copy")
            ax.text(e.start + 0.55, 0.5, e.name, fontsize=7, va="center", rotation=90)
            continue
        y = 1 if e.rank == n + gpu else 0
        ax.add_patch(Rectangle((e.start, y - 0.3), e.end - e.start, 0.6, facecolor=colours.get(e.kind, "#999999"),
                               edgecolor="white", gid=e.kind))
        ax.text(e.start + 0.5, y, e.name.replace(" ", "\n"), ha="center", va="center", fontsize=6, color="white")
    ax.set_xlim(0, max(e.end for e in events))
    ax.set_ylim(1.6, -0.6)
    ax.set_yticks([0, 1], [f"GPU{gpu}", f"CPU{gpu} (host)"])
    ax.set_xlabel("walkthrough step")
    ax.set_title("ZeRO-Offload: gradients go down, the CPU runs Adam, parameters come back up",
                 fontsize=10, loc="left")
    ax.spines[["top", "right"]].set_visible(False)
    return ax.figure
