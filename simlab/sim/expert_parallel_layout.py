"""Expert-data parallel: experts split over the expert-parallel group, everything else replicated — Megatron-LM's
layout, on the rank grid's `ep` dimension (`simlab.sim.mesh.Mesh`).

Teaches: expert parallelism is carved out of data parallelism. Every rank of Mesh(ep, dp) trains on its own
tokens, so for the dense parameters (attention, the router, norms) all ep · dp ranks are data-parallel
replicas: their gradients are summed over the *dense group* (the ranks that differ only in ep and dp). The
experts are split: the rank at ep index e holds experts [e·E/ep, (e+1)·E/ep), and the ranks holding the
same experts — same ep index, any dp index: the mesh's dp group — sum those experts' gradients over that
*expert-data-parallel group* (Megatron's `expert_data_parallel_group`). The ep group itself runs the
all-to-alls (`expert_parallel_dispatch`).

With cp = 1 and Megatron's expert tensor-parallel size equal to tp, Megatron's second, expert grid
("tp-ep-dp-pp") numbers ranks exactly as this one grid does; with cp > 1 it folds cp into the expert grid
differently, so the layout here takes cp = 1.

Bytes per step (gradient all-reduces under the course's ring accounting, `collectives.ring_bytes_sent`):
an expert group of d ranks sends 2·(d−1)/d of the local experts' gradients per rank, a dense group of
ep·d ranks 2·(ep·d−1)/(ep·d) of the dense gradients; a group of one rank sends nothing.

    >>> lay = expert_data_parallel(Mesh(ep=2, dp=2), experts=4, params_per_expert=10, dense_params=8)
    >>> lay.experts_of(1), lay.ep_groups, lay.expert_groups, lay.dense_groups  # rank = dp_rank*ep + ep_rank
    ((2, 3), [(0, 1), (2, 3)], [(0, 2), (1, 3)], [(0, 1, 2, 3)])
    >>> lay.expert_allreduce_bytes, lay.dense_allreduce_bytes  # 2 experts x 10 params on 2 ranks; 8 on 4
    ([80, 80, 80, 80], [48, 48, 48, 48])
"""
from __future__ import annotations

from dataclasses import dataclass

from .._checks import check_divisible, check_int
from ..trace import Event, Trace
from .collectives import ring_bytes_sent
from .expert_parallel_dispatch import STEPS, DispatchPlan
from .mesh import Mesh
from .message import Message

GRAD_STEPS = ("expert all-reduce", "dense all-reduce")  # after the layer's STEPS: their Event.step follows on


def sharing(mesh: Mesh, vary: tuple[str, ...]) -> list[tuple[int, ...]]:
    """The groups of ranks that share every coordinate except those in `vary`, sorted by first rank."""
    groups: dict[tuple, list[int]] = {}
    for rank in range(mesh.world_size):
        fixed = tuple(i for axis, i in mesh.coords(rank)._asdict().items() if axis not in vary)
        groups.setdefault(fixed, []).append(rank)
    return sorted(tuple(g) for g in groups.values())


def _group_of(groups: list[tuple[int, ...]], rank: int) -> tuple[int, ...]:
    return next(g for g in groups if rank in g)


@dataclass(frozen=True)
class EDPLayout:
    """Which rank holds which experts and which ranks sum which gradients, on `mesh`."""

    mesh: Mesh
    experts: int
    params_per_expert: int  # one expert's parameters as one rank holds them
    dense_params: int  # the non-expert parameters one rank holds
    itemsize: int

    @property
    def local_experts(self) -> int:
        return self.experts // self.mesh.ep

    def experts_of(self, rank: int) -> tuple[int, ...]:
        """The experts `rank` holds: E/ep consecutive ones, by its ep index."""
        first = self.mesh.coords(rank).ep * self.local_experts if self.mesh.ep > 1 else 0
        return tuple(range(first, first + self.local_experts))

    @property
    def ep_groups(self) -> list[tuple[int, ...]]:
        """The all-to-all groups: ranks that differ only in ep, one of each expert shard."""
        return self.mesh.groups("ep")

    @property
    def expert_groups(self) -> list[tuple[int, ...]]:
        """Expert-data-parallel groups: ranks holding the same experts (they differ only in dp)."""
        return self.mesh.groups("dp")

    @property
    def dense_groups(self) -> list[tuple[int, ...]]:
        """Data-parallel groups of the dense parameters: ranks that differ only in ep and dp."""
        return sharing(self.mesh, ("ep", "dp"))

    def _ring(self, groups, numel: int) -> list[int]:
        sent = [0] * self.mesh.world_size
        for group in groups:
            if len(group) > 1 and numel:  # a group of one has nothing to sum, nor has an empty buffer
                for rank, nbytes in zip(group, ring_bytes_sent("all-reduce", len(group), numel, self.itemsize)):
                    sent[rank] = nbytes
        return sent

    @property
    def expert_allreduce_bytes(self) -> list[int]:
        """Per rank: the ring all-reduce of its local experts' gradients over its expert-data-parallel group."""
        return self._ring(self.expert_groups, self.local_experts * self.params_per_expert)

    @property
    def dense_allreduce_bytes(self) -> list[int]:
        """Per rank: the ring all-reduce of the dense gradients over its dense group."""
        return self._ring(self.dense_groups, self.dense_params)

    def _check_plans(self, plans) -> list[DispatchPlan]:
        plans = list(plans)
        if len(plans) != len(self.ep_groups) or any(p.ep != self.mesh.ep for p in plans):
            raise ValueError(f"plans: must be {len(self.ep_groups)} DispatchPlans of ep={self.mesh.ep} ranks, "
                             "one per ep group in order")
        return plans

    def step_bytes(self, plans) -> dict[str, list[int]]:
        """Bytes each rank sends in one step, by group: the all-to-alls of `plans` (one DispatchPlan per ep
        group, in `ep_groups` order) and the two gradient all-reduces; "total" adds them."""
        a2a = [0] * self.mesh.world_size
        for group, plan in zip(self.ep_groups, self._check_plans(plans)):
            for rank, nbytes in zip(group, plan.bytes_sent_per_rank):
                a2a[rank] = nbytes
        parts = {"all-to-all": a2a, "expert all-reduce": self.expert_allreduce_bytes,
                 "dense all-reduce": self.dense_allreduce_bytes}
        return parts | {"total": [sum(col) for col in zip(*parts.values())]}

    def to_trace(self, plans) -> Trace:
        """Every rank's events for one step: each ep group's plan (`DispatchPlan.to_trace`, global ranks), then
        one "comm" event per gradient all-reduce a rank takes part in (nbytes: what it sends)."""
        trace = Trace()
        for group, plan in zip(self.ep_groups, self._check_plans(plans)):
            trace.extend(plan.to_trace(ranks=group))
        for k, (name, sent, groups) in enumerate(zip(GRAD_STEPS, (self.expert_allreduce_bytes,
                                                                  self.dense_allreduce_bytes),
                                                     (self.expert_groups, self.dense_groups))):
            step = len(STEPS) + k
            trace.extend(Event(rank, "comm", step, name=name, nbytes=sent[rank], start=float(step), end=step + 1.0)
                         for group in groups if len(group) > 1 for rank in group)
        return trace

    def lines(self) -> list[Message]:
        """One line per rank: its experts and the three groups it works in (Messages: `_` says them)."""
        return [Message("rank {rank}: experts {experts}; all-to-all with {ep}; expert gradients summed over {edp}; "
                        "dense gradients over {dense}", rank=r, experts=list(self.experts_of(r)),
                        ep=list(_group_of(self.ep_groups, r)), edp=list(_group_of(self.expert_groups, r)),
                        dense=list(_group_of(self.dense_groups, r)))
                for r in range(self.mesh.world_size)]


def expert_data_parallel(mesh: Mesh, experts: int, params_per_expert: int, dense_params: int,
                         itemsize: int = 4) -> EDPLayout:
    """Megatron's expert-data-parallel layout of `experts` on `mesh` (cp must be 1, experts divisible by ep)."""
    if not isinstance(mesh, Mesh):
        raise ValueError(f"mesh={mesh!r}: must be a simlab.sim.mesh.Mesh")
    if mesh.cp != 1:
        raise ValueError(f"cp={mesh.cp}: the expert-data-parallel layout here takes cp = 1 "
                         "(Megatron folds cp into a second, expert grid)")
    check_int("experts", experts, 1)
    check_divisible("experts", experts, "ep", mesh.ep)
    check_int("params_per_expert", params_per_expert, 0)
    check_int("dense_params", dense_params, 0)
    return EDPLayout(mesh, experts, params_per_expert, dense_params, check_int("itemsize", itemsize, 1))
