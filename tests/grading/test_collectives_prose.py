"""Lesson 1's prose against its own outputs: every number the markdown states that a cell prints is held here to
the stored output (English and Chinese alike), so the text cannot drift from what the learner sees run."""
import re

import pytest
from notebook_cells import cells, printed, source  # tests/notebook_cells.py

from simlab.plan import split_sizes

PATHS = ("notebooks/01_collectives.ipynb", "notebooks/zh/01_collectives.ipynb")


def _cells(path):
    by_id = cells(path)
    text = {i: source(c).replace("（", "(").replace("）", ")") for i, c in by_id.items()}  # zh brackets
    return text, {i: printed(c) for i, c in by_id.items()}


@pytest.mark.parametrize("path", PATHS)
def test_the_naive_star_and_the_ring_bytes(path):
    text, out = _cells(path)
    printed = out["303e7241"]
    assert re.search(r"r0\s+96 B", printed) and len(re.findall(r"(total|合计)\s+192 B", printed)) == 2
    assert re.search(r"(optimum per rank: |每个 rank 的最优值：)48 B", printed)
    for number in ("192 B", "48 B", "96 B", "$S = 32$ B"):
        assert number in text["47b594c4"], number


@pytest.mark.parametrize("path", PATHS)
def test_the_uneven_ring(path):
    text, out = _cells(path)
    assert split_sizes(1001, 8) == (126,) + (125,) * 7 and "126" in text["21d3827b"] and "125" in text["21d3827b"]
    sent = [int(x) for x in re.search(r"(?:bytes sent per rank: |每个 rank 发送的字节： )\[([\d, ]+)\]",
                                      out["39dd52c9"]).group(1).split(",")]
    assert sent == [7004] + [7008] * 6 + [7004]
    prose = text["l1-uneven-bytes"]
    assert "(4 B)" in prose and max(sent) - min(sent) == 4  # one element
    assert "4004" in prose and 1001 * 4 == 4004 and "7007" in prose and 2 * 7 * 4004 // 8 == 7007
    assert "7008 B" in prose and max(sent) == 7008


@pytest.mark.parametrize("path", PATHS)
def test_the_lesson_ends_with_links_not_paths(path):
    text, _ = _cells(path)
    summary = text["87fc8117"]
    assert re.search(r"\]\(02_data_parallel\.ipynb\)", summary)            # the next lesson, in the same language
    assert re.search(r"\]\(\.\./(\.\./)?exercises/(zh/)?01_collectives\.ipynb\)", summary)
    assert "`notebooks/02" not in summary


@pytest.mark.parametrize("path", PATHS)
def test_the_summary_table_names_what_the_lessons_teach(path):
    """DP is the star (reduce + broadcast, scatter/gather), DDP the all-reduce; TP all-reduces in backward (f)
    too; sequence parallelism all-gathers and reduce-scatters."""
    table = _cells(path)[0]["5070f317"]
    rows = {line.split("|")[1].strip(): line for line in table.splitlines() if line.startswith("| ")}
    dp = next(line for name, line in rows.items() if name.startswith("DP"))
    assert all(word in dp for word in ("broadcast", "scatter", "gather", "reduce")) and "DDP" not in dp.split("|")[1]
    assert "all-reduce" in rows["DDP"] or "全归约" in rows["DDP"]
    tp = rows["TP"]
    assert "(f)" in tp and "(g)" in tp  # forward and backward
    sp = next(line for name, line in rows.items() if name.startswith("TP +"))
    assert ("all-gather" in sp and "reduce-scatter" in sp) or ("全收集" in sp and "归约分散" in sp)


@pytest.mark.parametrize("path", PATHS)
def test_a_predict_prompt_comes_before_the_cell_it_asks_about(path):
    ids = list(cells(path))
    assert re.search(r"\*\*(Predict, then run|先预测，再运行)", _cells(path)[0]["21d3827b"])
    assert ids.index("21d3827b") + 1 == ids.index("39dd52c9")  # the uneven 8-rank run
