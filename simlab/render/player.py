"""A player whose frames are switched in the browser: every course player and timeline slider uses it.

Players are deterministic, so each frame is drawn once, in the kernel, as a PNG; stepping, the slider and
Play then only swap pictures in the browser (an anywidget front end, below). No matplotlib redraw and no
round trip to the kernel happens per step, so a step is as fast as the browser can show an image, and the
player keeps working while the kernel is busy. `value` (the frame shown) still syncs both ways, so
other widgets can follow it and tests can drive it.

Two kinds of frames:
- `frame_player(frames)`: one picture per frame (a ring step, a ZeRO step …);
- `reveal_player(fig, ax, times)`: one picture; frame k greys out what lies right of data-x times[k]
  on axes `ax` (a Gantt chart "up to time t"), so a time slider needs no new picture at all.

The DOM carries stable classes (`simlab-player`, `simlab-play`, `simlab-prev`, `simlab-next`,
`simlab-step`, `simlab-frame`, `simlab-caption`) for the browser tests.
"""
from __future__ import annotations

import base64
import pathlib
import threading

import anywidget
import traitlets as t

from ..i18n import _
from .picture import DISPLAY_DPI, PIXEL_SCALE, png_size, render_png

# Every player's controls in the browser (◀ Play ▶, a slider, the caption): put in front of each player's front end
PLAYER_BAR = pathlib.Path(__file__).with_name("player_bar.js").read_text(encoding="utf-8")

# Play shows every frame once in about `seconds`, but never faster than the eye can follow.
MIN_INTERVAL_MS, MAX_INTERVAL_MS = 40, 1500

_ESM = PLAYER_BAR + r"""
function el(tag, cls) { const e = document.createElement(tag); if (cls) e.className = cls; return e; }
function render({ model, el: root }) {
  const box = el("div", "simlab-box"), img = el("img", "simlab-frame"), veil = el("div", "simlab-veil");
  box.style.cssText = "position:relative;display:inline-block;max-width:100%";
  img.style.cssText = "display:block;max-width:100%;height:auto";
  // each picture at its natural size: drawn with pixel_scale × the pixels, for HiDPI screens
  img.onload = () => { img.style.width = img.naturalWidth / model.get("pixel_scale") + "px"; };
  veil.style.cssText = "position:absolute;background:rgba(255,255,255,0.78);pointer-events:none";
  box.append(img, veil);
  let urls = [];
  const player = playerBar(model, root, box, () => model.get("count"), show);
  function load() { urls = model.get("frames").map(b => "data:image/png;base64," + b); player.update(); }
  function show(k) {
    const rv = model.get("reveal"), src = urls.length === 1 ? urls[0] : urls[k];
    const pending = urls.length > 1 && model.get("frames")[k] === "";
    if (src && !pending && img.src !== src) img.src = src;
    img.style.opacity = pending ? "0.4" : "1";  // a frame still being drawn: the last one, faded
    if (rv.length) { const [top, bottom, right] = model.get("veil_box"), x = rv[k];
      Object.assign(veil.style, { display: x < right ? "block" : "none", left: 100 * x + "%",
        width: 100 * (right - x) + "%", top: 100 * top + "%", height: 100 * (bottom - top) + "%" });
    } else veil.style.display = "none";
  }
  for (const name of ["value", "captions", "reveal"]) model.on(`change:${name}`, player.update);
  model.on("change:frames", load);
  load();
  return () => player.stop();
}
export default { render };
"""


class PlayerControls(t.HasTraits):
    """What every player syncs for its bar (`player_bar.js`): the step shown (`value`, kept within `count`, which
    each player defines), the captions, Play's pace, and the bar's words in the reader's language."""

    value = t.Int(0).tag(sync=True)
    captions = t.List(t.Unicode()).tag(sync=True)   # HTML under the picture, one per step (or none)
    interval_ms = t.Int(250).tag(sync=True)
    label_prefix = t.Unicode("step ").tag(sync=True)
    play_label = t.Unicode("▶ play").tag(sync=True)
    pause_label = t.Unicode("❚❚ pause").tag(sync=True)
    prev_label = t.Unicode("previous step").tag(sync=True)
    next_label = t.Unicode("next step").tag(sync=True)

    def __init__(self, **kwargs):
        super().__init__(**{"play_label": _("▶ play"), "pause_label": _("❚❚ pause"),
                            "prev_label": _("previous step"), "next_label": _("next step"), **kwargs})

    @t.validate("value")
    def _clamp(self, proposal):
        return max(0, min(int(proposal["value"]), max(self.count - 1, 0)))


class FramePlayer(PlayerControls, anywidget.AnyWidget):
    """Frames (PNG, base64) shown one at a time; `value` is the frame on screen."""

    _esm = _ESM
    frames = t.List(t.Unicode()).tag(sync=True)     # one PNG per frame, or one for a reveal player
    count = t.Int(0).tag(sync=True)                 # number of frames
    reveal = t.List(t.Float()).tag(sync=True)       # reveal player: x (fraction of width) where grey starts
    veil_box = t.List(t.Float(), [0.0, 1.0, 1.0]).tag(sync=True)  # axes top, bottom, right (fractions)
    width_px = t.Int(600).tag(sync=True)            # the first frame's natural width (CSS px)
    pixel_scale = t.Float(PIXEL_SCALE).tag(sync=True)  # picture pixels per CSS px

    def __init__(self, hint: str | None = None, **kwargs):
        super().__init__(**kwargs)
        self.hint = hint if hint is not None else _("▶ run this cell to get the player")
        self._generation, self._drawer = 0, None

    def __repr__(self) -> str:  # what a notebook shows before the cell runs, and what nbval compares
        return self.hint

    def set_frames(self, frames, captions=None, seconds: float = 10.0) -> None:
        """New frames — Figures, PNG bytes, or functions that return a Figure — shown from frame 0.

        In a running kernel only frame 0 is drawn before this returns (so a knob that rebuilds a player
        answers in one frame's time); the others are drawn in a background thread and reach the browser in
        batches. Elsewhere (tests, scripts) every frame is drawn before it returns."""
        frames = list(frames)
        if not frames:
            raise ValueError("frames: need at least one frame")
        self._generation += 1
        first = _png(frames[0])
        with self.hold_sync():
            self.reveal, self.count, self.value = [], len(frames), 0
            self.captions = list(captions or [])
            self.width_px = round(png_size(first)[0] / PIXEL_SCALE)
            self.interval_ms = _interval(len(frames), seconds)
            self.frames = [_b64(first)] + [""] * (len(frames) - 1)  # "": not drawn yet
        if len(frames) > 1:
            self._drawer = threading.Thread(target=self._draw_rest, args=(frames, self._generation), daemon=True)
            self._drawer.start()
            if not _in_kernel():
                self.wait()

    def _draw_rest(self, frames, generation: int) -> None:
        drawn, ready = list(self.frames), 2  # push when 2, 4, 8 … frames are ready: few, growing messages
        for k in range(1, len(frames)):
            if generation != self._generation:
                return  # newer frames replaced these
            drawn[k] = _b64(_png(frames[k]))
            if k + 1 == ready or k == len(frames) - 1:
                if generation == self._generation:
                    self.frames = list(drawn)
                ready *= 2

    def wait(self, timeout: float | None = None) -> None:
        """Until every frame is drawn (tests; a player in a kernel draws the rest in the background)."""
        if self._drawer is not None:
            self._drawer.join(timeout)

    def set_reveal(self, fig, ax, times, captions=None, seconds: float = 10.0) -> None:
        """One picture of `fig`; frame k hides (greys) what lies right of data-x times[k] on `ax`."""
        times = [float(x) for x in times]
        if not times:
            raise ValueError("times: need at least one time")
        self._generation += 1  # frames still being drawn for an earlier picture are dropped
        png, bbox = render_png(fig, with_box=True)
        x0, x1 = ax.get_xlim()
        # a data x → the fraction of the saved picture's width (the picture is the figure cropped to bbox)
        to_inches = lambda xy: ax.transData.transform(xy) / fig.dpi  # noqa: E731 — local coordinate maps
        (_, bottom), (right, top) = to_inches((x0, ax.get_ylim()[0])), to_inches((x1, ax.get_ylim()[1]))
        frac_x = lambda inch: (inch - bbox.x0) / bbox.width  # noqa: E731 — local coordinate maps
        frac_y = lambda inch: (bbox.y1 - inch) / bbox.height  # noqa: E731 — pictures count y downwards
        top_f, bottom_f = sorted((frac_y(top), frac_y(bottom)))
        xs = [frac_x(to_inches((min(max(x, x0), x1), 0))[0]) for x in times]
        with self.hold_sync():
            self.count, self.value = len(times), len(times) - 1
            self.captions = list(captions or [])
            self.veil_box = [top_f, bottom_f, frac_x(right)]
            self.width_px = round(png_size(png)[0] / PIXEL_SCALE)
            self.interval_ms = _interval(len(times), seconds)
            self.frames = [base64.b64encode(png).decode("ascii")]
            self.reveal = xs


def _png(frame) -> bytes:
    """A frame's PNG: given as bytes, a Figure, or a function returning either."""
    if callable(frame):
        frame = frame()
    return frame if isinstance(frame, bytes) else render_png(frame)[0]


def _b64(png: bytes) -> str:
    return base64.b64encode(png).decode("ascii")


def _in_kernel() -> bool:
    """Inside a Jupyter kernel (where the browser can show frames as they come)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    return getattr(get_ipython(), "kernel", None) is not None


def _interval(count: int, seconds: float) -> int:
    return int(min(MAX_INTERVAL_MS, max(MIN_INTERVAL_MS, 1000 * seconds / max(count - 1, 1))))


def frame_player(frames, *, captions=None, seconds: float = 10.0, hint: str | None = None,
                 label: str | None = None) -> FramePlayer:
    """A player over `frames` (matplotlib Figures or PNG bytes), each drawn once; Play takes ≈ `seconds`."""
    player = FramePlayer(hint=hint, label_prefix=label if label is not None else _("step "))
    player.set_frames(frames, captions, seconds)
    return player


def reveal_player(fig, ax, times, *, captions=None, seconds: float = 10.0, hint: str | None = None,
                  label: str | None = None) -> FramePlayer:
    """A player over one picture: frame k shows `ax` up to data-x times[k]; starts on the last frame."""
    hint = hint if hint is not None else _("▶ run this cell to get the timeline")
    player = FramePlayer(hint=hint, label_prefix=label if label is not None else _("tick "))
    player.set_reveal(fig, ax, times, captions, seconds)
    return player


__all__ = ["FramePlayer", "PlayerControls", "PLAYER_BAR", "frame_player", "reveal_player", "DISPLAY_DPI"]
