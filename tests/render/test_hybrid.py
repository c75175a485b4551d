"""Lesson 6's rank grid: every box and line is the simulator's (Mesh groups and the links they cross)."""
import math

import matplotlib
import pytest

matplotlib.use("Agg")

from simlab.render.hybrid import KINDS, TEXT_WIDTH, draw_mesh, mesh_text  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.picture import figure_png  # noqa: E402 — after matplotlib.use("Agg")
from simlab.sim.mesh import Mesh  # noqa: E402 — after matplotlib.use("Agg")

# (pp, dp, tp), GPUs per node: a node split by TP and DP, pure DP, the 64-GPU 3-D grid, one GPU, 64 one-GPU
# nodes, TP across nodes, a world smaller than its node
MESHES = [((2, 2, 2), 4), ((1, 8, 1), 8), ((4, 2, 8), 8), ((1, 1, 1), 8), ((1, 64, 1), 1), ((1, 1, 4), 2),
          ((2, 2, 1), 8), ((8, 1, 1), 4)]


def gid(ax, name):
    return [p for p in ax.patches if p.get_gid() == name]


# ---- mesh_text --------------------------------------------------------------------------------------------

def test_mesh_text_2x2x2_on_4_gpu_nodes():
    text = mesh_text(Mesh(pp=2, dp=2, tp=2), gpus_per_node=4)
    assert text.splitlines()[:5] == Mesh(pp=2, dp=2, tp=2).to_text().splitlines()  # the simulator's grid
    assert text.splitlines()[5:] == [
        "2 nodes of 4 GPUs: node 0 = ranks 0-3, node 1 = ranks 4-7",
        "tp groups (NVLink, inside a node): [0 1] [2 3] [4 5] [6 7]",
        "dp groups (NVLink, inside a node): [0 2] [1 3] [4 6] [5 7]",
        "pp groups (network, across nodes): [0 4] [1 5] [2 6] [3 7]"]


def test_mesh_text_size_one_kinds_and_a_partial_node():
    lines = mesh_text(Mesh(pp=1, dp=2, tp=1), gpus_per_node=8, intra="PCIe").splitlines()[4:]
    assert lines == ["1 node of 8 GPUs (2 used): node 0 = ranks 0-1",
                     "tp groups: size 1, no tp communication",
                     "dp groups (PCIe, inside a node): [0 1]",
                     "pp groups: size 1, no pp communication"]


def test_mesh_text_tp_across_nodes_and_long_groups():
    assert "tp groups (network, across nodes): [0 1 2 3]" in mesh_text(Mesh(tp=4), gpus_per_node=2)
    lines = mesh_text(Mesh(dp=64), gpus_per_node=8).splitlines()
    assert "8 nodes of 8 GPUs: node 0 = ranks 0-7, node 1 = ranks 8-15, …, node 7 = ranks 56-63" in lines
    assert "dp groups (network, across nodes): [0 1 2 … 63]" in lines
    assert "1 node of 1 GPU: node 0 = rank 0" in mesh_text(Mesh(), gpus_per_node=1)


@pytest.mark.parametrize("shape,per_node", MESHES)
def test_mesh_text_lists_every_group_and_its_link(shape, per_node):
    mesh = Mesh(**dict(zip(("pp", "dp", "tp"), shape)))
    text = mesh_text(mesh, per_node)
    ours = text.splitlines()[len(mesh.to_text().splitlines()):]
    assert all(len(line) <= TEXT_WIDTH for line in ours)
    assert text == mesh_text(mesh, per_node)  # deterministic
    for kind in KINDS:
        if getattr(mesh, kind) == 1:
            assert f"{kind} groups: size 1, no {kind} communication" in ours
            continue
        words = {"intra-node": "NVLink, inside a node", "inter-node": "network, across nodes"}
        assert f"{kind} groups ({words[mesh.link(kind, per_node)]}):" in text
        for g in mesh.groups(kind):
            shown = g if len(g) <= 8 else g[:3]
            assert "[" + " ".join(map(str, shown)) in text


# ---- draw_mesh --------------------------------------------------------------------------------------------

def tp_runs(mesh, per_node):
    """Pieces of TP groups that sit on one node: one outline each."""
    return sum(len({r // per_node for r in g}) for g in mesh.groups("tp")) if mesh.tp > 1 else 0


@pytest.mark.parametrize("shape,per_node", MESHES)
def test_draw_mesh_has_a_box_per_rank_and_a_mark_per_group(shape, per_node):
    mesh = Mesh(**dict(zip(("pp", "dp", "tp"), shape)))
    ax = draw_mesh(mesh, per_node).axes[0]
    slots = min(per_node, mesh.world_size)
    assert len(gid(ax, "rank")) == mesh.world_size
    assert len(gid(ax, "node")) == math.ceil(mesh.world_size / slots)
    assert len(gid(ax, "tp")) == tp_runs(mesh, per_node)
    for kind in ("dp", "pp"):  # a line per hop between consecutive members
        assert len(gid(ax, kind)) == len(mesh.groups(kind)) * (getattr(mesh, kind) - 1)
    texts = {t.get_text() for t in ax.texts}
    for r in range(mesh.world_size):
        c = mesh.coords(r)
        assert f"r{r}" in texts and f"p{c.pp} d{c.dp} t{c.tp}" in texts
    legend = [t.get_text() for t in ax.get_legend().get_texts()] if ax.get_legend() else []
    assert len(legend) == sum(getattr(mesh, k) > 1 for k in KINDS)
    for kind in (k for k in KINDS if getattr(mesh, k) > 1):
        where = "inside a node" if mesh.link(kind, per_node) == "intra-node" else "across nodes"
        assert any(line.startswith(f"{kind} group") and where in line for line in legend)


def test_draw_mesh_one_kind_and_a_png():
    mesh = Mesh(pp=2, dp=2, tp=2)
    fig = draw_mesh(mesh, 4, kinds=("pp",), title="pp only")
    ax = fig.axes[0]
    assert gid(ax, "tp") == [] and gid(ax, "dp") == [] and len(gid(ax, "pp")) == 4
    assert ax.get_title() == "pp only"
    assert figure_png(fig)[:4] == b"\x89PNG"
