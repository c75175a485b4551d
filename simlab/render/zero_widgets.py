"""Lesson 3's widgets: the memory calculator, the walkthrough player, and the walkthrough with its real run.

Explorers are drawn in the browser (`render.chart`): a knob builds a scene from the engine's numbers
(`memory_scene`, `zero_step_scene`, the same pictures as `render.zero`'s figures) and only that travels.

- `memory_calculator`: knobs (model size, GPUs, precision, offload) → bars for stages 0-3 and a table.
  The model-size slider has explicit options, so its default is exactly the paper's 7.5 B.
- `walkthrough_player`: the ZeRO walkthrough as a `chart_player` (a scene per step, stepped in the
  browser), the step's holdings table as its caption.
- `zero_explorer`: pick a stage; its walkthrough plays, the simulated trace downloads for Perfetto, and a
  button runs that stage on real processes (`run(stage)`, handed in by the notebook: render never
  starts processes) and shows the measured bytes beside the model and the real events beside the walkthrough.

Labels, hints and refusals go through `_()` (simlab.i18n); the knobs' values ("mixed", "7.5 B") stay as they are.
"""
from __future__ import annotations

import ipywidgets as w

from ..i18n import _
from ..sim.zero import holdings_text, to_trace, walkthrough
from .chart import Chart, axis, chart_player, rect, scene, text
from .controls import Panel, readout_html, run_control, table_html, trace_link, trace_link_html
from .picture import DISPLAY_DPI
from .style import (
    CPU_COLOR,
    EDGE_GREY,
    EMPTY_GREY,
    GATHERED_COLOR,
    INK,
    OWNED_COLOR,
    PAPER,
    PAPER_GREY,
    PART_COLOR,
    SOFT_INK,
    rows_table,
)
from .zero import GB, PART_NAMES, UNIT_IN, calculator_rows, calculator_table, calculator_title, gb, grid_layout
from .zero_run import draw_real_vs_model, real_run_text

# Model sizes the calculator offers: 1, 1.5, 2, 3, 5, 7, 7.5 × 10^k from 1 M to 1 T (GPT-3's 175 B too);
# explicit options, so the default is exactly the value the lesson prints (a log slider would snap 7.5 B to 7.94 B).
SIZES = sorted({m * 10**e for e in range(6, 12) for m in (1, 1.5, 2, 3, 5, 7, 7.5)} | {1.75e11, 1e12})
GPU_COUNTS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]  # the default, the paper's 64, is one of them
UNIT_PX = round(UNIT_IN * DISPLAY_DPI)  # a block slot of the step grid, in CSS px: the figure's, at 100 px per inch


def size_label(psi: float) -> str:
    """7.5e9 → '7.5 B', 1.75e11 → '175 B', 1e12 → '1 T', 3e6 → '3 M'."""
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6)):
        if psi >= scale:
            return f"{psi / scale:g} {unit}"
    return f"{psi:g}"


def memory_scene(rows: dict, title: str) -> dict:
    """`draw_memory_bars` as a chart: a stacked bar (params / grads / optimizer, GB) per configuration with its
    total on top, a hatched host bar beside it under offload; `rows` is `calculator_rows`'s (the engine's bytes)."""
    labels, marks = list(rows), []
    has_cpu = any(r.get("cpu", 0) for r in rows.values())
    width = 0.38 if has_cpu else 0.6
    for x, k in enumerate(labels):
        gpu_x, bottom = x - width / 2 if has_cpu else x, 0.0
        for part, color in PART_COLOR.items():
            height = rows[k][part] / GB
            marks.append(rect(gpu_x - width / 2, gpu_x + width / 2, bottom, bottom + height, fill=color,
                              tip=f"{_(PART_NAMES[part])}: {gb(rows[k][part])} GB"))
            bottom += height
        marks.append(text(gpu_x, rows[k]["total"] / GB, gb(rows[k]["total"]), baseline="bottom", dy=2, bold=True))
        if has_cpu and rows[k]["cpu"]:
            marks += [rect(x, x + width, 0, rows[k]["cpu"] / GB, fill=PAPER, hatch=CPU_COLOR, stroke=CPU_COLOR),
                      text(x + width / 2, rows[k]["cpu"] / GB, gb(rows[k]["cpu"]), baseline="bottom", dy=2,
                           color=SOFT_INK)]
    top = max(max(r["total"], r.get("cpu", 0)) for r in rows.values()) / GB or 1.0
    legend = [(_(PART_NAMES[part]), color) for part, color in PART_COLOR.items()]
    legend += [(_("CPU (offload)"), CPU_COLOR, "hatch")] if has_cpu else []
    cells = calculator_table(rows)
    return scene(marks, title=title, width=145 * len(rows) + 90, height=400, legend=legend, legend_at="right",
                 x=axis(-0.5, len(rows) - 0.5, "", [(x, k.replace(" (", "\n(")) for x, k in enumerate(labels)]),
                 y=axis(0, top * 1.15, _("GB per GPU")), alt=f"{title}\n{_('GB per GPU')}\n{rows_table(cells)}")


def zero_step_scene(step, world_size: int) -> dict:
    """`draw_zero_step` (describe=False) as a chart: GPU (and host) columns, a row per kind of state, owned blocks
    solid blue, gathered ones pale with a dashed edge, in the same places (`render.zero.grid_layout`)."""
    g = grid_layout(step, world_size)
    marks = [text(x0 + g["cell_w"] / 2, top + 0.15, name, baseline="bottom", bold=True) for name, x0, top in g["columns"]]
    marks += [rect(x0, x0 + g["cell_w"], y0, y0 + 1.1, fill=PAPER_GREY if full else EMPTY_GREY, stroke=EDGE_GREY)
              for x0, y0, full in g["cells"]]
    marks += [text(-0.3, y0 + 0.55, _(PART_NAMES[kind]), anchor="end") for kind, y0 in g["rows"]]
    for b, bx, y0, owned in g["blocks"]:
        marks += [rect(bx + 0.04, bx + g["slot"] - 0.04, y0 + 0.15, y0 + 0.95, fill=OWNED_COLOR if owned
                       else GATHERED_COLOR, stroke=INK, dash=not owned),
                  text(bx + g["slot"] / 2, y0 + 0.55, b, color=PAPER if owned else INK, bold=owned)]
    x, y = (-g["left"], g["width"]), (-g["bands"] * g["band_h"] + 0.7, 0.8)
    title = _("step {index}: {name}").format(index=step.index, name=step.name)
    return scene(marks, x=axis(*x, hidden=True), y=axis(*y, hidden=True), aspect="equal", title=title,
                 width=UNIT_PX * (x[1] - x[0]) + 8, height=UNIT_PX * (y[1] - y[0]) + 8,
                 legend=[(_("owned block"), OWNED_COLOR), (_("someone else's block"), GATHERED_COLOR, "dashed-box")],
                 alt=f"{title}\n{_(holdings_text(step))}")


def memory_calculator(params: float = 7.5e9, gpus: int = 64, precision: str = "mixed") -> Panel:
    """Knobs → bars for stages 0-3 (at natural size) and the same numbers as a table (GB per GPU)."""
    if params not in SIZES or gpus not in GPU_COUNTS:
        raise ValueError(_("params={params}, gpus={gpus}: the calculator offers {smallest} … {largest} parameters "
                           "and {fewest} … {most} GPUs (powers of 2)").format(
            params=f"{params:g}", gpus=gpus, smallest=size_label(SIZES[0]), largest=size_label(SIZES[-1]),
            fewest=GPU_COUNTS[0], most=GPU_COUNTS[-1]))
    size = w.SelectionSlider(options=[(size_label(p), p) for p in SIZES], value=params, description=_("params"),
                             continuous_update=False)
    n = w.SelectionSlider(options=[(str(g), g) for g in GPU_COUNTS], value=gpus, description=_("GPUs"),
                          continuous_update=False)
    prec = w.Dropdown(options=["mixed", "fp32", "mixed-fp32-grads"], value=precision, description=_("precision"))
    off = w.Checkbox(value=False, description=_("offload (stages 2, 3)"))
    image, table = Chart(hint=""), w.HTML()

    def show(change=None) -> None:
        rows = calculator_rows(size.value, n.value, prec.value, off.value)
        image.scene = memory_scene(rows, calculator_title(size.value, n.value, prec.value))  # drawn in the browser
        cells = calculator_table(rows)
        table.value = "<b>" + _("GB per GPU") + "</b>" + table_html(cells, list(cells[0]))

    for knob in (size, n, prec, off):
        knob.observe(show, names="value")
    show()
    panel = Panel([w.HBox([size, n]), w.HBox([prec, off]), image, table],
                  hint=_("▶ run this cell to get the memory calculator"))
    panel.knobs = {"params": size, "gpus": n, "precision": prec, "offload": off}
    return panel


def walkthrough_frames(steps, world_size: int):
    """(scenes, captions) of a walkthrough: one grid per step, its holdings table under it."""
    return [zero_step_scene(st, world_size) for st in steps], [readout_html(_(holdings_text(st))) for st in steps]


def walkthrough_player(steps, world_size: int, seconds: float = 12.0):
    """The walkthrough as a player: one scene per step, drawn and stepped in the browser."""
    scenes, captions = walkthrough_frames(steps, world_size)
    return chart_player(scenes, captions=captions, seconds=seconds,
                        hint=_("▶ run this cell to get the ZeRO walkthrough player"))


def show_real_run(real: dict, layers: int):
    """What the run control shows: measured vs model (figure), the lined-up events (text), the real trace."""
    return (draw_real_vs_model(real), real_run_text(real, layers),
            [trace_link(real["trace"], f"zero{real['stage']}_real.json")])


def zero_explorer(run, stage: int = 3, world_size: int = 3, layers: int = 3) -> Panel:
    """A stage picker, its walkthrough, the simulated trace, and a button that runs it for real: `run(stage)`
    must return `parity.zero.run_zero(stage, world_size, steps=1, …)` on a model of `layers` Linears."""
    if stage not in (1, 2, 3):
        raise ValueError(_("stage={stage}: the real run has stages 1, 2 and 3").format(stage=repr(stage)))
    pick = w.ToggleButtons(options=[(f"ZeRO-{s}", s) for s in (1, 2, 3)], value=stage, description=_("stage"))
    steps = walkthrough(stage, layers, world_size)
    player = walkthrough_player(steps, world_size)
    sim_link = trace_link(to_trace(steps), f"zero{stage}_simulated.json")
    control = run_control(lambda: run(pick.value), lambda real: show_real_run(real, layers),
                          label=_("run this stage on {n} real processes").format(n=world_size))

    def restage(change) -> None:
        new = walkthrough(change["new"], layers, world_size)
        scenes, captions = walkthrough_frames(new, world_size)
        player.set_frames(scenes, captions, seconds=12.0)
        sim_link.value = trace_link_html(to_trace(new), f"zero{change['new']}_simulated.json")

    pick.observe(restage, names="value")
    panel = Panel([pick, player, sim_link, control],
                  hint=_("▶ run this cell to get the walkthrough and its real run"))
    panel.pick, panel.player, panel.sim_link, panel.control = pick, player, sim_link, control
    return panel
