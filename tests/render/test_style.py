"""The shared look: one palette (no colour written anywhere else), one `KIND_COLOR`, one `draw_sim_vs_real`,
and the text helpers every lesson's tables use (display width, padding, units)."""
import ast
import pathlib
import re

import matplotlib
import pytest

matplotlib.use("Agg")

from simlab import i18n  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render import style  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.style import display_width, draw_sim_vs_real, fmt, mib, pad, rows_table  # noqa: E402 — after matplotlib.use("Agg")
from simlab.trace import Event, Trace  # noqa: E402 — after matplotlib.use("Agg")

from .test_collectives_text_cjk import columns, starts  # noqa: E402 — after matplotlib.use("Agg")

SIMLAB = pathlib.Path(__file__).parents[2] / "simlab"
COLOUR = re.compile(r"#(?:[0-9a-fA-F]{6}|[0-9a-fA-F]{3})\b")


pytestmark = pytest.mark.usefixtures("english_afterwards")  # tests/conftest.py: English again after each test


# ---- the palette -------------------------------------------------------------------------------------------

def _strings(path):
    """Every string constant of a module, f-strings' literal parts included."""
    return [n.value for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def test_every_colour_is_named_in_the_style_module_alone():
    """No picture or widget writes a colour (a matplotlib one or a CSS one) of its own."""
    elsewhere = {f"{p.relative_to(SIMLAB)}: {c}" for p in (SIMLAB / "render").glob("*.py") if p.name != "style.py"
                 for s in _strings(p) for c in COLOUR.findall(s)}
    assert sorted(elsewhere) == []
    assert len(COLOUR.findall((SIMLAB / "render" / "style.py").read_text(encoding="utf-8"))) > 30


@pytest.mark.parametrize("name", ["KIND_COLOR", "draw_sim_vs_real", "new_ax", "time_unit", "display_width"])
def test_each_shared_name_is_defined_once(name):
    defined = [p.relative_to(SIMLAB).as_posix() for p in SIMLAB.rglob("*.py")
               for n in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
               if isinstance(n, ast.FunctionDef) and n.name == name
               or isinstance(n, ast.Assign) and any(getattr(t, "id", None) == name for t in n.targets)]
    assert defined == ["render/style.py"]


def test_one_kind_colour_for_events_and_groups():
    assert set(style.KIND_COLOR) == {"send", "recv", "compute", "comm", "tp", "dp", "pp"}
    assert style.TIME_COLOR["tp_comm"] == style.KIND_COLOR["tp"] and style.MEMORY_COLOR["params"] == style.BLUE


# ---- draw_sim_vs_real --------------------------------------------------------------------------------------

SIM = Trace([Event(0, "compute", 0, name="a", start=0.0, end=0.002), Event(1, "compute", 0, name="b", start=0.002,
                                                                          end=0.003)])
REAL = Trace([Event(0, "compute", 1, name="a", start=5.0, end=5.004)])


def test_two_panels_share_the_time_axis_the_simulation_first():
    drawn = []

    def draw(ax, trace, span, real):
        drawn.append((ax, len(trace), span, real))
        ax.set_xlabel("time")
    fig = draw_sim_vs_real(SIM, REAL, draw, figsize=(6, 3))
    top, bottom = fig.axes
    assert [(a, n, s, r) for a, n, s, r in drawn] == [(top, 2, pytest.approx(0.004), False),
                                                      (bottom, 1, pytest.approx(0.004), True)]
    assert top.get_shared_x_axes().joined(top, bottom)
    assert (top.get_title(loc="left"), bottom.get_title(loc="left")) == ("simulated", "real")
    assert top.get_xlabel() == "" and bottom.get_xlabel() == "time"  # labelled once, under the lower panel
    i18n.set_language("zh")
    zh = draw_sim_vs_real(SIM, REAL, draw, figsize=(6, 3))
    assert [ax.get_title(loc="left") for ax in zh.axes] == ["模拟", "真实运行"]


def test_overlay_draws_both_into_one_axes():
    drawn = []
    fig = draw_sim_vs_real(SIM, REAL, lambda ax, trace, span, real: drawn.append((ax, real)), figsize=(6, 3),
                           overlay=True, titles=("both",), span=1.0)
    (ax,) = fig.axes
    assert drawn == [(ax, False), (ax, True)] and ax.get_title(loc="left") == "both"
    assert tuple(fig.get_size_inches()) == (6, 3)


# ---- text --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, width", [
    ("chunk 0", 7), ("块 0", 4), ("发送", 4), ("（n=4，32 B）：", 15), ("", 0),
    ("·Σ→×✓│", 6),  # ambiguous or narrow: one column each, as in Latin fonts, so English stays as it was
])
def test_display_width_counts_wide_characters_twice(text, width):
    assert display_width(text) == width == columns(text)


def test_pad_fills_to_display_columns_not_characters():
    assert pad("块", 4) == "块  " and columns(pad("块", 4)) == 4
    assert pad("ab", 4) == "ab".ljust(4)  # ASCII: exactly what ljust gives


def test_chinese_headers_align_their_columns():
    rows = [{"进程编号": "r0", "发送字节数": 48, "说明": "ok"}, {"进程编号": "r10", "发送字节数": 1024, "说明": "全部"}]
    lines = rows_table(rows).splitlines()
    header = starts(lines[0], ["进程编号", "发送字节数", "说明"])
    assert header == [0, 10, 22]  # 进程编号 is 8 columns wide, +2; 发送字节数 10, +2
    assert starts(lines[1], ["r0", "48", "ok"]) == header
    assert starts(lines[2], ["r10", "1,024", "全部"]) == header



def test_units():
    assert mib(56 * 2**20) == "56.0 MiB"
    assert [fmt(x) for x in (3e-5, 0.0021, 2.5, 1024, True, "x")] == ["30.0 µs", "2.10 ms", "2.500 s", "1,024",
                                                                      "True", "x"]
    assert style.time_unit(0.004) == (1e3, "ms") and style.time_unit(0.0) == (1e9, "ns")
