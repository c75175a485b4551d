"""Lesson 4's schedule explorer: schedule, p, m, v and t_B/t_F drive the Gantt chart and the readouts;
a button runs the same schedule on p real processes and draws it under its simulation.

Every number it shows comes from `simlab.sim.pipeline.explore` (which moves knobs a schedule cannot take
to the nearest it can); this module only draws. The real run is not started here: the notebook hands
the explorer a function that runs it (`simlab.parity.pipeline.run_pipeline`), as renderers start no
processes. `explorer_frame` and `real_frame` are the pure parts, so tests need no browser.
"""
from __future__ import annotations

import html

from ..sim.pipeline import explore
from ..sim.schedules import SCHEDULES, nearest_valid
from .mpl import figure_png
from .pipeline import draw_gantt, draw_sim_vs_real

NAMES = tuple(SCHEDULES)  # naive, gpipe, 1f1b, interleaved, zero-bubble


def readout_text(readout: dict) -> str:
    peak = readout["peak_activations"]
    return (f"{readout['schedule']}: p={readout['stages']} m={readout['microbatches']} v={readout['chunks']}   "
            f"makespan {readout['makespan']:.2f}   bubble {100 * readout['bubble_fraction']:.1f} %   "
            f"peak activations per rank {peak} (stage × micro-batch units; interleaved: chunk units, 1/v each)")


def explorer_frame(name: str, stages: int, microbatches: int, chunks: int = 1, ratio: float = 2.0,
                   until: float | None = None):
    """(figure, readout text) for one position of the knobs; `until` is the step slider's time."""
    return frame_of(explore(name, stages, microbatches, chunks, ratio), until)


def frame_of(run, until: float | None = None):
    """(figure, readout text) of an `explore` result: the slider redraws without re-simulating."""
    _, trace, readout = run
    fig = draw_gantt(trace, readout["stages"], until=until, title=readout_text(readout))
    return fig, readout_text(readout)


def real_frame(run, name: str, stages: int, microbatches: int, chunks: int = 1, hidden: int = 256):
    """(figure, text): the knobs' schedule run on `stages` real processes by `run` (`run_pipeline`),
    drawn under its simulation fed the run's own per-action times; parity with one process is shown."""
    m, v = nearest_valid(name, stages, microbatches, chunks)
    res = run(name, stages, m, v, steps=2, global_batch=32 * m, hidden=hidden, compare_torch=False)
    ok = "✓" if res["max_abs_diff_vs_reference"] < 1e-5 else "✗"
    text = (f"{name} on {stages} processes: loss and grads vs one process {ok} "
            f"(max |diff| {res['max_abs_diff_vs_reference']:.1e}); bubble measured "
            f"{res['measured_bubble_fraction']:.3f}, simulated with the measured times {res['simulated_bubble_fraction']:.3f}")
    fig = draw_sim_vs_real(res["simulated_trace"], res["trace"], stages,
                           titles=("simulated (measured per-action times)", f"real, {stages} processes"))
    return fig, text


def schedule_explorer(name: str = "1f1b", stages: int = 4, microbatches: int = 8, chunks: int = 2,
                      ratio: float = 2.0, run=None):
    """Knobs → Gantt chart (PNG in an Image widget) + readout; Play/slider walk the timeline. With
    `run` (e.g. `simlab.parity.pipeline.run_pipeline`), a button runs the knobs' schedule for real."""
    import ipywidgets as w
    pick = w.Dropdown(options=NAMES, value=name, description="schedule")
    p = w.IntSlider(value=stages, min=1, max=8, description="stages p")
    m = w.IntSlider(value=microbatches, min=1, max=32, description="micro-b. m")
    v = w.IntSlider(value=chunks, min=1, max=4, description="chunks v")
    r = w.FloatSlider(value=ratio, min=0.5, max=4.0, step=0.25, description="t_B / t_F")
    tick = w.IntSlider(value=0, min=0, max=1, description="time")
    play = w.Play(interval=150)
    w.jslink((play, "value"), (tick, "value"))
    image, text = w.Image(format="png"), w.HTML()

    state = {}  # the current knobs' simulation: one per knob change, the slider only redraws it

    def rebuild(_=None) -> None:  # knobs changed: new schedule, new time range
        state["run"] = explore(pick.value, p.value, m.value, v.value, r.value)
        steps = max(1, round(state["run"][2]["makespan"] * v.value * 4))  # quarter-forward ticks
        tick.unobserve(draw, names="value")  # one redraw below, not one per trait set here
        tick.max = play.max = steps
        tick.value = play.value = steps
        tick.observe(draw, names="value")
        draw()

    def draw(_=None) -> None:
        until = state["run"][2]["makespan"] * tick.value / max(tick.max, 1)
        fig, readout = frame_of(state["run"], until)
        image.value = figure_png(fig)
        text.value = f"<pre>{readout}</pre>"

    go, real_image, real_text = w.Button(description="run on real processes"), w.Image(format="png"), w.HTML()

    def run_real(_=None) -> None:  # a few seconds: p processes, two steps
        go.disabled, real_text.value = True, "<pre>running…</pre>"
        try:
            fig, summary = real_frame(run, pick.value, p.value, m.value, v.value)
            real_image.value, real_text.value = figure_png(fig), f"<pre>{summary}</pre>"
        except Exception as err:  # LaunchTimeout, WorkerError, …: say so instead of "running…" forever
            line = (str(err).strip().splitlines() or [""])[0]
            real_text.value = f"<pre>real run failed: {type(err).__name__}: {html.escape(line)}</pre>"
        finally:
            go.disabled = False

    for knob in (pick, p, m, v, r):
        knob.observe(rebuild, names="value")
    tick.observe(draw, names="value")
    go.on_click(run_real)
    rebuild()
    real = [go, real_image, real_text] if run is not None else []  # without a run there is nothing to press
    return w.VBox([w.HBox([pick, r]), w.HBox([p, m, v]), w.HBox([play, tick]), image, text, *real])
