"""Context parallelism on real ranks: attention over a sequence split across a process group, forward and backward.

What it teaches: ring attention as Megatron-LM's CP and the ring-flash-attention implementations run it. Rank r
holds its tokens' Q, K, V (`sim.context_parallel.positions`: zig-zag or contiguous chunks). Forward, ring step i:
it sends the K,V block it holds to rank r + 1 and receives the next from rank r − 1 (isend/irecv, posted before
the compute so the wire and the arithmetic overlap), and merges the tiles it needs into its online softmax.
Backward, the K,V go around again; behind them travels each block's dK,dV accumulator: rank r adds its share
for the block it holds and passes it on, and the N-th hop delivers every block's dK,dV to its owner. Each
transfer and compute is one Event of `simlab.trace.Recorder`, at the plan step of `sim.context_parallel.
ring_attention_plan`; `work[step]` counts the (query, key) pairs scored there.

`context_parallel_attention(q, k, v, variant=…)` runs any of the three variants (`sim.context_parallel_costs.
VARIANTS`): "ring" here, "all-gather-kv" and "ulysses" in `exec.context_parallel_variants`. Every variant takes
`group=` (default WORLD; in a grid, this rank's cp group of `exec.mesh.new_groups`) and works on the device its
inputs are on. `simlab.parity.context_parallel.run_context_parallel` checks them against one process and torch.

Shapes: q (b, a, t, d) and k, v (b, kv_heads, t, d), t = s/N tokens of this rank in its local order.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from .._checks import check_choice
from ..sim.context_parallel import chunks_of, dkv_chunk, kv_chunk
from ..sim.context_parallel_costs import VARIANTS
from ..trace import Recorder
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
from .context_parallel_variants import all_gather_kv_attention, ulysses_attention


class RingAttention(torch.autograd.Function):
    """Ring attention, forward and backward, on this rank of `group`."""

    @staticmethod
    def forward(ctx, q, k, v, layout: str, causal: bool, group, rec: Recorder, work: dict | None):
        n, r = dist.get_world_size(group), dist.get_rank(group)
        mine = chunks_of(r, n, layout)  # this rank's query chunks: (r,) or (r, 2N − 1 − r)
        state, held = new_state(q, len(mine)), pack(k, v)  # (m, l, O) per query chunk; K,V held (2·b·g·t·d,)
        for i in range(n):  # step i: the K,V of rank j = r − i
            j = (r - i) % n
            passing = (Exchange(rec, group, i, "kv", held, (r + 1) % n, kv_chunk(j), (r - 1) % n,
                                kv_chunk((j - 1) % n)) if i < n - 1 else None)  # the next block travels meanwhile
            kj, vj = unpack(held, k, v)
            timed_compute(rec, work, i, "attention", attend, state, q, kj, vj, mine, chunks_of(j, n, layout), causal)
            if passing is not None:
                held = passing.wait()
        out, lse = finish(state)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.setup = (layout, causal, group, rec, work)
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        layout, causal, group, rec, work = ctx.setup
        n, r = dist.get_world_size(group), dist.get_rank(group)
        dout, mine = dout.contiguous(), chunks_of(r, n, layout)
        delta = (dout * out).sum(-1)  # (b, a, t): rowsum(dO ∘ O), FlashAttention's D
        dq, held, arriving = torch.zeros_like(q), pack(k, v), None  # dq (b, a, t, d); arriving: dK,dV in flight
        for i in range(n):  # step n + i: K,V of rank j = r − i again, and its dK,dV so far
            j, step = (r - i) % n, n + i
            passing = (Exchange(rec, group, step, "kv", held, (r + 1) % n, kv_chunk(j), (r - 1) % n,
                                kv_chunk((j - 1) % n)) if i < n - 1 else None)
            kj, vj = unpack(held, k, v)
            dqi, dkj, dvj, _ = timed_compute(rec, work, step, "attention backward", attend_backward,
                                             q, kj, vj, dout, lse, delta, mine, chunks_of(j, n, layout), causal)
            dq += dqi
            gathered = pack(dkj, dvj) if i == 0 else arriving.wait() + pack(dkj, dvj)  # + what ranks before added
            if n > 1:  # hand block j's dK,dV on; the last hop brings rank r + 1 its own
                arriving = Exchange(rec, group, step, "dkv", gathered, (r + 1) % n, dkv_chunk(j, n), (r - 1) % n,
                                    dkv_chunk((j - 1) % n, n), tag=1)
            if passing is not None:
                held = passing.wait()
        dk, dv = unpack(arriving.wait() if n > 1 else gathered, k, v)
        return dq, dk, dv, None, None, None, None, None


def ring_attention(q, k, v, *, layout: str = "zigzag", causal: bool = True, group=None,
                   recorder: Recorder | None = None, work: dict | None = None) -> torch.Tensor:
    """This rank's attention output (b, a, t, d) for its queries over the whole sequence, by ring attention.
    Differentiable: backward returns dQ, dK, dV of this rank's tokens. `recorder` gets the Events, `work`
    (a dict) the pairs scored per plan step."""
    check_inputs(q, k, v, group, layout, causal)
    rec = recorder if recorder is not None else Recorder(dist.get_rank(group))
    return RingAttention.apply(q, k, v, layout, causal, group, rec, work)


def context_parallel_attention(q, k, v, *, variant: str = "ring", layout: str = "zigzag", causal: bool = True,
                               group=None, recorder: Recorder | None = None, work: dict | None = None) -> torch.Tensor:
    """Attention of this rank's queries over the whole sequence by `variant` ("ring", "all-gather-kv",
    "ulysses"); each follows its plan in `sim.context_parallel_costs.make_plan`."""
    check_choice("variant", variant, VARIANTS)
    if variant == "ring":
        return ring_attention(q, k, v, layout=layout, causal=causal, group=group, recorder=recorder, work=work)
    run = all_gather_kv_attention if variant == "all-gather-kv" else ulysses_attention
    return run(q, k, v, layout=layout, causal=causal, group=group, recorder=recorder, work=work)
