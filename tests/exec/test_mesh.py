"""simlab.exec.mesh on real gloo ranks: the groups it makes hold exactly `Mesh.group_of`'s ranks, match
torch's own DeviceMesh (3-D, 4-D and 5-D grids, and a grid with a dummy sixth dimension), and are
independent (an all_reduce in one group sees only that group)."""
import multiprocessing

import pytest
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

from simlab.exec.launch import launch
from simlab.exec.mesh import device_mesh, new_groups
from simlab.sim.mesh import Mesh


class Mesh6(Mesh):
    """A dummy sixth dimension "xp" between ep and dp: the only change a new dimension needs."""
    DIMS = ("tp", "cp", "ep", "xp", "dp", "pp")


def _groups_on_each_rank(rank, world_size, cls, sizes, wrong_sizes=None):
    refused = None
    if wrong_sizes is not None:  # refused on every rank alike, so the real calls below still line up
        try:
            new_groups(cls(**wrong_sizes))
        except ValueError as e:
            refused = str(e)
    mesh = cls(**sizes)
    mine = new_groups(mesh)
    ours = device_mesh(mesh, "cpu")  # torch's DeviceMesh over mesh.axes, the dimensions the mesh shows
    # torch's DeviceMesh over EVERY dimension, size 1 included, its shape written out here slowest first:
    # row-major with the last dimension fastest is Megatron's order read backwards
    names = tuple(reversed(cls.DIMS))
    full = init_device_mesh("cpu", tuple(getattr(mesh, d) for d in names), mesh_dim_names=names)
    found = {"keys": list(mine), "ours_names": ours.mesh_dim_names}
    for dim in cls.DIMS:
        # [rank, 2**rank]: the sum of the ranks, and a bitmask that names exactly who took part
        x = torch.tensor([rank, 1 << rank], dtype=torch.int64)
        dist.all_reduce(x, group=mine[dim])
        found[dim] = {"ours": tuple(dist.get_process_group_ranks(mine[dim])),
                      "torch": tuple(dist.get_process_group_ranks(full.get_group(dim))),
                      "device_mesh": (tuple(dist.get_process_group_ranks(ours.get_group(dim)))
                                      if dim in mesh.axes else None),
                      "sum": x.tolist()}
    return found, refused


CASES = [  # (class, sizes, a wrong mesh to be refused first)
    (Mesh, dict(pp=1, dp=2, tp=2), dict(pp=2, dp=2, tp=2)),
    (Mesh, dict(pp=2, dp=2, tp=2), None),
    (Mesh, dict(pp=2, dp=2, cp=2, tp=2), None),  # 4-D, 16 ranks
    (Mesh, dict(pp=3, ep=2, cp=2), None),  # 5-D in torch's full mesh, (3, 1, 2, 2, 1): sizes that differ
    (Mesh, dict(pp=2, dp=2, ep=2, cp=2, tp=2), None),  # 5-D, 32 ranks
    (Mesh6, dict(pp=2, xp=2, ep=2, tp=2), None),  # the dummy sixth dimension
]


@pytest.mark.parametrize("cls, sizes, wrong_sizes", CASES,
                         ids=[f"{c.__name__}-" + "-".join(f"{k}{v}" for k, v in s.items()) for c, s, _w in CASES])
def test_groups_match_mesh_and_device_mesh_and_reduce_independently(cls, sizes, wrong_sizes):
    mesh = cls(**sizes)
    results = launch(_groups_on_each_rank, mesh.world_size, cls, sizes, wrong_sizes, backend="gloo", timeout=120)
    for rank, (found, refused) in enumerate(results):
        if wrong_sizes is not None:
            wrong = cls(**wrong_sizes)
            assert refused == f"world_size={mesh.world_size}: {wrong!r} needs {wrong.world_size} ranks"
        assert found["keys"] == list(cls.DIMS)  # a group for every dimension, size 1 too
        assert found["ours_names"] == mesh.axes
        for dim in cls.DIMS:
            members = mesh.group_of(dim, rank)
            assert found[dim]["ours"] == members, (rank, dim)
            assert found[dim]["torch"] == members, (rank, dim)
            assert found[dim]["device_mesh"] == (members if dim in mesh.axes else None), (rank, dim)
            assert found[dim]["sum"] == [sum(members), sum(1 << r for r in members)], (rank, dim)
    assert multiprocessing.active_children() == []


def test_refuses_without_a_default_group():
    assert not dist.is_initialized()
    with pytest.raises(RuntimeError, match="new_groups: call torch.distributed.init_process_group first"):
        new_groups(Mesh())
    with pytest.raises(RuntimeError, match="device_mesh: call torch.distributed.init_process_group first"):
        device_mesh(Mesh())


def test_world_size_mismatch_is_refused_before_any_group_is_made(monkeypatch):
    def must_not_run(*args, **kwargs):
        raise AssertionError("a group was made before the size check")

    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 6)
    monkeypatch.setattr(dist, "new_group", must_not_run)
    monkeypatch.setattr("simlab.exec.mesh.init_device_mesh", must_not_run)
    for make in (new_groups, device_mesh):
        with pytest.raises(ValueError) as info:
            make(Mesh(pp=2, dp=2, tp=2))
        assert str(info.value) == "world_size=6: Mesh(pp=2, dp=2, tp=2) needs 8 ranks"


def _joint_group_on_each_rank(rank, world_size, sizes):
    mine = new_groups(Mesh(**sizes), joint=("dp-cp",))
    x = torch.tensor([1 << rank], dtype=torch.int64)  # a bitmask: who took part
    dist.all_reduce(x, group=mine["dp-cp"])
    return list(mine), tuple(dist.get_process_group_ranks(mine["dp-cp"])), x.item()


def test_a_joint_group_holds_the_ranks_of_both_dimensions_and_reduces_over_them_alone():
    """Under context parallelism gradients are reduced over dp-cp: every rank that differs only in dp and cp."""
    sizes = dict(dp=2, cp=2, tp=2)
    mesh = Mesh(**sizes)
    for rank, (keys, ranks, mask) in enumerate(launch(_joint_group_on_each_rank, 8, sizes, backend="gloo",
                                                      timeout=120)):
        members = next(g for g in mesh.joint_groups("dp-cp") if rank in g)
        assert keys == [*Mesh.DIMS, "dp-cp"] and ranks == members == tuple(range(rank % 2, 8, 2))
        assert mask == sum(1 << r for r in members)
