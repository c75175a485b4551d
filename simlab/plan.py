"""The shared vocabulary of simlab: what a *plan* is made of.

A plan says, deterministically, what every rank does. The simulator (`simlab.sim`) steps through a
plan with exact integer arithmetic; the executor (`simlab.exec`) runs the very same plan on real
processes. Both describe what happened with `simlab.trace.Event`s.

- `Transfer`: one chunk moving from one rank to another during one step of a collective.
- `CollectivePlan`: the steps of a collective (each a tuple of transfers that run concurrently).
- `Action`: one pipeline action such as ``2F0`` (stage 2, forward, micro-batch 0).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

OPS = ("reduce", "copy")  # what the receiver does with a chunk: add it in, or overwrite with it
OP_SIGN = {"reduce": "(+=)", "copy": "(=)"}  # how a transfer's op prints, everywhere one is printed


def split_sizes(numel: int, parts: int) -> tuple[int, ...]:
    """Chunk sizes for `numel` elements cut into `parts` chunks, like `torch.tensor_split`.

    The first ``numel % parts`` chunks get one extra element, so sizes differ by at most one.
    >>> split_sizes(10, 4)
    (3, 3, 2, 2)
    """
    if parts < 1:
        raise ValueError(f"parts={parts}: must be >= 1")
    if numel < 0:
        raise ValueError(f"numel={numel}: must be >= 0")
    base, extra = divmod(numel, parts)
    return tuple(base + (1 if i < extra else 0) for i in range(parts))


def chunk_offsets(sizes: tuple[int, ...]) -> tuple[int, ...]:
    """Start offset of each chunk: (3, 3, 2, 2) -> (0, 3, 6, 8)."""
    offsets, pos = [], 0
    for size in sizes:
        offsets.append(pos)
        pos += size
    return tuple(offsets)


@dataclass(frozen=True)
class Transfer:
    """Chunk `chunk` goes from rank `src` to rank `dst` in step `step`; `dst` applies `op`."""

    step: int
    src: int
    dst: int
    chunk: int
    nbytes: int
    op: str = "copy"

    def __post_init__(self):
        if self.op not in OPS:
            raise ValueError(f"op={self.op!r}: must be one of {OPS}")

    def __str__(self) -> str:
        """'r0 → r1 (+=) chunk 3 (8 B)': the arrow is the direction, the bracket what dst does with it.

        >>> for t in (Transfer(0, 0, 1, 3, 8, "reduce"), Transfer(4, 2, 3, 1, 8)): print(t)
        r0 → r1 (+=) chunk 3 (8 B)
        r2 → r3 (=) chunk 1 (8 B)
        """
        return self.template.format(**self.fields)

    # a transfer is also a message (as sim's `Message`: its template and fields), so the layer that prints it says
    # it in the reader's language with `simlab.i18n._(transfer)`; base itself never translates
    template = "r{src} → r{dst} {sign} chunk {chunk} ({nbytes} B)"

    @property
    def fields(self) -> dict:
        return {"src": self.src, "dst": self.dst, "sign": OP_SIGN[self.op], "chunk": self.chunk, "nbytes": self.nbytes}


@dataclass(frozen=True)
class CollectivePlan:
    """A collective as data: which chunk moves where in each step.

    `chunk_sizes[c]` is chunk c's length in elements; `itemsize` bytes per element.
    `start` says which chunks each rank holds before step 0 ("all", "own" = chunk r only, or "root").
    `steps[k]` holds the transfers of step k; transfers within a step run concurrently.
    """

    name: str
    world_size: int
    chunk_sizes: tuple[int, ...]
    itemsize: int
    start: str
    steps: tuple[tuple[Transfer, ...], ...]
    root: int = 0
    meta: dict = field(default_factory=dict, compare=False)

    @property
    def numel(self) -> int:
        return sum(self.chunk_sizes)

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize

    @property
    def num_steps(self) -> int:
        return len(self.steps)

    def transfers(self):
        """All transfers in execution order (step by step)."""
        return [t for step in self.steps for t in step]

    def bytes_sent_per_rank(self) -> list[int]:
        sent = [0] * self.world_size
        for t in self.transfers():
            sent[t.src] += t.nbytes
        return sent

    def bytes_received_per_rank(self) -> list[int]:
        recv = [0] * self.world_size
        for t in self.transfers():
            recv[t.dst] += t.nbytes
        return recv

    def for_rank(self, rank: int) -> list[list[Transfer]]:
        """What one rank does, step by step: the transfers it sends or receives."""
        return [[t for t in step if rank in (t.src, t.dst)] for step in self.steps]


_ACTION = re.compile(r"^(\d+)([FBIW])(\d+)$")


@dataclass(frozen=True, order=True)
class Action:
    """One pipeline action: stage `stage` runs op F/B/I/W on micro-batch `mb`. Prints as ``2F0``."""

    stage: int
    op: str
    mb: int

    def __str__(self) -> str:
        return f"{self.stage}{self.op}{self.mb}"

    @classmethod
    def parse(cls, text: str) -> "Action":
        match = _ACTION.match(text.strip())
        if not match:
            raise ValueError(f"action={text!r}: expected '<stage><F|B|I|W><microbatch>', e.g. '2F0'")
        return cls(int(match[1]), match[2], int(match[3]))
