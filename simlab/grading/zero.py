"""Lesson 3's exercise: per-GPU memory of ZeRO stages 0-3, graded on the paper's Figure 1 and 48 more
cases where shards round up."""
from __future__ import annotations

from ..sim.memory import per_gpu_bytes
from .common import fail

PAPER = {0: 120e9, 1: 31.40625e9, 2: 16.640625e9, 3: 1.875e9}  # ZeRO paper, Figure 1: Ψ=7.5B, N=64, K=12


def check_zero_memory(fn) -> None:
    """Grade `fn(psi, n_gpus, stage) -> {params, grads, optimizer, total}` (mixed precision, K=12)."""
    title, keys = "ZeRO memory per GPU", ("params", "grads", "optimizer", "total")
    for stage, total in PAPER.items():
        got = fn(7_500_000_000, 64, stage)
        if got.get("total") != total:
            fail(title, f"the paper's example, stage {stage}", f"total={got.get('total')} B, paper: {total:.0f} B")
    cases = [(psi, n, stage) for psi in (1_000_000, 1_000_003, 7_500_000_000) for n in (1, 3, 64, 1000)
             for stage in range(4)]
    for psi, n, stage in cases:
        want, got = per_gpu_bytes(psi, n, stage, precision="mixed"), fn(psi, n, stage)
        wrong = [k for k in keys if got.get(k) != want[k]]
        if wrong:
            fail(title, f"psi={psi}, n_gpus={n}, stage={stage}",
                  f"{wrong[0]}={got.get(wrong[0])} but expected {want[wrong[0]]} (shards round up)")
    print(f"{title}: ✓ the paper's 120 / 31.4 / 16.6 / 1.9 GB and {len(cases)} more cases "
          f"(uneven shards round up)")
