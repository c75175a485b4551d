"""This machine's roofline, measured: the best FLOP/s its matrix multiplies reach, the bytes/s a large copy
reaches, and the wall time of one training step of the course's small GPT — so lesson 5b can place GEMMs on
this machine's roofline and print this machine's MFU.

What it teaches: a datasheet's peak is not what a program gets. Like ml-engineering's mamf-finder ("maximum
achievable matmul FLOPS"), `best_matmul_seconds` times square GEMMs of several sizes and keeps the best run of
each (the least disturbed); the machine's achievable peak is the best FLOP/s over the sizes — small GEMMs are
bound by memory and fixed costs, very large ones by cache misses. `best_copy_seconds` copies a buffer far
larger than the caches: read once and written once, 2 × its bytes move. Timings are reported, never asserted:
other programs share the cores.
"""
from __future__ import annotations

import time

import torch

from .._checks import check_choice, check_int

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def best_of(fn, repeats: int) -> float:
    """The shortest of `repeats` timed calls, after one untimed warm-up call."""
    check_int("repeats", repeats, 1)
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def best_matmul_seconds(n: int, dtype: str = "fp32", repeats: int = 5) -> float:
    """Seconds of the fastest of `repeats` (n × n)·(n × n) matmuls in `dtype` (2n³ FLOPs each)."""
    check_int("n", n, 1, 8192)
    check_choice("dtype", dtype, tuple(DTYPES))
    gen = torch.Generator().manual_seed(n)
    a, b = (torch.randn(n, n, generator=gen).to(DTYPES[dtype]) for _ in range(2))
    out = torch.empty(n, n, dtype=DTYPES[dtype])
    return best_of(lambda: torch.mm(a, b, out=out), repeats)  # into one buffer: no allocation is timed


def best_copy_seconds(nbytes: int, repeats: int = 5) -> float:
    """Seconds of the fastest of `repeats` copies of an `nbytes` buffer into another (2 × nbytes moved)."""
    check_int("nbytes", nbytes, 1 << 20, 1 << 32)
    src = torch.ones(nbytes // 4, dtype=torch.float32)
    dst = torch.empty_like(src)  # touched once by the warm-up copy: page faults are not timed
    return best_of(lambda: dst.copy_(src), repeats)


def best_step_seconds(model, opt, tokens, targets, loss_fn, repeats: int = 3) -> float:
    """Seconds of the fastest of `repeats` training steps (forward, loss, backward, optimizer step)."""
    def one():
        opt.zero_grad(set_to_none=True)
        loss_fn(model(tokens), targets).backward()
        opt.step()
    return best_of(one, repeats)
