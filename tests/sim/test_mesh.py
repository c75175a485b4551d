"""simlab.sim.mesh: Megatron-LM's rank order (tp fastest, then dp, then pp), its groups, links and errors."""
import itertools
import sys

import pytest

from simlab.sim.mesh import KINDS, Coords, Mesh

SHAPES = [(pp, dp, tp) for pp, dp, tp in itertools.product([1, 2, 3, 4], repeat=3)] + [(2, 4, 8), (4, 2, 2)]


@pytest.mark.parametrize("shape", SHAPES)
def test_formula_and_coords_are_inverse_bijections(shape):
    mesh = Mesh(*shape)
    pp, dp, tp = shape
    assert mesh.world_size == pp * dp * tp
    seen = set()
    for p, d, t in itertools.product(range(pp), range(dp), range(tp)):
        rank = mesh.rank_of(p, d, t)
        assert rank == (p * dp + d) * tp + t
        assert mesh.coords(rank) == Coords(p, d, t) == (p, d, t)
        seen.add(rank)
    assert seen == set(range(mesh.world_size))
    assert all(mesh.rank_of(*mesh.coords(r)) == r for r in range(mesh.world_size))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("kind", KINDS)
def test_groups_partition_the_ranks(shape, kind):
    mesh = Mesh(*shape)
    groups = mesh.groups(kind)
    size = getattr(mesh, kind)
    assert len(groups) == mesh.world_size // size
    assert all(len(g) == size and list(g) == sorted(g) for g in groups)
    assert [g[0] for g in groups] == sorted(g[0] for g in groups)
    assert sorted(itertools.chain(*groups)) == list(range(mesh.world_size))  # each rank exactly once
    for rank in range(mesh.world_size):
        group = mesh.group_of(kind, rank)
        assert rank in group and group in groups
        # members differ from `rank` in this coordinate only
        others = [k for k in KINDS if k != kind]
        assert all(getattr(mesh.coords(r), k) == getattr(mesh.coords(rank), k) for r in group for k in others)
        assert [getattr(mesh.coords(r), kind) for r in group] == list(range(size))


def test_tp_groups_are_runs_of_adjacent_ranks():
    mesh = Mesh(pp=2, dp=3, tp=4)
    assert mesh.groups("tp") == [tuple(range(s, s + 4)) for s in range(0, 24, 4)]
    assert mesh.groups("pp") == [(r, r + 12) for r in range(12)]


def test_megatron_initialize_model_parallel_example():
    """16 GPUs, tensor_model_parallel_size=2, pipeline_model_parallel_size=4 (so dp=2), copied exactly
    from the docstring of `initialize_model_parallel` in NVIDIA/Megatron-LM,
    megatron/core/parallel_state.py (commit 00caa53af30912914981c86f39db123961678bbd):

        8 data_parallel groups:
            [g0, g2], [g1, g3], [g4, g6], [g5, g7], [g8, g10], [g9, g11], [g12, g14], [g13, g15]
        8 tensor model-parallel groups:
            [g0, g1], [g2, g3], [g4, g5], [g6, g7], [g8, g9], [g10, g11], [g12, g13], [g14, g15]
        4 pipeline model-parallel groups:
            [g0, g4, g8, g12], [g1, g5, g9, g13], [g2, g6, g10, g14], [g3, g7, g11, g15]
    """
    mesh = Mesh.from_world(16, pp=4, tp=2)
    assert mesh == Mesh(pp=4, dp=2, tp=2)
    assert mesh.groups("dp") == [(0, 2), (1, 3), (4, 6), (5, 7), (8, 10), (9, 11), (12, 14), (13, 15)]
    assert mesh.groups("tp") == [(0, 1), (2, 3), (4, 5), (6, 7), (8, 9), (10, 11), (12, 13), (14, 15)]
    assert mesh.groups("pp") == [(0, 4, 8, 12), (1, 5, 9, 13), (2, 6, 10, 14), (3, 7, 11, 15)]
    # "rank 0 to 7 belong to the first box and ranks 8 to 15 belong to the second box"
    assert [mesh.link(k, gpus_per_node=8) for k in KINDS] == ["intra-node", "intra-node", "inter-node"]


def test_link():
    assert Mesh(tp=8).link("tp", gpus_per_node=8) == "intra-node"
    assert Mesh(dp=2, tp=8).link("tp", gpus_per_node=8) == "intra-node"
    assert Mesh(dp=2, tp=8).link("dp", gpus_per_node=8) == "inter-node"  # ranks 0 and 8: two nodes
    assert Mesh(dp=2, tp=4).link("dp", gpus_per_node=8) == "intra-node"
    assert Mesh(pp=2, dp=2, tp=2).link("pp", gpus_per_node=4) == "inter-node"
    assert Mesh(tp=16).link("tp", gpus_per_node=8) == "inter-node"  # tp wider than a node
    assert Mesh(dp=4).link("dp", gpus_per_node=1) == "inter-node"
    assert Mesh(pp=4).link("tp", gpus_per_node=1) == "intra-node"  # size-1 groups never leave a GPU


def test_from_world():
    assert Mesh.from_world(8) == Mesh(dp=8)
    assert Mesh.from_world(24, pp=2, tp=4) == Mesh(pp=2, dp=3, tp=4)


@pytest.mark.parametrize("make, message", [
    (lambda: Mesh(tp=0), "tp=0: must be >= 1"),
    (lambda: Mesh(pp=-1), "pp=-1: must be >= 1"),
    (lambda: Mesh(dp=1.5), "dp=1.5: must be an integer"),
    (lambda: Mesh.from_world(6, pp=2, tp=2), "world_size=6: must be divisible by pp*tp = 4"),
    (lambda: Mesh.from_world(0), "world_size=0: must be >= 1"),
    (lambda: Mesh(2, 2, 2).rank_of(0, 2, 0), "dp_rank=2: must be between 0 and 1"),
    (lambda: Mesh(2, 2, 2).coords(8), "rank=8: must be between 0 and 7"),
    (lambda: Mesh(2, 2, 2).groups("ep"), "kind='ep': must be one of tp, dp, pp"),
    (lambda: Mesh(2, 2, 2).group_of("cp", 0), "kind='cp': must be one of tp, dp, pp"),
    (lambda: Mesh(2, 2, 2).link("tp", 0), "gpus_per_node=0: must be >= 1"),
])
def test_errors_are_one_line_and_name_the_parameter(make, message):
    with pytest.raises(ValueError) as info:
        make()
    assert str(info.value) == message


def test_frozen_and_text_is_deterministic():
    mesh = Mesh(pp=2, dp=3, tp=2)
    with pytest.raises(AttributeError):
        mesh.tp = 4
    text = mesh.to_text()
    assert text == Mesh(pp=2, dp=3, tp=2).to_text()
    lines = text.splitlines()
    assert len(lines) == 2 + mesh.pp + 1  # title, dp header, one row per pipeline stage, legend
    assert lines[2] == "pp=0  [ 0  1]  [ 2  3]  [ 4  5]"
    assert lines[3] == "pp=1  [ 6  7]  [ 8  9]  [10 11]"


def test_simulator_side_does_not_import_torch():
    import subprocess
    code = ("import sys, simlab.sim.mesh; print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('torch', 'matplotlib', 'ipywidgets') or m.startswith(('simlab.exec', 'simlab.render'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
