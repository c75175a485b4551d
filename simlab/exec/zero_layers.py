"""ZeRO's layers (lesson 3): how a Linear computes when its parameters are sharded (stage 3), or traced whole
(stages 1 and 2), so that every gather, free, forward and backward lands in the `Recorder` as events named
and ordered as the simulator's walkthrough (`simlab.sim.zero`).

Stage 3 keeps only this rank's (S,) shard of the layer's flattened weight+bias (`ShardedLinear`): the full
parameters exist only between an all-gather and a free, once in the forward and again in the backward, and
the gradient is reduce-scattered straight back to a shard (`_GatheredLinear`). Stages 1 and 2 keep the
whole layer; `TracedLinear` records nn.Linear's own arithmetic. `simlab.exec.zero.ZeroAdam` swaps a model's
Linears for these.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from ..trace import Recorder
from .zero_shards import all_gather, bytes_sent, into_rows, new_rows, own_block, reduce_scatter_mean, shard_size

# ---------------------------------------------------------------- stage 3: the layer owns a shard only

class _GatheredLinear(torch.autograd.Function):
    """y = x·Wᵀ + b where W, b exist only between a gather and a free — in forward and again in backward."""

    @staticmethod
    def forward(ctx, x, shard, layer):
        full = layer.gather()  # (N·S,)
        weight, bias = layer.unflatten(full)
        y = layer.rec.timed("compute", f"forward L{layer.index}", lambda: torch.addmm(bias, x, weight.t()))
        layer.free(full)  # W is not saved for backward: that is the memory ZeRO-3 wins
        ctx.save_for_backward(x)
        ctx.layer = layer
        return y  # (b, out)

    @staticmethod
    def backward(ctx, grad_y):  # grad_y: (b, out)
        (x,), layer = ctx.saved_tensors, ctx.layer
        full = layer.gather()  # re-gather: forward dropped it
        weight, _ = layer.unflatten(full)

        def compute():
            grad_x = grad_y @ weight if ctx.needs_input_grad[0] else None  # (b, in)
            return grad_x, grad_y.t() @ x, grad_y.sum(0)  # (out, in), (out,)
        grad_x, grad_w, grad_b = layer.rec.timed("compute", f"backward L{layer.index}", compute)
        layer.free(full)
        rows = new_rows(layer.numel, layer.world_size, full.device)  # (N, S) full grads, transient
        into_rows(rows, [grad_w, grad_b])
        grad_shard = layer.rec.timed("comm", f"reduce-scatter L{layer.index}", lambda: reduce_scatter_mean(
            rows, layer.group).clone(), nbytes=bytes_sent("reduce-scatter", rows, layer.group))  # keep S, not (N, S)
        return grad_x, grad_shard, None  # autograd puts grad_shard into shard.grad: (S,)


class ShardedLinear(nn.Module):
    """A Linear whose only parameter is this rank's (S,) shard of its flattened, padded weight+bias."""

    def __init__(self, linear: nn.Linear, index: int, group, rec: Recorder):
        super().__init__()
        self.index, self.group, self.rec = index, group, rec
        self.rank, self.world_size = dist.get_rank(group), dist.get_world_size(group)
        self.shape = tuple(linear.weight.shape)  # (out, in)
        self.numel = linear.weight.numel() + linear.bias.numel()  # P
        self.shard = nn.Parameter(own_block([linear.weight, linear.bias], self.rank,
                                            shard_size(self.numel, self.world_size)))

    def gather(self) -> torch.Tensor:
        rows = new_rows(self.numel, self.world_size, self.shard.device)  # (N, S)
        rows[self.rank] = self.shard.detach()
        return self.rec.timed("comm", f"all-gather L{self.index}", lambda: all_gather(rows, self.group),
                              nbytes=bytes_sent("all-gather", rows, self.group)).view(-1)  # (N·S,)

    def free(self, full: torch.Tensor) -> None:
        # resize_(0) releases the storage now, even while views of it are still referenced; a local act, not
        # communication: "compute", as the walkthrough records it (a comm lane would show a free as traffic)
        self.rec.timed("compute", f"free L{self.index}", lambda: full.untyped_storage().resize_(0))

    def unflatten(self, full: torch.Tensor):
        out, fan_in = self.shape
        return full[:out * fan_in].view(out, fan_in), full[out * fan_in:self.numel]  # (out, in), (out,)

    def forward(self, x):
        return _GatheredLinear.apply(x, self.shard, self)


# ---------------------------------------------------------------- stages 1, 2: a whole layer, traced

class _TracedFn(torch.autograd.Function):
    """nn.Linear's arithmetic, its forward and backward recorded as events (as stage 3's are)."""

    @staticmethod
    def forward(ctx, x, weight, bias, layer):
        ctx.save_for_backward(x, weight)
        ctx.layer = layer
        return layer.rec.timed("compute", f"forward L{layer.index}", lambda: torch.addmm(bias, x, weight.t()))

    @staticmethod
    def backward(ctx, grad_y):  # grad_y: (b, out)
        x, weight = ctx.saved_tensors

        def compute():
            grad_x = grad_y @ weight if ctx.needs_input_grad[0] else None  # (b, in)
            return grad_x, grad_y.t() @ x, grad_y.sum(0)  # (out, in), (out,)
        # autograd accumulates the grads into weight.grad after this returns: stage 2's hook reduces them then
        return (*ctx.layer.rec.timed("compute", f"backward L{ctx.layer.index}", compute), None)


class TracedLinear(nn.Module):
    """Stages 1 and 2: the layer stays whole (same parameters, same order); only its events are recorded."""

    def __init__(self, linear: nn.Linear, index: int, rec: Recorder):
        super().__init__()
        self.linear, self.index, self.rec = linear, index, rec

    def forward(self, x):
        return _TracedFn.apply(x, self.linear.weight, self.linear.bias, self)
