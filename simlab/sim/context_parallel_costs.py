"""Context parallelism's three ways, side by side: what each rank sends, and the K,V it must hold.

- **ring** (ring attention; Megatron-LM's CP): K,V blocks hop around the ring, N − 1 hops forward; backward
  sends them around again plus N hops of dK,dV (`sim.context_parallel.ring_attention_plan`). A rank holds
  at most the block it computes on and the one arriving: memory O(s/N), traffic overlappable with compute.
- **all-gather-kv** (Llama 3's choice, Dubey et al. 2024 §3.3.2): all-gather K and V once, attend locally
  with any mask, reduce-scatter dK,dV in the backward. The same bytes as the ring's forward, but every rank
  holds the whole sequence's K,V — small under GQA (kv_heads ≪ heads), which is why Llama 3 can afford it.
- **ulysses** (DeepSpeed-Ulysses, Jacobs et al. 2023): an all-to-all turns "my tokens, all heads" into "all
  tokens, my heads"; attention runs whole on heads/N heads; a second all-to-all turns the output back. Needs
  heads and kv_heads divisible by N; each all-to-all sends (N − 1)/N of a rank's share, so bytes per rank
  shrink as N grows, where the ring's do not.

All closed forms count bytes per rank (every rank sends the same) and are checked against hand-computed cases
and against the plans' own transfers (tests/sim/test_context_parallel.py); a real run's sends equal them
(`simlab.parity.context_parallel`).

    >>> c = costs("ring", world_size=4, seq=16, heads=4, head_dim=2)  # K,V block = 2·(16/4)·4·2 = 64 floats
    >>> c.forward_bytes, c.backward_bytes, c.kv_buffer_bytes
    (768, 1792, 512)
    >>> costs("ulysses", world_size=4, seq=16, heads=4, head_dim=2).forward_bytes  # 3 · (24 + 8) floats
    384
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .._checks import check_choice, check_divisible, check_int, check_ranks
from ..plan import CollectivePlan, Transfer
from .collectives import ring_all_gather, ring_reduce_scatter
from .context_parallel import check_layout, kv_chunk_names, ring_attention_plan

VARIANTS = ("ring", "all-gather-kv", "ulysses")


class CPCost(NamedTuple):
    """One variant's price per rank, in bytes: sent in the forward and in the backward, and the K,V buffers
    it allocates beyond its own K,V shard while attention runs (the block arriving and the one in use for
    the ring, the gathered sequence for all-gather, the heads' whole-sequence K,V for Ulysses)."""

    variant: str
    forward_bytes: int
    backward_bytes: int
    kv_buffer_bytes: int

    @property
    def bytes_sent(self) -> int:
        return self.forward_bytes + self.backward_bytes


def check_shape(variant: str, *, world_size: int, seq: int, heads: int, head_dim: int, kv_heads: int | None = None,
                batch: int = 1, itemsize: int = 4, layout: str = "zigzag") -> int:
    """Every rule in one line naming the argument; returns kv_heads (None: as many as heads)."""
    check_choice("variant", variant, VARIANTS)
    check_layout(world_size, seq, layout)
    for name, value in (("heads", heads), ("head_dim", head_dim), ("batch", batch), ("itemsize", itemsize)):
        check_int(name, value, 1)
    kv_heads = heads if kv_heads is None else check_int("kv_heads", kv_heads, 1)
    check_divisible("heads", heads, "kv_heads", kv_heads)  # GQA: each K,V head serves heads/kv_heads queries
    if variant == "ulysses":  # each rank gets whole heads: of the queries and of the keys and values
        check_divisible("heads", heads, "world_size", world_size)
        check_divisible("kv_heads", kv_heads, "world_size", world_size)
    return kv_heads


def kv_block_numel(*, world_size: int, seq: int, kv_heads: int, head_dim: int, batch: int = 1) -> int:
    """Elements of one rank's K and V: 2 · b · s/N · kv_heads · head_dim (GQA makes kv_heads < heads)."""
    check_ranks("world_size", world_size)
    return 2 * batch * (seq // world_size) * kv_heads * head_dim


def ulysses_pieces(*, world_size: int, seq: int, heads: int, kv_heads: int, head_dim: int, batch: int = 1
                   ) -> tuple[int, int]:
    """Elements a rank sends to each other rank in Ulysses' all-to-alls: (Q,K,V piece, output piece) — its
    s/N tokens of one rank's heads/N query heads and kv_heads/N key and value heads; of its heads/N outputs."""
    tokens = batch * (seq // world_size) * head_dim
    return tokens * (heads + 2 * kv_heads) // world_size, tokens * heads // world_size


def costs(variant: str, *, world_size: int, seq: int, heads: int, head_dim: int, kv_heads: int | None = None,
          batch: int = 1, itemsize: int = 4, layout: str = "zigzag") -> CPCost:
    """Bytes per rank and K,V buffers of `variant`, in closed form (B = one rank's K,V block in bytes).

    ring:          forward (N−1)·B; backward (N−1)·B of K,V and N·B of dK,dV; buffers min(N−1, 2)·B
    all-gather-kv: forward (N−1)·B (ring all-gather); backward (N−1)·B (reduce-scatter of dK,dV); buffers N·B
    ulysses:       forward (N−1)·(Q,K,V piece + output piece), backward the same (the all-to-alls' gradients
                   go back the way they came); buffers B (whole-sequence K,V of kv_heads/N heads)
    One rank sends nothing and allocates nothing.
    """
    g = check_shape(variant, world_size=world_size, seq=seq, heads=heads, head_dim=head_dim, kv_heads=kv_heads,
                    batch=batch, itemsize=itemsize, layout=layout)
    n = world_size
    block = kv_block_numel(world_size=n, seq=seq, kv_heads=g, head_dim=head_dim, batch=batch) * itemsize
    if n == 1:
        return CPCost(variant, 0, 0, 0)
    if variant == "ring":
        return CPCost(variant, (n - 1) * block, (n - 1) * block + n * block, min(n - 1, 2) * block)
    if variant == "all-gather-kv":
        return CPCost(variant, (n - 1) * block, (n - 1) * block, n * block)
    qkv, out = ulysses_pieces(world_size=n, seq=seq, heads=heads, kv_heads=g, head_dim=head_dim, batch=batch)
    sent = (n - 1) * (qkv + out) * itemsize
    return CPCost(variant, sent, sent, block)


def compare(*, world_size: int, seq: int, heads: int, head_dim: int, kv_heads: int | None = None, batch: int = 1,
            itemsize: int = 4) -> dict[str, CPCost | None]:
    """Every variant's `costs` for one shape; None for Ulysses where the heads do not divide over N."""
    out = {}
    for variant in VARIANTS:
        try:
            out[variant] = costs(variant, world_size=world_size, seq=seq, heads=heads, head_dim=head_dim,
                                 kv_heads=kv_heads, batch=batch, itemsize=itemsize, layout="contiguous")
        except ValueError:
            if variant != "ulysses":
                raise
            out[variant] = None
    return out


# ---- the plans a real run follows, one plan step per step of the run ------------------------------------

def _moved(plan: CollectivePlan, step: int, chunk: int) -> list[tuple[Transfer, ...]]:
    """A collective's steps shifted to start at plan step `step` and chunk `chunk`."""
    return [tuple(Transfer(t.step + step, t.src, t.dst, t.chunk + chunk, t.nbytes, t.op) for t in s)
            for s in plan.steps]


def all_gather_kv_plan(world_size: int, block_numel: int, itemsize: int = 4) -> CollectivePlan:
    """Steps 0..N−2: ring all-gather of the K,V blocks (chunk j = rank j's); step N−1: attention; step N:
    its backward; steps N+1..2N−1: ring reduce-scatter of dK,dV (chunk N + j ends on rank j)."""
    n = check_ranks("world_size", world_size)
    gather = ring_all_gather(n, n * block_numel, itemsize)
    scatter = ring_reduce_scatter(n, n * block_numel, itemsize)
    steps = _moved(gather, 0, 0) + [(), ()] + _moved(scatter, n + 1, n)
    return CollectivePlan("all_gather_kv", n, (block_numel,) * (2 * n), itemsize, "own", tuple(steps),
                          meta={"variant": "all-gather-kv", "chunk_names": kv_chunk_names(n),
                                "compute_steps": {n - 1: "attention", n: "attention backward"}})


def all_to_all_steps(world_size: int, piece_nbytes: int, step: int, chunk: int) -> list[tuple[Transfer, ...]]:
    """A pairwise all-to-all: in round k = 1..N−1 rank r sends rank (r + k) mod N the piece meant for it
    (chunk `chunk` + that rank), as N − 1 plan steps from `step` on."""
    n = world_size
    return [tuple(Transfer(step + k - 1, r, (r + k) % n, chunk + (r + k) % n, piece_nbytes) for r in range(n))
            for k in range(1, n)]


def ulysses_plan(world_size: int, qkv_numel: int, out_numel: int, itemsize: int = 4) -> CollectivePlan:
    """Four all-to-alls around two computes: Q,K,V (steps 0..N−2), attention (N−1), output (N..2N−2); then
    the backward mirrors it: dOut (2N−1..3N−3), attention backward (3N−2), dQ,dK,dV (3N−1..4N−3).
    `qkv_numel`, `out_numel`: one piece of each (`ulysses_pieces`)."""
    n = check_ranks("world_size", world_size)
    q, o = qkv_numel * itemsize, out_numel * itemsize
    steps = (all_to_all_steps(n, q, 0, 0) + [()] + all_to_all_steps(n, o, n, n)
             + all_to_all_steps(n, o, 2 * n - 1, 2 * n) + [()] + all_to_all_steps(n, q, 3 * n - 1, 3 * n))
    names = {"qkv": (0, n), "out": (n, 2 * n), "dout": (2 * n, 3 * n), "dqkv": (3 * n, 4 * n)}
    return CollectivePlan("ulysses", n, (qkv_numel,) * n + (out_numel,) * 2 * n + (qkv_numel,) * n, itemsize, "own",
                          tuple(steps), meta={"variant": "ulysses", "chunk_names": names,
                                              "compute_steps": {n - 1: "attention", 3 * n - 2: "attention backward"}})


def make_plan(variant: str, *, world_size: int, seq: int, heads: int, head_dim: int, kv_heads: int | None = None,
              batch: int = 1, itemsize: int = 4, layout: str = "zigzag") -> CollectivePlan:
    """The plan of `variant`, forward and backward, for this shape."""
    g = check_shape(variant, world_size=world_size, seq=seq, heads=heads, head_dim=head_dim, kv_heads=kv_heads,
                    batch=batch, itemsize=itemsize, layout=layout)
    block = kv_block_numel(world_size=world_size, seq=seq, kv_heads=g, head_dim=head_dim, batch=batch)
    if variant == "ring":
        return ring_attention_plan(world_size, block, itemsize)
    if variant == "all-gather-kv":
        return all_gather_kv_plan(world_size, block, itemsize)
    qkv, out = ulysses_pieces(world_size=world_size, seq=seq, heads=heads, kv_heads=g, head_dim=head_dim, batch=batch)
    return ulysses_plan(world_size, qkv, out, itemsize)


# ---- the same closed forms over arrays, for lesson 6's model of a whole step (`hybrid_layer.cp_seconds`) ----

def layer_bytes(variant, n, block, qkv_piece, out_piece) -> tuple:
    """`costs` over numpy arrays: (forward, backward, K,V buffer) bytes per rank for `variant` (an index into
    VARIANTS) on n ranks, given one rank's K,V block and Ulysses' two pieces in bytes (`kv_block_numel`,
    `ulysses_pieces` × itemsize). The same formulas as `costs`, which tests/sim/test_context_parallel_model.py
    holds them to; no shape checks here (`hybrid.check_context` made them)."""
    variant, n = np.asarray(variant), np.asarray(n)
    ring, gather = variant == VARIANTS.index("ring"), variant == VARIANTS.index("all-gather-kv")
    ulysses = (n - 1) * (qkv_piece + out_piece)
    forward = np.where(ring | gather, (n - 1) * block, ulysses)
    backward = np.where(ring, (2 * n - 1) * block, np.where(gather, (n - 1) * block, ulysses))
    buffers = np.where(ring, np.minimum(n - 1, 2) * block, np.where(gather, n * block, block))
    alone = n == 1
    return tuple(np.where(alone, 0, x) for x in (forward, backward, buffers))
