"""Pictures of figures: PNG bytes at the figure's natural size, drawn with twice the pixels for HiDPI screens.

Every widget shows figures through here (`figure_png`, or `render_png` when it must know where in the
picture the axes are). One lock serialises drawing: matplotlib is not thread-safe, and a player draws its
later frames in a background thread.
"""
from __future__ import annotations

import threading

# Figures are shown at their natural size, DISPLAY_DPI CSS pixels per inch (so 10 pt text is 14 px), and
# drawn with PIXEL_SCALE × as many pixels so they stay sharp on HiDPI screens.
DISPLAY_DPI, PIXEL_SCALE = 100, 2
RENDER_LOCK = threading.RLock()


def render_png(fig, with_box: bool = False, region=None) -> tuple[bytes, object]:
    """(PNG bytes, the saved region in inches, or None): the figure cropped to its drawn content.

    with_box=True lays the figure out first and saves exactly the measured region, so positions in the
    picture are known (a reveal player's veil). `region` (one such region) saves that region as it is:
    frames of one layout share their first frame's region, one draw each and all of one size."""
    with RENDER_LOCK:  # matplotlib is not thread-safe: a player draws its later frames in a thread
        return _render_png(fig, with_box, region)


def _render_png(fig, with_box: bool, region):
    import io

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    if not isinstance(fig.canvas, FigureCanvasAgg):
        FigureCanvasAgg(fig)
    bbox = "tight" if region is None else region
    if with_box and region is None:
        if fig.get_layout_engine() is not None:
            fig.draw_without_rendering()  # lays the figure out (the layout engine runs here) without painting
        bbox = fig.get_tightbbox(fig.canvas.get_renderer()).padded(0.1)  # what "tight" would crop to
    buf = io.BytesIO()
    # zlib level 1: a picture is encoded for one trip to the browser, not stored; the default level took a
    # third of a Gantt chart's time for files only 1.5x smaller
    fig.savefig(buf, format="png", dpi=DISPLAY_DPI * PIXEL_SCALE, bbox_inches=bbox, pad_inches=0.1,
                pil_kwargs={"compress_level": 1})
    return buf.getvalue(), (None if isinstance(bbox, str) else bbox)


def figure_png(fig) -> bytes:
    return render_png(fig)[0]


def png_size(png: bytes) -> tuple[int, int]:
    """(width, height) in pixels, from the PNG header."""
    if png[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
