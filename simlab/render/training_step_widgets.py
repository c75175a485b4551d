"""Lesson 5b's explorer: every knob of one training step — the model, the micro-batch b and how many are
accumulated (m), the sequence length, the attention kernel, recomputation, the precision, the GPU — tied to the
step's memory bar and its time. The kernel computes (`sim.training_step.one_step`, a few ms), the browser draws
(`render.chart`): a knob change sends a new scene, never a picture.

- `step_scene(step)`: the scene of one `one_step` result — its memory stacked by kind and activation term above
  the GPU's memory (what tensors can use, and what the CUDA context, NCCL's buffers and fragmentation take), a
  dashed line at the usable edge, a red outline and "does not fit" when it does not; its time by phase with MFU
  and HFU. Pure data, so tests need no browser; its `alt` is the readout (`render.training_step.step_text`).
- `step_explorer(...)`: the knobs (ipywidgets: keyboard-drivable), the Chart and the readout beside it. A
  combination the model refuses (say FP8 on a GPU without FP8 units) is one line in the readout, never a traceback.

    >>> s = step_scene(one_step("megatron-1.7b-2021", "a100-80gb", 4, 8, attention="eager"))
    >>> [p["title"] for p in s["panels"]][0].endswith("does not fit: 12.98 GB over the usable memory")
    True
"""
from __future__ import annotations

from ..i18n import _
from ..sim.gpus import GPUS
from ..sim.model import PRESETS
from ..sim.training_step import one_step
from .chart import axis, line, panel, rect, scene, text
from .style import INK, MATCH_COLOR, STEP_PHASE_COLOR, time_unit
from .training_step import LABEL, size, step_text
from .training_step_figures import PHASES, capacity_segments, legend_entries, memory_segments

GB = 1e9
NO_FIT = MATCH_COLOR[False]
MICROBATCHES = (1, 2, 4, 8, 16, 32, 64)  # b
ACCUMULATED = (1, 2, 4, 8, 16, 32, 64, 128)  # m
SEQUENCES = (512, 1024, 2048, 4096, 8192, 16384, 32768)
WIDTH = 640


def _verdict(mem: dict) -> str:
    return (_("fits: {free} free").format(free=size(mem["free"])) if mem["fits"] else
            _("does not fit: {over} over the usable memory").format(over=size(-mem["free"])))


def memory_panel(step: dict) -> dict:
    """The step's memory (y = 1) above the GPU's (y = 0), in GB, each segment with its name and size as a tip."""
    mem, c = step["memory"], step["config"]
    right = max(mem["total"], mem["capacity"]) / GB * 1.04
    marks = []
    for y, segments in ((1, memory_segments(step)), (0, capacity_segments(step))):
        left = 0.0
        for key, label, nbytes, colour in segments:
            tip = _("{label} ({key}): {size}").format(label=label, key=key, size=size(nbytes))
            marks.append(rect(left, left + nbytes / GB, y - 0.3, y + 0.3, colour, tip=tip))
            left += nbytes / GB
    if not mem["fits"]:
        marks.append(rect(0, mem["total"] / GB, 0.7, 1.3, "none", stroke=NO_FIT, width=2, tip=_verdict(mem)))
    usable = mem["usable"] / GB
    marks += [line([usable, usable], [-0.45, 1.45], INK, dash=True, width=1.2),
              text(usable, 1.45, _("usable {gb}").format(gb=size(mem["usable"])), anchor="end", baseline="bottom",
                   size=12, dx=-3)]
    title = _("memory: {total} — {verdict}").format(total=size(mem["total"]), verdict=_verdict(mem))
    return panel(marks, x=axis(0, right, "GB"), width=WIDTH, height=170, title=title,
                 title_color=INK if mem["fits"] else NO_FIT,
                 y=axis(-0.6, 1.6, ticks=[(1, _("one step")), (0, _("the GPU ({gpu})").format(gpu=c["gpu"]))]))


def time_panel(step: dict) -> dict:
    """The step's time, one bar stacked by phase, with its length, MFU and HFU in the title."""
    t = step["time"]
    scale, unit = time_unit(t["step_seconds"])
    marks, left = [], 0.0
    for phase in PHASES:
        if t[phase] > 0:
            marks.append(rect(left, left + t[phase] * scale, 0.2, 0.8, STEP_PHASE_COLOR[phase], label=_(LABEL[phase]),
                              tip=_("{phase}: {seconds} {unit}").format(
                                  phase=_(LABEL[phase]), seconds=f"{t[phase] * scale:.3g}", unit=unit)))
            left += t[phase] * scale
    title = _("time: {seconds} {unit} per step, MFU {mfu}, HFU {hfu}").format(
        seconds=f"{t['step_seconds'] * scale:.3g}", unit=unit, mfu=f"{step['mfu']:.1%}", hfu=f"{step['hfu']:.1%}")
    return panel(marks, x=axis(0, left * 1.04 or 1.0, unit), y=axis(0, 1, hidden=True), width=WIDTH, height=90,
                 title=title)


def step_scene(step: dict) -> dict:
    """Both panels, one legend (the memory's kinds and terms, the GPU's parts, the phases), the readout as alt."""
    phases = [(_(LABEL[p]), STEP_PHASE_COLOR[p]) for p in PHASES if step["time"][p] > 0]
    legend = legend_entries(memory_segments(step) + capacity_segments(step)) + phases
    c = step["config"]
    title = _("{model}: b = {b}, m = {m}, s = {s}, {attention} attention, recompute {recompute}, {precision}").format(
        model=c["model"], b=c["microbatch"], m=c["microbatches"], s=c["seq"], attention=c["attention"],
        recompute=c["recompute"], precision=c["precision"])
    return scene(panels=[memory_panel(step), time_panel(step)], title=title, legend=legend, legend_at="right",
                 alt=step_text(step))


KNOBS = ("model", "gpu", "microbatch", "microbatches", "seq", "attention", "recompute", "precision")


def step_explorer(model: str = "megatron-1.7b-2021", gpu: str = "a100-80gb", microbatch: int = 4,
                  microbatches: int = 8, seq: int | None = None, attention: str = "eager", recompute: str = "none",
                  precision: str = "mixed"):
    """The knobs, the memory bar and time of one step (a `Chart`), and its readout beside it. Returns a `Panel`;
    `.knobs`, `.chart`, `.readout` and `.shown["step"]` (the last `one_step` drawn) are its parts, for tests."""
    import ipywidgets as w

    from .chart import Chart
    from .controls import Panel, readout_html
    seq = seq or PRESETS[model].seq
    first = one_step(model, gpu, microbatch, microbatches, seq=seq, attention=attention, recompute=recompute,
                     precision=precision)  # a bad start is refused here, in one line, before any widget exists

    def slider(name, grid, value, label):
        if value not in grid:  # a knob must start on its grid, or the browser moves it
            raise ValueError(f"{name}={value!r}: must be one of {', '.join(map(str, grid))}")
        return w.SelectionSlider(options=grid, value=value, description=label, continuous_update=False,
                                 style={"description_width": "initial"})

    knobs = {"model": w.Dropdown(options=sorted(PRESETS), value=model, description=_("model")),
             "gpu": w.Dropdown(options=[g for g in GPUS if GPUS[g].roofline], value=gpu, description="GPU"),
             "microbatch": slider("microbatch", MICROBATCHES, microbatch, _("micro-batch b")),
             "microbatches": slider("microbatches", ACCUMULATED, microbatches, _("micro-batches m")),
             "seq": slider("seq", SEQUENCES, seq, _("sequence s")),
             "attention": w.ToggleButtons(options=("eager", "flash"), value=attention, description=_("attention")),
             "recompute": w.ToggleButtons(options=("none", "selective", "full"), value=recompute,
                                          description=_("recompute")),
             "precision": w.Dropdown(options=("fp32", "mixed", "mixed-fp32-grads", "fp8"), value=precision,
                                     description=_("precision"))}
    chart = Chart(step_scene(first), hint=_("▶ run this cell to get the step explorer"))
    readout = w.HTML(readout_html(step_text(first)))
    readout.add_class("simlab-readout")
    busy, shown = [], {"step": first}

    def show(change=None) -> None:
        if busy:
            return
        values = {k: knob.value for k, knob in knobs.items()}
        try:
            step = one_step(values.pop("model"), values.pop("gpu"), values.pop("microbatch"),
                            values.pop("microbatches"), **values)
        except ValueError as err:  # a combination the model refuses: one line, the last picture stays
            readout.value = readout_html("✗ " + str(err).splitlines()[0])
            return
        shown["step"] = step
        with chart.hold_sync():
            chart.scene = step_scene(step)
        readout.value = readout_html(step_text(step))

    def new_model(change) -> None:  # a preset brings its own sequence length, when the slider has it
        if PRESETS[change["new"]].seq in SEQUENCES:
            busy.append(1)
            knobs["seq"].value = PRESETS[change["new"]].seq
            busy.clear()

    knobs["model"].observe(new_model, names="value")
    for knob in knobs.values():
        knob.observe(show, names="value")
    rows = [w.HBox([knobs["model"], knobs["gpu"], knobs["precision"]]),
            w.HBox([knobs["microbatch"], knobs["microbatches"], knobs["seq"]]),
            w.HBox([knobs["attention"], knobs["recompute"]]),
            w.HBox([chart, readout], layout=w.Layout(flex_flow="row wrap", align_items="flex-start"))]
    out = Panel(rows, hint=_("▶ run this cell to get the step explorer: model, b, m, s, attention, recompute, "
                             "precision and GPU against one step's memory and time"))
    out.knobs, out.chart, out.readout, out.shown = knobs, chart, readout, shown
    return out
