"""How fast is a ring all-reduce written in Python over isend/irecv, next to torch's own?

Times `simlab.exec.collectives.ring_all_reduce` (the very function lessons call) against
`dist.all_reduce` on the same ranks, same float32 buffers, in one launched run, and prints
size, our median, torch's median and the ratio ours/torch (lower is better; 1.0 = as fast as gloo).

    .venv/bin/python benchmarks/collectives.py                       # 1, 16, 64 MB on 4 gloo ranks
    .venv/bin/python benchmarks/collectives.py --sizes-mb 16 --repeats 20 --json

Each repeat: reset the buffer, barrier, time one call on every rank; a repeat's time is the slowest
rank's (a collective is done when the last rank is done). The two are interleaved, so drift in a busy
machine hits both alike. Expect noise when ranks outnumber cores: run it a few times.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from _common import paired_quartiles  # benchmarks/ is on sys.path when run as a script

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
from simlab.exec.collectives import ring_all_reduce  # noqa: E402 — after sys.path gains the checkout
from simlab.exec.launch import device, launch  # noqa: E402 — after sys.path gains the checkout

MB = 2**20


def _time_once(fn, buf, source) -> float:
    buf.copy_(source)  # same values every time: repeated sums would otherwise overflow
    dist.barrier()  # everyone starts together, so we time the collective, not a late rank
    start = time.perf_counter()
    fn(buf)
    return time.perf_counter() - start


def _worker(rank: int, world_size: int, sizes_mb, repeats: int, warmup: int) -> dict:
    out = {}
    for size_mb in sizes_mb:
        numel = int(size_mb * MB) // 4  # float32
        gen = torch.Generator().manual_seed(rank)
        source = torch.randn(numel, generator=gen).to(device())  # (numel,)
        buf = torch.empty_like(source)
        contenders = {"ours": ring_all_reduce, "torch": dist.all_reduce}
        for _ in range(warmup):  # first calls pay for connections, page faults and scratch buffers
            for fn in contenders.values():
                _time_once(fn, buf, source)
        times = {name: [] for name in contenders}
        for _ in range(repeats):
            for name, fn in contenders.items():  # interleaved: machine noise hits both alike
                times[name].append(_time_once(fn, buf, source))
        out[size_mb] = times
    return out


def run(sizes_mb, world_size: int = 4, repeats: int = 20, warmup: int = 2, backend: str = "auto") -> list[dict]:
    per_rank = launch(_worker, world_size, list(sizes_mb), repeats, warmup, backend=backend, timeout=600)
    rows = []
    for size_mb in sizes_mb:
        # per repeat, the slowest rank decides (the collective is done when the last rank is)
        slowest = {name: [max(rank[size_mb][name][i] for rank in per_rank) for i in range(repeats)]
                   for name in ("ours", "torch")}
        ours, torch_ = (statistics.median(slowest[name]) * 1e3 for name in ("ours", "torch"))
        # ratios of back-to-back pairs: their spread shows how much the machine's noise moves the ratio
        p25, p75 = paired_quartiles(slowest["ours"], slowest["torch"])
        rows.append({"size_mb": size_mb, "world_size": world_size, "repeats": repeats, "ours_ms": ours,
                     "torch_ms": torch_, "ratio": ours / torch_, "ratio_p25": p25, "ratio_p75": p75})
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mb", type=float, nargs="+", default=[1, 16, 64])
    parser.add_argument("--world-size", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--backend", default="auto", choices=["auto", "gloo", "nccl"])
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    if args.world_size < 2 or args.repeats < 1 or args.warmup < 0 or min(args.sizes_mb) <= 0:
        parser.error("need --world-size >= 2, --repeats >= 1, --warmup >= 0 and sizes > 0")
    rows = run(args.sizes_mb, args.world_size, args.repeats, args.warmup, args.backend)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"ring all-reduce vs dist.all_reduce, {args.world_size} ranks, median of {args.repeats}")
    print(f"{'size MB':>8} {'ours ms':>9} {'torch ms':>9} {'ours/torch':>11} {'pairs p25-p75':>14}")
    for row in rows:
        print(f"{row['size_mb']:>8g} {row['ours_ms']:>9.2f} {row['torch_ms']:>9.2f} {row['ratio']:>11.2f}"
              f" {row['ratio_p25']:>8.2f}-{row['ratio_p75']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
