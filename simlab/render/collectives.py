"""Lesson 1's step player: Play button + slider that walk through a collective, step by step.

Shows the simulated step and, when a real run is given, the real step next to it with a visible
per-step verdict (``match ✓`` / ``match ✗``). The verdicts come from the engine
(`simlab.sim.stepper.steps_match`); this module only displays them.

The content of each frame comes from pure helpers, so tests (and curious learners) can check it
without a browser: `player_frame(k, ...)` gives the text, `player_figure(k, ...)` the picture.

    >>> from simlab.sim.collectives import ring_all_reduce
    >>> from simlab.sim.stepper import simulate
    >>> plan = ring_all_reduce(world_size=3, numel=6)
    >>> steps = simulate(plan).steps
    >>> player_frame(4, steps, plan, real_steps=steps).splitlines()[0]
    'step 4/4 of ring_all_reduce (n=3, 24 B): all-gather  match ✓'
"""
from __future__ import annotations

import html

from ..sim.stepper import step_matches, steps_match
from .mpl import figure_png
from .text import MATCH, side_by_side_text, step_text

MATCH_COLOR = {True: "#2ca02c", False: "#d62728"}


def _verdict(k: int, sim_steps, real_steps, verdicts) -> bool:
    """The engine's verdict for step k; a step the real run never reached does not match."""
    if verdicts is not None:
        return bool(verdicts[k]) if k < len(verdicts) else False
    if k >= len(real_steps):
        return False
    return step_matches(sim_steps[k], real_steps[k])


def player_frame(k: int, sim_steps, plan, real_steps=None, verdicts=None, show: str | None = None) -> str:
    """The text the player shows for step k: one table, or simulated | real with the verdict."""
    if real_steps is None:
        return step_text(sim_steps[k], plan, show or "sources")
    real = real_steps[k] if k < len(real_steps) else None
    match = _verdict(k, sim_steps, real_steps, verdicts)
    return side_by_side_text(sim_steps[k], real, plan, match, show or "values")


def player_figure(k: int, sim_steps, plan, real_steps=None, verdicts=None):
    """The picture for step k: the ring of the simulated step, and of the real one beside it."""
    from matplotlib.figure import Figure
    from .mpl import draw_ring_step
    if real_steps is None:
        return draw_ring_step(sim_steps[k], plan)
    fig = Figure(figsize=(11, 6.6), layout="constrained")
    sim_ax, real_ax = fig.subplots(1, 2)
    draw_ring_step(sim_steps[k], plan, ax=sim_ax, title="simulated")
    match = _verdict(k, sim_steps, real_steps, verdicts)
    if k < len(real_steps):
        draw_ring_step(real_steps[k], plan, ax=real_ax, title=f"real  ({MATCH[match]})")
        real_ax.title.set_color(MATCH_COLOR[match])  # the verdict is the point of this panel
    else:
        real_ax.axis("off")
        real_ax.set_title(f"real: no step {k}  ({MATCH[match]})")
    fig.suptitle(f"step {k}/{len(sim_steps) - 1} of {plan.name}", fontsize=11)
    return fig


def verdict_html(k: int, verdicts) -> str:
    """'match ✓' in green or 'match ✗' in red, then one mark per step (the current one boxed)."""
    match = bool(verdicts[k]) if k < len(verdicts) else False
    marks = "".join(
        f"<span style='border:1px solid #333;padding:0 2px'>{'✓' if v else '✗'}</span>" if i == k
        else ("✓" if v else "✗") for i, v in enumerate(verdicts))
    return (f"<b style='color:{MATCH_COLOR[match]};font-size:1.1em'>{MATCH[match]}</b>"
            f"&nbsp;&nbsp;<span style='font-family:monospace'>{marks}</span>"
            f"&nbsp;&nbsp;{sum(map(bool, verdicts))}/{len(verdicts)} steps match")


def step_player(sim_steps, plan, real_steps=None, verdicts=None, mode: str = "text",
                interval_ms: int = 900):
    """Play + slider (linked in the browser with `jslink`) over steps 0..K; returns a VBox.

    mode "text": `player_frame` in a <pre>. mode "plot": `player_figure` as a PNG in an Image
    widget (unlike an Output widget, an Image needs no live kernel to capture the drawing and
    keeps its picture when the notebook is saved).
    """
    import ipywidgets as w
    if mode not in ("text", "plot"):
        raise ValueError(f"mode={mode!r}: must be 'text' or 'plot'")
    if real_steps is not None and verdicts is None:
        verdicts = steps_match(sim_steps, real_steps)  # the engine decides what "match" means
    last = len(sim_steps) - 1
    play = w.Play(value=0, min=0, max=last, step=1, interval=interval_ms, description="play")
    slider = w.IntSlider(value=0, min=0, max=last, description="step")
    w.jslink((play, "value"), (slider, "value"))  # Play drives the slider even without a kernel
    status = w.HTML()
    view = w.HTML() if mode == "text" else w.Image(format="png")

    def show(k: int) -> None:
        if verdicts is not None:
            status.value = verdict_html(k, verdicts)
        if mode == "text":
            text = player_frame(k, sim_steps, plan, real_steps, verdicts)
            view.value = f"<pre style='line-height:1.25'>{html.escape(text)}</pre>"
        else:
            view.value = figure_png(player_figure(k, sim_steps, plan, real_steps, verdicts))

    slider.observe(lambda change: show(change["new"]), names="value")
    show(0)
    return w.VBox([w.HBox([play, slider, status]), view])
