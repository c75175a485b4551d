"""The pieces every lesson's widgets are built from: pictures at their natural size, panels that say
what they are before they run, a button that runs the shown configuration on real processes, a link
to open a trace in Perfetto, and readouts that never wrap mid-word.

Players live in `simlab.render.player`. Nothing here starts a process: a run control is handed the
run as a callable by the notebook (render/ never imports exec/ or parity/).

    >>> panel = Panel([], hint="▶ run this cell to get the explorer")
    >>> repr(panel)
    '▶ run this cell to get the explorer'
    >>> table_html([{"a": 1, "b": "x"}], ["a", "b"]).startswith("<table")
    True
"""
from __future__ import annotations

import base64
import hashlib
import html
import json
import threading
import time

import ipywidgets as w

from ..i18n import _
from .picture import PIXEL_SCALE, figure_png, png_size
from .style import ARROW_GREY

NO_WRAP = "white-space:pre;overflow-x:auto;margin:2px 0;line-height:1.25"


class Panel(w.VBox):
    """A VBox whose text form is a hint: what a saved notebook shows before its cell is run (instead of
    `VBox(children=(HBox(…`), and what nbval compares."""

    def __init__(self, children=(), hint: str | None = None, **kwargs):
        super().__init__(children=list(children), **kwargs)
        self.hint = hint if hint is not None else _("▶ run this cell to get the widget")

    def __repr__(self) -> str:
        return self.hint


def figure_image(fig=None) -> w.Image:
    """An Image showing `fig` at its natural size (sharp on HiDPI screens); hidden while it has none."""
    # margin 0: ipywidgets' default 2 px margin beside max-width 100% made every wide explorer scroll sideways
    image = w.Image(format="png", layout=w.Layout(max_width="100%", height="auto", margin="0", display="none"))
    image.add_class("simlab-image")
    if fig is not None:
        show_figure(image, fig)
    return image


def show_figure(image: w.Image, fig) -> None:
    """Put `fig` (or PNG bytes) in an image made by `figure_image`."""
    png = fig if isinstance(fig, bytes) else figure_png(fig)
    with image.hold_sync():
        image.value = png
        image.width = str(round(png_size(png)[0] / PIXEL_SCALE))  # CSS px: the natural size
        image.layout.display = None


# the key of a figure's fingerprint in a notebook output's metadata, beside its image/png
FINGERPRINT_KEY = "simlab/figure"


def figure_fingerprint(fig) -> dict:
    """What a figure says, as text: nbval compares text, not pictures, so a stored PNG carries this beside it and
    tests/test_figures_current.py compares it with what the current code draws (a picture cannot go stale unseen).

    "labels": titles, axis labels and legend entries (a figure's words: the same for a simulation and a real run);
    "texts": the other texts and the tick labels; "extents": each axes' limits, 4 significant digits (the data
    it shows); "sha": a digest of the three."""
    from matplotlib.text import Text
    fig.draw_without_rendering()  # tick labels are only set when the figure is laid out

    def said(texts) -> list[str]:
        return [t.get_text() for t in texts if isinstance(t, Text) and t.get_visible() and t.get_text().strip()]
    labels = [s for s in (fig.get_suptitle(), fig.get_supxlabel(), fig.get_supylabel()) if s.strip()]
    texts = [t for t in said(fig.texts) if t not in labels]  # fig.texts holds the suptitle too
    extents = []
    for ax in fig.axes:
        legend = ax.get_legend()
        labels += [s for s in (*(ax.get_title(loc) for loc in ("left", "center", "right")), ax.get_xlabel(),
                               ax.get_ylabel()) if s.strip()]
        labels += said([legend.get_title(), *legend.get_texts()] if legend else [])
        texts += said(ax.texts) + (said(ax.get_xticklabels() + ax.get_yticklabels()) if ax.axison else [])
        extents.append([float(f"{v:.4g}") for v in (*ax.get_xlim(), *ax.get_ylim())])
    for legend in fig.legends:
        labels += said([legend.get_title(), *legend.get_texts()])
    seen = {"labels": labels, "texts": texts, "extents": extents}
    digest = hashlib.sha256(json.dumps(seen, ensure_ascii=False, sort_keys=True).encode()).hexdigest()[:16]
    return {**seen, "sha": digest}


def fingerprint_displayed_figures() -> None:
    """In a notebook, every Figure a cell shows carries `figure_fingerprint` in its output's metadata (under
    FINGERPRINT_KEY): IPython's mime-bundle formatter adds it, the inline backend still draws the PNG."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None:
        return
    from matplotlib.figure import Figure
    # ({}, metadata): no data of its own, so the inline backend's formatters still give image/png and text/plain
    shell.display_formatter.mimebundle_formatter.for_type(Figure, lambda fig: ({}, {FINGERPRINT_KEY: figure_fingerprint(fig)}))


def readout_html(text: str) -> str:
    """Monospaced text that scrolls sideways instead of wrapping mid-word."""
    return f"<pre style='{NO_WRAP}'>{html.escape(text)}</pre>"


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return html.escape(str(value))


def table_html(rows: list[dict], keys) -> str:
    """A small table: one column per key, one row per dict; numbers to 4 significant digits."""
    head = "".join(f"<th style='text-align:left;padding:0 8px'>{html.escape(k)}</th>" for k in keys)
    body = "".join("<tr>" + "".join(f"<td style='padding:0 8px;white-space:nowrap'>{_cell(r.get(k, ''))}</td>"
                                    for k in keys) + "</tr>" for r in rows)
    return f"<table style='border-collapse:collapse;font-family:monospace'><tr>{head}</tr>{body}</table>"


def trace_link(trace, filename: str = "trace.json") -> w.HTML:
    """A download link of `trace` as Chrome-trace JSON: drop the file on https://ui.perfetto.dev."""
    link = w.HTML(trace_link_html(trace, filename))
    link.add_class("simlab-trace")
    return link


def trace_link_html(trace, filename: str) -> str:
    data = base64.b64encode(trace.to_chrome().encode()).decode("ascii")
    name = html.escape(filename)
    site = "<a href='https://ui.perfetto.dev' target='_blank'>ui.perfetto.dev</a>"
    return (f"<a download='{name}' href='data:application/json;base64,{data}'>⤓ {name}</a> "
            f"<span style='color:{ARROW_GREY}'>{_('(open it at {site}: Open trace file)').format(site=site)}</span>")


def failure_line(err: BaseException) -> str:
    """One line for a failed run: its type and the first line of its message, never a traceback."""
    first = (str(err).strip().splitlines() or [""])[0]
    return _("real run failed: {kind}: {line}").format(kind=type(err).__name__, line=first)


class RunControl(Panel):
    """A button that runs the shown configuration on real processes, with progress, then shows the result.

    `run()` does the real run and returns its result (it blocks; the kernel runs it, so an interrupt stops
    it and its processes). `show(result)` returns (figure or None, text) or (figure, text, [widgets]) —
    the widgets (e.g. `trace_link` of the real trace) go under the readout. `.run_now()` is what
    a click does, synchronously: tests call it, then look at `.image`, `.readout` and `.result`.
    """

    def __init__(self, run, show, label: str | None = None, hint: str | None = None):
        label = label if label is not None else _("run on real processes")
        hint = hint if hint is not None else _("▶ run this cell to get the real-run button")
        self.button = w.Button(description=label, icon="play", layout=w.Layout(width="auto"))
        self.button.add_class("simlab-run")
        self.progress = w.HTML()
        self.image = figure_image()
        self.image.add_class("simlab-run-image")
        self.readout = w.HTML()
        self.extra = w.Box()  # e.g. the real trace's link, filled after a run
        self.result, self.error = None, None
        self._run, self._show = run, show
        self.button.on_click(lambda _: self.run_now())
        super().__init__([w.HBox([self.button, self.progress]), self.image, self.readout, self.extra], hint=hint)

    def run_now(self):
        """Run, showing elapsed seconds while it runs; returns the result (None if it failed)."""
        self.button.disabled, self.error = True, None
        done, start = threading.Event(), time.monotonic()

        def tick() -> None:  # progress from a thread: the kernel itself is busy running
            while not done.wait(0.5):
                text = _("running… {seconds} s").format(seconds=f"{time.monotonic() - start:.0f}")
                self.progress.value = f"<span class='simlab-progress'>{text}</span>"

        self.progress.value = f"<span class='simlab-progress'>{_('running…')}</span>"
        ticker = threading.Thread(target=tick, daemon=True)
        ticker.start()
        final = ""
        try:
            self.result = self._run()
            fig, text, *extra = self._show(self.result)  # extra: widgets such as the real trace's link
            if fig is not None:
                show_figure(self.image, fig)
            self.readout.value = readout_html(text)
            self.extra.children = tuple(extra[0]) if extra else ()
            final = _("done in {seconds} s").format(seconds=f"{time.monotonic() - start:.1f}")
        except KeyboardInterrupt as err:  # the kernel's interrupt: the launcher already stopped the workers
            self.result, self.error = None, err
            final = str(err) or _("interrupted")  # "interrupted: 4 workers stopped"; not a traceback in the log
        except Exception as err:  # LaunchTimeout, WorkerError, …: one line, never a traceback
            self.result, self.error = None, err
            self.readout.value = readout_html(failure_line(err))
        finally:
            done.set()
            ticker.join()  # before the last word, so the ticker cannot overwrite it
            self.progress.value, self.button.disabled = final, False
        return self.result


def run_control(run, show, *, label: str | None = None, hint: str | None = None) -> RunControl:
    return RunControl(run, show, label=label, hint=hint)
