"""Chinese figures draw every glyph: `simlab.i18n.use_cjk_font` (the one place fonts are configured) finds a CJK
font — Noto Sans CJK SC from the `noto-cjk-sans-otc` package the course depends on — and matplotlib falls
back to it per glyph, so nothing is drawn as an empty box ("Glyph … missing from font(s)")."""
import io
import warnings

import matplotlib
import pytest
from matplotlib.figure import Figure

from simlab import i18n

TEXT = "数据并行、张量并行、流水线并行、微批次、显存：每块 GPU 的显存（GB）"


def missing_glyphs(families=None) -> list[str]:
    """Draw a figure with Chinese title, labels and legend; return matplotlib's missing-glyph warnings."""
    with matplotlib.rc_context({"font.family": families} if families else {}), \
            warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fig = Figure(figsize=(6, 3))
        ax = fig.add_subplot()
        ax.bar(["零冗余优化器", "激活重计算"], [1, 2], label="气泡")
        ax.set_title(TEXT)
        ax.set_ylabel("每步时间（秒）")
        ax.legend()
        fig.savefig(io.BytesIO(), format="png")
    return [str(w.message) for w in caught if "missing from font" in str(w.message)]


@pytest.fixture(scope="module")
def family():
    return i18n.use_cjk_font()


def test_the_course_font_is_noto_sans_cjk_sc(family):
    assert family == "Noto Sans CJK SC"  # simplified-Chinese glyph shapes (matplotlib >= 3.11 reads every face)
    assert list(matplotlib.rcParams["font.family"])[-1] == family
    assert list(matplotlib.rcParams["font.family"])[0] == "sans-serif"  # Latin text keeps the default font


def test_chinese_labels_draw_without_missing_glyphs(family):
    assert missing_glyphs() == []


def test_without_the_cjk_font_glyphs_would_be_missing(family):
    """The check above can fail: with the default font alone, matplotlib reports the missing glyphs."""
    assert len(missing_glyphs(["DejaVu Sans"])) > 10


def test_setting_chinese_configures_the_font_once(family):
    before = list(matplotlib.rcParams["font.family"])
    i18n.set_language("zh")
    i18n.set_language("en")
    assert list(matplotlib.rcParams["font.family"]) == before  # idempotent: the family is appended once


def ink(weight: str) -> int:
    """Dark pixels of Chinese text drawn at `weight` (what a reader sees: bold is thicker)."""
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    fig = Figure(figsize=(3, 0.6), dpi=100)
    fig.text(0.02, 0.3, "最佳方案：流水线", fontsize=20, fontweight=weight)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return int((np.asarray(canvas.buffer_rgba())[..., 0] < 128).sum())


def test_bold_chinese_resolves_to_a_bold_cjk_face(family):
    """Bold mixed lines (a plan named in bold, '最佳：TP+PP') draw their Chinese in bold: the CJK family's bold
    face is registered (Debian's fonts-noto-cjk, which CI installs: .ci/run), not the one-weight PyPI collection's
    regular face that bold used to fall back to."""
    from matplotlib import font_manager
    from matplotlib.font_manager import FontProperties
    bold = font_manager.get_font(font_manager.findfont(FontProperties(family=family, weight="bold")))
    regular = font_manager.get_font(font_manager.findfont(FontProperties(family=family)))
    assert (bold.family_name, bold.style_name) == (family, "Bold")
    assert (regular.family_name, regular.style_name) == (family, "Regular")
    assert ink("bold") > 1.15 * ink("normal")  # and it shows: the bold strokes are thicker
