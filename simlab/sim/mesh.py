"""The (pp, dp, tp) rank grid: which global rank plays which part in 3-D parallel training.

Megatron-LM's order: TP varies fastest, then DP, then PP —
    global rank = (pp_rank·dp + dp_rank)·tp + tp_rank,   i.e. ranks = arange(world).reshape(pp, dp, tp).

Teaches why this order, given that a node's GPUs are consecutive ranks (node = rank // gpus_per_node):
- TP innermost: a TP group all-reduces activations in every layer, forward and backward, on the
  critical path. Adjacent ranks share a node, so TP stays on the fastest link (NVLink).
- DP in the middle: one gradient all-reduce per step, which can overlap with the backward pass.
- PP outermost: only point-to-point sends of one activation per micro-batch between neighbouring
  stages, the least traffic, so it is the one that may cross nodes (InfiniBand).

    >>> m = Mesh(pp=2, dp=2, tp=2)
    >>> m.rank_of(1, 0, 1), m.coords(5)
    (5, Coords(pp=1, dp=0, tp=1))
    >>> m.groups("tp"), m.group_of("pp", 5)
    ([(0, 1), (2, 3), (4, 5), (6, 7)], (1, 5))
    >>> m.link("tp", gpus_per_node=4), m.link("pp", gpus_per_node=4)
    ('intra-node', 'inter-node')
    >>> print(m.to_text())
    Mesh(pp=2, dp=2, tp=2): 8 ranks, rank = (pp_rank*dp + dp_rank)*tp + tp_rank
          dp=0   dp=1
    pp=0  [0 1]  [2 3]
    pp=1  [4 5]  [6 7]
    [..] = a tp group; same slot across a row = a dp group; same slot down a column = a pp group
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from .._checks import check_choice, check_int

KINDS = ("tp", "dp", "pp")
_AXIS = {"pp": 0, "dp": 1, "tp": 2}  # axes of the (pp, dp, tp) grid; the last varies fastest
LINKS = ("intra-node", "inter-node")


class Coords(NamedTuple):
    """One rank's place in the grid: pipeline stage, data-parallel replica, tensor-parallel shard."""
    pp: int
    dp: int
    tp: int


@dataclass(frozen=True)
class Mesh:
    """A pp × dp × tp grid of world_size = pp·dp·tp ranks, in Megatron-LM's order (tp fastest)."""
    pp: int = 1
    dp: int = 1
    tp: int = 1

    def __post_init__(self):
        for name in ("pp", "dp", "tp"):
            check_int(name, getattr(self, name), 1)  # "tp=0: must be >= 1"

    @classmethod
    def from_world(cls, world_size: int, pp: int = 1, tp: int = 1) -> Mesh:
        """How launchers size a run: fix pp and tp (the model's split), dp takes the rest of the ranks."""
        check_int("world_size", world_size, 1)
        check_int("pp", pp, 1)
        check_int("tp", tp, 1)
        if world_size % (pp * tp):
            raise ValueError(f"world_size={world_size}: must be divisible by pp*tp = {pp * tp}")
        return cls(pp=pp, dp=world_size // (pp * tp), tp=tp)

    @property
    def world_size(self) -> int:
        return self.pp * self.dp * self.tp

    def grid(self) -> np.ndarray:
        """grid()[p, d, t] is the global rank: shape (pp, dp, tp), C order, so tp is contiguous."""
        return np.arange(self.world_size).reshape(self.pp, self.dp, self.tp)

    def rank_of(self, pp_rank: int, dp_rank: int, tp_rank: int) -> int:
        check_int("pp_rank", pp_rank, 0, self.pp - 1)
        check_int("dp_rank", dp_rank, 0, self.dp - 1)
        check_int("tp_rank", tp_rank, 0, self.tp - 1)
        return (pp_rank * self.dp + dp_rank) * self.tp + tp_rank

    def coords(self, rank: int) -> Coords:
        check_int("rank", rank, 0, self.world_size - 1)
        # Peel off the fastest digit first, like reading a mixed-radix number with digits (pp, dp, tp).
        rest, tp_rank = divmod(rank, self.tp)
        pp_rank, dp_rank = divmod(rest, self.dp)
        return Coords(pp_rank, dp_rank, tp_rank)

    def groups(self, kind: str) -> list[tuple[int, ...]]:
        """Every group of `kind`: the ranks that differ only in that coordinate, sorted by first rank.

        tp: pp·dp groups of tp ranks, dp: pp·tp groups of dp ranks, pp: dp·tp groups of pp ranks.
        """
        check_choice("kind", kind, KINDS)
        # Move the kind's axis last, then each row of the flattened grid is one group: (n_groups, size).
        rows = np.moveaxis(self.grid(), _AXIS[kind], -1).reshape(-1, getattr(self, kind))
        return sorted(tuple(int(r) for r in row) for row in rows)

    def group_of(self, kind: str, rank: int) -> tuple[int, ...]:
        """The `kind` group that holds `rank`: fix its other two coordinates, let this one run."""
        check_choice("kind", kind, KINDS)
        c = self.coords(rank)._asdict()
        size = getattr(self, kind)
        return tuple(self.rank_of(**{f"{k}_rank": (i if k == kind else c[k]) for k in _AXIS})
                     for i in range(size))

    def link(self, kind: str, gpus_per_node: int) -> str:
        """'intra-node' if every `kind` group fits inside one node (ranks gpus_per_node·n ...), else
        'inter-node': that collective then runs at the network's speed, several times slower."""
        check_int("gpus_per_node", gpus_per_node, 1)
        same_node = all(len({r // gpus_per_node for r in g}) == 1 for g in self.groups(kind))
        return LINKS[0] if same_node else LINKS[1]

    def to_text(self) -> str:
        """One row per pipeline stage, one bracketed tp group per dp replica."""
        width = len(str(self.world_size - 1))
        cells = [["[" + " ".join(f"{r:>{width}}" for r in tp_group) + "]" for tp_group in stage]
                 for stage in self.grid().tolist()]  # cells[p][d]: the tp group at (stage p, replica d)
        cell_w = max(len(cells[0][0]), len(f"dp={self.dp - 1}"))
        label_w = len(f"pp={self.pp - 1}")
        lines = [f"{self!r}: {self.world_size} ranks, rank = (pp_rank*dp + dp_rank)*tp + tp_rank",
                 " " * label_w + "".join(f"  {f'dp={d}':<{cell_w}}" for d in range(self.dp)).rstrip()]
        for p, row in enumerate(cells):
            lines.append(f"{f'pp={p}':<{label_w}}" + "".join(f"  {c:<{cell_w}}" for c in row).rstrip())
        lines.append("[..] = a tp group; same slot across a row = a dp group; "
                     "same slot down a column = a pp group")
        return "\n".join(lines)
