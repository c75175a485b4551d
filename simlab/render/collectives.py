"""Lesson 1's widgets: the ring player, the simulated | real player with a verdict per step, and the
ring lab (N and size knobs, a button that runs the shown ring on N real processes).

The ring lab is drawn in the browser (`render.chart`): a knob re-simulates and sends one scene per step
(`ring_scene`, and after a real run `pair_scene`: the pictures `draw_ring_step` and `player_figure` draw).

Players are `frame_player`s: every step is drawn once, here, and stepped in the browser. What a frame
shows comes from pure helpers, so tests (and curious learners) can check it without a browser:
`player_frame(k, ...)` gives the text, `player_figure(k, ...)` the picture. The verdicts come from the
engine (`simlab.sim.collectives_stepper.steps_match`); this module only displays them.

    >>> from simlab.sim.collectives import ring_all_reduce
    >>> from simlab.sim.collectives_stepper import simulate
    >>> plan = ring_all_reduce(world_size=3, numel=6)
    >>> steps = simulate(plan).steps
    >>> player_frame(4, steps, plan, real_steps=steps).splitlines()[0]
    'step 4/4 of ring_all_reduce (n=3, 24 B): all-gather  match ✓'
"""
from __future__ import annotations

import functools

from ..i18n import _
from ..sim.collectives import power_inputs, ring_all_reduce
from ..sim.collectives_stepper import simulate, step_matches, steps_match
from .collectives_figures import (
    ARROW_BEND,
    MAX_CHUNK_BOXES,
    RADIUS,
    RING_FIGSIZE,
    _sizes,
    arrow_path,
    chunk_row,
    contribution_color,
    draw_ring_step,
    rank_position,
    ring_legend,
    ring_legend_handles,
    ring_title,
)
from .collectives_text import header, match_text, side_by_side_text, step_text
from .picture import DISPLAY_DPI
from .style import FAINT_GREY, INK, MATCH_COLOR, MIN_FONT, PAPER, SOFT_INK, TRANSFER_COLOR

# ipywidgets and anywidget are imported where a widget is built: drawing and text stay headless

PAIR_FIGSIZE = (2 * RING_FIGSIZE[0] - 0.4, RING_FIGSIZE[1])  # two rings, one shared legend: 880 x 520 px
RING_PX = round(RING_FIGSIZE[0] * DISPLAY_DPI)  # a ring panel in the browser, as wide as the figure


def _px(points: float) -> int:
    return round(points * DISPLAY_DPI / 72)  # a font size in points (the figures') as CSS px (the charts')


def _given(**keys) -> dict:
    return {k: v for k, v in keys.items() if v is not None}


def _verdict(k: int, sim_steps, real_steps, verdicts) -> bool:
    """The engine's verdict for step k; a step the real run never reached does not match."""
    if verdicts is not None:
        return bool(verdicts[k]) if k < len(verdicts) else False
    if k >= len(real_steps):
        return False
    return step_matches(sim_steps[k], real_steps[k])


def player_frame(k: int, sim_steps, plan, real_steps=None, verdicts=None, show: str | None = None) -> str:
    """The text for step k: one table, or simulated | real with the verdict."""
    if real_steps is None:
        return step_text(sim_steps[k], plan, show or "sources")
    real = real_steps[k] if k < len(real_steps) else None
    match = _verdict(k, sim_steps, real_steps, verdicts)
    return side_by_side_text(sim_steps[k], real, plan, match, show or "values")


def player_figure(k: int, sim_steps, plan, real_steps=None, verdicts=None):
    """The picture for step k: the simulated ring, and the real one beside it under one legend."""
    from matplotlib.figure import Figure
    if real_steps is None:
        return draw_ring_step(sim_steps[k], plan)
    fig = Figure(figsize=PAIR_FIGSIZE, layout="constrained")
    sim_ax, real_ax = fig.subplots(1, 2)
    draw_ring_step(sim_steps[k], plan, ax=sim_ax, title=_("simulated"), legend=False)
    match = _verdict(k, sim_steps, real_steps, verdicts)
    shown = [sim_steps[k]]
    if k < len(real_steps):
        draw_ring_step(real_steps[k], plan, ax=real_ax, title=_("real") + f"  ({match_text(match)})", legend=False)
        real_ax.title.set_color(MATCH_COLOR[match])  # the verdict is the point of this panel
        shown.append(real_steps[k])
    else:
        real_ax.axis("off")
        real_ax.set_title(_("real: no step {k}").format(k=k) + f"  ({match_text(match)})", fontsize=11)
    fig.suptitle(header(sim_steps[k], plan), fontsize=11)
    fig.legend(handles=ring_legend_handles(shown, plan.world_size), loc="outside lower center", ncol=3,
               fontsize=MIN_FONT, frameon=False, handlelength=1.6)
    return fig


def _hex(color) -> str:
    from matplotlib.colors import to_hex
    return to_hex(color)  # a colormap's shade (RGBA) as the "#rrggbb" a chart takes


@functools.lru_cache(maxsize=512)
def _shade(count: int | None, n: int, held: bool) -> str:
    """`contribution_color` as "#rrggbb", once per shade: matplotlib rebuilds the colormap on every lookup
    (1 ms each, a second for the boxes of a ring of 8)."""
    return _hex(contribution_color(count, n, held))


def ring_panel(step, plan, title: str, title_color: str | None = None, size: int = RING_PX) -> dict:
    """`draw_ring_step`'s ring as a chart panel: the same nodes, chunk boxes, shades and arrows, in the same
    places (`collectives_figures`' `rank_position`, `chunk_row`, `arrow_path`), its legend left to the scene."""
    from .chart import arrow, axis, circle, panel, rect, text
    n, chunks = plan.world_size, len(plan.chunk_sizes)
    s = _sizes(n, chunks)
    ring = RADIUS if n > 1 else 0.0  # a lone rank sits in the middle
    extent, marks, boxes = ring + s["node"], [], []
    for r in range(n):
        x, y = rank_position(r, n)
        marks.append(circle(x, y, s["node"], PAPER, stroke=INK, r_unit="data", width=1.2, size=_px(s["font"]),
                            label=f"r{r}" if r % s["named"] == 0 else None))
        if chunks > MAX_CHUNK_BOXES:
            continue
        left, bottom, reach = chunk_row(step, r, n, s)
        extent = max(extent, ring + reach)
        for c, value in enumerate(step.values[r]):
            sources = step.sources[r][c] if step.sources is not None else None
            dark = sources is not None and len(sources) > n / 2
            boxes.append(rect(left + c * s["box_w"], left + (c + 1) * s["box_w"], bottom, bottom + s["box_h"],
                              fill=_shade(len(sources) if sources is not None else None, n, value is not None),
                              stroke=SOFT_INK, width=0.6,
                              label=str(c) if s["box_labels"] else None, label_color=PAPER if dark else INK))
    for t in step.transfers:
        start, end, middle = arrow_path(t, n, s)
        marks.append(arrow(*start, *end, TRANSFER_COLOR[t.op], width=1.4, bend=ARROW_BEND, dash=t.op == "copy"))
        if n <= 12:  # name the chunk (or, with one chunk, the bytes) while labels are still legible
            marks.append(text(*middle, f"c{t.chunk}" if chunks > 1 else f"{t.nbytes} B", color=TRANSFER_COLOR[t.op],
                              halo=True))
    if chunks > MAX_CHUNK_BOXES:
        marks.append(text(0, 0, _("{chunks} chunks per rank:\nboxes hidden").format(chunks=chunks), color=FAINT_GREY))
    lim = extent + 0.05
    return panel(boxes + marks, x=axis(-lim, lim, hidden=True), y=axis(-lim, lim, hidden=True), aspect="equal",
                 width=size, height=size + 40, title=title, title_at="center", **_given(title_color=title_color))


def ring_scene(step, plan) -> dict:
    """One step of the ring as a chart scene (`draw_ring_step`'s picture), its table as the text alternative."""
    from .chart import scene
    n = plan.world_size
    legend = [(label, _hex(color), style) for label, color, style in ring_legend([step], n)]
    return scene(panels=[ring_panel(step, plan, ring_title(step, plan))], legend=legend,
                 alt=step_text(step, plan, "sources"))


def pair_scene(k: int, sim_steps, plan, real_steps, verdicts) -> dict:
    """Step k simulated | real side by side under one legend, the real panel's title in the verdict's colour
    (`player_figure`'s picture); the text alternative is the side-by-side table."""
    from .chart import scene
    match = _verdict(k, sim_steps, real_steps, verdicts)
    shown, real = [sim_steps[k]], real_steps[k] if k < len(real_steps) else None
    panels = [ring_panel(sim_steps[k], plan, _("simulated"), size=RING_PX - 20)]
    if real is not None:
        panels.append(ring_panel(real, plan, _("real") + f"  ({match_text(match)})", MATCH_COLOR[match], RING_PX - 20))
        shown.append(real)
    else:  # a step the real run never reached: an empty panel that says so
        none = _("real: no step {k}").format(k=k) + f"  ({match_text(match)})"
        panels.append({**ring_panel(sim_steps[k], plan, none, MATCH_COLOR[match], RING_PX - 20), "marks": []})
    legend = [(label, _hex(color), style) for label, color, style in ring_legend(shown, plan.world_size)]
    return scene(panels=panels, columns=2, title=header(sim_steps[k], plan), legend=legend,
                 alt=player_frame(k, sim_steps, plan, real_steps, verdicts))


def verdict_html(k: int, verdicts) -> str:
    """'match ✓' in green or 'match ✗' in red, then one mark per step (the current one boxed)."""
    match = bool(verdicts[k]) if k < len(verdicts) else False
    marks = "".join(
        f"<span style='border:1px solid {INK};padding:0 2px'>{'✓' if v else '✗'}</span>" if i == k
        else ("✓" if v else "✗") for i, v in enumerate(verdicts))
    return (f"<span style='white-space:nowrap'><b style='color:{MATCH_COLOR[match]};font-size:1.1em'>"
            f"{match_text(match)}</b>&nbsp;&nbsp;<span style='font-family:monospace'>{marks}</span>&nbsp;&nbsp;"
            + _("{matching}/{steps} steps match").format(matching=sum(map(bool, verdicts)), steps=len(verdicts))
            + "</span>")


def step_player(sim_steps, plan, real_steps=None, verdicts=None, seconds: float = 8.0, hint: str | None = None):
    """A `frame_player` over steps 0..K: the ring, or simulated | real with the verdict under each step.
    The default hint is looked up when called, so it is in the language in force then."""
    from .player import frame_player
    if real_steps is not None and verdicts is None:
        verdicts = steps_match(sim_steps, real_steps)  # the engine decides what "match" means
    frames = [player_figure(k, sim_steps, plan, real_steps, verdicts) for k in range(len(sim_steps))]
    captions = None if verdicts is None else [verdict_html(k, verdicts) for k in range(len(sim_steps))]
    return frame_player(frames, captions=captions, seconds=seconds, label=_("step "),
                        hint=_("▶ run this cell to get the ring player") if hint is None else hint)


# ---- the ring lab: knobs, the simulated ring, and the same ring on real processes ---------------

def _size(nbytes: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def real_run_text(result, sim_steps, verdicts) -> str:
    """What the real run did, in numbers: steps matching, bytes per rank (real and simulated), torch diff."""
    n, plan = result["world_size"], result["plan"]
    return "\n".join([
        _("{n} process{es} ({backend}), ring all-reduce of {size}: {matching}/{steps} steps match the "
          "simulation").format(n=n, es="" if n == 1 else "es", backend=result["backend"], size=_size(plan.nbytes),
                               matching=sum(verdicts), steps=len(verdicts)),
        _("bytes sent per rank   real {real}   simulated {simulated}").format(
            real=result["bytes_sent_per_rank"], simulated=list(sim_steps[-1].bytes_sent)),
        _("max |ours − torch's all_reduce| = {diff}").format(diff=f"{result['max_abs_diff_vs_torch']:g}")])


class RingLab:
    """N and size knobs over the simulated ring all-reduce (rank r brings 2**r, so every chunk's value
    says whose inputs it holds); the button runs the shown ring on N real processes through `run`,
    then the player shows simulated | real with the engine's verdict for every step.
    Displayed as its `panel` (a `Panel`, whose text form is the hint)."""

    def __init__(self, run, world_sizes, sizes, world_size: int, numel: int, hint: str):
        import ipywidgets as w

        from .chart import ChartPlayer
        from .controls import Panel, run_control
        style = {"description_width": "initial"}
        # explicit options: the default is one of them, never a value snapped to a grid
        self.ranks = w.SelectionSlider(options=[(str(k), k) for k in world_sizes], value=world_size,
                                       description=_("ranks N"), style=style)
        self.size = w.SelectionSlider(options=[(_size(4 * m), m) for m in sizes], value=numel,
                                      description=_("buffer (float32)"), style=style)
        # its scenes come from _simulate, and after a run from _show: drawn and stepped in the browser
        self.player = ChartPlayer(hint="", label_prefix=_("step "))
        self.sim_link = w.HTML()
        self.control = run_control(lambda: run(world_size=self.ranks.value, numel=self.size.value), self._show,
                                   label=_("run this ring on N real processes"))
        self._simulate()
        for knob in (self.ranks, self.size):
            knob.observe(lambda _change: self._simulate(), names="value")
        self.panel = Panel([w.HBox([self.ranks, self.size]), self.player, self.sim_link, self.control], hint=hint)

    def __repr__(self) -> str:
        return repr(self.panel)

    def _repr_mimebundle_(self, **kwargs):  # Jupyter shows the panel
        return self.panel._repr_mimebundle_(**kwargs)

    def _simulate(self) -> None:
        """Simulate what the knobs show; an earlier real run no longer applies to it."""
        from .controls import trace_link_html
        n, numel = self.ranks.value, self.size.value
        self.plan = ring_all_reduce(n, numel)
        self.sim = simulate(self.plan, power_inputs(n, numel))
        self.player.set_frames([ring_scene(step, self.plan) for step in self.sim.steps], seconds=8.0)
        self.sim_link.value = trace_link_html(self.sim.trace, f"ring_all_reduce_n{n}_simulated.json")
        self.control.readout.value, self.control.extra.children = "", ()

    def _show(self, result):
        """After a real run: simulated | real in the player, the numbers in the readout, the real trace."""
        from .controls import trace_link
        if (result["world_size"], result["numel"]) != (self.plan.world_size, self.plan.numel):
            raise ValueError(_("the knobs changed while it ran: press the button again"))
        if result.get("inputs") != "powers-of-two":  # else no real value could equal a simulated one
            raise ValueError(_("run must use inputs='powers-of-two', as the simulation shown does"))
        verdicts = steps_match(self.sim.steps, result["steps"])
        steps, plan, real = self.sim.steps, self.plan, result["steps"]
        self.player.set_frames([pair_scene(k, steps, plan, real, verdicts) for k in range(len(steps))],
                               captions=[verdict_html(k, verdicts) for k in range(len(steps))], seconds=8.0)
        link = trace_link(result["trace"], f"ring_all_reduce_n{self.plan.world_size}_real.json")
        return None, real_run_text(result, self.sim.steps, verdicts), [link]


def ring_lab(run, *, world_sizes=(2, 3, 4, 5, 6, 8), sizes=(4, 8, 16, 64, 1024, 1 << 18),
             world_size: int = 4, numel: int = 8, hint: str | None = None) -> RingLab:
    """The ring lab. `run(world_size=, numel=)` runs the ring all-reduce for real and returns
    `run_collective`'s result (snapshots on, `inputs="powers-of-two"`); `sizes` are in elements."""
    for name, value, options in (("world_size", world_size, world_sizes), ("numel", numel, sizes)):
        if value not in options:
            raise ValueError(_("{name}={value}: must be one of {options}").format(
                name=name, value=repr(value), options=", ".join(map(str, options))))
    return RingLab(run, world_sizes, sizes, world_size, numel,
                   _("▶ run this cell to get the ring lab") if hint is None else hint)


__all__ = ["player_frame", "player_figure", "verdict_html", "step_player", "ring_lab", "real_run_text", "ring_panel",
           "ring_scene", "pair_scene"]
