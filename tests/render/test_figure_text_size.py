"""Every word on every lesson's figures is at least 10 px tall as a reader sees it, in English and in Chinese.

The figures are the lessons' own: each figure cell of every lesson (en and zh) is replayed in-process with only the
cells it needs (`test_figures_current.replay`; a real run's figure, marked measured, draws with the same functions
as its simulated twin and is left out), and every visible text is measured as displayed: its size in points at
DISPLAY_DPI (100 px per inch: 10 pt = 13.9 px), scaled down by the notebook column when the picture is wider
than it. The column is NOTEBOOK_COLUMN_PX wide: what the review of issue 26 read (lesson 6's 8-point legends in
its 1211-px-wide pictures measured 7–8 px: a column of about 820 px).
"""
import pytest
from matplotlib.text import Text
from test_figures_current import MEASURED, figures, lessons, notebook, replay, source

from simlab import i18n
from simlab.render.picture import DISPLAY_DPI

NOTEBOOK_COLUMN_PX = 820
MIN_PX = 10
# figures below MIN_PX, each with the module that sets its size and why it is small (an entry makes the test fail
# once its figure is readable, so the list cannot outlive the problem). Empty since lessons 5 and 5b were redrawn.
TOO_SMALL: dict[str, str] = {}


def displayed_px(fig) -> list[tuple[float, str]]:
    """(px as displayed, text) of every visible text of `fig`, smallest first."""
    fig.draw_without_rendering()
    width = fig.get_tightbbox().width * DISPLAY_DPI  # the PNG's width: the inline backend saves at 100 dpi, tight
    shrink = min(1.0, NOTEBOOK_COLUMN_PX / width)
    return sorted((t.get_fontsize() * DISPLAY_DPI / 72 * shrink, t.get_text()) for t in fig.findobj(Text)
                  if t.get_visible() and t.get_text().strip())


def figure_cells():
    for path in lessons():
        zh, name = "/zh/" in path, path.split("/")[-1].removesuffix(".ipynb")
        for cell, _out in figures(notebook(path)):
            if MEASURED not in source(cell):
                yield pytest.param(path, zh, cell["id"], id=f"{'zh/' if zh else ''}{name}/{cell['id']}")


@pytest.mark.usefixtures("english_afterwards")
@pytest.mark.parametrize("path, zh, cell_id", list(figure_cells()))
def test_every_text_is_at_least_10_px_as_displayed(path, zh, cell_id):
    if zh:
        i18n.set_language("zh")
    nb = notebook(path)
    cell = next(c for c in nb["cells"] if c["id"] == cell_id)
    small = [(round(px, 1), text) for px, text in displayed_px(replay(nb, cell)) if px < MIN_PX]
    key = f"{path.split('/')[-1].removesuffix('.ipynb')}/{cell_id}"
    if key in TOO_SMALL:
        assert small, f"{key} is now readable: drop it from TOO_SMALL"
    else:
        assert small == []
