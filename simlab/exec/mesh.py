"""The real process groups for a `simlab.sim.mesh.Mesh`: one torch ProcessGroup per group of each dimension.

What it teaches: `torch.distributed.new_group` is itself collective over the default group — EVERY
rank must call it for EVERY group, members or not, and in the same order, or the ranks disagree on
which group is which and the run hangs or mixes up groups. So each rank walks the whole grid in one
fixed order (dimensions in `Mesh.DIMS` order, tp cp ep dp pp; groups by first rank) and keeps only the
groups it belongs to. Nothing here names a dimension: a mesh with one more has one more group per rank.
Do it once per run, right after init_process_group: creating groups is slow (a rendezvous each).

torch's own `init_device_mesh(device, mesh.shape, mesh_dim_names=mesh.axes)` lays ranks out the same
way (row-major, last dimension fastest; shape (pp, dp, tp), or (pp, dp, ep, cp, tp) on a 5-D mesh), so
its groups are these groups: `device_mesh` builds it, and tests/exec/test_mesh.py compares the two.
"""
from __future__ import annotations

import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from simlab.sim.mesh import Mesh


def _check_world(mesh: Mesh, caller: str) -> None:
    if not dist.is_initialized():
        raise RuntimeError(f"{caller}: call torch.distributed.init_process_group first")
    world_size = dist.get_world_size()
    if world_size != mesh.world_size:  # every rank sees the same size, so every rank refuses alike
        raise ValueError(f"world_size={world_size}: {mesh!r} needs {mesh.world_size} ranks")


def new_groups(mesh: Mesh, backend: str | None = None, joint: tuple = ()) -> dict[str, dist.ProcessGroup]:
    """Call on every rank: create all of `mesh`'s groups; return this rank's group per dimension.

    `backend` None means the default group's backend. Returns {"tp": ..., "cp": ..., "ep": ..., "dp": ...,
    "pp": ...}, one entry per name in mesh.DIMS; a dimension of size 1 gives each rank a group of itself.
    `joint` names groups over several dimensions (`Mesh.joint_groups`, e.g. "dp-cp": where gradients are
    reduced under context parallelism), created after the others and returned under their names.
    Raises ValueError when the default group's size is not mesh.world_size, before creating anything.
    """
    _check_world(mesh, "new_groups")
    if not isinstance(joint, tuple):
        raise ValueError(f"joint={joint!r}: must be a tuple of names such as 'dp-cp'")
    layout = [(dim, mesh.groups(dim)) for dim in mesh.DIMS] + [(name, mesh.joint_groups(name)) for name in joint]
    rank, mine = dist.get_rank(), {}
    for name, groups in layout:  # one fixed order on every rank: the grid's own, fastest first, then `joint`
        for ranks in groups:
            group = dist.new_group(list(ranks), backend=backend)  # collective: all ranks, same order
            if rank in ranks:  # non-members get a placeholder they must never use
                mine[name] = group
    return mine


def device_mesh(mesh: Mesh, device_type: str = "cpu") -> DeviceMesh:
    """Call on every rank: torch's DeviceMesh for the same grid, its dimensions named by `mesh.axes`.

    `device_type` "cpu" under gloo, "cuda" under NCCL. `device_mesh(m).get_group("dp")` holds the ranks of
    `m.group_of("dp", rank)`; the dimensions `mesh.axes` hides (size 1) are left out, as torch needs none.
    """
    _check_world(mesh, "device_mesh")
    return init_device_mesh(device_type, mesh.shape, mesh_dim_names=mesh.axes)
