"""How fast is our ZeRO (simlab.exec.zero.ZeroAdam) next to torch's own ZeRO-1 and ZeRO-3?

Trains the same MLP (≈ 4M parameters, float32, Adam) on the same data, in one script run (one launch per peer group), with:
  ours-z3           ZeroAdam stage 3 (ShardedLinear)     vs  torch-fsdp2: FSDP2 `fully_shard` per Linear,
                                                             then the root, Adam           (target ≤ 1.25)
  ours-z1           ZeroAdam stage 1                     vs  torch-zero1: DDP + ZeroRedundancyOptimizer
                                                             (optimizer_class=Adam)         (target ≤ 1.10)
  ours-z2, ours-z2-offload, ours-z3-offload: for information, against the same peers (z2 → torch-zero1,
                                                             z3-offload → torch-fsdp2).
Prints the median step time (zero_grad, forward, backward, optimizer step), the ratio to the torch peer
(lower is better; 1.0 = as fast as torch) and the p25–p75 spread of the per-step ratios.

    .venv/bin/python benchmarks/zero.py                       # 4 gloo ranks, 4M params, 20 steps
    .venv/bin/python benchmarks/zero.py --steps 30 --json

A step's time is the slowest rank's (the step is done when the last rank is); a barrier starts every
step. Each peer group (ZeRO-3 and FSDP2; ZeRO-1/2 and ZeroRedundancyOptimizer) runs in its own launch,
its contenders taking turns step by step in rotating order, so drift on a busy machine hits them alike.
Timings need a quiet machine: the script prints the 1-min load average and warns above 1.5.
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

import torch
import torch.distributed as dist
from _common import count, load_warning, paired_quartiles  # benchmarks/ is on sys.path when run as a script
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
from simlab.exec.launch import launch  # noqa: E402 — after sys.path gains the checkout
from simlab.exec.models import loss_fn, make_batch, make_mlp, mlp_sizes, num_params, shard  # noqa: E402 — after sys.path gains the checkout
from simlab.exec.zero import ZeroAdam  # noqa: E402 — after sys.path gains the checkout

CONTENDERS = ("ours-z3", "torch-fsdp2", "ours-z1", "torch-zero1", "ours-z2", "ours-z2-offload", "ours-z3-offload")
PEER = {"ours-z3": "torch-fsdp2", "ours-z1": "torch-zero1", "ours-z2": "torch-zero1",
        "ours-z2-offload": "torch-zero1", "ours-z3-offload": "torch-fsdp2"}
TARGET = {"ours-z3": 1.25, "ours-z1": 1.10}  # the others are for information
OURS = tuple(PEER)
# each peer group runs in its own launch, taking turns step by step: FSDP2's allocations between two
# ZeRO-1 steps made glibc hand memory back and ours (transient buckets) pay page faults again
GROUPS = (("ours-z3", "torch-fsdp2", "ours-z3-offload"), ("ours-z1", "torch-zero1", "ours-z2", "ours-z2-offload"))
LR = 1e-3


def _step(model, opt, x, y) -> float:
    dist.barrier()  # everyone starts together: we time the step, not a late rank
    start = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss_fn(model(x), y).backward()  # (b, out) → scalar
    opt.step()
    return time.perf_counter() - start


def _fsdp2(sizes):
    """torch's ZeRO-3, as in simlab.parity.zero._torch_fsdp: one `fully_shard` per Linear, then the root."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    model, mesh = make_mlp(sizes), init_device_mesh("cpu", (dist.get_world_size(),))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model, torch.optim.Adam(model.parameters(), lr=LR)


def _zero1(sizes):
    """torch's ZeRO-1, as in simlab.parity.zero._torch_zero: DDP + ZeroRedundancyOptimizer(Adam)."""
    from torch.distributed.optim import ZeroRedundancyOptimizer
    ddp = nn.parallel.DistributedDataParallel(make_mlp(sizes))
    return ddp, ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.Adam, lr=LR)


def _ours(sizes, rank, world_size, stage, offload=False):
    model = make_mlp(sizes)  # same init everywhere: ZeRO does not broadcast
    return model, ZeroAdam(model, stage, lr=LR, offload=offload)


def _worker(rank, world_size, sizes, global_batch, steps, warmup, contenders) -> dict:
    x, y = shard(make_batch(global_batch, sizes[0], sizes[-1]), rank, world_size)  # (b, in), (b, out)
    build = {"ours-z3": lambda: _ours(sizes, rank, world_size, 3),
             "torch-fsdp2": lambda: _fsdp2(sizes),
             "ours-z1": lambda: _ours(sizes, rank, world_size, 1),
             "torch-zero1": lambda: _zero1(sizes),
             "ours-z2": lambda: _ours(sizes, rank, world_size, 2),
             "ours-z2-offload": lambda: _ours(sizes, rank, world_size, 2, offload=True),
             "ours-z3-offload": lambda: _ours(sizes, rank, world_size, 3, offload=True)}
    runs = {name: build[name]() for name in contenders}  # name → (model, optimizer)
    times = {name: [] for name in contenders}
    n = len(contenders)
    for i in range(warmup + steps):  # warm-up: page faults, connections, FSDP2's lazy init, DDP's rebuild
        for name in contenders[i % n:] + contenders[:i % n]:  # rotate: nobody always goes first
            t = _step(*runs[name], x, y)
            if i >= warmup:
                times[name].append(t)
    for _, opt in runs.values():
        if isinstance(opt, ZeroAdam):
            opt.close()
    del runs, build
    gc.collect()  # teardown trap: no DDP/FSDP module or optimizer may hold the group when it is destroyed
    return {"times": times}


def run(params: int, world_size: int = 4, steps: int = 20, warmup: int = 3, global_batch: int = 64,
        contenders=CONTENDERS) -> dict:
    contenders = tuple(contenders)
    sizes, load = mlp_sizes(params, depth=4), os.getloadavg()[0]  # the load before our ranks add theirs
    import torch.distributed.fsdp  # noqa: F401 — import once here: every forked rank inherits it
    import torch.distributed.optim  # noqa: F401 — import once here: every forked rank inherits it
    slowest = {}
    for group in GROUPS:  # one launch per peer group: a contender's heap is not churned by unrelated ones
        names = tuple(n for n in group if n in contenders)
        if names:
            ranks = launch(_worker, world_size, sizes, global_batch, steps, warmup, names, timeout=1800)
            slowest.update({n: [max(r["times"][n][i] for r in ranks) for i in range(steps)] for n in names})
    median = {name: statistics.median(ts) * 1e3 for name, ts in slowest.items()}
    row = {"params": num_params(make_mlp(sizes)), "sizes": sizes, "world_size": world_size,
           "global_batch": global_batch, "steps": steps, "warmup": warmup, "load_1min": load}
    row.update({f"{name}_ms": median[name] for name in contenders})
    for name in contenders:
        peer = PEER.get(name)
        if peer not in median:
            continue
        row[f"{name}_ratio"] = median[name] / median[peer]
        row[f"{name}_ratio_p25"], row[f"{name}_ratio_p75"] = paired_quartiles(slowest[name], slowest[peer])
        if name in TARGET:
            row[f"{name}_target"] = TARGET[name]
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=4)
    parser.add_argument("--params", type=count, default=4_000_000, help="e.g. 4M")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per contender")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--global-batch", type=int, default=64)
    parser.add_argument("--only", default=None,
                        help=f"comma-separated subset of {','.join(CONTENDERS)} (a ratio needs its peer)")
    parser.add_argument("--json", action="store_true", help="print the row as JSON")
    args = parser.parse_args(argv)
    if args.world_size < 2 or args.steps < 1 or args.warmup < 1 or args.params < 1:
        parser.error("need --world-size >= 2, --steps >= 1, --warmup >= 1, --params >= 1")
    if args.global_batch % args.world_size:
        parser.error(f"--global-batch={args.global_batch}: must be divisible by --world-size={args.world_size}")
    contenders = CONTENDERS
    if args.only:
        contenders = tuple(c.strip() for c in args.only.split(",") if c.strip())
        unknown = [c for c in contenders if c not in CONTENDERS]
        if unknown or not contenders:
            parser.error(f"--only: unknown {unknown}; choose from {','.join(CONTENDERS)}")
    load = load_warning()
    row = run(args.params, args.world_size, args.steps, args.warmup, args.global_batch, contenders)
    if args.json:
        print(json.dumps(row, indent=2))
        return 0
    print(f"ZeRO step (Adam), {row['world_size']} gloo ranks, {row['params']:,} params {row['sizes']}, "
          f"batch {row['global_batch']}, median of {row['steps']} (load {load:.2f})")
    print(f"{'contender':<16} {'step ms':>8} {'peer':<12} {'/peer':>6} {'pairs p25-p75':>14} {'target':>7}")
    for name in contenders:
        cells = [f"{name:<16}", f"{row[name + '_ms']:>8.1f}"]
        if name + "_ratio" in row:
            target = f"≤{TARGET[name]:.2f}" if name in TARGET else "info"
            cells += [f"{PEER[name]:<12}", f"{row[name + '_ratio']:>6.2f}",
                      f"{row[name + '_ratio_p25']:>8.2f}-{row[name + '_ratio_p75']:.2f}", f"{target:>7}"]
        print(" ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
