"""Lesson 5's split explorer picture as a scene the browser draws (`render.chart.Chart`): A (hidden, ffn) and
B (ffn, hidden) of GeLU(X·A)·B, each cell in the colour of the rank that holds it — the picture
`render.tensor_parallel.draw_mlp_shards` draws, as data, so a knob sends JSON instead of a new figure.

Who holds a cell is `sim.tensor_parallel.shard_plan`'s answer (`render.tensor_parallel.shard_owner`); this
module only places the cells. One data unit is one cell; y grows upwards, so row i of a matrix spans
[-(i + 1), -i].

    >>> s = mlp_scene("column", "row", 2, hidden=2, ffn=4)
    >>> [m["tip"] for m in s["marks"] if m["kind"] == "rect"][:4]  # A's first row: columns 0-1 rank 0, 2-3 rank 1
    ['A[0, 0]: rank 0', 'A[0, 1]: rank 0', 'A[0, 2]: rank 1', 'A[0, 3]: rank 1']
"""
from __future__ import annotations

from ..i18n import _
from ..sim.tensor_parallel import shard_plan
from .chart import axis, rect, scene, text
from .style import PAPER
from .tensor_parallel import by_kind, count_of, rank_color, shard_owner

INCH = 100  # CSS px per inch: the figure's sizes, as the browser shows them
LABEL_PX, SIGN_PX = 14, 17  # the figure's 10- and 12-point text
GAP_IN, MARGIN_IN = 1.2, 0.2  # inches between A and B (room for "GeLU →"), and around the matrices


def mlp_scene(a_split: str, b_split: str, ranks: int, *, hidden: int, ffn: int, title: str | None = None,
              alt: str = "") -> dict:
    """The scene of `draw_mlp_shards(a_split, b_split, ranks, hidden, ffn, title=…)`: every cell a rect in its
    rank's colour whose tip names it ("B[3, 0]: rank 1"), the matrices' names above them, "GeLU →" between;
    `alt` is the text a screen reader gets (the explorer's readout)."""
    plans = [shard_plan(a_split, ranks, (hidden, ffn)), shard_plan(b_split, ranks, (ffn, hidden))]
    cell = min(0.25, 4.0 / max(hidden, ffn))  # inches: the longer matrix side ≤ 4 in, as the figure
    gap, margin = GAP_IN / cell, MARGIN_IN / cell  # in cells
    marks, x = [], 0.0
    for name, plan in zip("AB", plans):
        rows, cols = plan.shape
        for i in range(rows):
            for j in range(cols):
                r = shard_owner(plan, i, j)
                marks.append(rect(x + j, x + j + 1, -(i + 1), -i, fill=rank_color(r), stroke=PAPER, width=0.5,
                                  tip=f"{name}[{i}, {j}]: rank {r}"))
        marks.append(text(x + cols / 2, 0.1 / cell, f"{name} {by_kind(plan.kind)} {plan.shape}",
                          anchor="middle", baseline="bottom", size=LABEL_PX))
        if name == "A":
            marks.append(text(x + cols + gap / 2, -min(hidden, ffn) / 2, "GeLU →", anchor="middle", size=SIGN_PX))
            x += cols + gap
    right, top, bottom = x + hidden, 0.6 / cell, -max(hidden, ffn) - margin
    return scene(marks, width=round((right + 2 * margin) * cell * INCH), height=round((top - bottom) * cell * INCH),
                 title=title or _("GeLU(X·A)·B on {ranks}").format(ranks=count_of(ranks, "rank")),
                 x=axis(-margin, right + margin, hidden=True), y=axis(bottom, top, hidden=True), aspect="equal",
                 legend=[[f"rank {r}", rank_color(r)] for r in range(ranks)], alt=alt)
