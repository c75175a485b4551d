"""torch's own context parallelism on CPU: the ring behind `torch.distributed.tensor.experimental.context_parallel`.

What we found in torch 2.13's source (`torch/distributed/tensor/experimental/_context_parallel/_attention.py`):
`context_parallel()` patches `F.scaled_dot_product_attention` into a DTensor op whose handler knows only the CUDA
kernels (`_scaled_dot_product_flash_attention`, `…_efficient_attention`, `…_cudnn_attention`); on a CPU the call
becomes `aten._scaled_dot_product_flash_attention_for_cpu`, which has no sharding rule, and fails
("does not have a sharding strategy registered"). Its algorithm, though, is one function that takes the
attention kernel as an argument — `_templated_ring_attention` and `_templated_ring_attention_backward`, with
torch's head-tail load balancer (rank r holds chunks r and 2N − 1 − r: our zig-zag) and a K,V rotation by
all-to-all (a ring) or by all-gather (its default). Given the CPU kernel, it runs on gloo, and that is what
ours is compared with: the same ring, written by torch, on the same shards.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from ..exec.context_parallel_tiles import expand, fold
from ..i18n import _

aten = torch.ops.aten


def torch_compared() -> str:
    """What the torch comparison ran, for a learner reading the result."""
    return _("torch's ring attention (_templated_ring_attention, what torch's context_parallel runs) with its CPU "
             "kernel: context_parallel() itself needs CUDA, its dispatcher knows the GPU kernels only")


def why_no_torch(device: torch.device) -> str | None:
    """None where torch's ring can run on this device, else why not."""
    if device.type == "cpu":
        return None
    return _("torch's ring attention is compared on CPUs only here (its CPU kernel); on GPUs "
             "context_parallel() itself would be the comparison")


def torch_ring_attention(q, k, v, dout, *, variant: str, layout: str, causal: bool, group=None):
    """torch's ring on this rank's shards (local order as ours): (out, dQ, dK, dV). K,V heads are repeated for
    GQA (torch's ring takes equal heads) and their gradients summed back. Ulysses has no torch counterpart:
    its results are compared with torch's ring, which computes the same attention."""
    from torch.distributed.tensor.experimental._context_parallel import _attention as cp

    heads, kv_heads = q.shape[1], k.shape[1]
    k, v = expand(k, heads).contiguous(), expand(v, heads).contiguous()
    group = group if group is not None else dist.group.WORLD
    options = cp._cp_options
    saved = (options.enable_load_balance, options.rotate_method)
    # torch balances a causal mask with chunks r and 2N-1-r (our zig-zag), and refuses to balance without a mask
    options.enable_load_balance = causal and layout == "zigzag"
    options.rotate_method = cp._RotateMethod.ALL_GATHER if variant == "all-gather-kv" else cp._RotateMethod.ALL_TO_ALL
    try:
        out, lse, *_rest = cp._templated_ring_attention(group, 2, aten._scaled_dot_product_flash_attention_for_cpu,
                                                        q, k, v, is_causal=causal)
        dq, dk, dv, *_rest = cp._templated_ring_attention_backward(
            group, 2, aten._scaled_dot_product_flash_attention_for_cpu_backward.default, dout.contiguous(),
            "grad_out", q, k, v, out, lse, causal, dropout_p=0.0)
    finally:
        options.enable_load_balance, options.rotate_method = saved
    return out, dq, fold(dk, kv_heads), fold(dv, kv_heads)
