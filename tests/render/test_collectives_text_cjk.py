"""Lesson 1's text tables line up by *display* width (`render.style.pad`): a Chinese character (and
full-width punctuation such as '，' or '（') takes two columns of a fixed-width font, so padding by `len`
would push every column after a Chinese header left. English tables must keep exactly the widths they had
(every character one column, the ambiguous ·, Σ, → and × included).

Column positions are measured here with our own independent count (`columns`, from unicodedata), then
compared row against row: a table lines up when every row puts a column's first character at the same
display column as the header does. The helpers themselves are tested in tests/render/test_style.py."""
import unicodedata

import pytest

from simlab import i18n
from simlab.render.collectives_text import bytes_table, side_by_side_text, step_text, trace_table
from simlab.sim.collectives import ring_all_reduce
from simlab.sim.collectives_stepper import simulate

pytestmark = pytest.mark.usefixtures("english_afterwards")  # tests/conftest.py: English again after each test


def columns(text: str) -> int:
    """Display columns of `text`, counted the way a terminal does (wide and full-width: 2)."""
    return sum(2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1 for ch in text)


def starts(line: str, cells: list[str]) -> list[int]:
    """The display column at which each of `cells` begins in `line`, searched left to right."""
    out, at = [], 0
    for cell in cells:
        at = line.index(cell, at)
        out.append(columns(line[:at]))
        at += len(cell)
    return out


def test_english_tables_keep_their_old_widths():
    """An ASCII table padded by display width is the table ljust would have made."""
    rows = [["rank", "bytes sent"], ["r0", "48 B"], ["total", "192 B"]]
    widths = [max(len(r[i]) for r in rows) for i in range(2)]
    by_len = "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)
    assert bytes_table([48, 48, 48, 48]).splitlines()[:2] == by_len.splitlines()[:2]


@pytest.fixture
def ring():
    plan = ring_all_reduce(world_size=4, numel=8)
    return plan, simulate(plan).steps


def test_the_chinese_step_table_lines_up_and_holds_the_english_numbers(ring):
    plan, steps = ring
    english = step_text(steps[3], plan).splitlines()
    i18n.set_language("zh")
    chinese = step_text(steps[3], plan).splitlines()
    assert chinese[1].split() == ["块", "0", "块", "1", "块", "2", "块", "3", "发送", "接收"]
    header = starts(chinese[1], ["块 0", "块 1", "块 2", "块 3", "发送", "接收"])
    for rank in range(4):  # each rank row: the same cells as in English, under the Chinese headers
        row = chinese[2 + rank]
        assert row.split() == english[2 + rank].split()
        cells = row.split()
        assert starts(row, cells[:5] + [" ".join(cells[5:7]), " ".join(cells[7:9])])[1:] == header


def test_the_chinese_side_by_side_keeps_its_divider_in_one_column(ring):
    plan, steps = ring
    i18n.set_language("zh")
    body = side_by_side_text(steps[3], steps[3], plan, True).splitlines()[1:-1]
    assert body[0].startswith("模拟") and "真实运行" in body[0]
    assert "传输（发送方 → 接收方" in "\n".join(body)  # full-width text on the left half, too
    assert len({columns(line[:line.index("│")]) for line in body}) == 1


def test_the_chinese_trace_and_bytes_tables(ring):
    plan, steps = ring
    i18n.set_language("zh")
    trace = trace_table(simulate(plan).trace, 4).splitlines()
    assert trace[0] == "追踪记录：4 个 rank 上共 48 个事件（不含时间）" and trace[1] == "第 0 步"
    assert trace[2] == "  r0 → r1 块 3 (8 B)"
    table = bytes_table([96, 32, 32, 32]).splitlines()
    header = starts(table[0], ["进程编号", "发送字节数"])
    assert all(starts(line, line.split(None, 1)) == header for line in table[1:])
