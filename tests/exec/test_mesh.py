"""simlab.exec.mesh on real gloo ranks: the groups it makes hold exactly `Mesh.group_of`'s ranks, match
torch's own DeviceMesh, and are independent (an all_reduce in one group sees only that group)."""
import multiprocessing

import pytest
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

from simlab.exec.launch import launch
from simlab.exec.mesh import new_groups
from simlab.sim.mesh import KINDS, Mesh


def _groups_on_each_rank(rank, world_size, shape, wrong_shape=None):
    refused = None
    if wrong_shape is not None:  # refused on every rank alike, so the real call below still lines up
        try:
            new_groups(Mesh(*wrong_shape))
        except ValueError as e:
            refused = str(e)
    mine = new_groups(Mesh(*shape))
    device_mesh = init_device_mesh("cpu", shape, mesh_dim_names=("pp", "dp", "tp"))
    found = {}
    for kind in KINDS:
        # [rank, 2**rank]: the sum of the ranks, and a bitmask that names exactly who took part
        x = torch.tensor([rank, 1 << rank], dtype=torch.int64)
        dist.all_reduce(x, group=mine[kind])
        found[kind] = {"ours": tuple(dist.get_process_group_ranks(mine[kind])),
                       "torch": tuple(dist.get_process_group_ranks(device_mesh.get_group(kind))),
                       "sum": x.tolist()}
    return found, refused


@pytest.mark.parametrize("shape, wrong_shape", [((1, 2, 2), (2, 2, 2)), ((2, 2, 2), None)])
def test_groups_match_mesh_and_device_mesh_and_reduce_independently(shape, wrong_shape):
    mesh = Mesh(*shape)
    results = launch(_groups_on_each_rank, mesh.world_size, shape, wrong_shape, backend="gloo", timeout=60)
    for rank, (found, refused) in enumerate(results):
        if wrong_shape is not None:
            wrong = Mesh(*wrong_shape)
            assert refused == f"world_size={mesh.world_size}: {wrong!r} needs {wrong.world_size} ranks"
        for kind in KINDS:
            members = mesh.group_of(kind, rank)
            assert found[kind]["ours"] == members, (rank, kind)
            assert found[kind]["torch"] == members, (rank, kind)
            assert found[kind]["sum"] == [sum(members), sum(1 << r for r in members)], (rank, kind)
    assert multiprocessing.active_children() == []


def test_refuses_without_a_default_group():
    assert not dist.is_initialized()
    with pytest.raises(RuntimeError, match="init_process_group first"):
        new_groups(Mesh())


def test_world_size_mismatch_is_refused_before_any_group_is_made(monkeypatch):
    def must_not_run(*args, **kwargs):
        raise AssertionError("new_group called before the size check")

    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 6)
    monkeypatch.setattr(dist, "new_group", must_not_run)
    with pytest.raises(ValueError) as info:
        new_groups(Mesh(pp=2, dp=2, tp=2))
    assert str(info.value) == "world_size=6: Mesh(pp=2, dp=2, tp=2) needs 8 ranks"

