"""How fast is our DDP (simlab.exec.data_parallel.BucketedDDP) next to torch's DistributedDataParallel?

Trains the same MLP (≥ 4M parameters, float32) on the same data, in one launched run, with four
contenders: ours with the ring all-reduce thread, the same counting bytes (a `Recorder`, which starts
each bucket's ring with a barrier), ours with `dist.all_reduce(async_op=True)`, and torch's DDP with
the same bucket cap. Prints the median step time (forward, backward with the all-reduces, optimizer
step), the ratio to torch's DDP (lower is better; 1.0 = as fast as torch), the spread of per-step
ratios, and how much all-reduce time per step ran hidden behind backward vs exposed after it.

    .venv/bin/python benchmarks/data_parallel.py                          # 4 gloo ranks, 4M params, 25 MB
    .venv/bin/python benchmarks/data_parallel.py --bucket-cap-mb 4 --steps 30 --json

Same cap, not always the same buckets: torch's reducer closes a bucket once it *reaches* the cap,
ours (`simlab.sim.data_parallel_buckets`) never exceed it — at 4M params and 4 MB: torch 2 buckets, ours 4. The
header shows both; `--torch-bucket-cap-mb` lets you match the layouts (ours 8 MB vs torch 4 MB).

A step's time is the slowest rank's (the step is done when the last rank is). The contenders take
turns step by step in rotating order, so drift on a busy machine hits all alike. Timings need a quiet
machine: the script prints the 1-min load average and warns above 1.5; run it a few times.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
from simlab.exec.data_parallel import BucketedDDP  # noqa: E402 — after sys.path gains the checkout
from simlab.exec.launch import launch  # noqa: E402 — after sys.path gains the checkout
from simlab.exec.models import loss_fn, make_batch, make_mlp, mlp_sizes, num_params, shard  # noqa: E402 — after sys.path gains the checkout

CONTENDERS = ("ours-ring", "ours-ring-counted", "ours-torch-ar", "torch-ddp")
OURS = CONTENDERS[:3]


def _step(model, opt, x, y) -> float:
    dist.barrier()  # everyone starts together: we time the step, not a late rank
    start = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss_fn(model(x), y).backward()  # (b, out) → scalar; the all-reduces run inside backward
    opt.step()
    return time.perf_counter() - start


def _worker(rank, world_size, sizes, global_batch, cap_mb, torch_cap_mb, steps, warmup) -> dict:
    x, y = shard(make_batch(global_batch, sizes[0], sizes[-1]), rank, world_size)  # (b, in), (b, out)
    models = {"ours-ring": BucketedDDP(make_mlp(sizes), cap_mb, allreduce="ring"),
              "ours-ring-counted": BucketedDDP(make_mlp(sizes), cap_mb, allreduce="ring", count_bytes=True),
              "ours-torch-ar": BucketedDDP(make_mlp(sizes), cap_mb, allreduce="torch"),
              "torch-ddp": torch.nn.parallel.DistributedDataParallel(make_mlp(sizes), bucket_cap_mb=torch_cap_mb)}
    opts = {name: torch.optim.SGD(m.parameters(), lr=1e-3) for name, m in models.items()}
    times = {name: [] for name in models}
    for i in range(warmup + steps):  # warm-up: page faults, connections, torch DDP's bucket rebuild
        for name in CONTENDERS[i % 4:] + CONTENDERS[:i % 4]:  # rotate: nobody always goes first
            t = _step(models[name], opts[name], x, y)
            if i >= warmup:
                times[name].append(t)
    overlap = {name: models[name].overlap[warmup:] for name in OURS}
    buckets = len(models["ours-ring"].buckets), _torch_buckets(models["torch-ddp"])
    for name in OURS:
        models[name].close()
    del models, opts
    gc.collect()  # teardown trap: no DDP may hold the group when it is destroyed
    return {"times": times, "overlap": overlap, "buckets": buckets}


def _torch_buckets(ddp) -> int | None:
    """How many buckets torch's DDP ended up with. Its C++ reducer rebuilds them after step 1 and closes
    a bucket once it *reaches* the cap (so may overshoot by one parameter); ours never exceed the cap."""
    try:  # private API: the count is a footnote, never a reason to fail
        return len(ddp._get_ddp_logging_data()["rebuilt_bucket_sizes"].split(","))
    except Exception:
        return None


def run(params: int, world_size: int = 4, cap_mb: float = 25.0, steps: int = 20, warmup: int = 3,
        global_batch: int = 64, torch_cap_mb: float | None = None) -> dict:
    torch_cap_mb = torch_cap_mb or cap_mb
    sizes = mlp_sizes(params, depth=4)
    ranks = launch(_worker, world_size, sizes, global_batch, cap_mb, torch_cap_mb, steps, warmup, timeout=1800)
    slowest = {name: [max(r["times"][name][i] for r in ranks) for i in range(steps)] for name in CONTENDERS}
    median = {name: statistics.median(ts) * 1e3 for name, ts in slowest.items()}
    row = {"params": num_params(make_mlp(sizes)), "sizes": sizes, "world_size": world_size, "bucket_cap_mb": cap_mb,
           "torch_bucket_cap_mb": torch_cap_mb,
           "buckets": ranks[0]["buckets"][0], "torch_buckets": ranks[0]["buckets"][1], "global_batch": global_batch, "steps": steps,
           "load_1min": os.getloadavg()[0]}
    row.update({f"{name}_ms": median[name] for name in CONTENDERS})
    for name in OURS:  # ratios of back-to-back steps: their spread shows how much noise moves the ratio
        row[f"{name}_ratio"] = median[name] / median["torch-ddp"]
        row[f"{name}_ratio_p25"], row[f"{name}_ratio_p75"] = paired_quartiles(slowest[name], slowest["torch-ddp"])
    for name in OURS:  # all-reduce time per step, mean over ranks and steps
        per = [o for r in ranks for o in r["overlap"][name]]
        row[f"{name}_hidden_ms"] = 1e3 * sum(h for h, _ in per) / len(per)
        row[f"{name}_exposed_ms"] = 1e3 * sum(e for _, e in per) / len(per)
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=4)
    parser.add_argument("--params", type=count, default=4_000_000, help="e.g. 4M (at least 4M for the report)")
    parser.add_argument("--bucket-cap-mb", type=float, default=25.0)
    parser.add_argument("--torch-bucket-cap-mb", type=float, default=None,
                        help="torch's cap, if not the same: e.g. ours 8 vs torch 4 gives both 2 buckets of 8 MB at 4M")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per contender")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--global-batch", type=int, default=64)
    parser.add_argument("--json", action="store_true", help="print the row as JSON")
    args = parser.parse_args(argv)
    if args.world_size < 2 or args.steps < 1 or args.warmup < 1 or args.bucket_cap_mb <= 0 or args.params < 1:
        parser.error("need --world-size >= 2, --steps >= 1, --warmup >= 1, --bucket-cap-mb > 0, --params >= 1")
    if args.torch_bucket_cap_mb is not None and args.torch_bucket_cap_mb <= 0:
        parser.error(f"--torch-bucket-cap-mb={args.torch_bucket_cap_mb}: must be > 0")
    if args.global_batch % args.world_size:
        parser.error(f"--global-batch={args.global_batch}: must be divisible by --world-size={args.world_size}")
    load = load_warning()
    row = run(args.params, args.world_size, args.bucket_cap_mb, args.steps, args.warmup, args.global_batch,
              args.torch_bucket_cap_mb)
    if args.json:
        print(json.dumps(row, indent=2))
        return 0
    print(f"DDP step, {row['world_size']} gloo ranks, {row['params']:,} params, cap {row['bucket_cap_mb']:g} MB"
          f" (torch {row['torch_bucket_cap_mb']:g} MB) "
          f"(buckets: ours {row['buckets']}, torch {row['torch_buckets']}), batch {row['global_batch']}, median of {row['steps']} (load {load:.2f})")
    print(f"{'contender':<18} {'step ms':>8} {'/torch':>7} {'pairs p25-p75':>14} {'hidden ms':>10} {'exposed ms':>11}")
    for name in CONTENDERS:
        cells = [f"{name:<18}", f"{row[name + '_ms']:>8.1f}"]
        if name in OURS:
            cells += [f"{row[name + '_ratio']:>7.2f}", f"{row[name + '_ratio_p25']:>8.2f}-{row[name + '_ratio_p75']:.2f}",
                      f"{row[name + '_hidden_ms']:>10.1f}", f"{row[name + '_exposed_ms']:>11.1f}"]
        print(" ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
