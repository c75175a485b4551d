"""Expert-data parallel on real ranks: the groups of `simlab.sim.expert_parallel_layout.EDPLayout` as torch
process groups, and the two gradient all-reduces a step ends with.

What it teaches: after backward, a rank's gradients are only its own tokens' share. The experts' gradients
are summed over the ranks holding the same experts (the expert-data-parallel group: the mesh's dp group),
the dense ones (here the router) over every rank that trained on other tokens (the dense group: ep × dp).
Each family is flattened into one buffer and all-reduced once, as DDP's buckets are, so the bytes are one
ring all-reduce of its size (ring accounting, as every lesson counts them). Summed, not averaged: the loss
is the sum over every rank's tokens, as the one-process reference's is (Megatron averages instead, 1/dp).
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from ..sim.collectives import ring_bytes_sent
from ..sim.expert_parallel_dispatch import STEPS
from ..sim.expert_parallel_layout import GRAD_STEPS, EDPLayout
from ..trace import Recorder
from .mesh import new_groups


def new_layout_groups(layout: EDPLayout) -> dict[str, dist.ProcessGroup]:
    """Call on every rank: this rank's "ep" (all-to-all), "expert" and "dense" groups.

    The mesh's groups come from `exec.mesh.new_groups` (ep, and dp = the expert groups); the dense groups
    (ep × dp) are one more family of `new_group` calls, made by every rank in the same order."""
    mine, rank = new_groups(layout.mesh), dist.get_rank()
    dense = None
    for ranks in layout.dense_groups:  # collective: every rank creates every group, in one order
        group = dist.new_group(list(ranks))
        if rank in ranks:
            dense = group
    return {"ep": mine["ep"], "expert": mine["dp"], "dense": dense}


def _sum_over(params: list[torch.nn.Parameter], group, rec: Recorder, name: str) -> None:
    """One flat all-reduce (sum) of the params' gradients over `group`, recorded as one "comm" Event."""
    size = dist.get_world_size(group)
    if size == 1:  # nothing to sum with
        return
    grads = [p.grad for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])  # one bucket
    start = rec.now()
    dist.all_reduce(flat, group=group)
    sent = ring_bytes_sent("all-reduce", size, flat.numel(), flat.element_size())[dist.get_rank(group)]
    rec.record("comm", start, rec.now(), name, step=len(STEPS) + GRAD_STEPS.index(name), nbytes=sent)
    for g, part in zip(grads, flat.split([g.numel() for g in grads])):
        g.copy_(part.view_as(g))


def sum_gradients(moe, groups: dict, rec: Recorder) -> None:
    """After backward: experts' gradients over the expert group, the router's over the dense group."""
    _sum_over(list(moe.experts.parameters()), groups["expert"], rec, "expert all-reduce")
    _sum_over(list(moe.router.parameters()), groups["dense"], rec, "dense all-reduce")
