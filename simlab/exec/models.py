"""Tiny deterministic models and the single-process references every parallel run is checked against.

What it teaches: data parallelism must not change the maths. Training on the whole global batch in
one process (`reference_train`) is the ground truth; DP and DDP split the batch over ranks and must
reproduce its losses and final parameters (fp32, to ~1e-6). Everything here is seeded, so two calls
with the same arguments build bit-identical models and batches — in any process.

    >>> model = make_mlp([8, 16, 4], seed=0)
    >>> num_params(model)
    212
    >>> x, y = make_batch(6, 8, 4, seed=0)
    >>> tuple(x.shape), tuple(y.shape)
    ((6, 8), (6, 4))
"""
from __future__ import annotations

import contextlib
import math

import torch
from torch import nn

from .._checks import check_int, check_positive

TINY_MLP = (16, 32, 32, 32, 4)  # 2,788 parameters: parity runs take well under a second


def make_mlp(sizes, seed: int = 0) -> nn.Sequential:
    """Linear → GELU → … → Linear with widths `sizes` (first = inputs, last = outputs), float32.

    The parameter count is Σ (sizes[i] + 1)·sizes[i+1]; use `mlp_sizes(params)` to hit a target.
    """
    sizes = [check_int(f"sizes[{i}]", s, 1) for i, s in enumerate(sizes)]
    if len(sizes) < 2:
        raise ValueError(f"sizes={sizes}: need at least an input and an output width")
    gen_state = torch.random.get_rng_state()
    torch.manual_seed(seed)  # nn.Linear draws its init from the global generator: pin it, then restore
    try:
        layers = []
        for i, (fan_in, fan_out) in enumerate(zip(sizes, sizes[1:])):
            layers.append(nn.Linear(fan_in, fan_out, dtype=torch.float32))
            if i < len(sizes) - 2:  # no activation after the last layer: it is a regression head
                layers.append(nn.GELU())
        return nn.Sequential(*layers)
    finally:
        torch.random.set_rng_state(gen_state)


def mlp_sizes(params: int, depth: int = 4, in_features: int | None = None,
              out_features: int | None = None) -> list[int]:
    """Widths of a `depth`-layer MLP with about `params` parameters (square hidden layers)."""
    check_int("params", params, 1)
    check_int("depth", depth, 1)
    width = max(1, math.ceil(math.sqrt(params / depth)))  # each layer holds ≈ width² weights
    sizes = [width] * (depth + 1)
    sizes[0] = in_features or width
    sizes[-1] = out_features or width
    return sizes


def num_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def make_batch(global_batch: int, in_features: int, out_features: int, seed: int = 0):
    """Inputs (B, in) and regression targets (B, out): standard normal, from their own generator."""
    check_int("global_batch", global_batch, 1)
    gen = torch.Generator().manual_seed(seed + 1)  # +1: never the same stream as the model's init
    x = torch.randn(global_batch, in_features, generator=gen)  # (B, in)
    y = torch.randn(global_batch, out_features, generator=gen)  # (B, out)
    return x, y


def loss_fn(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean squared error, averaged over the batch: the mean is what makes 'average the grads' right."""
    return nn.functional.mse_loss(out, target)


def flat_params(model: nn.Module) -> torch.Tensor:
    """All parameters as one detached 1-D float32 vector (P,), in `parameters()` order."""
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone()


def shard(batch, rank: int, world_size: int):
    """Rank `rank`'s contiguous slice of every tensor in `batch`: rows [rank·b, (rank+1)·b)."""
    out = []
    for t in batch:
        b = t.shape[0] // world_size  # callers check divisibility before any process starts
        out.append(t[rank * b:(rank + 1) * b])  # (B/n, ...)
    return tuple(out)


def reference_train(model_fn, batch, steps: int, lr: float = 0.1):
    """Train `model_fn()` with SGD on the whole `batch` (x, y) in one process.

    Returns (losses, final_params): one float per step, and `flat_params` after the last step.
    """
    check_int("steps", steps, 1)
    check_positive("lr", lr)
    model = model_fn()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    losses = train_steps(model, opt, *batch, steps)  # the loss is the mean over the global batch
    return losses, flat_params(model)


def check_batch(global_batch: int, world_size: int, accumulate: int = 1) -> None:
    """One-line ValueError before any process starts: every rank (and micro-batch) gets equal rows."""
    check_int("global_batch", global_batch, 1)
    if global_batch % (world_size * accumulate):
        by = f"world_size={world_size}" + (f" x accumulate={accumulate}" if accumulate > 1 else "")
        raise ValueError(f"global_batch={global_batch}: must be divisible by {by}")


def train_steps(model, opt, x, y, steps: int, accumulate: int = 1) -> list[float]:
    """`steps` SGD steps on (x, y); each step splits into `accumulate` micro-batches, all but the last
    under `model.no_sync()` (DDP's gradient accumulation). Dividing each micro-loss by `accumulate`
    makes the accumulated gradient the whole batch's mean gradient. Returns one loss per step."""
    losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for j, (xm, ym) in enumerate(zip(x.chunk(accumulate), y.chunk(accumulate))):  # (b/a, in), (b/a, out)
            with contextlib.nullcontext() if j == accumulate - 1 else model.no_sync():
                loss = loss_fn(model(xm), ym) / accumulate
                loss.backward()
            total += loss.item()
        opt.step()
        losses.append(total)
    return losses
