"""Lesson 4's schedule explorer: schedule, p, m, v and t_B/t_F drive one simulated Gantt chart and a
readout table; a time player greys out what has not run yet; a button runs the same schedule on p real
processes and draws it under its simulation.

Every number it shows comes from `simlab.sim.pipeline.explore` (which moves knobs a schedule cannot take
to the nearest it can); this module only draws. A knob change simulates once and sends one scene
(`explorer_scene`: the chart as data, `render.pipeline_scene`), which the browser draws; playing the
timeline then happens in the browser too (`pipeline_scene.GanttTimeline`: a veil moved over the chart, not
redrawn per tick), so Play takes about ten seconds whatever the schedule's size. `explorer_frame` draws
the same chart with matplotlib (a static figure). The real run is not started here: the notebook hands
the explorer a function that runs it (`simlab.parity.pipeline.run_pipeline`), as renderers start no
processes; its one-off result is drawn with matplotlib. `explorer_scene`, `explorer_frame`, `real_run`
and `real_view` are the pure parts, so tests need no browser. Every word shown goes through `_()`
(simlab.i18n), looked up when the explorer is built, so it speaks the language in force then; the
numbers are the same in every language.
"""
from __future__ import annotations

import bisect

from .._checks import check_choice, check_int
from ..i18n import N_, _
from ..sim.pipeline import explore, peak_activations
from ..sim.pipeline_schedules import SCHEDULES, make_schedule, nearest_valid
from .controls import Panel, run_control, table_html, trace_link, trace_link_html
from .pipeline import draw_gantt, draw_gantt_sim_vs_real
from .pipeline_scene import GanttTimeline, gantt_scene, time_scale

NAMES = tuple(SCHEDULES)  # naive, gpipe, 1f1b, interleaved, zero-bubble
RATIOS = (0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0)  # t_B / t_F: the slider's exact values (2: the lesson's)
LIMITS = {"stages": (1, 8), "microbatches": (1, 32), "chunks": (1, 4)}  # the sliders' ranges
MAX_FRAMES = 200  # the timeline player's ticks: Play shows them all in about ten seconds
PEAK_UNITS = N_("peak activations: micro-batch × stage units (interleaved: chunk units, 1/v of a stage each)")


def readout_rows(readout: dict) -> list[dict]:
    """One table row of the simulation's numbers, both bubble conventions side by side."""
    return [{_("schedule"): readout["schedule"], "p": readout["stages"], "m": readout["microbatches"],
             "v": readout["chunks"], _("makespan"): readout["makespan"],
             _("bubble (idle / total)"): readout["bubble_fraction"],
             _("ratio (idle / ideal)"): readout["bubble_ratio"],
             _("peak activations per rank"): str(readout["peak_activations"])}]


def readout_text(readout: dict) -> str:
    """The same numbers in one line of text (what a test or a printout reads)."""
    return _("{schedule}: p={p} m={m} v={v}   makespan {makespan}   bubble {bubble} % (ratio {ratio})   "
             "peak activations per rank {peaks}").format(
        schedule=readout["schedule"], p=readout["stages"], m=readout["microbatches"], v=readout["chunks"],
        makespan=f"{readout['makespan']:.2f}", bubble=f"{100 * readout['bubble_fraction']:.1f}",
        ratio=f"{readout['bubble_ratio']:.3f}", peaks=readout["peak_activations"])


def chart_title(readout: dict, ratio: float) -> str:
    chunks = f", v={readout['chunks']}" if readout["schedule"] == "interleaved" else ""
    return _("{schedule}: p={p}, m={m}{chunks}, t_B / t_F = {ratio} (simulated)").format(
        schedule=readout["schedule"], p=readout["stages"], m=readout["microbatches"], chunks=chunks,
        ratio=f"{ratio:g}")


def explorer_frame(name: str, stages: int, microbatches: int, chunks: int = 1, ratio: float = 2.0,
                   until: float | None = None):
    """(figure, readout text) for one position of the knobs; `until` draws only what has started by then."""
    return frame_of(explore(name, stages, microbatches, chunks, ratio), ratio, until)


def frame_of(run, ratio: float = 2.0, until: float | None = None):
    """(figure, readout text) of an `explore` result."""
    _plan, trace, readout = run
    fig = draw_gantt(trace, readout["stages"], until=until, title=chart_title(readout, ratio))
    return fig, readout_text(readout)


def timeline_ticks(trace, max_frames: int = MAX_FRAMES) -> tuple[list[float], list[str]]:
    """The player's frames: time 0 and every moment an action ends (at most `max_frames`, evenly
    picked, the last always kept), with a caption each saying how much of the step has run."""
    ends = sorted(e.end for e in trace)
    t0 = min((e.start for e in trace), default=0.0)
    moments = sorted({t0, *ends})
    if len(moments) > max_frames:  # keep the first and the last, spread the rest evenly
        step = (len(moments) - 1) / (max_frames - 1)
        moments = [moments[round(k * step)] for k in range(max_frames)]
    total, span = len(ends), (moments[-1] - t0) or 1.0
    caption = _("time {t} of {span}: {done} of {total} actions done")
    captions = [caption.format(t=f"{x - t0:.3g}", span=f"{span:.3g}", total=total,
                               done=bisect.bisect_right(ends, x + 1e-12 * span)) for x in moments]
    return [x - t0 for x in moments], captions


def real_run(run, name: str, stages: int, microbatches: int, chunks: int = 1, hidden: int = 256) -> dict:
    """The knobs' schedule (moved to what it can take) on `stages` real processes, by `run`
    (`run_pipeline`): two steps, the second timed; no torch comparison (the lesson shows that)."""
    m, v = nearest_valid(name, stages, microbatches, chunks)
    return run(name, stages, m, v, steps=2, global_batch=32 * m, hidden=hidden, compare_torch=False)


def _processes(n: int) -> str:
    return _("{n} process{es}").format(n=n, es="" if n == 1 else "es")


def real_view(res: dict):
    """(figure, text, [link]) for a real run: its timeline under the simulation fed the run's own
    per-action times, parity with one process, both bubbles, the activations each rank really held,
    and the real trace for Perfetto."""
    name, p, m, v = res["schedule_name"], res["world_size"], res["microbatches"], res["chunks"]
    ok = "✓" if res["max_abs_diff_vs_reference"] < 1e-5 else "✗"
    planned = peak_activations(make_schedule(name, p, m, v))
    text = "\n".join([
        _("{name} on {processes}, m={m}: loss and grads = one process {ok} (max |diff| {diff})").format(
            name=name, processes=_processes(p), m=m, ok=ok, diff=f"{res['max_abs_diff_vs_reference']:.1e}"),
        _("bubble measured {measured} (ratio {measured_ratio}), simulated with the measured times {simulated} "
          "(ratio {simulated_ratio})").format(
            measured=f"{res['measured_bubble_fraction']:.3f}", measured_ratio=f"{res['measured_bubble_ratio']:.2f}",
            simulated=f"{res['simulated_bubble_fraction']:.3f}",
            simulated_ratio=f"{res['simulated_bubble_ratio']:.2f}"),
        _("activations held per rank: measured {measured}, simulated {simulated}").format(
            measured=res["measured_peak_activations"], simulated=planned)])
    fig = draw_gantt_sim_vs_real(res["simulated_trace"], res["trace"], p,
                                 titles=(_("simulated, fed the measured per-action times"),
                                         _("real, {processes}").format(processes=_processes(p))))
    return fig, text, [trace_link(res["trace"], f"pipeline_real_{name}_p{p}_m{m}.json")]


def _check_knobs(name, stages, microbatches, chunks, ratio) -> None:
    """A knob must start on its slider, or the browser would move it and show another value."""
    check_choice("name", name, NAMES)
    for key, value in (("stages", stages), ("microbatches", microbatches), ("chunks", chunks)):
        check_int(key, value, *LIMITS[key])
    if ratio not in RATIOS:
        raise ValueError(_("{name}={value}: must be one of {options}").format(  # lesson 1's words (collectives.po)
            name="ratio", value=repr(ratio), options=", ".join(f"{r:g}" for r in RATIOS)))


def explorer_scene(run, ratio: float = 2.0) -> dict:
    """The scene of an `explore` result (the picture `frame_of` draws, for the browser): its Gantt chart titled
    with the knobs, the readout line as its text alternative."""
    _plan, trace, readout = run
    return gantt_scene(trace, readout["stages"], title=chart_title(readout, ratio), alt=readout_text(readout))


def schedule_explorer(name: str = "1f1b", stages: int = 4, microbatches: int = 8, chunks: int = 2,
                      ratio: float = 2.0, run=None) -> Panel:
    """Knobs → one simulated Gantt chart in a time player + a readout table + the simulated trace's link.
    With `run` (e.g. `simlab.parity.pipeline.run_pipeline`), a button runs the knobs' schedule for real.
    The chart is drawn in the browser (`pipeline_scene.GanttTimeline`): a knob sends a scene, not a picture."""
    import ipywidgets as w
    _check_knobs(name, stages, microbatches, chunks, ratio)
    slider = dict(continuous_update=False, style={"description_width": "initial"})
    knobs = {"name": w.Dropdown(options=NAMES, value=name, description=_("schedule")),
             "ratio": w.SelectionSlider(options=[(f"{r:g}", r) for r in RATIOS], value=ratio,
                                        description="t_B / t_F", **slider),
             "stages": w.IntSlider(stages, *LIMITS["stages"], description=_("stages p"), **slider),
             "microbatches": w.IntSlider(microbatches, *LIMITS["microbatches"], description=_("micro-batches m"),
                                         **slider),
             "chunks": w.IntSlider(chunks, *LIMITS["chunks"], description=_("chunks v (interleaved)"),
                                   **slider)}
    readout, sim_link = w.HTML(), w.HTML()
    peak_units = _(PEAK_UNITS)
    player = GanttTimeline(hint=_("▶ run this cell to get the timeline player"), label_prefix="t ")

    def rebuild(_change=None) -> None:  # one simulation and one scene per knob change
        k = {key: knob.value for key, knob in knobs.items()}
        knobs["chunks"].disabled = k["name"] != "interleaved"  # only interleaving splits a rank into chunks
        sim = explore(k["name"], k["stages"], k["microbatches"], k["chunks"], k["ratio"])
        times, captions = timeline_ticks(sim[1])
        scale = time_scale(sim[1])  # the ticks in the chart's time unit
        player.set_reveal(explorer_scene(sim, k["ratio"]), [x * scale for x in times], captions)
        r = sim[2]
        readout.value = table_html(readout_rows(r), list(readout_rows(r)[0])) + f"<small>{peak_units}</small>"
        sim_link.value = trace_link_html(sim[1], f"pipeline_simulated_{r['schedule']}_p{r['stages']}_m"
                                                 f"{r['microbatches']}.json")

    for knob in knobs.values():
        knob.observe(rebuild, names="value")
    rebuild()
    children = [w.HBox([knobs["name"], knobs["ratio"]]),
                w.HBox([knobs["stages"], knobs["microbatches"], knobs["chunks"]]), player, readout, sim_link]
    control = None
    if run is not None:  # without a run there is nothing to press
        def run_shown():
            return real_run(run, *(knobs[key].value for key in ("name", "stages", "microbatches", "chunks")))

        control = run_control(run_shown, real_view, label=_("run for real"),
                              hint=_("▶ run this cell to get the real-run button"))
        children.append(control)
    panel = Panel(children, hint=_("▶ run this cell to get the schedule explorer"))
    # for tests and curious learners: the knobs, what they show, and the real run's control
    panel.knobs, panel.player, panel.readout, panel.sim_link, panel.run_control = (knobs, player, readout,
                                                                                   sim_link, control)
    return panel
