"""Lesson 6's rank grid, drawn and written: `draw_mesh` / `mesh_text` show which global rank is which (pp, dp,
tp) coordinate, its TP, DP and PP groups, and which link each kind of group crosses (`Mesh.link`: inside a node
or over the network). Memory and time of several plans are `render.hybrid_plans`'s pictures, the advisor's
verdict `render.hybrid_advisor`'s text.

Numbers come from `simlab.sim.mesh`; words through `i18n._`:

    >>> from simlab.sim.mesh import Mesh
    >>> print(mesh_text(Mesh(pp=2, dp=2, tp=2), gpus_per_node=4))
    Mesh(pp=2, dp=2, tp=2): 8 ranks, rank = (pp_rank*dp + dp_rank)*tp + tp_rank
          dp=0   dp=1
    pp=0  [0 1]  [2 3]
    pp=1  [4 5]  [6 7]
    [..] = a tp group; same slot across a row = a dp group; same slot down a column = a pp group
    2 nodes of 4 GPUs: node 0 = ranks 0-3, node 1 = ranks 4-7
    tp groups (NVLink, inside a node): [0 1] [2 3] [4 5] [6 7]
    dp groups (NVLink, inside a node): [0 2] [1 3] [4 6] [5 7]
    pp groups (network, across nodes): [0 4] [1 5] [2 6] [3 7]
"""
from __future__ import annotations

from itertools import pairwise

from ..i18n import _
from ..sim.mesh import KINDS
from .style import FRAME_GREY, INK, KIND_COLOR, SOFT_INK, STAGE_FILL, new_ax

MAX_NODE_ROWS = 8  # beyond this many nodes the node frames wrap into further columns
TEXT_WIDTH = 100  # group lists wrap here, so notebook outputs stay readable


def _link(mesh, kind: str, gpus_per_node: int, intra: str) -> str:
    words = {"intra-node": _("{intra}, inside a node"), "inter-node": _("network, across nodes")}
    return words[mesh.link(kind, gpus_per_node)].format(intra=intra)


def _wrap(head: str, items: list[str], width: int = TEXT_WIDTH) -> list[str]:
    """head + items joined by spaces, wrapped between items (a group "[0 1]" is never split)."""
    lines, line = [], head
    for item in items:
        if len(line) + 1 + len(item) > width and line.strip():
            lines.append(line)
            line = "   "
        line += " " + item
    return lines + [line]


def _group(g: tuple) -> str:
    """'[0 1 2 3]'; a long group (always evenly spaced) shows its first three ranks and its last."""
    return "[" + " ".join(map(str, g if len(g) <= 8 else g[:3])) + (f" … {g[-1]}]" if len(g) > 8 else "]")


def mesh_text(mesh, gpus_per_node: int, intra: str = "NVLink") -> str:
    """`Mesh.to_text`'s grid, the nodes, and one line per kind: its groups and the link they cross.
    `intra`: what joins a node's GPUs (NVLink; PCIe on a cluster without it)."""
    slots = min(gpus_per_node, mesh.world_size)  # a world smaller than a node uses part of one
    count = -(-mesh.world_size // slots)
    nodes = [_("node {n} = ranks {first}-{last}").format(n=n, first=n * slots, last=n * slots + slots - 1)
             if slots > 1 else _("node {n} = rank {n}").format(n=n) for n in range(count)]
    if count > 4:  # the rule is plain after two: node n holds the next gpus_per_node ranks
        nodes = nodes[:2] + ["…", nodes[-1]]
    head = _("{count} node{s} of {gpus} GPU{t}").format(count=count, s="s" * (count > 1), gpus=gpus_per_node,
                                                       t="s" * (gpus_per_node > 1))
    head += _(" ({slots} used)").format(slots=slots) if slots < gpus_per_node else ""
    lines = _(mesh.to_text()).splitlines() + [_("{head}: {nodes}").format(head=head, nodes=", ".join(nodes))]  # the grid's sentences said here
    for kind in KINDS:
        if getattr(mesh, kind) == 1:  # every group is one rank: nothing to send
            lines.append(_("{kind} groups: size 1, no {kind} communication").format(kind=kind))
            continue
        groups = [_group(g) for g in mesh.groups(kind)]
        lines += _wrap(_("{kind} groups ({link}):").format(kind=kind, link=_link(mesh, kind, gpus_per_node, intra)),
                       groups)
    return "\n".join(lines)


# geometry of the picture, in data units: boxes on a PITCH_X × PITCH_Y lattice, lines in the gaps between
PITCH_X, PITCH_Y, HALF_W, HALF_H, FRAME = 1.25, 1.7, 0.4, 0.36, 0.55
LANE = {"dp": (-0.58, 0.68), "pp": (0.58, 0.78)}  # (x of its vertical runs, y of its runs below a row)


def _place(rank: int, world: int, gpus_per_node: int) -> tuple[float, float]:
    """A rank's box centre: node n = rank // gpus_per_node is one framed row; rows wrap into columns."""
    slots = min(gpus_per_node, world)
    nodes = -(-world // slots)
    rows = -(-nodes // -(-nodes // MAX_NODE_ROWS))
    node, slot = divmod(rank, slots)
    col, row = divmod(node, rows)
    return col * (slots * PITCH_X + 0.8) + slot * PITCH_X, row * PITCH_Y


def _connect(ax, kind: str, a, b, lw: float):
    """One hop of a DP or PP group. On one row: an arc above (DP) or below (PP) the boxes. Across rows:
    out of the box's side (DP left, PP right), along the gap between boxes and between rows, into the
    other's side, so a line never runs over a box it does not join."""
    from matplotlib.patches import FancyArrowPatch, PathPatch
    from matplotlib.path import Path
    style = dict(color=KIND_COLOR[kind], lw=lw, alpha=0.9, zorder=3, gid=kind, fill=False)
    (x1, y1), (x2, y2) = sorted((a, b), key=lambda p: (p[1], p[0]))  # upper first; on one row, left first
    side, below = LANE[kind]
    if y1 == y2:
        edge = -HALF_H if kind == "dp" else HALF_H  # the y axis points down: -HALF_H is the top edge
        bend = (-0.3 if kind == "dp" else 0.3) / (x2 - x1)  # the arc rises about 0.15 whatever the span
        ax.add_patch(FancyArrowPatch((x1, y1 + edge), (x2, y2 + edge), arrowstyle="-",
                                     connectionstyle=f"arc3,rad={bend}", **style))
        return
    stub = HALF_W if side > 0 else -HALF_W
    points = [(x1 + stub, y1), (x1 + side, y1), (x1 + side, y1 + below), (x2 + side, y1 + below),
              (x2 + side, y2), (x2 + stub, y2)]
    ax.add_patch(PathPatch(Path(points), **style))


def draw_mesh(mesh, gpus_per_node: int, ax=None, title=None, intra: str = "NVLink", kinds=KINDS):
    """One box per global rank (r, then its p·d·t coordinates), a framed row per node, filled by pipeline
    stage; TP groups outlined, DP and PP groups joined by lines; the legend says which link each crosses.
    `kinds`: the groups to draw (e.g. ("pp",) to look at one kind alone). Returns the Figure."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch, Rectangle
    world = mesh.world_size
    slots = min(gpus_per_node, world)
    pos = [_place(r, world, slots) for r in range(world)]
    width = max(x for x, _y in pos) + 2 * FRAME + 0.3
    height = max(y for _x, y in pos) + 2 * FRAME + 0.5
    scale = min(0.75, 15 / width)  # inches per data unit; wide layouts shrink, fonts with them
    ax = new_ax(ax, (0.8 + scale * width, 1.6 + scale * height))
    font = 9 * scale / 0.75
    for n in range(-(-world // slots)):
        (x0, y0), last = pos[n * slots], min(world, (n + 1) * slots) - n * slots - 1
        ax.add_patch(Rectangle((x0 - FRAME, y0 - FRAME), last * PITCH_X + 2 * FRAME, 2 * FRAME, facecolor="none",
                               edgecolor=FRAME_GREY, linestyle="--", linewidth=1, gid="node"))
        ax.text(x0 - FRAME, y0 - FRAME - 0.03, _("node {n}").format(n=n), fontsize=0.85 * font, color=SOFT_INK, va="bottom")
    for r, (x, y) in enumerate(pos):
        c = mesh.coords(r)
        ax.add_patch(Rectangle((x - HALF_W, y - HALF_H), 2 * HALF_W, 2 * HALF_H, zorder=2, gid="rank",
                               facecolor=STAGE_FILL[c.pp % len(STAGE_FILL)], edgecolor=INK, linewidth=0.8))
        ax.text(x, y - 0.1, f"r{r}", ha="center", va="center", fontsize=font, zorder=4, fontweight="bold")
        ax.text(x, y + 0.17, f"p{c.pp} d{c.dp} t{c.tp}", ha="center", va="center", zorder=4,
                fontsize=0.85 * font, color=INK)  # 0.85: 10 px at the smallest layout's 9 pt
    handles = []
    for kind in (k for k in KINDS if k in kinds and getattr(mesh, k) > 1):
        label = _("{kind} group ({n} ranks): {link}").format(kind=kind, n=getattr(mesh, kind),
                                                             link=_link(mesh, kind, gpus_per_node, intra))
        for group in mesh.groups(kind):
            if kind == "tp":  # contiguous ranks: outline each run that sits on one node's row
                runs = []
                for r in group:
                    if runs and r // slots == runs[-1][-1] // slots:
                        runs[-1].append(r)
                    else:
                        runs.append([r])
                for run in runs:
                    (xa, ya), (xb, _yb) = pos[run[0]], pos[run[-1]]
                    ax.add_patch(Rectangle((xa - HALF_W - 0.06, ya - HALF_H - 0.06), xb - xa + 2 * HALF_W + 0.12,
                                           2 * HALF_H + 0.12, facecolor="none",
                                           edgecolor=KIND_COLOR["tp"], linewidth=2, zorder=3, gid="tp"))
            else:
                for a, b in pairwise(group):
                    _connect(ax, kind, pos[a], pos[b], 1.0 if world > 32 else 1.4)
        handles.append(Patch(facecolor="none", edgecolor=KIND_COLOR[kind], linewidth=2, label=label)
                       if kind == "tp" else Line2D([], [], color=KIND_COLOR[kind], linewidth=1.6, label=label))
    ax.set_xlim(-FRAME - 0.15, width - FRAME - 0.15)
    ax.set_ylim(height - FRAME - 0.3, -FRAME - 0.2)  # node 0 on top, ranks read like text
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(title if title is not None else _("{mesh} on nodes of {gpus} GPUs\n(box: rank, then its pp·dp·tp "
                 "coordinates; fill: its pipeline stage)").format(mesh=repr(mesh), gpus=gpus_per_node), fontsize=10)
    if handles:
        ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), fontsize=8, frameon=False)
    return ax.figure
