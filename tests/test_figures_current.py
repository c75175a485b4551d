"""Stored figures cannot go stale: nbval compares a notebook's text, never its pictures, so each figure a lesson
stores carries its fingerprint (`render.controls.figure_fingerprint`: its labels, texts and axes' extents, in the
output's metadata) and this test holds it to the current code, without running whole notebooks:

- a figure of the simulator (deterministic) is drawn again: the figure cell is replayed in-process with only the
  cells it needs (the cells that bind the names it reads, found from the AST, transitively), and its fingerprint
  must be the stored one;
- a figure of a real run (a cell marked NBVAL_IGNORE_OUTPUT: measured times) is not re-measured: its words are
  held instead — no label of a Chinese figure is an English message the catalog translates.

The committed zh lesson 6 once showed English "forward / backward / time (ms)" in its measured Gantt charts while
the code drew 前向 / 反向 / 时间; `test_the_stale_lesson_6_charts_fail` shows both rules fail on them.
"""
import ast
import contextlib
import io
import json
import re
from functools import cache

import matplotlib
import pytest

matplotlib.use("Agg")

from notebook_cells import ROOT, source  # noqa: E402 — after matplotlib.use("Agg")

from simlab import i18n  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.controls import FINGERPRINT_KEY, figure_fingerprint  # noqa: E402 — after matplotlib.use("Agg")

pytestmark = pytest.mark.usefixtures("english_afterwards")  # tests/conftest.py: English again after each test

MEASURED = "NBVAL_IGNORE_OUTPUT"
CJK = re.compile(r"[\u3000-\u30ff\u4e00-\u9fff\uff00-\uffef]")
# figures of measured data whose cells print deterministic text (so they carry no NBVAL_IGNORE_OUTPUT): a replay
# measures again and draws other numbers. Like the marked cells, only their labels' language is checked.
MEASURED_FIGURES = {
    "476322f1": "lesson 1: a real ring all-reduce's trace, in wall time",
    "l5b-roofline-fig": "lesson 5b: this machine's roofline, from its measured matmul rate and memory bandwidth",
}
STALE_COMMIT = "ca4f029"  # the zh lesson 6 whose measured Gantt charts said forward / backward / time (ms)
STALE = ROOT / "tests/golden/stale_zh_06_figures.json"  # its cells with pictures (`git show STALE_COMMIT:…`, PNGs left out)


def notebook(path) -> dict:
    return json.loads((ROOT / path).read_text(encoding="utf-8"))


def figures(nb) -> list[tuple[dict, dict]]:
    """(cell, output) of every stored picture."""
    return [(cell, out) for cell in nb["cells"] for out in cell.get("outputs", []) if "image/png" in out.get("data", {})]


# ---- replaying a figure cell with only the cells it needs ------------------------------------------------------

def _code(cell) -> str:
    """A cell's Python: IPython's magics (%matplotlib inline) dropped."""
    return "\n".join(line for line in source(cell).splitlines() if not line.lstrip().startswith(("%", "!")))


def _names(tree) -> tuple[set, set]:
    """(names the code binds, names it reads before binding them: `fig, text = f(); fig` needs no earlier fig)."""
    bound, needed = set(), set()
    for statement in tree.body:
        reads, binds = set(), set()
        for node in ast.walk(statement):
            if isinstance(node, ast.Name):
                (reads if isinstance(node.ctx, ast.Load) else binds).add(node.id)
            elif isinstance(node, ast.alias):
                binds.add((node.asname or node.name).split(".")[0])
            elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                binds.add(node.name)
        needed |= reads - bound
        bound |= binds
    return bound, needed


def needed_cells(nb, target) -> list[dict]:
    """The code cells before `target` that bind a name it reads (the latest binding), transitively, in notebook
    order; a cell that sets the language (zh-language) always."""
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    position = {c["id"]: i for i, c in enumerate(code)}
    names = {c["id"]: _names(ast.parse(_code(c))) for c in code}
    chosen, todo = set(), [target]
    while todo:
        cell = todo.pop()
        for name in names[cell["id"]][1]:
            binder = next((c for c in reversed(code[:position[cell["id"]]]) if name in names[c["id"]][0]), None)
            if binder is not None and binder["id"] not in chosen:
                chosen.add(binder["id"])
                todo.append(binder)
    chosen |= {c["id"] for c in code[:position[target["id"]]] if "set_language" in source(c)}
    return [c for c in code if c["id"] in chosen]


def replay(nb, target):
    """The value the figure cell `target` ends with, run after the cells it needs (their printing discarded)."""
    scope: dict = {}
    with contextlib.redirect_stdout(io.StringIO()):
        for cell in needed_cells(nb, target):
            exec(compile(_code(cell), cell["id"], "exec"), scope)
        body = ast.parse(_code(target)).body
        *head, last = body
        exec(compile(ast.Module(head, []), target["id"], "exec"), scope)
        return eval(compile(ast.Expression(last.value), target["id"], "eval"), scope)


# ---- the Chinese catalog's English: what a zh figure must not say ------------------------------------------------

@cache
def translated_english() -> list[re.Pattern]:
    """Each English message the zh catalog translates (to something else), as a pattern: its {fields} match anything."""
    return [re.compile(re.sub(r"\\\{\w*\\\}", ".+", re.escape(msgid)))
            for msgid, text in i18n.entries("zh").items()
            if msgid != text and re.search(r"[A-Za-z]{3}", re.sub(r"\{\w*\}", "", msgid))]


def english_in(labels) -> list[str]:
    """The labels that are wholly English (no Chinese character) and that the catalog would have translated."""
    return [label for label in labels if not CJK.search(label) and any(p.fullmatch(label) for p in translated_english())]


# ---- the checker -----------------------------------------------------------------------------------------------

def stale_figures(nb, zh: bool) -> list[str]:
    """One line per stored figure that is not what the current code draws (an empty list: all current)."""
    problems = []
    for cell, out in figures(nb):
        stored = out.get("metadata", {}).get(FINGERPRINT_KEY)
        if stored is None:
            problems.append(f"{cell['id']}: no fingerprint (stored before figures carried one: re-run the lesson)")
            continue
        if zh and english_in(stored["labels"]):
            problems.append(f"{cell['id']}: English the catalog translates: {english_in(stored['labels'])}")
        if MEASURED not in source(cell) and cell["id"] not in MEASURED_FIGURES:
            fresh = figure_fingerprint(replay(nb, cell))
            if fresh["sha"] != stored["sha"]:
                diff = {k: (stored[k], fresh[k]) for k in ("labels", "texts", "extents") if stored[k] != fresh[k]}
                problems.append(f"{cell['id']}: stored figure differs from the current code's (stored, now): {diff}")
    return problems


def lessons() -> list[str]:
    return sorted(str(p.relative_to(ROOT)) for folder in ("notebooks", "notebooks/zh")
                  for p in (ROOT / folder).glob("*.ipynb"))


@pytest.mark.parametrize("path", lessons())
def test_every_stored_figure_is_what_the_current_code_draws(path):
    nb, zh = notebook(path), "/zh/" in path
    if zh:
        i18n.set_language("zh")
    assert stale_figures(nb, zh) == []


def test_the_lessons_re_run_here_are_checked():
    """Every lesson, English and Chinese: every figure carries a fingerprint, so none is waved through."""
    for path in lessons():
        assert all(FINGERPRINT_KEY in out["metadata"] for _c, out in figures(notebook(path))), path
    assert sum(bool(figures(notebook(p))) for p in lessons() if "/zh/" not in p) >= 7  # lessons with figures


def test_the_figure_cells_of_real_runs_are_the_measured_ones():
    """A figure is replayed unless its cell is marked measured: lesson 6's real runs are exactly those marked."""
    nb = notebook("notebooks/06_choosing_a_strategy.ipynb")
    assert [c["id"] for c, _out in figures(nb) if MEASURED in source(c)] == ["l6-predict", "l6-predict8"]


def test_a_figure_cell_replays_with_only_the_cells_it_needs():
    nb = notebook("notebooks/zh/06_choosing_a_strategy.ipynb")
    cells = {c["id"]: c for c in nb["cells"]}
    assert [c["id"] for c in needed_cells(nb, cells["l6-grid-fig"])] == ["zh-language", "l6-imports", "l6-grid"]
    assert [c["id"] for c in needed_cells(nb, cells["l6-nodes-slow"])] == ["zh-language", "l6-imports"]


def test_the_stale_lesson_6_charts_fail():
    """Both rules fail on the committed zh lesson 6 of STALE_COMMIT: its pictures carry no fingerprint, and what its
    measured Gantt charts showed (read off the stored PNG: English legends and time axis under Chinese titles),
    put in a fingerprint, is refused; a simulated figure whose stored words differ from the code's is refused too."""
    old = json.loads(STALE.read_text(encoding="utf-8"))  # kept in the tree: CI's clone may have no history
    i18n.set_language("zh")
    problems = stale_figures(old, zh=True)
    assert len(problems) == len(figures(old)) == 10 and all("no fingerprint" in p for p in problems)

    nb = notebook("notebooks/zh/06_choosing_a_strategy.ipynb")
    cells = {c["id"]: c for c in nb["cells"]}
    gantt = next(o for o in cells["l6-predict"]["outputs"] if "image/png" in o.get("data", {}))
    gantt["metadata"][FINGERPRINT_KEY]["labels"] = [  # what the stale picture showed
        "预测：第 6 课的模型 + 本机的校准常数，由第 4 课的模拟器推演", "forward", "backward",
        "实测：真实运行的最后一步", "forward", "backward", "time (ms)"]
    grid = next(o for o in cells["l6-grid-fig"]["outputs"] if "image/png" in o.get("data", {}))
    grid["metadata"][FINGERPRINT_KEY]["sha"] = "0" * 16  # a picture drawn by other code
    problems = stale_figures({"cells": [cells["zh-language"], cells["l6-imports"], cells["l6-grid"],
                                        cells["l6-grid-fig"], cells["l6-predict"]]}, zh=True)
    assert [p.split(":")[0] for p in problems] == ["l6-grid-fig", "l6-predict"]
    assert "['forward', 'backward', 'forward', 'backward', 'time (ms)']" in problems[1]


def test_every_figure_listed_as_measured_is_a_figure_of_a_lesson():
    """MEASURED_FIGURES cannot outlive its cells: each id is a figure cell of an English lesson and its Chinese copy."""
    for cell_id in MEASURED_FIGURES:
        holders = [p for p in lessons() if any(c["id"] == cell_id for c, _out in figures(notebook(p)))]
        assert len(holders) == 2, (cell_id, holders)
