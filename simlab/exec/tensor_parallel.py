"""Tensor parallelism on real ranks: Megatron-LM's column- and row-parallel linear layers, and the f and g
operators that join them, written as autograd Functions over torch.distributed collectives.

What it teaches: a tensor-parallel layer is an ordinary layer holding a slice of the weight, plus one
collective at the place where the maths needs the whole tensor again —
  f       enters a TP region:  forward identity (X is already on every rank), backward all-reduce of dX
  g       leaves a TP region:  forward all-reduce of the partial sums,         backward identity
  gather  (column, gather_output): forward all-gather of the output columns,  backward keep own slice
  scatter (row, input not parallel): forward keep own slice of X,             backward all-gather
`ParallelMLP` = f → column fc1 → GeLU → row fc2 → g: one all-reduce each way. `ParallelSelfAttention`
= f → fused QKV, column-parallel by whole heads → attention on H/N heads → row W_o → g: the same two.
Every layer is cut out of the full (unsplit) module with `from_full`, so a run compares with it exactly,
and every collective is counted in `CommStats` (calls per phase, bytes sent under ring accounting).
nn.Linear stores W as (out, in): "column-parallel" (Megatron's Y = X·A, A split by columns) therefore
keeps a block of W's *rows* here.

Run it: python -c "from simlab.exec.tensor_parallel_parity import run_tp; print(run_tp(4, 'mlp'))"
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from .._checks import check_int
from ..sim.tensor_parallel import check_divisible
from .collectives import _plan

RING_PLANS = {"all-reduce": "ring-allreduce", "all-gather": "ring-all-gather"}  # simlab.sim.collectives


class CommStats:
    """The collectives one rank ran: calls per (phase, op) and the bytes it sent (ring accounting)."""

    def __init__(self, rank: int, world_size: int):
        self.rank, self.world_size = rank, world_size
        self.calls: dict[tuple[str, str], int] = {}
        self.bytes_sent = 0

    def record(self, phase: str, op: str, numel: int, itemsize: int) -> None:
        self.calls[phase, op] = self.calls.get((phase, op), 0) + 1
        # what the simulator's ring plan of this size sends from this rank (for all-gather: the gathered size)
        self.bytes_sent += _plan(RING_PLANS[op], self.world_size, numel, itemsize).bytes_sent_per_rank()[self.rank]

    def count(self, phase: str, op: str = "all-reduce") -> int:
        return self.calls.get((phase, op), 0)


def _all_reduce(x: torch.Tensor, stats: CommStats, phase: str) -> torch.Tensor:
    out = x.contiguous().clone()  # never sum into a tensor autograd may still need
    dist.all_reduce(out)
    stats.record(phase, "all-reduce", out.numel(), out.element_size())
    return out


def _all_gather_last(x: torch.Tensor, stats: CommStats, phase: str) -> torch.Tensor:
    """(..., k) on every rank → (..., N·k): the ranks' slices side by side, in rank order."""
    parts = [torch.empty_like(x) for _ in range(stats.world_size)]
    dist.all_gather(parts, x.contiguous())
    stats.record(phase, "all-gather", x.numel() * stats.world_size, x.element_size())
    return torch.cat(parts, dim=-1)


def _own_slice(x: torch.Tensor, stats: CommStats) -> torch.Tensor:
    return x.chunk(stats.world_size, dim=-1)[stats.rank].contiguous()  # (..., k/N)


class CopyToTP(torch.autograd.Function):
    """f: identity forward; backward sums every rank's partial dX (each saw only its slice of W)."""

    @staticmethod
    def forward(ctx, x, stats):
        ctx.stats = stats
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return _all_reduce(grad, ctx.stats, "backward"), None


class ReduceFromTP(torch.autograd.Function):
    """g: all-reduce forward (partial sums → the whole); backward identity (dY is already whole)."""

    @staticmethod
    def forward(ctx, x, stats):
        return _all_reduce(x, stats, "forward")

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class GatherFromTP(torch.autograd.Function):
    """all-gather the last dim forward; backward each rank keeps the gradient of its own slice."""

    @staticmethod
    def forward(ctx, x, stats):
        ctx.stats = stats
        return _all_gather_last(x, stats, "forward")

    @staticmethod
    def backward(ctx, grad):
        return _own_slice(grad, ctx.stats), None


class ScatterToTP(torch.autograd.Function):
    """keep own slice of the last dim forward; backward all-gathers the slices' gradients."""

    @staticmethod
    def forward(ctx, x, stats):
        ctx.stats = stats
        return _own_slice(x, stats)

    @staticmethod
    def backward(ctx, grad):
        return _all_gather_last(grad, ctx.stats, "backward"), None


def _param(t: torch.Tensor | None) -> nn.Parameter | None:
    return None if t is None else nn.Parameter(t.detach().clone())  # clone: not a view of the full weight


def _block(size: int, rank: int, world_size: int, name: str) -> slice:
    check_int("rank", rank, 0, world_size - 1)
    step = check_divisible(name, size, world_size, "world_size") // world_size
    return slice(rank * step, (rank + 1) * step)


class ColumnParallelLinear(nn.Module):
    """Holds W's output rows [r·out/N, (r+1)·out/N): needs all of X (f), makes its slice of Y's last dim;
    gather_output=True all-gathers the slices into the whole Y."""

    def __init__(self, weight, bias, stats: CommStats, gather_output: bool = False):
        super().__init__()
        self.weight, self.bias = _param(weight), _param(bias)  # (out/N, in), (out/N,)
        self.stats, self.gather_output = stats, gather_output

    @classmethod
    def from_full(cls, linear: nn.Linear, rank: int, world_size: int, gather_output: bool = False,
                  stats: CommStats | None = None) -> "ColumnParallelLinear":
        rows = _block(linear.out_features, rank, world_size, "out_features")
        bias = None if linear.bias is None else linear.bias[rows]
        return cls(linear.weight[rows], bias, stats or CommStats(rank, world_size), gather_output)

    def forward(self, x):  # (..., in)
        y = F.linear(CopyToTP.apply(x, self.stats), self.weight, self.bias)  # (..., out/N)
        return GatherFromTP.apply(y, self.stats) if self.gather_output else y


class RowParallelLinear(nn.Module):
    """Holds W's input columns [r·in/N, (r+1)·in/N): multiplies X's matching slice into a partial Y (b, out),
    g sums the partials; the bias is added once, after the sum. input_is_parallel=False slices X first."""

    def __init__(self, weight, bias, stats: CommStats, input_is_parallel: bool = True):
        super().__init__()
        self.weight, self.bias = _param(weight), _param(bias)  # (out, in/N), (out,)
        self.stats, self.input_is_parallel = stats, input_is_parallel

    @classmethod
    def from_full(cls, linear: nn.Linear, rank: int, world_size: int, input_is_parallel: bool = True,
                  stats: CommStats | None = None) -> "RowParallelLinear":
        cols = _block(linear.in_features, rank, world_size, "in_features")
        return cls(linear.weight[:, cols], linear.bias, stats or CommStats(rank, world_size), input_is_parallel)

    def forward(self, x):  # (..., in/N), or (..., in) when not input_is_parallel
        if not self.input_is_parallel:
            x = ScatterToTP.apply(x, self.stats)  # (..., in/N)
        y = ReduceFromTP.apply(F.linear(x, self.weight), self.stats)  # (..., out): Σ of the partials
        return y if self.bias is None else y + self.bias


# ---------------------------------------------------------------- blocks (unsplit references: _parity)

def attend(q, k, v, head_dim: int):
    """Causal softmax attention on however many heads q, k, v (b, s, heads·d) hold; returns (b, s, heads·d)."""
    b, s, _ = q.shape
    q, k, v = (t.reshape(b, s, -1, head_dim).transpose(1, 2) for t in (q, k, v))  # (b, heads, s, d)
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (b, heads, s, d)
    return o.transpose(1, 2).reshape(b, s, -1)  # (b, s, heads·d)


class ParallelMLP(nn.Module):
    """Megatron's MLP: fc1 column-parallel (GeLU stays local), fc2 row-parallel; f and g once each."""

    def __init__(self, fc1: ColumnParallelLinear, fc2: RowParallelLinear):
        super().__init__()
        self.fc1, self.fc2, self.stats = fc1, fc2, fc1.stats

    @classmethod
    def from_full(cls, mlp: nn.Module, rank: int, world_size: int) -> "ParallelMLP":
        stats = CommStats(rank, world_size)  # one counter for the block
        return cls(ColumnParallelLinear.from_full(mlp.fc1, rank, world_size, stats=stats),
                   RowParallelLinear.from_full(mlp.fc2, rank, world_size, stats=stats))

    def forward(self, x):  # (b, s, h) on every rank
        return self.fc2(F.gelu(self.fc1(x)))  # (b, s, ffn/N) → (b, s, h)

    def grad_shards(self) -> dict:
        """name (as in the full MLP) → (this rank's grad, the dim the ranks' slices concatenate along; None: whole)."""
        return {"fc1.weight": (self.fc1.weight.grad, 0), "fc1.bias": (self.fc1.bias.grad, 0),
                "fc2.weight": (self.fc2.weight.grad, 1), "fc2.bias": (self.fc2.bias.grad, None)}


class ParallelSelfAttention(nn.Module):
    """Split by heads: one fused QKV column-parallel linear (H/N whole heads per rank, one f), W_o row-parallel."""

    def __init__(self, qkv: ColumnParallelLinear, wo: RowParallelLinear, head_dim: int):
        super().__init__()
        self.qkv, self.wo, self.head_dim, self.stats = qkv, wo, head_dim, qkv.stats

    @classmethod
    def from_full(cls, attn: nn.Module, rank: int, world_size: int) -> "ParallelSelfAttention":
        rows = _block(attn.wq.out_features // attn.head_dim, rank, world_size, "heads")  # this rank's heads…
        rows = slice(rows.start * attn.head_dim, rows.stop * attn.head_dim)  # … and their rows of Wq, Wk, Wv
        stats = CommStats(rank, world_size)
        fused = [torch.cat([w.weight[rows] for w in (attn.wq, attn.wk, attn.wv)]),  # (3h/N, h)
                 torch.cat([w.bias[rows] for w in (attn.wq, attn.wk, attn.wv)])]  # (3h/N,)
        return cls(ColumnParallelLinear(*fused, stats), RowParallelLinear.from_full(attn.wo, rank, world_size,
                                                                                    stats=stats), attn.head_dim)

    def forward(self, x):  # (b, s, h) on every rank
        q, k, v = self.qkv(x).chunk(3, dim=-1)  # (b, s, h/N) each
        return self.wo(attend(q, k, v, self.head_dim))  # (b, s, h/N) → (b, s, h)

    def grad_shards(self) -> dict:
        wq, wk, wv = self.qkv.weight.grad.chunk(3)  # (h/N, h) each
        bq, bk, bv = self.qkv.bias.grad.chunk(3)
        return {"wq.weight": (wq, 0), "wq.bias": (bq, 0), "wk.weight": (wk, 0), "wk.bias": (bk, 0),
                "wv.weight": (wv, 0), "wv.bias": (bv, 0), "wo.weight": (self.wo.weight.grad, 1),
                "wo.bias": (self.wo.bias.grad, None)}
