"""Tensor parallelism on real ranks: Megatron-LM's column- and row-parallel linear layers, and the f and g
operators that join them, written as autograd Functions over torch.distributed collectives.

What it teaches: a tensor-parallel layer is an ordinary layer holding a slice of the weight, plus one
collective at the place where the maths needs the whole tensor again —
  f       enters a TP region:  forward identity (X is already on every rank), backward all-reduce of dX
  g       leaves a TP region:  forward all-reduce of the partial sums,         backward identity
  gather  (column, gather_output): forward all-gather of the output columns,  backward keep own slice
  scatter (row, input not parallel): forward keep own slice of X,             backward all-gather
`ParallelMLP` = f → column fc1 → GeLU → row fc2 → g: one all-reduce each way. `ParallelSelfAttention`
= f → fused QKV, column-parallel by whole heads → attention on a/N heads → row W_o → g: the same two.
Every layer is cut out of the full (unsplit) module with `from_full`, so a run compares with it exactly.
`CommStats` is the tensor-parallel group a layer talks on (default WORLD; in 3-D parallelism, this rank's
TP group of a `simlab.sim.mesh.Mesh`) and counts every collective it runs there (calls per phase, bytes
sent under ring accounting); a layer's rank and size are its rank and size in that group.
nn.Linear stores W as (out, in): "column-parallel" (Megatron's Y = X·A, A split by columns) therefore
keeps a block of W's *rows* here.

Run it: python -c "from simlab.parity.tensor_parallel import run_tp; print(run_tp(4, 'mlp'))"
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from .._checks import check_divisible, check_int
from ..sim.collectives import ring_bytes_sent
from ..trace import Recorder
from .models import attend


class CommStats:
    """The group a TP layer talks on (None: WORLD), and what it ran there: calls per (phase, op), the
    bytes this rank sent (ring accounting) and one timed "comm" Event per collective (`rec.events`).
    `rank`/`world_size` default to this process's in `group`; give both to build layers without any
    process group (e.g. to check shapes)."""

    def __init__(self, group=None, rank: int | None = None, world_size: int | None = None):
        self.group = group
        self.rank = dist.get_rank(group) if rank is None else rank
        self.world_size = dist.get_world_size(group) if world_size is None else world_size
        self.calls: dict[tuple[str, str], int] = {}
        self.bytes_sent, self.rec = 0, Recorder(self.rank)

    def record(self, phase: str, op: str, numel: int, itemsize: int, start: float) -> None:
        """One collective that began at `start` (rec.now()) and just ended."""
        self.calls[phase, op] = self.calls.get((phase, op), 0) + 1
        # what the simulator's ring plan of this size sends from this rank (for all-gather: the gathered size)
        sent = ring_bytes_sent(op, self.world_size, numel, itemsize)[self.rank]
        self.bytes_sent += sent
        self.rec.record("comm", start, self.rec.now(), f"{phase} {op}", nbytes=sent)

    def count(self, phase: str, op: str = "all-reduce") -> int:
        return self.calls.get((phase, op), 0)


def _all_reduce(x: torch.Tensor, stats: CommStats, phase: str) -> torch.Tensor:
    out, start = x.contiguous().clone(), stats.rec.now()  # never sum into a tensor autograd may still need
    dist.all_reduce(out, group=stats.group)
    stats.record(phase, "all-reduce", out.numel(), out.element_size(), start)
    return out


def _all_gather_last(x: torch.Tensor, stats: CommStats, phase: str) -> torch.Tensor:
    """(..., k) on every rank → (..., N·k): the ranks' slices side by side, in rank order."""
    parts, start = [torch.empty_like(x) for _ in range(stats.world_size)], stats.rec.now()
    dist.all_gather(parts, x.contiguous(), group=stats.group)
    stats.record(phase, "all-gather", x.numel() * stats.world_size, x.element_size(), start)
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


def _param(t: torch.Tensor | None, device=None) -> nn.Parameter | None:
    # a copy, on `device` (default: where t is): never a view of the full weight
    return None if t is None else nn.Parameter(t.detach().to(device or t.device, copy=True))


def _block(size: int, stats: CommStats, name: str) -> slice:
    check_int("rank", stats.rank, 0, stats.world_size - 1)
    step = check_divisible(name, size, "world_size", stats.world_size) // stats.world_size
    return slice(stats.rank * step, (stats.rank + 1) * step)


class ColumnParallelLinear(nn.Module):
    """Holds W's output rows [r·out/N, (r+1)·out/N): needs all of X (f), makes its slice of Y's last dim;
    gather_output=True all-gathers the slices into the whole Y."""

    def __init__(self, weight, bias, stats: CommStats, gather_output: bool = False, device=None):
        super().__init__()
        self.weight, self.bias = _param(weight, device), _param(bias, device)  # (out/N, in), (out/N,)
        self.stats, self.gather_output = stats, gather_output

    @classmethod
    def from_full(cls, linear: nn.Linear, group=None, gather_output: bool = False, stats: CommStats | None = None,
                  device=None) -> "ColumnParallelLinear":
        stats = stats or CommStats(group)
        rows = _block(linear.out_features, stats, "out_features")
        bias = None if linear.bias is None else linear.bias[rows]
        return cls(linear.weight[rows], bias, stats, gather_output, device)

    def forward(self, x):  # (..., in)
        y = F.linear(CopyToTP.apply(x, self.stats), self.weight, self.bias)  # (..., out/N)
        return GatherFromTP.apply(y, self.stats) if self.gather_output else y


class RowParallelLinear(nn.Module):
    """Holds W's input columns [r·in/N, (r+1)·in/N): multiplies X's matching slice into a partial Y (b, out),
    g sums the partials; the bias is added once, after the sum. input_is_parallel=False slices X first."""

    def __init__(self, weight, bias, stats: CommStats, input_is_parallel: bool = True, device=None):
        super().__init__()
        self.weight, self.bias = _param(weight, device), _param(bias, device)  # (out, in/N), (out,)
        self.stats, self.input_is_parallel = stats, input_is_parallel

    @classmethod
    def from_full(cls, linear: nn.Linear, group=None, input_is_parallel: bool = True,
                  stats: CommStats | None = None, device=None) -> "RowParallelLinear":
        stats = stats or CommStats(group)
        cols = _block(linear.in_features, stats, "in_features")
        return cls(linear.weight[:, cols], linear.bias, stats, input_is_parallel, device)

    def forward(self, x):  # (..., in/N), or (..., in) when not input_is_parallel
        if not self.input_is_parallel:
            x = ScatterToTP.apply(x, self.stats)  # (..., in/N)
        y = ReduceFromTP.apply(F.linear(x, self.weight), self.stats)  # (..., out): Σ of the partials
        return y if self.bias is None else y + self.bias


# ---------------------------------------------------------------- blocks (unsplit ones: simlab.exec.models)

class ParallelMLP(nn.Module):
    """Megatron's MLP: fc1 column-parallel (GeLU stays local), fc2 row-parallel; f and g once each."""

    def __init__(self, fc1: ColumnParallelLinear, fc2: RowParallelLinear):
        super().__init__()
        self.fc1, self.fc2, self.stats = fc1, fc2, fc1.stats

    @classmethod
    def from_full(cls, mlp: nn.Module, group=None, stats: CommStats | None = None, device=None) -> "ParallelMLP":
        stats = stats or CommStats(group)  # one group and one counter for the block
        return cls(ColumnParallelLinear.from_full(mlp.fc1, stats=stats, device=device),
                   RowParallelLinear.from_full(mlp.fc2, stats=stats, device=device))

    def forward(self, x):  # (b, s, h) on every rank
        return self.fc2(F.gelu(self.fc1(x)))  # (b, s, ffn/N) → (b, s, h)

    def grad_shards(self) -> dict:
        return self.shards("grad")

    def shards(self, of: str = "data") -> dict:
        """name (as in the full MLP) → (this rank's slice of each parameter's `of` ("data" or "grad"), the
        dim the ranks' slices concatenate along; None: whole on every rank)."""
        get = lambda p: getattr(p, of)  # noqa: E731 — a local one-liner: the attribute asked for
        return {"fc1.weight": (get(self.fc1.weight), 0), "fc1.bias": (get(self.fc1.bias), 0),
                "fc2.weight": (get(self.fc2.weight), 1), "fc2.bias": (get(self.fc2.bias), None)}


class ParallelSelfAttention(nn.Module):
    """Split by heads: one fused QKV column-parallel linear (a/N whole heads per rank, one f), W_o row-parallel."""

    def __init__(self, qkv: ColumnParallelLinear, wo: RowParallelLinear, head_dim: int):
        super().__init__()
        self.qkv, self.wo, self.head_dim, self.stats = qkv, wo, head_dim, qkv.stats

    @classmethod
    def from_full(cls, attn: nn.Module, group=None, stats: CommStats | None = None,
                  device=None) -> "ParallelSelfAttention":
        stats = stats or CommStats(group)
        rows = _block(attn.wq.out_features // attn.head_dim, stats, "heads")  # this rank's heads…
        rows = slice(rows.start * attn.head_dim, rows.stop * attn.head_dim)  # … and their rows of Wq, Wk, Wv
        fused = [torch.cat([w.weight[rows] for w in (attn.wq, attn.wk, attn.wv)]),  # (3h/N, h)
                 torch.cat([w.bias[rows] for w in (attn.wq, attn.wk, attn.wv)])]  # (3h/N,)
        return cls(ColumnParallelLinear(*fused, stats, device=device),
                   RowParallelLinear.from_full(attn.wo, stats=stats, device=device), attn.head_dim)

    def forward(self, x):  # (b, s, h) on every rank
        q, k, v = self.qkv(x).chunk(3, dim=-1)  # (b, s, h/N) each
        return self.wo(attend(q, k, v, self.head_dim))  # (b, s, h/N) → (b, s, h)

    def grad_shards(self) -> dict:
        return self.shards("grad")

    def shards(self, of: str = "data") -> dict:
        """As `ParallelMLP.shards`, the fused QKV cut back into the unsplit block's wq, wk, wv."""
        wq, wk, wv = getattr(self.qkv.weight, of).chunk(3)  # (h/N, h) each
        bq, bk, bv = getattr(self.qkv.bias, of).chunk(3)
        return {"wq.weight": (wq, 0), "wq.bias": (bq, 0), "wk.weight": (wk, 0), "wk.bias": (bk, 0),
                "wv.weight": (wv, 0), "wv.bias": (bv, 0), "wo.weight": (getattr(self.wo.weight, of), 1),
                "wo.bias": (getattr(self.wo.bias, of), None)}
