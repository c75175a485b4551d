"""simlab.sim.mesh: Megatron-LM's rank order (tp fastest, then cp, ep, dp, pp), its groups, links and errors,
on the lessons' 3-D grid, on 4-D and 5-D grids, and on a subclass with one more (dummy) dimension."""
import itertools
import math
import pickle
import sys

import pytest

from simlab.sim.mesh import DIMS, KINDS, Coords, Mesh

SHAPES = [(pp, dp, tp) for pp, dp, tp in itertools.product([1, 2, 3, 4], repeat=3)] + [(2, 4, 8), (4, 2, 2)]


def mesh3(shape):
    pp, dp, tp = shape
    return Mesh(pp=pp, dp=dp, tp=tp)


class Mesh6(Mesh):
    """A dummy sixth dimension "xp" between ep and dp: the only change a new dimension needs."""
    DIMS = ("tp", "cp", "ep", "xp", "dp", "pp")


# (class, sizes): 3-D, 4-D, 5-D, sizes that differ per dimension (a swapped pair of axes shows), and the dummy 6-D
GRIDS = [(Mesh, dict(pp=2, dp=2, tp=2)), (Mesh, dict(pp=2, dp=3, cp=2, tp=2)), (Mesh, dict(dp=2, ep=3, tp=2)),
         (Mesh, dict(pp=3, ep=2, cp=2)), (Mesh, dict(cp=4)), (Mesh, dict(pp=2, dp=2, ep=2, cp=2, tp=2)),
         (Mesh, dict(pp=2, dp=3, ep=2, cp=3, tp=2)), (Mesh6, dict(pp=2, xp=3, tp=2)),
         (Mesh6, dict(pp=2, dp=2, xp=2, ep=3, cp=2, tp=2))]
IDS = [f"{cls.__name__}-" + "-".join(f"{k}{v}" for k, v in sizes.items()) for cls, sizes in GRIDS]


def reference(cls, sizes):
    """Written from the definition, not from the code under test: rank = Σ index[d]·stride[d] over all of
    cls.DIMS, stride[d] = the product of the sizes of the dimensions before d (the faster ones)."""
    dims = cls.DIMS
    size = {d: sizes.get(d, 1) for d in dims}
    stride = {d: math.prod(size[e] for e in dims[:i]) for i, d in enumerate(dims)}
    ranks = {}  # index tuple (over dims, fastest first) -> global rank
    for index in itertools.product(*(range(size[d]) for d in dims)):
        ranks[index] = sum(i * stride[d] for i, d in zip(index, dims))
    return dims, size, ranks


@pytest.mark.parametrize("cls, sizes", GRIDS, ids=IDS)
def test_every_method_agrees_with_the_definition_for_any_number_of_dimensions(cls, sizes):
    dims, size, ranks = reference(cls, sizes)
    mesh = cls(**sizes)
    axes = tuple(d for d in reversed(dims) if d in KINDS or size[d] > 1)  # slowest first
    assert mesh.axes == axes and mesh.shape == tuple(size[a] for a in axes)
    assert mesh.world_size == math.prod(size.values()) == len(ranks)
    assert sorted(ranks.values()) == list(range(mesh.world_size))  # a bijection
    assert repr(mesh) == f"{cls.__name__}(" + ", ".join(f"{a}={size[a]}" for a in axes) + ")"
    assert all(getattr(mesh, d) == size[d] for d in dims)
    for index, rank in ranks.items():
        named = dict(zip(dims, index))
        shown = [named[a] for a in axes]
        assert mesh.rank_of(*shown) == rank
        assert mesh.coords(rank) == tuple(shown) and mesh.coords(rank)._asdict() == {a: named[a] for a in axes}
        assert mesh.grid()[tuple(shown)] == rank
    for kind in dims:
        groups = {}  # the ranks that agree on every other index, found from the definition
        for index, rank in ranks.items():
            others = tuple(i for i, d in zip(index, dims) if d != kind)
            groups.setdefault(others, []).append(rank)
        expected = sorted(tuple(sorted(g)) for g in groups.values())
        assert mesh.groups(kind) == expected
        assert all(mesh.group_of(kind, r) in expected and r in mesh.group_of(kind, r) for r in ranks.values())
        assert mesh.stride(kind) == math.prod(size[d] for d in dims[:dims.index(kind)])
        for per_node in (1, 2, 4, 8):
            crosses = any(len({r // per_node for r in g}) > 1 for g in expected)
            assert mesh.link(kind, per_node) == ("inter-node" if crosses else "intra-node")


@pytest.mark.parametrize("cls, sizes", GRIDS, ids=IDS)
def test_text_shows_every_rank_once_in_rows_of_the_fastest_axis(cls, sizes):
    mesh = cls(**sizes)
    *slow, across, inner = mesh.axes
    lines = mesh.to_text().splitlines()
    rows = math.prod(getattr(mesh, a) for a in slow)
    assert len(lines) == 2 + rows + 1  # title, header, one row per index of the slower axes, legend
    assert lines[0].startswith(f"{mesh!r}: {mesh.world_size} ranks, rank = ")
    assert lines[1].split() == [f"{across}={i}" for i in range(getattr(mesh, across))]
    numbers = [int(x) for line in lines[2:-1] for x in line.split("  ", 1)[1].replace("[", " ").replace("]", " ").split()]
    assert numbers == list(range(mesh.world_size))  # rank order, left to right, top to bottom
    assert lines[-1].startswith(f"[..] = a {inner} group; same slot across a row = a {across} group; ")
    assert mesh.to_text() == cls(**sizes).to_text()  # deterministic


@pytest.mark.parametrize("shape", SHAPES)
def test_formula_and_coords_are_inverse_bijections(shape):
    mesh = mesh3(shape)
    pp, dp, tp = shape
    assert mesh.world_size == pp * dp * tp
    seen = set()
    for p, d, t in itertools.product(range(pp), range(dp), range(tp)):
        rank = mesh.rank_of(p, d, t)
        assert rank == (p * dp + d) * tp + t
        assert mesh.coords(rank) == Coords(pp=p, dp=d, tp=t) == (p, d, t)
        pp_r, dp_r, tp_r = mesh.coords(rank)  # how lesson 6's code reads them
        assert (pp_r, dp_r, tp_r) == (mesh.coords(rank).pp, mesh.coords(rank).dp, mesh.coords(rank).tp)
        seen.add(rank)
    assert seen == set(range(mesh.world_size))
    assert all(mesh.rank_of(*mesh.coords(r)) == r for r in range(mesh.world_size))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("kind", KINDS)
def test_groups_partition_the_ranks(shape, kind):
    mesh = mesh3(shape)
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


def test_size_one_dimensions_change_no_text():
    """cp and ep of size 1 are digits that are always 0: the lessons' grid reads exactly as before."""
    mesh = Mesh(pp=2, dp=2, tp=2, cp=1, ep=1)
    assert mesh == Mesh(pp=2, dp=2, tp=2) and hash(mesh) == hash(Mesh(tp=2, dp=2, pp=2))
    assert repr(mesh) == "Mesh(pp=2, dp=2, tp=2)" and repr(Mesh(dp=2, tp=2)) == "Mesh(pp=1, dp=2, tp=2)"
    assert mesh.axes == ("pp", "dp", "tp") and mesh.shape == (2, 2, 2)
    assert repr(mesh.coords(5)) == "Coords(pp=1, dp=0, tp=1)"
    assert mesh.groups("cp") == mesh.groups("ep") == [(r,) for r in range(8)]
    assert mesh.to_text().splitlines()[0] == "Mesh(pp=2, dp=2, tp=2): 8 ranks, rank = (pp_rank*dp + dp_rank)*tp + tp_rank"
    assert Mesh(cp=2) != Mesh(dp=2) and Mesh(dp=2) != Mesh6(dp=2)  # same sizes, different grid kinds


def test_dims_order_is_megatrons():
    assert DIMS == Mesh.DIMS == ("tp", "cp", "ep", "dp", "pp")  # Megatron-LM's default order "tp-cp-ep-dp-pp"
    assert KINDS == ("tp", "dp", "pp")
    assert Mesh6(pp=2, xp=3, tp=2).axes == ("pp", "dp", "xp", "tp")  # dp=1 still shown: one of the lessons' three


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
    assert Mesh(dp=2, cp=4, tp=2).link("cp", gpus_per_node=8) == "intra-node"  # cp strides tp: 0 2 4 6
    assert Mesh(dp=2, cp=4, tp=2).link("dp", gpus_per_node=8) == "inter-node"


def test_from_world():
    assert Mesh.from_world(8) == Mesh(dp=8)
    assert Mesh.from_world(24, pp=2, tp=4) == Mesh(pp=2, dp=3, tp=4)
    assert Mesh.from_world(32, pp=2, ep=2, cp=2, tp=2) == Mesh(pp=2, dp=2, ep=2, cp=2, tp=2)
    assert Mesh6.from_world(12, xp=3) == Mesh6(xp=3, dp=4)


@pytest.mark.parametrize("make, message", [
    (lambda: Mesh(tp=0), "tp=0: must be >= 1"),
    (lambda: Mesh(pp=-1), "pp=-1: must be >= 1"),
    (lambda: Mesh(dp=1.5), "dp=1.5: must be an integer"),
    (lambda: Mesh(cp=True), "cp=True: must be an integer"),
    (lambda: Mesh(xp=2), "xp=2: not a dimension; the dimensions are tp, cp, ep, dp, pp"),
    (lambda: Mesh.from_world(6, pp=2, tp=2), "world_size=6: must be divisible by pp*tp = 4"),
    (lambda: Mesh.from_world(12, pp=2, cp=2, tp=2), "world_size=12: must be divisible by pp*cp*tp = 8"),
    (lambda: Mesh.from_world(8, dp=2), "dp=2: from_world sets dp to the ranks left; give only the others"),
    (lambda: Mesh.from_world(0), "world_size=0: must be >= 1"),
    (lambda: Mesh(pp=2, dp=2, tp=2).rank_of(0, 2, 0), "dp_rank=2: must be between 0 and 1"),
    (lambda: Mesh(pp=2, dp=2, tp=2).rank_of(0, 1), "coords=(0, 1): must be 3 indices, one per axis pp, dp, tp"),
    (lambda: Mesh(pp=2, dp=2, tp=2).coords(8), "rank=8: must be between 0 and 7"),
    (lambda: Mesh(pp=2, dp=2, tp=2).groups("xp"), "kind='xp': must be one of tp, cp, ep, dp, pp"),
    (lambda: Mesh(pp=2, dp=2, tp=2).group_of("sp", 0), "kind='sp': must be one of tp, cp, ep, dp, pp"),
    (lambda: Mesh(pp=2, dp=2, tp=2).group_of("tp", 8), "rank=8: must be between 0 and 7"),
    (lambda: Mesh(pp=2, dp=2, tp=2).link("tp", 0), "gpus_per_node=0: must be >= 1"),
])
def test_errors_are_one_line_and_name_the_parameter(make, message):
    with pytest.raises(ValueError) as info:
        make()
    assert str(info.value) == message


def test_keyword_only():
    with pytest.raises(TypeError):
        Mesh(2, 2, 2)  # positional sizes would change meaning whenever DIMS grows


def test_frozen_and_text_is_deterministic():
    mesh = Mesh(pp=2, dp=3, tp=2)
    with pytest.raises(AttributeError):
        mesh.tp = 4
    with pytest.raises(AttributeError):
        mesh.coords(1).tp = 4
    text = mesh.to_text()
    assert text == Mesh(pp=2, dp=3, tp=2).to_text()
    lines = text.splitlines()
    assert len(lines) == 2 + mesh.pp + 1  # title, dp header, one row per pipeline stage, legend
    assert lines[2] == "pp=0  [ 0  1]  [ 2  3]  [ 4  5]"
    assert lines[3] == "pp=1  [ 6  7]  [ 8  9]  [10 11]"


def test_mesh_and_coords_pickle():
    """Launchers send a Mesh to every worker, and workers send Coords back: both must survive pickling."""
    for mesh in (Mesh(pp=2, dp=2, tp=2), Mesh(pp=2, dp=2, ep=2, cp=2, tp=2), Mesh6(xp=2, tp=2)):
        again = pickle.loads(pickle.dumps(mesh))
        assert again == mesh and repr(again) == repr(mesh) and type(again) is type(mesh)
        c = mesh.coords(mesh.world_size - 1)
        assert pickle.loads(pickle.dumps(c)) == c and repr(pickle.loads(pickle.dumps(c))) == repr(c)
    with pytest.raises(AttributeError, match="its fields are pp, dp, tp"):
        _ = Mesh(pp=2).coords(1).cp


def test_simulator_side_does_not_import_torch():
    import subprocess
    code = ("import sys, simlab.sim.mesh; print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('torch', 'matplotlib', 'ipywidgets') or m.startswith(('simlab.exec', 'simlab.render'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")  # megatron.core without TE/Apex
@pytest.mark.parametrize("sizes", [dict(dp=2, cp=2, tp=2), dict(pp=2, dp=2, cp=2), dict(cp=4, dp=2),
                                   dict(pp=2, dp=3, cp=2, tp=2)], ids=str)  # Megatron's grids: cp or ep, not both
@pytest.mark.parametrize("name", ["dp-cp", "tp-cp", "tp-dp-cp", "cp", "dp"])
def test_joint_groups_are_megatrons(sizes, name):
    """Megatron-LM's RankGenerator names a joint group by its dimensions ("dp-cp": the data-parallel group with
    context parallelism, where gradients are reduced); ours hold the same ranks, and a one-name joint group is
    that dimension's groups."""
    from megatron.core.parallel_state import RankGenerator
    mesh = Mesh(**sizes)
    theirs = RankGenerator(**{d: getattr(mesh, d) for d in DIMS}, order="tp-cp-ep-dp-pp")
    assert mesh.joint_groups(name) == sorted(tuple(g) for g in theirs.get_ranks(name))
    if "-" not in name:
        assert mesh.joint_groups(name) == mesh.groups(name)


@pytest.mark.parametrize("cls, sizes", GRIDS, ids=IDS)
def test_index_of_and_joint_groups_agree_with_the_definition(cls, sizes):
    dims, size, ranks = reference(cls, sizes)
    mesh = cls(**sizes)
    for index, rank in ranks.items():
        assert [mesh.index_of(d, rank) for d in dims] == list(index)
    for a, b in itertools.combinations(dims, 2):  # a joint group: every rank sharing the other coordinates
        groups = mesh.joint_groups(f"{a}-{b}")
        assert sorted(r for g in groups for r in g) == list(range(mesh.world_size))
        assert all(len(g) == size[a] * size[b] for g in groups)
        for g in groups:
            fixed = {tuple(i for i, d in zip(index, dims) if d not in (a, b)) for index, r in ranks.items() if r in g}
            assert len(fixed) == 1


@pytest.mark.parametrize("name", ["dp+cp", "dp-dp", "", "xp", None])
def test_a_joint_group_of_unknown_dimensions_is_refused_in_one_line(name):
    message = r"^name=.*: must be dimensions joined by '-', each one of tp, cp, ep, dp, pp$"
    with pytest.raises(ValueError, match=message):
        Mesh(dp=2, cp=2).joint_groups(name)
