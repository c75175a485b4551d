"""The rank grid: which global rank plays which part when training is split several ways at once.

Five named dimensions, in Megatron-LM's order (its RankGenerator's "tp-cp-ep-dp-pp"), fastest first:
    tp  tensor parallel: each layer's weight matrices split across ranks
    cp  context parallel: the sequence split across ranks (attention passes keys and values around)
    ep  expert parallel: a mixture-of-experts layer's experts spread across ranks
    dp  data parallel: whole replicas, each on its own part of the batch
    pp  pipeline parallel: consecutive layers on consecutive stages
A global rank is a mixed-radix number whose digits are the coordinates, pp the most significant:
    rank = (((pp_rank·dp + dp_rank)·ep + ep_rank)·cp + cp_rank)·tp + tp_rank
i.e. ranks = arange(world).reshape(pp, dp, ep, cp, tp). A dimension of size 1 is a digit that is always 0,
so the lessons' (pp, dp, tp) grid is this same formula with cp = ep = 1. (Megatron-LM builds its expert
groups from a second grid in the same order; here one grid holds all five, as torch's DeviceMesh would.)

Why this order, given that a node's GPUs are consecutive ranks (node = rank // gpus_per_node):
- TP innermost: a TP group all-reduces activations in every layer, forward and backward, on the
  critical path. Adjacent ranks share a node, so TP stays on the fastest link (NVLink).
- CP, then EP next: attention's key/value exchange and the experts' all-to-all also run every layer.
- DP: one gradient all-reduce per step with plain DP or ZeRO-1 (ZeRO-2/3 reduce, and ZeRO-3 gathers, every
  micro-batch), which can overlap with the backward pass.
- PP outermost: only point-to-point sends of one activation per micro-batch between neighbouring
  stages, the least traffic, so it is the one that may cross nodes (InfiniBand).

How the code stays N-dimensional: every method loops over `Mesh.DIMS` and never names a dimension, so
a new dimension is one more name in that tuple (a subclass can add one: `class Mesh6(Mesh): DIMS = …`,
as tests/sim/test_mesh.py does). What a mesh *shows* is `mesh.axes`: pp, dp and tp always (the lessons'
three, even at size 1), any other dimension only when its size is > 1, slowest first. repr, `coords`,
`rank_of`'s arguments and `to_text` follow the axes, so a 3-D mesh reads as it always has — coords
unpack as (pp, dp, tp) — and a 5-D one shows all five:

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
    >>> m5 = Mesh(pp=2, dp=2, ep=2, cp=2, tp=2)
    >>> m5.axes, m5.coords(13), m5.rank_of(0, 1, 1, 0, 1)
    (('pp', 'dp', 'ep', 'cp', 'tp'), Coords(pp=0, dp=1, ep=1, cp=0, tp=1), 13)
    >>> m5.group_of("cp", 13), m5.group_of("ep", 13), m5.group_of("dp", 13), m5.stride("dp")
    ((13, 15), (9, 13), (5, 13), 8)
    >>> print(m5.to_text())
    Mesh(pp=2, dp=2, ep=2, cp=2, tp=2): 32 ranks, rank = (((pp_rank*dp + dp_rank)*ep + ep_rank)*cp + cp_rank)*tp + tp_rank
                    cp=0     cp=1
    pp=0 dp=0 ep=0  [ 0  1]  [ 2  3]
    pp=0 dp=0 ep=1  [ 4  5]  [ 6  7]
    pp=0 dp=1 ep=0  [ 8  9]  [10 11]
    pp=0 dp=1 ep=1  [12 13]  [14 15]
    pp=1 dp=0 ep=0  [16 17]  [18 19]
    pp=1 dp=0 ep=1  [20 21]  [22 23]
    pp=1 dp=1 ep=0  [24 25]  [26 27]
    pp=1 dp=1 ep=1  [28 29]  [30 31]
    [..] = a tp group; same slot across a row = a cp group; same slot in rows that differ in one of pp, dp, ep = a group of that one
"""
from __future__ import annotations

import math

import numpy as np

from .._checks import check_choice, check_int
from .message import Message

DIMS = ("tp", "cp", "ep", "dp", "pp")  # fastest first: Megatron-LM's "tp-cp-ep-dp-pp"
KINDS = ("tp", "dp", "pp")  # the lessons' three: always shown, and what lesson 6 sends bytes over
LINKS = ("intra-node", "inter-node")


class Coords(tuple):
    """One rank's place in the grid: its index along each of the mesh's axes, slowest first.

    A plain tuple underneath, so a 3-D mesh's coords unpack as `pp_rank, dp_rank, tp_rank = mesh.coords(r)`
    and equal (pp_rank, dp_rank, tp_rank); the names read one index at a time (`c.tp`). The fields are the
    keywords in the order given — `Mesh.coords` gives them slowest first: Coords(pp=1, dp=0, tp=1).
    Unlike a NamedTuple its fields vary with the mesh: five on a 5-D mesh, three on the lessons' grid.
    """

    def __new__(cls, **index: int) -> Coords:
        coords = super().__new__(cls, index.values())
        object.__setattr__(coords, "_fields", tuple(index))  # kept beside the tuple, in its __dict__
        return coords

    def __getattr__(self, name: str) -> int:  # only called for names that are not real attributes
        fields = self.__dict__.get("_fields", ())
        if name in fields:
            return self[fields.index(name)]
        raise AttributeError(f"Coords has no {name!r}: its fields are {', '.join(fields)}")

    def __setattr__(self, name, value):
        raise AttributeError("Coords are read-only")

    def __getnewargs_ex__(self):  # how pickle (a worker's result, a launch argument) rebuilds it
        return (), self._asdict()

    def _asdict(self) -> dict[str, int]:
        return dict(zip(self._fields, self))

    def __repr__(self) -> str:
        return "Coords(" + ", ".join(f"{k}={v}" for k, v in zip(self._fields, self)) + ")"


class Mesh:
    """A grid of world_size = (product of every size) ranks, one size per name in DIMS, 1 unless given.

    Keyword-only — Mesh(pp=2, dp=4, tp=2) — because a positional Mesh(2, 4, 2) would silently mean a
    different grid as soon as DIMS grows. Frozen and hashable, like a frozen dataclass; mesh.tp,
    mesh.cp … read one size.
    """

    DIMS = DIMS  # the one list of dimensions; a subclass with a longer tuple has more of them

    def __init__(self, **sizes: int):
        for dim, size in sizes.items():
            if dim not in self.DIMS:
                raise ValueError(f"{dim}={size!r}: not a dimension; the dimensions are {', '.join(self.DIMS)}")
            check_int(dim, size, 1)  # "tp=0: must be >= 1"
        # One size per name in DIMS, fastest first; object.__setattr__ because the mesh is frozen.
        object.__setattr__(self, "_sizes", tuple(sizes.get(d, 1) for d in self.DIMS))

    def __getattr__(self, name: str) -> int:  # mesh.tp, mesh.cp …: only called for names not found otherwise
        if name in type(self).DIMS:
            return self._sizes[type(self).DIMS.index(name)]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __setattr__(self, name, value):
        raise AttributeError(f"a {type(self).__name__} is frozen: build a new one instead of setting {name}")

    def __delattr__(self, name):
        raise AttributeError(f"a {type(self).__name__} is frozen: build a new one instead of deleting {name}")

    def __eq__(self, other) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._sizes == other._sizes

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._sizes))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(" + ", ".join(f"{a}={getattr(self, a)}" for a in self.axes) + ")"

    @classmethod
    def from_world(cls, world_size: int, **sizes: int) -> Mesh:
        """How launchers size a run: fix the model's split (pp, tp, cp, ep), dp takes the rest of the ranks."""
        check_int("world_size", world_size, 1)
        if "dp" in sizes:
            raise ValueError(f"dp={sizes['dp']!r}: from_world sets dp to the ranks left; give only the others")
        split = cls(**sizes)  # checks every size; its world_size is the product of all but dp
        if world_size % split.world_size:
            named = "*".join(a for a in split.axes if a != "dp")
            raise ValueError(f"world_size={world_size}: must be divisible by {named} = {split.world_size}")
        return cls(**sizes, dp=world_size // split.world_size)

    @property
    def world_size(self) -> int:
        return math.prod(self._sizes)

    @property
    def axes(self) -> tuple[str, ...]:
        """The dimensions this mesh shows, slowest first: pp, dp, tp always, any other when its size > 1.
        A hidden dimension has size 1, so leaving it out changes no rank."""
        return tuple(d for d in reversed(self.DIMS) if d in KINDS or getattr(self, d) > 1)

    @property
    def shape(self) -> tuple[int, ...]:
        """The size of each axis, slowest first: (pp, dp, tp) for the lessons' grid."""
        return tuple(getattr(self, a) for a in self.axes)

    def grid(self) -> np.ndarray:
        """grid()[p, d, t] is the global rank: shape `mesh.shape`, C order, so the last axis (tp) is contiguous."""
        return np.arange(self.world_size).reshape(self.shape)

    def stride(self, kind: str) -> int:
        """How far apart neighbours in a `kind` group are: the product of the faster dimensions' sizes
        (tp: 1, cp: tp, ep: tp·cp, dp: tp·cp·ep, pp: world_size/pp)."""
        check_choice("kind", kind, self.DIMS)
        return math.prod(self._sizes[:self.DIMS.index(kind)])

    def rank_of(self, *coords: int) -> int:
        """The global rank at `coords`, one index per axis, slowest first (what `coords` returns)."""
        if len(coords) != len(self.axes):
            raise ValueError(f"coords={coords}: must be {len(self.axes)} indices, one per axis {', '.join(self.axes)}")
        rank = 0
        for axis, index in zip(self.axes, coords):
            size = getattr(self, axis)
            check_int(f"{axis}_rank", index, 0, size - 1)
            rank = rank * size + index  # Horner's rule: shift the digits so far one place, add the next
        return rank

    def coords(self, rank: int) -> Coords:
        check_int("rank", rank, 0, self.world_size - 1)
        index = {}
        for axis in reversed(self.axes):  # peel off the fastest digit first, as in reading a mixed-radix number
            rank, index[axis] = divmod(rank, getattr(self, axis))
        return Coords(**{a: index[a] for a in self.axes})

    def group_of(self, kind: str, rank: int) -> tuple[int, ...]:
        """The `kind` group that holds `rank`: fix every other coordinate, let this one run. Its members
        are evenly spaced, `stride(kind)` apart, from the one whose `kind` index is 0."""
        stride = self.stride(kind)
        check_int("rank", rank, 0, self.world_size - 1)
        size = getattr(self, kind)
        first = rank - (rank // stride % size) * stride  # (rank // stride) % size: rank's index along kind
        return tuple(range(first, first + size * stride, stride))

    def groups(self, kind: str) -> list[tuple[int, ...]]:
        """Every group of `kind`, sorted by first rank: world_size/size groups of `size` ranks each.

        tp: pp·dp groups of tp ranks, dp: pp·tp groups of dp ranks, pp: dp·tp groups of pp ranks (times
        cp·ep on a 5-D mesh). Each group starts at the one member whose `kind` index is 0.
        """
        stride, size = self.stride(kind), getattr(self, kind)
        return [self.group_of(kind, r) for r in range(self.world_size) if r // stride % size == 0]

    def index_of(self, kind: str, rank: int) -> int:
        """Rank `rank`'s index along `kind` (its digit in the mixed-radix number), on any mesh: 0 where hidden."""
        check_int("rank", rank, 0, self.world_size - 1)
        return rank // self.stride(kind) % getattr(self, kind)

    def joint_groups(self, name: str) -> list[tuple[int, ...]]:
        """Groups over several dimensions at once, named as Megatron's RankGenerator names them ("dp-cp": the
        ranks that differ only in dp and cp, its data-parallel group with context parallelism, over which the
        gradients are reduced when the sequence is split). Each group sorted, groups sorted by first rank."""
        kinds = name.split("-") if isinstance(name, str) else ()
        if not kinds or not all(k in self.DIMS for k in kinds) or len(set(kinds)) != len(kinds):
            raise ValueError(f"name={name!r}: must be dimensions joined by '-', each one of {', '.join(self.DIMS)}")
        fixed = [d for d in self.DIMS if d not in kinds]
        out: dict[tuple, list[int]] = {}
        for rank in range(self.world_size):  # the ranks that share every other coordinate form one group
            out.setdefault(tuple(self.index_of(d, rank) for d in fixed), []).append(rank)
        return sorted(tuple(g) for g in out.values())

    def link(self, kind: str, gpus_per_node: int) -> str:
        """'intra-node' if every `kind` group fits inside one node (ranks gpus_per_node·n ...), else
        'inter-node': that collective then runs at the network's speed, several times slower."""
        check_int("gpus_per_node", gpus_per_node, 1)
        same_node = all(len({r // gpus_per_node for r in g}) == 1 for g in self.groups(kind))
        return LINKS[0] if same_node else LINKS[1]

    def to_text(self) -> str:
        """One bracketed group of the fastest axis (tp) per cell, the next axis (dp; cp on a 5-D mesh) across
        a row, one row per index of the slower axes (pp; or pp, dp, ep)."""
        *slow, across, inner = self.axes
        n_across, n_inner = getattr(self, across), getattr(self, inner)
        width = len(str(self.world_size - 1))
        rows = self.grid().reshape(-1, n_across, n_inner).tolist()  # (rows, across, inner)
        cells = [["[" + " ".join(f"{r:>{width}}" for r in group) + "]" for group in row] for row in rows]
        labels = [" ".join(f"{a}={i}" for a, i in zip(slow, index))
                  for index in np.ndindex(*(getattr(self, a) for a in slow))]  # one per row, in rank order
        cell_w = max(len(cells[0][0]), len(f"{across}={n_across - 1}"))
        label_w = max(len(label) for label in labels)
        formula = f"{self.axes[0]}_rank"
        for a in self.axes[1:]:  # Horner's rule again, written out: (pp_rank*dp + dp_rank)*tp + tp_rank
            formula = f"{formula}*{a} + {a}_rank" if a == self.axes[-1] else f"({formula}*{a} + {a}_rank)"
        lines = [Message("{mesh}: {n} ranks, rank = {formula}", mesh=repr(self), n=self.world_size, formula=formula),
                 " " * label_w + "".join(f"  {f'{across}={i}':<{cell_w}}" for i in range(n_across)).rstrip()]
        for label, row in zip(labels, cells):
            lines.append(f"{label:<{label_w}}" + "".join(f"  {c:<{cell_w}}" for c in row).rstrip())
        slower = (Message("same slot down a column = a {kind} group", kind=slow[0]) if len(slow) == 1 else
                  Message("same slot in rows that differ in one of {kinds} = a group of that one",
                          kinds=", ".join(slow)))
        lines.append(Message("[..] = a {inner} group; same slot across a row = a {across} group; {slower}",
                             inner=inner, across=across, slower=slower))
        return Message.lines(lines)  # English as a string; the sentences said in Chinese by render.hybrid.mesh_text
