"""Flat, padded shards: how ZeRO cuts a layer across ranks, and the two collectives that move them.

A layer's weight and bias, flattened end to end and padded with zeros to N·S elements (S = ceil(P / N)),
are viewed as *rows* (N, S): row r is rank r's shard. ZeRO never needs more than this layout:
  reduce_scatter_mean(rows): every rank's full grads in `rows` → our row holds the mean over ranks;
  all_gather(rows):          our row holds our updated shard → every row holds its owner's.
Both work in place, on a process `group` (default WORLD; with 3-D parallelism, the data-parallel
group): N is the group's size and "rank" this process's rank in it. On gloo they run our ring from
lesson 1 (`simlab.exec.collectives.run_plan`): gloo's own reduce_scatter is slower than its all_reduce
(37 vs 26 ms for 16 MB on 4 ranks, measured), while a ring reduce-scatter is half a ring all-reduce.
On NCCL they call torch's collectives. `bytes_sent` says what either sends, in the ring accounting.

    >>> rows = torch.full((2, 3), -1.0)
    >>> into_rows(rows, [torch.tensor([[1., 2.], [3., 4.]]), torch.tensor([5.])])  # P = 5, N·S = 6
    >>> rows
    tensor([[1., 2., 3.],
            [4., 5., 0.]])
"""
from __future__ import annotations

import math

import torch
import torch.distributed as dist

from ..sim.collectives import plan_for, ring_bytes_sent
from .collectives import run_plan

# torch 2.13 renamed the flat-tensor collectives; the old names still work but warn
_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def shard_size(numel: int, world_size: int) -> int:
    return math.ceil(numel / world_size)


def _row_pieces(rows: torch.Tensor, tensors, first: int = 0):
    """Where `tensors`, flattened end to end, land in the (N, S) layout filled row after row, restricted
    to the rows `rows` holds (k, S): rows first … first+k−1. Yields (slice of a row, flat tensor,
    offset in it). What no tensor fills is the padding."""
    size, at = rows.shape[1], 0  # at: the flat position of the current tensor's first element
    for t in tensors:
        flat = t.detach().reshape(-1)
        for r in range(max(at // size, first), min(first + rows.shape[0], -(-(at + flat.numel()) // size))):
            lo, hi = max(at, r * size), min(at + flat.numel(), (r + 1) * size)  # overlap with row r
            yield rows[r - first, lo - r * size:hi - r * size], flat, lo - at
        at += flat.numel()


def into_rows(rows: torch.Tensor, tensors) -> None:
    """Copy `tensors` end to end into `rows` (N, S), zero tail: their flat concatenation padded with zeros
    to N·S, written straight into place (rows may be a column block of a larger bucket: no intermediate copy)."""
    filled, size = 0, rows.shape[1]
    for piece, flat, off in _row_pieces(rows, tensors):
        piece.copy_(flat[off:off + piece.numel()])
        filled += piece.numel()
    for r in range(filled // size, rows.shape[0]):  # the padding: zero, so it adds nothing when reduced
        rows[r, filled - r * size if r == filled // size else 0:].zero_()


def from_rows(rows: torch.Tensor, tensors) -> None:
    """The inverse of into_rows: copy `rows` (N, S) back into `tensors`, skipping the padding."""
    for t in tensors:
        if not t.is_contiguous():  # reshape(-1) would be a copy: the write would land nowhere
            raise ValueError(f"tensors: a {tuple(t.shape)} tensor is not contiguous; from_rows writes in place")
    for piece, flat, off in _row_pieces(rows, tensors):
        flat[off:off + piece.numel()].copy_(piece)


def own_block(tensors, rank: int, size: int) -> torch.Tensor:
    """Row `rank` of into_rows(tensors) as a new (S,) tensor, without building the other N−1 rows."""
    out = tensors[0].new_zeros(1, size)  # (1, S): our row alone; the tail stays padding
    for piece, flat, off in _row_pieces(out, tensors, first=rank):
        piece.copy_(flat[off:off + piece.numel()])
    return out[0]  # (S,)


def new_rows(numel: int, world_size: int, device) -> torch.Tensor:
    return torch.empty(world_size, shard_size(numel, world_size), device=device)  # (N, S)


def _group_rank(rows: torch.Tensor, group) -> int:
    if rows.shape[0] != dist.get_world_size(group):  # a mismatch would hang the other ranks: refuse here
        raise ValueError(f"rows: {rows.shape[0]} rows, the group has {dist.get_world_size(group)} ranks")
    return dist.get_rank(group)


def reduce_scatter_mean(rows: torch.Tensor, group=None) -> torch.Tensor:
    """rows (N, S): this rank's full grads, in place → (S,) view of our row: the mean over the group.

    The mean, not the sum: each rank's loss is a mean over its part of the batch."""
    rank, n = _group_rank(rows, group), rows.shape[0]
    if dist.get_backend(group) == "gloo":
        run_plan(plan_for("ring-reduce-scatter", n, rows.numel(), rows.element_size()), rows, group=group)
    else:
        out = rows.new_empty(rows.shape[1])  # (S,)
        _reduce_scatter(out, rows.view(-1), group=group)  # NCCL: rank r receives Σ_ranks rows[r]
        rows[rank] = out
    return rows[rank].div_(n)


def all_gather(rows: torch.Tensor, group=None) -> torch.Tensor:
    """rows (N, S) with our shard in row `rank` → every row filled with its owner's shard; returns rows."""
    rank = _group_rank(rows, group)
    if dist.get_backend(group) == "gloo":
        run_plan(plan_for("ring-all-gather", rows.shape[0], rows.numel(), rows.element_size()), rows, group=group)
    else:  # NCCL: the input may not alias the output
        _all_gather(rows.view(-1), rows[rank].clone(), group=group)
    return rows


def bytes_sent(goal: str, rows: torch.Tensor, group=None) -> int:
    """What this rank sends to reduce-scatter or all-gather `rows` (N, S): (N-1)·S elements."""
    return ring_bytes_sent(goal, rows.shape[0], rows.numel(), rows.element_size())[dist.get_rank(group)]
