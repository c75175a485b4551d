"""The real process groups for a `simlab.sim.mesh.Mesh`: one torch ProcessGroup per tp, dp and pp group.

What it teaches: `torch.distributed.new_group` is itself collective over the default group — EVERY
rank must call it for EVERY group, members or not, and in the same order, or the ranks disagree on
which group is which and the run hangs or mixes up groups. So each rank walks the whole grid in one
fixed order (kinds tp, dp, pp; groups by first rank) and keeps only the groups it belongs to.
Do it once per run, right after init_process_group: creating groups is slow (a rendezvous each).

torch's own `init_device_mesh(device, (pp, dp, tp), mesh_dim_names=("pp", "dp", "tp"))` lays ranks out
the same way (row-major, last dimension fastest), so its groups are these groups.
"""
from __future__ import annotations

import torch.distributed as dist

from simlab.sim.mesh import KINDS, Mesh


def new_groups(mesh: Mesh, backend: str | None = None) -> dict[str, dist.ProcessGroup]:
    """Call on every rank: create all of `mesh`'s groups; return this rank's group per kind.

    `backend` None means the default group's backend. Returns {"tp": ..., "dp": ..., "pp": ...}.
    Raises ValueError when the default group's size is not mesh.world_size, before creating anything.
    """
    if not dist.is_initialized():
        raise RuntimeError("new_groups: call torch.distributed.init_process_group first")
    world_size = dist.get_world_size()
    if world_size != mesh.world_size:  # every rank sees the same size, so every rank refuses alike
        raise ValueError(f"world_size={world_size}: {mesh!r} needs {mesh.world_size} ranks")
    rank, mine = dist.get_rank(), {}
    for kind in KINDS:
        for ranks in mesh.groups(kind):
            group = dist.new_group(list(ranks), backend=backend)  # collective: all ranks, same order
            if rank in ranks:  # non-members get a placeholder they must never use
                mine[kind] = group
    return mine
