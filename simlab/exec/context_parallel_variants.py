"""The two other ways to split attention over a sequence: gather all K,V first (Llama 3), or trade the sequence
split for a split by heads (DeepSpeed-Ulysses). Same inputs and outputs as `exec.context_parallel.ring_attention`.

- `all_gather_kv_attention`: one ring all-gather of every rank's K,V (`exec.collectives.ring_all_gather`, the
  course's own ring), attention of this rank's queries over the whole sequence, and in the backward one ring
  reduce-scatter that sums every rank's dK,dV share into the block's owner. Llama 3 trains 128K contexts this
  way (Dubey et al. 2024 §3.3.2): under GQA the gathered K,V are small, and any mask is easy.
- `ulysses_attention`: an all-to-all sends rank j the heads it will own (its Q, K, V heads/N of them) for this
  rank's tokens; each rank then holds every token of heads/N heads and attends locally; a second all-to-all
  sends each token's output home. Backward, autograd runs the same all-to-alls in reverse. Needs heads and
  kv_heads divisible by N.

Each all-to-all is pairwise (round k: to rank r + k, from rank r − k), so every transfer is one recorded
send/recv at the plan step of `sim.context_parallel_costs.ulysses_plan`.
"""
from __future__ import annotations

import dataclasses

import torch
import torch.distributed as dist

from .._checks import check_divisible
from ..sim.context_parallel import chunks_of
from ..trace import Recorder
from . import collectives
from .context_parallel_tiles import (
    Exchange,
    attend,
    attend_backward,
    check_inputs,
    finish,
    new_state,
    pack,
    timed_compute,
    unpack,
)


class LocalAttention(torch.autograd.Function):
    """Attention of q's chunks over k,v's chunks in one process, tiles skipped as the mask allows; forward and
    backward recorded as one compute each, at plan steps `steps`."""

    @staticmethod
    def forward(ctx, q, k, v, q_chunks, kv_chunks, causal, rec, work, steps):
        state = new_state(q, len(q_chunks))
        timed_compute(rec, work, steps[0], "attention", attend, state, q, k, v, q_chunks, kv_chunks, causal)
        out, lse = finish(state)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.setup = (q_chunks, kv_chunks, causal, rec, work, steps)
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        q_chunks, kv_chunks, causal, rec, work, steps = ctx.setup
        dout = dout.contiguous()
        delta = (dout * out).sum(-1)  # (b, a, t)
        dq, dk, dv, _ = timed_compute(rec, work, steps[1], "attention backward", attend_backward,
                                      q, k, v, dout, lse, delta, q_chunks, kv_chunks, causal)
        return dq, dk, dv, None, None, None, None, None, None


def _absorb(rec: Recorder, sub: Recorder, step: int, chunk: int, name: str) -> None:
    """A collective's Events (recorded by `exec.collectives.run_plan`, which restarts its own clock) into
    `rec`: moved to plan step `step` and chunk `chunk` on, named by what travelled, on `rec`'s clock."""
    shift = sub.origin - rec.origin
    rec.events.extend(dataclasses.replace(e, step=e.step + step, chunk=e.chunk + chunk, name=name,
                                          start=e.start + shift, end=e.end + shift) for e in sub.events)


class GatherKV(torch.autograd.Function):
    """Every rank's packed K,V (n·block,) from this rank's (block,): ring all-gather forward (plan steps
    0..N−2), ring reduce-scatter of the gradient backward (steps N+1..2N−1, chunks N..2N−1)."""

    @staticmethod
    def forward(ctx, own, group, rec):
        n, r = dist.get_world_size(group), dist.get_rank(group)
        ctx.setup = (group, rec)
        if n == 1:
            return own.clone()
        gathered, sub = own.new_empty(n * own.numel()), Recorder(r)
        collectives.ring_all_gather(gathered, own, sub, group)
        _absorb(rec, sub, 0, 0, "kv")
        return gathered

    @staticmethod
    def backward(ctx, grad):
        group, rec = ctx.setup
        n, r = dist.get_world_size(group), dist.get_rank(group)
        if n == 1:
            return grad, None, None
        own, sub = grad.new_empty(grad.numel() // n), Recorder(r)
        collectives.ring_reduce_scatter(own, grad.contiguous(), sub, group)
        _absorb(rec, sub, n + 1, n, "dkv")
        return own, None, None


def _recorder(rec, group) -> Recorder:
    return rec if rec is not None else Recorder(dist.get_rank(group))


def all_gather_kv_attention(q, k, v, *, layout: str = "zigzag", causal: bool = True, group=None,
                            recorder: Recorder | None = None, work: dict | None = None) -> torch.Tensor:
    """This rank's output (b, a, t, d): K,V all-gathered once (plan step 0..N−2), attention at step N − 1."""
    check_inputs(q, k, v, group, layout, causal)
    rec, n, r = _recorder(recorder, group), dist.get_world_size(group), dist.get_rank(group)
    blocks = GatherKV.apply(pack(k, v), group, rec).view(n, -1)  # (N, 2·b·kv_heads·t·d): rank j's at [j]
    kvs = [unpack(blocks[j], k, v) for j in range(n)]
    k_all, v_all = (torch.cat([kv[i] for kv in kvs], dim=2) for i in (0, 1))  # (b, kv_heads, s, d), rank order
    every = [c for j in range(n) for c in chunks_of(j, n, layout)]
    return LocalAttention.apply(q, k_all, v_all, chunks_of(r, n, layout), every, causal, rec, work, (n - 1, n))


class AllToAll(torch.autograd.Function):
    """(N, P) → (N, P): row j goes to rank j, row j of the result came from rank j. Its gradient is the same
    exchange the other way, recorded at the backward's plan steps."""

    @staticmethod
    def forward(ctx, pieces, group, rec, steps, chunks, names):
        ctx.setup = (group, rec, steps[1], chunks[1], names[1])
        return _all_to_all(pieces, group, rec, steps[0], chunks[0], names[0])

    @staticmethod
    def backward(ctx, grad):
        return _all_to_all(grad.contiguous(), *ctx.setup), None, None, None, None, None


def _all_to_all(pieces, group, rec, step, chunk, name):
    """Pairwise: round k = 1..N−1 sends row r + k to rank r + k and receives rank r − k's row for us."""
    n, r = dist.get_world_size(group), dist.get_rank(group)
    out = torch.empty_like(pieces)
    out[r] = pieces[r]
    for k in range(1, n):
        to, frm = (r + k) % n, (r - k) % n
        out[frm] = Exchange(rec, group, step + k - 1, name, pieces[to], to, chunk + to, frm, chunk + r).wait()
    return out


def ulysses_attention(q, k, v, *, layout: str = "zigzag", causal: bool = True, group=None,
                      recorder: Recorder | None = None, work: dict | None = None) -> torch.Tensor:
    """This rank's output (b, a, t, d) by Ulysses: all-to-all to heads, whole-sequence attention on a/N heads
    (its `work` counts every token pair of those heads), all-to-all back to tokens."""
    check_inputs(q, k, v, group, layout, causal)
    rec, n = _recorder(recorder, group), dist.get_world_size(group)
    check_divisible("heads", q.shape[1], "world_size", n)  # whole heads per rank, queries and keys alike
    check_divisible("kv_heads", k.shape[1], "world_size", n)
    ha, hg, t = q.shape[1] // n, k.shape[1] // n, q.shape[2]
    heads_of = lambda x, h, j: x[:, j * h:(j + 1) * h]  # noqa: E731 — rank j's heads: (b, h, t, d)
    pieces = torch.stack([pack(heads_of(q, ha, j), heads_of(k, hg, j), heads_of(v, hg, j)) for j in range(n)])
    got = AllToAll.apply(pieces, group, rec, (0, 3 * n - 1), (0, 3 * n), ("qkv", "dqkv"))  # [j]: rank j's tokens
    parts = [unpack(got[j], q[:, :ha], k[:, :hg], v[:, :hg]) for j in range(n)]
    qh, kh, vh = (torch.cat([p[i] for p in parts], dim=2) for i in range(3))  # (b, a/N, s, d), ranks' tokens in turn
    every = [c for j in range(n) for c in chunks_of(j, n, layout)]
    oh = LocalAttention.apply(qh, kh, vh, every, every, causal, rec, work, (n - 1, 3 * n - 2))
    outs = torch.stack([oh[:, :, j * t:(j + 1) * t].reshape(-1) for j in range(n)])  # [j]: rank j's tokens
    back = AllToAll.apply(outs, group, rec, (n, 2 * n - 1), (n, 2 * n), ("out", "dout"))  # [j]: rank j's heads
    return torch.cat([back[j].view(q.shape[0], ha, t, q.shape[3]) for j in range(n)], dim=1)  # (b, a, t, d)
