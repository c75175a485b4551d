"""Lesson 4's Gantt chart as a scene: the picture `render.pipeline.draw_gantt` draws, as data the browser
draws (`render.chart.Chart`), so an explorer's knob sends a few KB of JSON instead of redrawing a figure.

`gantt_scene(trace, ranks, …)` has the figure's content: one row per rank (rank 0 on top), a box per
action coloured by op (F, B, and the split backward's I and W; an interleaved rank's later chunks lighter,
`pipeline._shade`), each labelled with its micro-batch (the browser drops a label its box cannot hold),
the bubble as white space, the legend, the time axis in the unit `style.time_unit` picks. `until` draws
only what has started by then, clipped there, with a cursor (lesson 6's window on a long pipeline). The
boxes come from the trace as it is — this module does no schedule arithmetic.

`GanttTimeline` is the Chart of such a scene with a time player over it (lesson 4's explorer: its chart "up to
time t", a veil moved in the browser; `set_reveal(scene, reveal, captions)`), `time_scale` the factor from the
trace's times to the scene's x.

    >>> from simlab.trace import Event, Trace
    >>> t = Trace([Event(0, "compute", 0, name="0F0", start=0, end=1), Event(1, "compute", 0, name="1F0",
    ...            start=1, end=2)])
    >>> s = gantt_scene(t, 2, title="two stages")
    >>> [(m["x0"], m["x1"], m["y0"], m["y1"], m["label"]) for m in s["marks"] if m["kind"] == "rect"]
    [(0.0, 1.0, -0.4, 0.4, '0'), (1.0, 2.0, 0.6, 1.4, '0')]
"""
from __future__ import annotations

import json

import traitlets as t

from .._checks import check_number
from ..i18n import _
from ..trace import Trace
from .chart import ESM, Chart, axis, line, rect, scene
from .pipeline import LABEL_INCHES, MAX_EDGED, OP_NAME, ROW, _actions, _shade, gantt_text
from .player import PLAYER_BAR, PlayerControls, _interval
from .style import INK, OP_COLOR, PAPER, TAB_RED, time_unit

WIDTH = 1000  # CSS px: the matplotlib chart's 10 inches at 100 px per inch
ROW_PX, FRAME_PX = 45, 120  # a rank's row, and the title, time axis and legend around them
PLOT_PX = 0.8 * WIDTH  # about what the rank names and the margins leave of the width for the time axis


def _data(v: float) -> float:
    """A coordinate as sent: 6 decimals are finer than a pixel, and 0.6000000000000001 costs bytes per box."""
    return round(v, 6)


def _clock(acts, span: float | None):
    """(t0, span, scale, unit) of a chart of `acts`: its first start, the time it spans (given, or first start to
    last end), and `time_unit`'s scale and unit for that span — as `draw_gantt` reckons them."""
    t0 = min((e.start for e, _a in acts), default=0.0)
    span = span or (max((e.end for e, _a in acts), default=1.0) - t0) or 1.0
    return (t0, span) + time_unit(span)


def time_label(span: float, unit: str) -> str:
    """The time axis' label, as `draw_gantt` writes it (model time units have no unit to name)."""
    return _("time ({unit})").format(unit=unit) if unit != "s" or span > 100 else _("time")


def gantt_scene(trace, ranks: int, *, title: str = "", until: float | None = None, span: float | None = None,
                alt: str | None = None) -> dict:
    """The scene of `draw_gantt(trace, ranks, title=…, until=…, span=…)`; `alt` is the text a screen reader
    gets (default: the same chart as text, `gantt_text`, of the actions shown)."""
    acts = _actions(trace)
    t0, span, scale, unit = _clock(acts, span)
    shown = [(e, a) for e, a in acts if until is None or e.start - t0 < until]
    edge = PAPER if len(shown) <= MAX_EDGED else None  # white gaps between boxes, while they can show
    marks = []
    for e, a in shown:
        end = e.end if until is None else min(e.end, t0 + until)
        # a label only where it can fit (as `draw_gantt` decides; the browser drops one that still does not), and
        # never on a box cut at `until`: 2,048 boxes of a few pixels send no labels at all
        fits = (e.end - e.start) / span * PLOT_PX / 100 >= LABEL_INCHES[0] * len(str(a.mb)) + LABEL_INCHES[1]
        dark = a.op in "FB" and a.stage < ranks  # later chunks are drawn lighter: dark ink reads better there
        marks.append(rect(_data((e.start - t0) * scale), _data((end - t0) * scale), _data(e.rank - ROW / 2),
                          _data(e.rank + ROW / 2), fill=_shade(OP_COLOR[a.op], a.stage // ranks), stroke=edge,
                          tip=e.name, **({"label": str(a.mb), "label_color": PAPER if dark else INK}
                                         if fits and end == e.end else {})))
    if until is not None:
        marks.append(line([until * scale] * 2, [-0.5, ranks - 0.5], TAB_RED, width=1))
    legend = [[_(OP_NAME[op]), OP_COLOR[op]] for op in dict.fromkeys(a.op for _e, a in acts)]
    if any(a.stage >= ranks for _e, a in acts):  # interleaved: say what the lighter shades are
        legend.append([_("lighter: later chunk"), _shade(OP_COLOR["F"], 1)])
    return scene(marks, width=WIDTH, height=FRAME_PX + ROW_PX * ranks, title=title or "",
                 x=axis(0, span * scale, time_label(span, unit)),
                 y=axis(-0.5, ranks - 0.5, ticks=[(r, f"rank {r}") for r in range(ranks)], invert=True),
                 legend=legend,
                 alt=alt if alt is not None else gantt_text(Trace([e for e, _a in shown]), ranks))


def time_scale(trace, span: float | None = None) -> float:
    """Data x per unit of the trace's time in `gantt_scene(trace, …, span=span)` (1, 1e3 …: its time unit)."""
    return _clock(_actions(trace), span)[2]


# The timeline's front end: render/chart.js draws the chart (imported as a module of its own, from its source, so
# the two never drift), and this adds every player's bar (player_bar.js: the browser tests drive it as a player)
# and a veil: a white rect over the plot area right of data-x reveal[k], moved in the browser, so Play
# needs no round trip to the kernel and the chart is not redrawn per tick. The plot area is read off the chart's
# own spines (the time axis is the panel's first line, from x.min to x.max; the rank axis stands at its left).
_TIMELINE_JS = r"""
const chartModule = import(URL.createObjectURL(new Blob([__CHART__], { type: "text/javascript" })));
const NS = "http://www.w3.org/2000/svg";
async function render({ model, el: root }) {
  const chart = (await chartModule).default, host = document.createElement("div");
  const player = playerBar(model, root, host, () => model.get("reveal").length, veil);
  const undraw = chart.render({ model, el: host });  // a Chart: redraws itself on change:scene
  function veil(k) {
    const g = host.querySelector("svg.simlab-chart-svg g.simlab-chart-panel"), sc = model.get("scene");
    if (!g || !sc.x) return;
    const lines = [...g.querySelectorAll(":scope > line")], at = (l, a) => parseFloat(l.getAttribute(a));
    if (!lines.length) return;
    const left = at(lines[0], "x1"), right = at(lines[0], "x2"), bottom = at(lines[0], "y1");
    const rank = lines.find(l => at(l, "x1") === left && at(l, "x2") === left  // up from the time axis, not a tick
                                 && Math.max(at(l, "y1"), at(l, "y2")) === bottom && Math.min(at(l, "y1"), at(l, "y2")) < bottom);
    const top = rank ? Math.min(at(rank, "y1"), at(rank, "y2")) : 0;
    const x = k >= 0 ? model.get("reveal")[k] : sc.x.max;
    const px = Math.max(left, Math.min(right, left + (x - sc.x.min) / (sc.x.max - sc.x.min) * (right - left)));
    let v = g.querySelector(":scope > rect.simlab-veil");
    if (!v) { v = document.createElementNS(NS, "rect"); v.setAttribute("class", "simlab-veil");
              v.setAttribute("fill", model.get("theme").paper); v.setAttribute("fill-opacity", "0.78");
              g.appendChild(v); }
    // its geometry as style (SVG 2 geometry properties), as FramePlayer's veil moves: what the browser tests watch
    v.style.cssText = `pointer-events:none;x:${px}px;y:${top}px;width:${Math.max(0, right - px)}px;`
                    + `height:${Math.max(0, bottom - top)}px;display:${px < right ? "inline" : "none"}`;
  }
  for (const name of ["value", "reveal", "captions", "scene"]) model.on(`change:${name}`, player.update);  // after the redraw
  player.update();
  return () => { player.stop(); if (typeof undraw === "function") undraw(); };
}
export default { render };
"""


class GanttTimeline(PlayerControls, Chart):
    """A Gantt chart drawn in the browser with a time player over it: tick k greys out (a veil) what lies right
    of data-x `reveal[k]`, the chart "up to time t"; stepping and Play happen in the browser (◀ ▶, a slider,
    Play ≈ `seconds` whatever the count), the chart is drawn once per scene. `value` (the tick shown) syncs
    both ways; `set_reveal` starts on the last tick, the whole chart."""

    _esm = PLAYER_BAR + _TIMELINE_JS.replace("__CHART__", json.dumps(ESM))
    reveal = t.List(t.Float()).tag(sync=True)       # data x where the veil starts, one per tick
    label_prefix = t.Unicode("t ").tag(sync=True)

    count = property(lambda self: len(self.reveal))

    @t.validate("reveal")
    def _finite(self, proposal):
        return [check_number(f"reveal[{k}]", x) for k, x in enumerate(proposal["value"])]

    def set_reveal(self, scene: dict, reveal, captions=None, seconds: float = 10.0) -> None:
        """A new chart and its ticks, shown whole (the last tick)."""
        reveal = list(reveal)
        if not reveal:
            raise ValueError("reveal: need at least one time")
        with self.hold_sync():
            self.scene, self.reveal, self.captions = scene, reveal, list(captions or [])
            self.interval_ms, self.value = _interval(len(reveal), seconds), len(reveal) - 1
