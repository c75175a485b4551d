"""Pipeline schedules drawn as Gantt charts: one row per rank, one box per action.

Any pipeline `Trace` works — simulated by `simlab.sim.pipeline.simulate` (model time) or recorded by
`simlab.exec.pipeline` (wall time): each compute event is named after its action ("2F0": stage 2,
forward, micro-batch 0). Boxes are coloured by op (F, B, or the split backward's I and W) and show the
micro-batch; with several chunks per rank (interleaved) later chunks are drawn lighter. White space is
the bubble.

- `draw_gantt(trace, ranks, until=…)`: a matplotlib Figure; `until` draws only what has started by then,
  with a cursor (a static "up to time t"; the explorer's player greys out the rest in the browser
  instead, on one picture). Text is MIN_FONT or larger as shown; the legend sits outside the axes. The
  boxes and their micro-batch labels are two collections, so a chart of 2,048 actions still redraws
  within an explorer's budget.
- `gantt_text(trace, ranks)`: the same chart as fixed-width text, for nbval to compare.
- `draw_gantt_sim_vs_real(sim, real, ranks)`: the simulation above the real run, on one time axis
  (`render.style.draw_sim_vs_real`).

Words go through `_()` (simlab.i18n): after `set_language("zh")` the legends, axis labels and the text
chart's key line are Chinese; the chart's own cells (`F0`, `B3`, `.`, `rank 0`) stay as they are, since
they are the notation the lesson teaches.

    >>> from simlab.trace import Event, Trace
    >>> t = Trace([Event(0, "compute", 0, name="0F0", start=0, end=1), Event(1, "compute", 0, name="1F0",
    ...            start=1, end=2), Event(1, "compute", 1, name="1B0", start=2, end=4),
    ...            Event(0, "compute", 1, name="0B0", start=4, end=6)])
    >>> print(gantt_text(t, 2))
    rank 0 |F0 .  .  .  B0 == |
    rank 1 |.  F0 B0 == .  .  |
    one column = 1 time unit; F forward, B backward, digits = micro-batch, '.' idle (the bubble)
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from ..i18n import N_, _
from ..plan import Action
from .style import MIN_FONT, OP_COLOR, TAB_RED, draw_sim_vs_real, time_unit

# shown through _(): the legends say them in the language in force
OP_NAME = {"F": N_("forward"), "B": N_("backward"), "I": N_("backward-input"), "W": N_("backward-weight")}
# the text chart's key: each op with the separator after it, as one message (Chinese writes '，')
OP_KEY = {"F": N_("F forward, "), "B": N_("B backward, "), "I": N_("I backward-input, "),
          "W": N_("W backward-weight, ")}
ROW = 0.8  # box height; rows are 1 apart


@lru_cache(maxsize=1 << 16)
def _parse(name: str) -> Action:
    """Action.parse, remembered: an explorer redraws the same few thousand names on every change."""
    return Action.parse(name)


def _actions(trace):
    """(event, Action) for every compute event named like '2F0', in time order."""
    out = []
    for e in sorted(trace, key=lambda e: (e.start, e.rank)):
        if e.kind == "compute":
            try:
                out.append((e, _parse(e.name)))
            except ValueError:
                continue  # not a pipeline action (e.g. a loss event): not drawn
    return out


def _shade(color: str, chunk: int) -> str:
    """Later chunks of an interleaved schedule: the same colour, mixed with white."""
    if chunk == 0:
        return color
    mix = min(0.25 * chunk, 0.6)
    rgb = [int(color[i:i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(c + (255 - c) * mix):02x}" for c in rgb)


GANTT_MARGINS = dict(left=0.8, right=1.8, top=0.4, bottom=0.55)  # inches: rank names, legend, title, time axis


def _gantt_axes(ranks: int):
    """A Figure of fixed margins for one Gantt chart: no layout engine to run on every redraw (it cost
    about a third of an explorer update), and the axes sit where the margins say."""
    from matplotlib.figure import Figure
    width, height = 10.0, 0.55 + 0.45 * ranks + GANTT_MARGINS["top"] + GANTT_MARGINS["bottom"] - 0.2
    fig = Figure(figsize=(width, height))
    m = GANTT_MARGINS
    fig.subplots_adjust(left=m["left"] / width, right=1 - m["right"] / width, top=1 - m["top"] / height,
                        bottom=m["bottom"] / height)
    return fig.add_subplot()


LABEL_INCHES = (0.09, 0.06)  # a box label at MIN_FONT needs 0.09 in per digit plus 0.06 in of margin
MAX_EDGED = 512  # boxes drawn with a white outline; more are too narrow for one to show, and outlines cost


def _compound(rects):
    """One Path of many boxes: rects (n, 4) as x0, x1, y0, y1 → n closed rectangles, 5 vertices each."""
    from matplotlib.path import Path  # matplotlib loads only when something is drawn (the CLI prints text)
    codes = [Path.MOVETO, Path.LINETO, Path.LINETO, Path.LINETO, Path.CLOSEPOLY]
    x0, x1, y0, y1 = np.asarray(rects, dtype=float).T  # (n,) each
    corners = np.stack([np.stack(c, axis=1) for c in ((x0, y0), (x0, y1), (x1, y1), (x1, y0), (x0, y0))], axis=1)
    return Path(corners.reshape(-1, 2), np.tile(codes, len(rects)))  # (5n, 2)


@lru_cache(maxsize=4096)
def _glyphs(text: str):
    """`text` at MIN_FONT as an outline (a Path) in points, centred on (0, 0)."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextPath
    from matplotlib.transforms import Affine2D
    path = TextPath((0, 0), text, prop=FontProperties(size=MIN_FONT))
    box = path.get_extents()
    return path.transformed(Affine2D().translate(-(box.x0 + box.x1) / 2, -(box.y0 + box.y1) / 2))


def _label_collection(ax, labels):
    """All box labels as one collection of glyph outlines, placed like scatter markers (offsets in data,
    outlines in points): one draw call however many there are, where a Text artist each cost ~1 ms per
    draw and a picture is laid out, measured and painted — so the explorer had to drop its labels."""
    from matplotlib.collections import PathCollection
    from matplotlib.transforms import IdentityTransform
    glyphs = PathCollection([_glyphs(text) for _x, _y, text, _c in labels], sizes=[1.0] * len(labels),
                            offsets=[(x, y) for x, y, _, _ in labels], offset_transform=ax.transData,
                            facecolors=[color for *_, color in labels], edgecolors="none", gid="labels")
    glyphs.set_transform(IdentityTransform())  # sizes=1: one outline unit is one point, at any dpi
    glyphs.set_in_layout(False)
    ax.add_collection(glyphs, autolim=False)


def draw_gantt(trace, ranks: int, ax=None, title: str | None = None, until: float | None = None,
               span: float | None = None):
    """Rank 0 on top; a box per action, labelled with its micro-batch where the label fits. Returns the
    Figure. The boxes are one collection (gid "actions") of one compound path per colour, and the
    labels another (gid "labels", glyph outlines at MIN_FONT): thousands of actions draw in
    milliseconds, where a Rectangle patch and a Text each took seconds, so an explorer can redraw on
    every knob change.

    until: draw only actions started by then (clipped at it) and a cursor there. span: the time axis
    length, so several charts can share one scale."""
    from matplotlib.collections import PathCollection
    from matplotlib.patches import Patch
    acts = _actions(trace)
    ax = ax if ax is not None else _gantt_axes(ranks)
    t0 = min((e.start for e, _a in acts), default=0.0)
    span = span or (max((e.end for e, _ in acts), default=1.0) - t0) or 1.0
    scale, unit = time_unit(span)
    inches = ax.figure.get_figwidth() * ax.get_position().width * 0.9  # the axes' width, before layout
    by_color, labels = {}, []  # colour → [(x0, x1, y0, y1)], in first-drawn order
    for e, a in acts:
        if until is not None and e.start - t0 >= until:
            continue
        end = e.end if until is None else min(e.end, t0 + until)
        x0, x1 = (e.start - t0) * scale, (end - t0) * scale
        by_color.setdefault(_shade(OP_COLOR[a.op], a.stage // ranks), []).append(
            (x0, x1, e.rank - ROW / 2, e.rank + ROW / 2))
        if end == e.end and (e.end - e.start) / span * inches >= LABEL_INCHES[0] * len(str(a.mb)) + LABEL_INCHES[1]:
            dark = a.op in "FB" and a.stage < ranks  # later chunks are drawn lighter: black reads better there
            labels.append(((x0 + x1) / 2, e.rank, str(a.mb), "white" if dark else "black"))
    count = sum(map(len, by_color.values()))
    edge = 0.5 if count <= MAX_EDGED else 0.0  # white gaps between boxes; past that they are too thin to see
    boxes = PathCollection([_compound(r) for r in by_color.values()], facecolors=list(by_color),
                           edgecolors="white", linewidths=edge, gid="actions")
    boxes.set_in_layout(False)
    ax.add_collection(boxes, autolim=False)  # the limits are set below
    if labels:
        _label_collection(ax, labels)
    if until is not None:
        ax.axvline(until * scale, color=TAB_RED, linewidth=1)
    ax.set_xlim(0, span * scale)
    ax.set_ylim(ranks - 0.5, -0.5)
    ax.set_yticks(range(ranks), [f"rank {r}" for r in range(ranks)], fontsize=MIN_FONT)
    ax.tick_params(axis="x", labelsize=MIN_FONT)
    ax.set_xlabel(_("time ({unit})").format(unit=unit) if unit != "s" or span > 100 else _("time"), fontsize=MIN_FONT)
    used = list(dict.fromkeys(a.op for _e, a in acts))
    handles = [Patch(color=OP_COLOR[op], label=_(OP_NAME[op])) for op in used]
    if any(a.stage >= ranks for _e, a in acts):  # interleaved: say what the lighter shades are
        handles.append(Patch(color=_shade(OP_COLOR["F"], 1), label=_("lighter: later chunk")))
    ax.legend(handles=handles, fontsize=MIN_FONT,
              loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)  # outside: never over a box
    ax.spines[["top", "right"]].set_visible(False)
    if title:
        ax.set_title(title, fontsize=MIN_FONT + 1, loc="left")
    return ax.figure


def _tick(acts) -> float:
    """The shortest action: one text column."""
    return min((e.end - e.start for e, _ in acts if e.end > e.start), default=1.0)


def _columns(acts, tick: float, t0: float, ranks: int) -> list[list[tuple]]:
    """Per rank, (first, last, action) column spans: start rounded down, end up, at least one column
    each, and never over the previous action's columns (a zero-length W still shows)."""
    eps = 1e-9  # times like 3.0000000001 / 1.0 must not spill into a column of their own
    spans = [[] for _r in range(ranks)]
    for e, a in sorted(acts, key=lambda ea: (ea[0].rank, ea[0].start, ea[0].end, ea[0].step)):
        row = spans[e.rank]
        first = max(math.floor((e.start - t0) / tick + eps), row[-1][1] if row else 0)
        row.append((first, max(first + 1, math.ceil((e.end - t0) / tick - eps)), a))
    return spans


def gantt_text(trace, ranks: int, tick: float | None = None, max_columns: int = 200) -> str:
    """One column per `tick` (default: the shortest action); an action shows as op + micro-batch, then
    '=' for each further column it lasts; '.' is idle. Every action gets at least one column (start
    rounded down, end up). The stage is shown only when a rank holds several (interleaved: "4F0");
    otherwise rank r runs stage r. Past `max_columns` the chart is cut, and says so.

    >>> from simlab.trace import Event, Trace
    >>> t = Trace([Event(0, "compute", 0, name="0F0", start=0, end=1), Event(0, "compute", 1, name="0W0",
    ...            start=1, end=1), Event(0, "compute", 2, name="0F1", start=1, end=3.5)])
    >>> print(gantt_text(t, 1, max_columns=3))
    rank 0 |F0 W0 F1 |
    … truncated at 3 of 4 columns
    one column = 1 time unit; F forward, W backward-weight, digits = micro-batch, '.' idle (the bubble)
    """
    acts = _actions(trace)
    tick = tick or _tick(acts)
    t0 = min((e.start for e, _a in acts), default=0.0)
    looped = len({a.stage for _e, a in acts}) > ranks  # several stages per rank: name the stage too
    label = (lambda a: str(a)) if looped else (lambda a: f"{a.op}{a.mb}")
    width = max((len(label(a)) for _e, a in acts), default=2) + 1
    spans = _columns(acts, tick, t0, ranks)
    total = max((row[-1][1] for row in spans if row), default=0)
    columns = min(max_columns, total)
    grid = [[".".ljust(width)] * columns for _r in range(ranks)]
    for r, row in enumerate(spans):
        for first, last, a in row:
            for c in range(first, min(last, columns)):
                grid[r][c] = (label(a) if c == first else "=" * (width - 1)).ljust(width)
    ops = sorted({a.op for _e, a in acts}, key="FBIW".index)
    legend = "".join(_(OP_KEY[op]) for op in ops)  # "F forward, B backward, "
    lines = [f"rank {r} |{''.join(row)}|" for r, row in enumerate(grid)]
    if total > columns:
        lines.append(_("… truncated at {columns} of {total} columns").format(columns=columns, total=total))
    unit = (_("{tick} time unit") if tick == 1 else _("{tick} time units")).format(tick=f"{tick:g}")
    what = _("labels = stage, op, micro-batch") if looped else _("digits = micro-batch")
    return "\n".join(lines + [_("one column = {unit}; {legend}{what}, '.' idle (the bubble)").format(
        unit=unit, legend=legend, what=what)])


def draw_gantt_sim_vs_real(sim_trace, real_trace, ranks: int, titles=None):
    """The simulated schedule above the real run, two Gantt charts on one time axis (both in seconds;
    `render.style.draw_sim_vs_real`). `titles` default to "simulated" and "real" in the language in force."""
    def draw(ax, trace, span, _real):
        draw_gantt(trace, ranks, ax=ax, span=span)
    return draw_sim_vs_real(sim_trace, real_trace, draw, figsize=(10, 1.2 + 0.9 * ranks), titles=titles)
