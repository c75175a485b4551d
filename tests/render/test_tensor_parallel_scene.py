"""Lesson 5's split picture as a scene for the browser: every cell of A and B where it is, in the colour of the
rank `shard_plan` gives it, the matrices named as the figure names them. No matplotlib: the scene is data."""
import json
import re

import pytest

from simlab.render.style import PAPER, RANK_COLORS
from simlab.render.tensor_parallel_scene import mlp_scene
from simlab.sim.tensor_parallel import shard_plan
from simlab.sim.tensor_parallel_choices import FFN, HIDDEN

pytestmark = pytest.mark.usefixtures("english_afterwards")  # tests/conftest.py: English again after each test
TIP = re.compile(r"(?P<name>[AB])\[(?P<i>\d+), (?P<j>\d+)\]: rank (?P<r>\d+)")


def cells(s: dict) -> dict:
    """(matrix, i, j) → (rank the tip names, fill, the cell's corners) for every cell drawn."""
    out = {}
    for m in s["marks"]:
        if m["kind"] == "rect":
            g = TIP.fullmatch(m["tip"])
            key = (g["name"], int(g["i"]), int(g["j"]))
            assert key not in out, f"{key} drawn twice"
            out[key] = (int(g["r"]), m["fill"], (m["x0"], m["x1"], m["y0"], m["y1"]))
    return out


@pytest.mark.parametrize("ranks", [1, 2, 4, 8])
@pytest.mark.parametrize("a_split, b_split", [(a, b) for a in ("column", "row") for b in ("column", "row")])
def test_every_cell_is_drawn_once_in_its_ranks_colour(a_split, b_split, ranks):
    drawn = cells(mlp_scene(a_split, b_split, ranks, hidden=HIDDEN, ffn=FFN))
    assert len(drawn) == 2 * HIDDEN * FFN
    for name, kind, shape in (("A", a_split, (HIDDEN, FFN)), ("B", b_split, (FFN, HIDDEN))):
        plan = shard_plan(kind, ranks, shape)
        for r in range(ranks):  # rank r's block, read off the plan's ranges, is exactly its cells
            (r0, r1), (c0, c1) = plan.rows[r], plan.cols[r]
            mine = {(i, j) for (n, i, j), (rank, _f, _c) in drawn.items() if n == name and rank == r}
            assert mine == {(i, j) for i in range(r0, r1) for j in range(c0, c1)}
        assert all(fill == RANK_COLORS[r] for (n, *_), (r, fill, _c) in drawn.items() if n == name)


def test_cells_sit_in_a_grid_row_i_under_row_i_minus_1_and_b_right_of_a():
    drawn = cells(mlp_scene("column", "row", 4, hidden=HIDDEN, ffn=FFN))
    x0, x1, y0, y1 = drawn["A", 0, 0][2]
    assert (x1 - x0, y1 - y0) == (1, 1)  # one data unit per cell
    assert drawn["A", 3, 5][2] == (x0 + 5, x1 + 5, y0 - 3, y1 - 3)
    assert drawn["B", 0, 0][2][0] > drawn["A", 0, FFN - 1][2][1]  # B starts right of A's last column


def test_names_title_legend_and_a_square_picture():
    s = mlp_scene("row", "column", 2, hidden=HIDDEN, ffn=FFN, alt="the readout")
    words = [m["text"] for m in s["marks"] if m["kind"] == "text"]
    assert words == [f"A by rows ({HIDDEN}, {FFN})", "GeLU →", f"B by columns ({FFN}, {HIDDEN})"]
    assert s["title"] == "GeLU(X·A)·B on 2 ranks" and s["alt"] == "the readout"
    assert s["legend"] == [["rank 0", RANK_COLORS[0]], ["rank 1", RANK_COLORS[1]]]
    assert s["aspect"] == "equal" and s["x"]["hidden"] and s["y"]["hidden"]
    assert {m["stroke"] for m in s["marks"] if m["kind"] == "rect"} == {PAPER}  # white lines between cells
    assert mlp_scene("column", "row", 1, hidden=HIDDEN, ffn=FFN, title="mine")["title"] == "mine"
    assert json.loads(json.dumps(s)) == s


def test_in_chinese_the_words_change_and_the_cells_do_not():
    from simlab import i18n
    english = mlp_scene("column", "row", 4, hidden=HIDDEN, ffn=FFN)
    i18n.set_language("zh")
    chinese = mlp_scene("column", "row", 4, hidden=HIDDEN, ffn=FFN)
    assert cells(chinese) == cells(english)
    assert chinese["title"] != english["title"] and "4" in chinese["title"]
