"""How much memory does a real collective run take? Peak RSS of `run_collective` (what `python -m simlab
run <collective>` calls) above torch's baseline, as a multiple of the buffer. Target: ≤ 4x in the parent
and in the largest worker.

    .venv/bin/python benchmarks/collectives_memory.py                  # 4 collectives x 16, 64 MiB, 4 ranks
    .venv/bin/python benchmarks/collectives_memory.py --sizes-mb 16 --collectives ring-all-reduce --json

Every measurement is a fresh process, so nothing measured before lifts its high-water mark. The parent's
peak (`ru_maxrss`) is compared with a process that only imports torch and simlab; each worker reports
its own peak above its RSS when it started (forked with torch loaded and its process group up).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MiB = 2**20
TARGET = 4.0
COLLECTIVES = ["ring-all-reduce", "ring-reduce-scatter", "ring-all-gather", "tree-broadcast"]

MEASURE = """
import json, resource, sys
from simlab.parity.collectives import run_collective  # torch and simlab: the baseline
kwargs = json.loads(sys.argv[1])
out = {}
if kwargs:
    res = run_collective(**kwargs)
    out = {"workers": [r["peak_rss_bytes"] - r["start_rss_bytes"] for r in res["per_rank"]],
           "correct": res["matches_simulator"] and res["max_abs_diff_vs_reference"] == 0
           and res["max_abs_diff_vs_torch"] == 0}
print(json.dumps(out | {"parent": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


def _measure(**kwargs) -> dict:
    """One fresh process: the parent's peak RSS (bytes) and, for a run, each worker's peak above its start."""
    done = subprocess.run([sys.executable, "-c", MEASURE, json.dumps(kwargs)], cwd=ROOT, capture_output=True,
                          text=True)
    if done.returncode:
        raise SystemExit(f"measurement {kwargs or 'baseline'} failed: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout.splitlines()[-1])


def run(collectives, sizes_mb, world_size: int = 4, timeout: float = 600.0) -> list[dict]:
    baseline = _measure()["parent"]
    rows = []
    for size_mb in sizes_mb:
        buffer = int(size_mb * MiB) // 4 * 4  # float32
        for name in collectives:
            got = _measure(name=name, world_size=world_size, numel=buffer // 4, timeout=timeout)
            parent, worker = got["parent"] - baseline, max(got["workers"])
            rows.append({"collective": name, "size_mb": size_mb, "world_size": world_size, "buffer_bytes": buffer,
                         "parent_bytes": parent, "worker_bytes": worker, "parent_x": parent / buffer,
                         "worker_x": worker / buffer, "correct": got["correct"], "target_x": TARGET,
                         "ok": max(parent, worker) <= TARGET * buffer})
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--collectives", nargs="+", default=COLLECTIVES,
                        choices=COLLECTIVES + ["naive-all-reduce"])
    parser.add_argument("--sizes-mb", type=float, nargs="+", default=[16, 64])
    parser.add_argument("--world-size", type=int, default=4)
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    if args.world_size < 2 or min(args.sizes_mb) < 1:
        parser.error("need --world-size >= 2 and sizes >= 1 MiB")
    rows = run(args.collectives, args.sizes_mb, args.world_size)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"peak RSS above baseline / buffer, {args.world_size} ranks, target ≤ {TARGET:g}x")
    print(f"{'collective':>20} {'MiB':>5} {'parent':>7} {'worker':>7}  ok  correct")
    for row in rows:
        print(f"{row['collective']:>20} {row['size_mb']:>5g} {row['parent_x']:>6.2f}x {row['worker_x']:>6.2f}x"
              f"  {'✓' if row['ok'] else '✗'}   {'✓' if row['correct'] else '✗'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
