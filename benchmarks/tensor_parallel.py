"""How fast is our tensor-parallel MLP (simlab.exec.tensor_parallel.ParallelMLP) next to torch's own TP?

Runs the same Megatron MLP block (hidden → 4·hidden → hidden, float32) on the same input, in one launched
run, as:
  ours           ParallelMLP: column-parallel fc1, GeLU, row-parallel fc2; f and g as autograd Functions
  torch-dtensor  parallelize_module(block, mesh, {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
                 on a 1-D CPU device mesh                                                    (target ≤ 1.10)
A step is forward + backward (X requires grad, as inside a network, so both run the backward all-reduce
of dX). Prints the median step time, the ratio ours / torch (lower is better; 1.0 = as fast as torch)
and the p25–p75 spread of the per-step ratios. `--block attention` times ParallelSelfAttention instead
(for information: DTensor reduces dX once per Q/K/V projection, ours once for the fused QKV).

    .venv/bin/python benchmarks/tensor_parallel.py                  # 4 gloo ranks, hidden 512, 20 steps
    .venv/bin/python benchmarks/tensor_parallel.py --steps 30 --json

A step's time is the slowest rank's (the step is done when the last rank is); a barrier starts every
step. The contenders take turns step by step in rotating order, so drift on a busy machine hits both
alike. Timings need a quiet machine: the script prints the 1-min load average and warns above 1.5.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch.distributed as dist
from _common import load_warning, paired_quartiles  # benchmarks/ is on sys.path when run as a script

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
from simlab.exec.launch import launch  # noqa: E402 — after sys.path gains the checkout
from simlab.exec.models import make_block, make_input  # noqa: E402 — after sys.path gains the checkout
from simlab.exec.tensor_parallel import ParallelMLP, ParallelSelfAttention  # noqa: E402 — after sys.path gains the checkout
from simlab.parity.tensor_parallel import torch_plan  # noqa: E402 — after sys.path gains the checkout

CONTENDERS = ("ours", "torch-dtensor")
TARGET = 1.10


def _step(model, x, grad_out) -> float:
    dist.barrier()  # everyone starts together: we time the step, not a late rank
    start = time.perf_counter()
    for p in model.parameters():
        p.grad = None
    xr = x.detach().requires_grad_(True)  # (b, s, h): a leaf needing dX, like a layer inside a network
    model(xr).backward(grad_out)  # (b, s, h)
    return time.perf_counter() - start


def _torch_model(block, full, world_size):
    """torch's TP of the same block, with the plan simlab.parity.tensor_parallel.torch_tp uses."""
    import copy

    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module
    return parallelize_module(copy.deepcopy(full), init_device_mesh("cpu", (world_size,)), torch_plan(block))


def _worker(rank, world_size, block, batch, seq, hidden, heads, steps, warmup) -> dict:
    full = make_block(block, hidden, heads, 4 * hidden)
    x, grad_out = make_input(batch, seq, hidden)  # (b, s, h) each, the same on every rank
    ours = (ParallelMLP if block == "mlp" else ParallelSelfAttention).from_full(full)
    runs = {"ours": ours, "torch-dtensor": _torch_model(block, full, world_size)}
    times = {name: [] for name in CONTENDERS}
    for i in range(warmup + steps):  # warm-up: page faults, connections, DTensor's sharding-propagation caches
        for name in CONTENDERS[i % 2:] + CONTENDERS[:i % 2]:  # alternate who goes first
            t = _step(runs[name], x, grad_out)
            if i >= warmup:
                times[name].append(t)
    del runs, ours
    gc.collect()  # teardown trap: nothing may hold the group when it is destroyed
    return {"times": times}


def run(world_size: int = 4, block: str = "mlp", batch: int = 4, seq: int = 128, hidden: int = 512,
        heads: int = 8, steps: int = 20, warmup: int = 3) -> dict:
    load = os.getloadavg()[0]  # the load before our ranks add theirs
    import torch.distributed.tensor.parallel  # noqa: F401 — import once here: every forked rank inherits it
    ranks = launch(_worker, world_size, block, batch, seq, hidden, heads, steps, warmup, backend="gloo",
                   timeout=1800)  # CPU tensors and a "cpu" mesh: gloo even where GPUs exist
    slowest = {name: [max(r["times"][name][i] for r in ranks) for i in range(steps)] for name in CONTENDERS}
    median = {name: statistics.median(ts) * 1e3 for name, ts in slowest.items()}
    p25, p75 = paired_quartiles(slowest["ours"], slowest["torch-dtensor"])  # back-to-back steps
    return {"block": block, "world_size": world_size, "batch": batch, "seq": seq, "hidden": hidden,
            "ffn": 4 * hidden, "heads": heads, "steps": steps, "warmup": warmup, "load_1min": load,
            "ours_ms": median["ours"], "torch_dtensor_ms": median["torch-dtensor"],
            "ratio": median["ours"] / median["torch-dtensor"], "ratio_p25": p25, "ratio_p75": p75,
            "target": TARGET}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=4)
    parser.add_argument("--block", choices=("mlp", "attention"), default="mlp")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=512, help="the MLP's inner width is 4x this")
    parser.add_argument("--heads", type=int, default=8, help="attention only")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per contender")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print the row as JSON")
    args = parser.parse_args(argv)
    if args.world_size < 2 or min(args.steps, args.warmup, args.batch, args.seq, args.hidden, args.heads) < 1:
        parser.error("need --world-size >= 2 and --steps, --warmup, --batch, --seq, --hidden, --heads >= 1")
    if args.block == "mlp" and (4 * args.hidden) % args.world_size:
        parser.error(f"--hidden={args.hidden}: 4x it must be divisible by --world-size={args.world_size}")
    if args.block == "attention" and (args.heads % args.world_size or args.hidden % args.heads):
        parser.error(f"--heads={args.heads}: must divide --hidden and be divisible by --world-size")
    load = load_warning()
    row = run(args.world_size, args.block, args.batch, args.seq, args.hidden, args.heads, args.steps, args.warmup)
    if args.json:
        print(json.dumps(row, indent=2))
        return 0
    print(f"TP {row['block']} step (forward + backward), {row['world_size']} gloo ranks, X ({row['batch']}, "
          f"{row['seq']}, {row['hidden']}), ffn {row['ffn']}, median of {row['steps']} (load {load:.2f})")
    print(f"{'contender':<14} {'step ms':>8}")
    print(f"{'ours':<14} {row['ours_ms']:>8.1f}")
    print(f"{'torch-dtensor':<14} {row['torch_dtensor_ms']:>8.1f}")
    print(f"ours / torch = {row['ratio']:.2f} (pairs p25-p75 {row['ratio_p25']:.2f}-{row['ratio_p75']:.2f}), "
          f"target ≤{TARGET:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
