"""Explorers drawn in the browser: the kernel computes a *scene* (plain JSON), the browser draws it as SVG.

A knob used to re-simulate (milliseconds), then redraw a matplotlib figure in the kernel (0.3–4.7 s on 2 cores).
Now it builds a scene — boxes, lines, words, numbers — for a `Chart` (an anywidget; `chart.js` draws it): a
change sends a few KB of JSON. A `ChartPlayer` steps through one scene per step in the browser, as
`render.player.FramePlayer` does with pictures. matplotlib stays for static figures and what nbval compares.

    >>> s = scene([rect(0, 1, 0, 2, fill=INK, label="params")],
    ...           x=axis(0, 1), y=axis(0, 2, label="GB"), alt="params: 2 GB")
    >>> Chart(s).alt
    'params: 2 GB'
    >>> validate({**s, "marks": [{"kind": "blob"}]})
    Traceback (most recent call last):
    ...
    ValueError: scene.marks[0].kind: 'blob' is not one of rect, line, text, circle, arrow

A scene is {"width", "height" (CSS px), "title", "x", "y" (`axis`), "marks", "legend", "alt"}, or {"panels":
[`panel`, …], "columns": k, …} (k panels to a row). Coordinates are data units, y up unless `invert`. `alt`
(required) is the text alternative, the readout as text, read by screen readers beside the SVG (shown too with
"show_alt"). Numbers must be finite, colours `render.style`'s ("#hex"): `validate` refuses others in one line.
DOM classes for tests: `simlab-chart` (root), `simlab-chart-svg`, `simlab-chart-alt`.
"""
from __future__ import annotations

import math
import pathlib
import re

import anywidget
import traitlets as t

from ..i18n import _
from .picture import DISPLAY_DPI
from .player import PLAYER_BAR, PlayerControls, _interval
from .style import FONT_STACK, INK, MIN_FONT, PAPER, SOFT_INK

# the front end: player_bar.js (a ChartPlayer's bar, shared with every player) then chart.js (the drawing)
ESM = PLAYER_BAR + pathlib.Path(__file__).with_name("chart.js").read_text(encoding="utf-8")
FONT_PX = round(MIN_FONT * DISPLAY_DPI / 72)  # 14 px: the size of a figure's smallest text, as shown
THEME = {"font": FONT_STACK, "font_px": FONT_PX, "ink": INK, "soft_ink": SOFT_INK, "paper": PAPER}

NUMBER, TEXT, COLOR, FLAG = "number", "text", "colour", "flag"
# every key a mark may have: its type, or the values it may take; REQUIRED: what it must have
MARKS = {
    "rect": {"x0": NUMBER, "x1": NUMBER, "y0": NUMBER, "y1": NUMBER, "fill": COLOR, "stroke": COLOR,
             "width": NUMBER, "dash": FLAG, "hatch": COLOR, "label": "labels", "label_color": COLOR,
             "size": NUMBER, "bold": FLAG, "tip": TEXT},
    "line": {"x": "numbers", "y": "numbers", "stroke": COLOR, "width": NUMBER, "dash": FLAG},
    "text": {"x": NUMBER, "y": NUMBER, "text": TEXT, "anchor": ("start", "middle", "end"), "size": NUMBER,
             "color": COLOR, "bold": FLAG, "halo": FLAG, "baseline": ("top", "middle", "bottom"),
             "dx": NUMBER, "dy": NUMBER},
    "circle": {"x": NUMBER, "y": NUMBER, "r": NUMBER, "r_unit": ("px", "data"), "fill": COLOR, "stroke": COLOR,
               "width": NUMBER, "label": TEXT, "label_color": COLOR, "size": NUMBER},
    "arrow": {"x0": NUMBER, "y0": NUMBER, "x1": NUMBER, "y1": NUMBER, "stroke": COLOR, "width": NUMBER,
              "dash": FLAG, "bend": NUMBER},
}
REQUIRED = {"rect": ("x0", "x1", "y0", "y1", "fill"), "line": ("x", "y", "stroke"), "text": ("x", "y", "text"),
            "circle": ("x", "y", "r", "fill"), "arrow": ("x0", "y0", "x1", "y1", "stroke")}
AXIS = {"min": NUMBER, "max": NUMBER, "label": TEXT, "ticks": "ticks", "invert": FLAG, "hidden": FLAG}
PANEL = {"width": NUMBER, "height": NUMBER, "title": TEXT, "title_at": ("left", "center"), "title_color": COLOR,
         "x": "axis", "y": "axis", "marks": "marks", "aspect": ("auto", "equal")}
SCENE = {**PANEL, "panels": "panels", "columns": NUMBER, "legend": "legend", "legend_at": ("bottom", "right"),
         "alt": TEXT, "show_alt": FLAG}
LEGEND_STYLES = ("box", "line", "dash", "hatch", "dashed-box")
_HEX = re.compile(r"#(?:[0-9a-fA-F]{3}|[0-9a-fA-F]{6}|[0-9a-fA-F]{8})")


# ---------------------------------------------------------------- builders: the marks, axes, panels, scenes

_given = lambda **keys: {k: v for k, v in keys.items() if v is not None}  # noqa: E731 — the builders' helper


def rect(x0, x1, y0, y1, fill, *, stroke=None, label=None, tip=None, **more) -> dict:
    """A box from x0 to x1, y0 to y1; its label (or the first of a list that fits) is drawn centred inside."""
    return _given(kind="rect", x0=x0, x1=x1, y0=y0, y1=y1, fill=fill, stroke=stroke, label=label, tip=tip, **more)


def line(x, y, stroke, *, dash: bool = False, width: float = 1.5) -> dict:
    return {"kind": "line", "x": list(x), "y": list(y), "stroke": stroke, "dash": dash, "width": width}


def text(x, y, text, *, anchor: str = "middle", **more) -> dict:  # noqa: A002 — the mark's own name
    """Words at (x, y); `dx`, `dy` shift them in px (dy up), `baseline` says which edge sits on y."""
    return _given(kind="text", x=x, y=y, text=text, anchor=anchor, **more)


def circle(x, y, r, fill, *, stroke=None, label=None, **more) -> dict:
    """A disc of radius r px (or in x's data units with r_unit="data")."""
    return _given(kind="circle", x=x, y=y, r=r, fill=fill, stroke=stroke, label=label, **more)


def arrow(x0, y0, x1, y1, stroke, *, width: float = 1.5, **more) -> dict:
    """From (x0, y0) to (x1, y1), the head at the end; `bend` curves it as matplotlib's arc3 rad does."""
    return _given(kind="arrow", x0=x0, y0=y0, x1=x1, y1=y1, stroke=stroke, width=width, **more)


def axis(lo, hi, label: str = "", ticks=None, *, invert: bool = False, hidden: bool = False) -> dict:
    """An axis from lo to hi; ticks are (value, label) pairs; `hidden` draws no spine, tick or label."""
    return _given(min=lo, max=hi, label=label, ticks=[list(tk) for tk in ticks] if ticks else None,
                  invert=invert or None, hidden=hidden or None)


def panel(marks, *, x, y, width, height, title: str = "", **more) -> dict:
    """One drawing area of a scene with panels: its own axes, marks and (left-aligned) title."""
    return {"width": width, "height": height, "title": title, "x": x, "y": y, "marks": list(marks), **more}


def scene(marks=None, *, alt: str, title: str = "", x=None, y=None, width=640, height=260, panels=None,
          legend=None, **more) -> dict:
    """A whole picture, checked: one panel (marks on axes x and y) or several (`panels`)."""
    body = {"panels": list(panels)} if panels is not None else {"width": width, "height": height, "x": x, "y": y,
                                                                "marks": list(marks or [])}
    return validate({"title": title, **body, "legend": [list(e) for e in legend or []], "alt": alt, **more})


# ---------------------------------------------------------------- validation: one line naming what is wrong

def _name(where) -> str:
    """A path kept as nested (parent, key) pairs while checking (cheap), spelled only for a refusal."""
    parent, key = (where, None) if isinstance(where, str) else where
    return parent if key is None else _name(parent) + (f"[{key}]" if isinstance(key, int) else f".{key}")


def _bad(where, value, why: str):
    raise ValueError(f"{_name(where)}: {value!r} {why}")


def _check(where, value, kind):
    """The value, made plain JSON (numpy numbers become floats, tuples lists), or a one-line refusal."""
    if kind is NUMBER:
        if type(value) is float or type(value) is int:  # the common case first: a scene has thousands
            number = value
        elif isinstance(value, bool) or isinstance(value, str) or not hasattr(value, "__float__"):
            return _bad(where, value, "is not a number")
        else:
            number = float(value)
        return float(number) if math.isfinite(number) else _bad(where, value, "is not a finite number")
    if type(kind) is tuple:
        return value if value in kind else _bad(where, value, "is not one of " + ", ".join(kind))
    if kind is TEXT:
        return value if isinstance(value, str) else _bad(where, value, "is not text")
    if kind is FLAG:
        return value if isinstance(value, bool) else _bad(where, value, "is not True or False")
    if kind is COLOR:
        ok = isinstance(value, str) and (value == "none" or _HEX.fullmatch(value))
        return value if ok else _bad(where, value, "is not a colour ('#rrggbb' from render/style.py, or 'none')")
    return _CHECKS[kind](where, value)


def _items(where, value) -> list:
    return list(value) if isinstance(value, (list, tuple)) else _bad(where, value, "is not a list")


def _each(check):  # a checker of a list whose items `check` checks
    return lambda where, value: [check((where, i), v) for i, v in enumerate(_items(where, value))]


def _keyed(where, value, keys: dict, required=()) -> dict:
    if not isinstance(value, dict):
        _bad(where, value, "is not a dict")
    for key in (k for k in value if k not in keys):
        _bad((where, key), key, "is not a key here: " + ", ".join(keys))
    for key in (k for k in required if k not in value):
        raise ValueError(f"{_name(where)}: needs {key!r}")
    return {k: _check((where, k), v, keys[k]) for k, v in value.items() if v is not None}


def _mark(where, value) -> dict:
    kind = value.get("kind") if isinstance(value, dict) else None
    if kind not in MARKS:
        _bad((where, "kind"), kind, "is not one of " + ", ".join(MARKS))
    body = _keyed(where, {k: v for k, v in value.items() if k != "kind"}, MARKS[kind], REQUIRED[kind])
    if kind == "line" and len(body["x"]) != len(body["y"]):
        raise ValueError(f"{_name(where)}: x has {len(body['x'])} points, y {len(body['y'])}")
    return {"kind": kind, **body}


def _axis(where, value) -> dict:
    body = _keyed(where, value, AXIS, ("min", "max"))
    return body if body["min"] < body["max"] else _bad(where, (body["min"], body["max"]), "is not min < max")


def _sized(where, body: dict) -> dict:
    bad = [size for size in ("width", "height") if body[size] <= 0]
    return _bad((where, bad[0]), body[bad[0]], "is not a positive size") if bad else body


def _row(what: str, *kinds, least: int | None = None):
    """A checker of a short list of given kinds: a tick [value, label], a legend entry [label, colour, style?]."""
    def check(where, value) -> list:
        value = _items(where, value)
        if not (least or len(kinds)) <= len(value) <= len(kinds):
            _bad(where, value, f"is not {what}")
        return [_check((where, i), v, kind) for i, (v, kind) in enumerate(zip(value, kinds))]
    return check


_CHECKS = {"numbers": _each(lambda w, v: _check(w, v, NUMBER)), "marks": _each(_mark), "axis": _axis,
           "ticks": _each(_row("a [value, label] pair", NUMBER, TEXT)),
           "legend": _each(_row("[label, colour] or [label, colour, style]", TEXT, COLOR, LEGEND_STYLES, least=2)),
           "panels": _each(lambda w, v: _sized(w, _keyed(w, v, PANEL, ("width", "height", "x", "y", "marks")))),
           "labels": lambda w, v: v if isinstance(v, str) else _each(lambda w, v: _check(w, v, TEXT))(w, v)}


class Scene(dict):
    """A scene `validate` checked: the widgets take it without checking it again (build a new one to change it)."""


def validate(value) -> Scene:
    """The scene as plain JSON, or ValueError in one line naming the bad part ("scene.marks[3].x0: nan …")."""
    if not isinstance(value, dict):
        _bad("scene", value, "is not a dict")
    if "panels" in value:
        if any(k in value for k in ("x", "y", "marks")):
            raise ValueError("scene: give either panels or x, y and marks, not both")
        body = _keyed("scene", value, SCENE, ("panels", "alt"))
        return Scene(body) if body["panels"] else _bad(("scene", "panels"), [], "has no panel")
    return Scene(_sized("scene", _keyed("scene", value, SCENE, ("width", "height", "x", "y", "marks", "alt"))))


# ---------------------------------------------------------------- the widgets

class Chart(anywidget.AnyWidget):
    """One scene, drawn as SVG in the browser; `chart.scene = new` redraws it. Its text form (what a saved
    notebook shows before the cell runs, and what nbval compares) is the hint."""

    _esm = ESM
    scene = t.Dict().tag(sync=True)
    theme = t.Dict().tag(sync=True)

    def __init__(self, scene: dict | None = None, hint: str | None = None, **kwargs):
        super().__init__(theme=dict(THEME), **kwargs)
        self.hint = hint if hint is not None else _("▶ run this cell to get the picture")
        if scene is not None:
            self.scene = scene

    @t.validate("scene")
    def _valid(self, proposal):  # what `scene()` built is checked once
        return proposal["value"] if type(proposal["value"]) is Scene else validate(proposal["value"])

    alt = property(lambda self: self.scene.get("alt", ""), doc="the text alternative, read beside the picture")

    def __repr__(self) -> str:
        return self.hint


class ChartPlayer(PlayerControls, anywidget.AnyWidget):
    """One scene per step, stepped in the browser (◀ ▶, a slider, Play), as `render.player.FramePlayer` steps
    pictures; `value` (the step shown) syncs both ways. Captions (HTML) go under the picture."""

    _esm = ESM
    frames = t.List(t.Dict()).tag(sync=True)
    theme = t.Dict().tag(sync=True)

    def __init__(self, hint: str | None = None, **kwargs):
        super().__init__(theme=dict(THEME), **kwargs)
        self.hint = hint if hint is not None else _("▶ run this cell to get the player")

    __repr__ = Chart.__repr__
    count = property(lambda self: len(self.frames))
    alt = property(lambda self: self.frames[self.value]["alt"] if self.frames else "", doc="the step shown's alt")

    @t.validate("frames")
    def _valid(self, proposal):
        return [s if type(s) is Scene else validate(s) for s in proposal["value"]]

    def set_frames(self, scenes, captions=None, seconds: float = 10.0) -> None:
        """New scenes, shown from the first; Play shows them all in about `seconds`."""
        scenes = list(scenes)  # checked as they are set (`_valid`)
        if not scenes:
            raise ValueError("frames: need at least one scene")
        with self.hold_sync():
            self.frames = scenes  # first: a scene refused leaves the player as it was
            self.captions, self.interval_ms, self.value = list(captions or []), _interval(len(scenes), seconds), 0


def chart_player(scenes, *, captions=None, seconds: float = 10.0, hint: str | None = None,
                 label: str | None = None) -> ChartPlayer:
    player = ChartPlayer(hint=hint, label_prefix=label if label is not None else _("step "))
    player.set_frames(scenes, captions, seconds)
    return player


__all__ = ["Chart", "ChartPlayer", "chart_player", "scene", "panel", "axis", "rect", "line", "text", "circle",
           "arrow", "validate", "THEME", "FONT_PX"]
