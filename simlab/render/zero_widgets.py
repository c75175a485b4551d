"""Lesson 3's widgets: the memory calculator, the walkthrough player, and the walkthrough with its real run.

- `memory_calculator`: knobs (model size, GPUs, precision, offload) → bars for stages 0-3 and a table.
  The model-size slider has explicit options, so its default is exactly the paper's 7.5 B.
- `walkthrough_player`: the ZeRO walkthrough as a `frame_player` (each step drawn once, stepped in the
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
from .controls import (
    Panel,
    figure_image,
    readout_html,
    run_control,
    show_figure,
    table_html,
    trace_link,
    trace_link_html,
)
from .picture import RENDER_LOCK, render_png
from .player import frame_player
from .zero import calculator_rows, calculator_table, calculator_title, draw_memory_bars, draw_zero_step
from .zero_run import draw_real_vs_model, real_run_text

# Model sizes the calculator offers: 1, 1.5, 2, 3, 5, 7, 7.5 × 10^k from 1 M to 1 T (GPT-3's 175 B too);
# explicit options, so the default is exactly the value the lesson prints (a log slider would snap 7.5 B to 7.94 B).
SIZES = sorted({m * 10**e for e in range(6, 12) for m in (1, 1.5, 2, 3, 5, 7, 7.5)} | {1.75e11, 1e12})
GPU_COUNTS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]  # the default, the paper's 64, is one of them


def size_label(psi: float) -> str:
    """7.5e9 → '7.5 B', 1.75e11 → '175 B', 1e12 → '1 T', 3e6 → '3 M'."""
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6)):
        if psi >= scale:
            return f"{psi / scale:g} {unit}"
    return f"{psi:g}"


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
    image, table = figure_image(), w.HTML()

    def show(change=None) -> None:
        rows = calculator_rows(size.value, n.value, prec.value, off.value)
        show_figure(image, draw_memory_bars(rows, title=calculator_title(size.value, n.value, prec.value)))
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
    """(frames, captions) of a walkthrough: one grid per step, its holdings table under it. A frame is a
    function that draws its PNG, so a player draws the first at once and the rest in the background.

    Every frame has the same layout, so the region the first one is cropped to serves them all: one draw
    per frame instead of two ("tight" measures first), and frames of exactly one size."""
    box = {}

    def frame(k: int):
        def draw() -> bytes:
            fig = draw_zero_step(steps[k], world_size, describe=False)
            with RENDER_LOCK:  # the first frame measures the region, then one draw each (players use a thread)
                png, box["region"] = render_png(fig, with_box=True, region=box.get("region"))
            return png
        return draw
    return [frame(k) for k in range(len(steps))], [readout_html(holdings_text(st)) for st in steps]


def walkthrough_player(steps, world_size: int, seconds: float = 12.0):
    """The walkthrough as a player: every step drawn once, stepped in the browser."""
    figures, captions = walkthrough_frames(steps, world_size)
    return frame_player(figures, captions=captions, seconds=seconds,
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
        figures, captions = walkthrough_frames(new, world_size)
        player.set_frames(figures, captions)
        sim_link.value = trace_link_html(to_trace(new), f"zero{change['new']}_simulated.json")

    pick.observe(restage, names="value")
    panel = Panel([pick, player, sim_link, control],
                  hint=_("▶ run this cell to get the walkthrough and its real run"))
    panel.pick, panel.player, panel.sim_link, panel.control = pick, player, sim_link, control
    return panel
