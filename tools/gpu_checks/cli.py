"""`make gpu-check`: every engine's CUDA device plumbing, CUDA memory per rank against the memory model, and one
real training step timed against the time model — on one GPU (the machine we can borrow) or one GPU per rank.

    python tools/gpu_check.py                 # on this machine's GPUs; exits 2 in one line if it has none
    python tools/gpu_check.py --device cpu    # the same plan on the CPU with tiny sizes: a dry run of the logic
    python tools/gpu_check.py --plan          # print the plan for this machine, run nothing
    python tools/gpu_check.py --only timing,memory   # only the checks (or groups) whose names start so
    python tools/gpu_check.py --backend gloo --world-size 2   # every lesson's parity on one backend, in this
                                                              # process, as before the plan (CI runs this)

One command, nothing to install: torch, numpy and the repository (put on sys.path here; run it from anywhere).
It never imports simlab.render (ipywidgets), pytest or matplotlib. Budget: 450 s in all (--budget); each group
of checks runs in its own subprocess with its own timeout, so a check that raises, crashes or hangs is one ✗ row
and the others still run. The markdown table is printed and written to $OUT/gpu_check.md when $OUT is set (the
borrowed machine copies $OUT back), else to benchmarks/gpu_check.md; --out overrides (a CPU dry run writes only
where --out says). Exit status: 0 every check passed, 1 one failed, 2 no GPU here — a target that verified
nothing must not pass; `--device cpu` is the dry run for such a machine.
"""
from __future__ import annotations

import argparse

import torch

from . import report
from .child import run_child
from .parity import legacy_rows
from .plan import mode_of, plan, select
from .report import FAIL, row, table
from .runner import run_groups

BUDGET = 450.0  # seconds for everything: under 8 minutes with the parent's own start


def parse(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"],
                        help="auto: cuda when this machine has a GPU; cpu: the dry run")
    parser.add_argument("--only", help="comma-separated prefixes of check or group names")
    parser.add_argument("--budget", type=float, default=BUDGET, help="seconds for everything (default 450)")
    parser.add_argument("--size", choices=["full", "tiny"], help="default: full on a GPU, tiny on the CPU")
    parser.add_argument("--out", help="where the markdown table goes (default: $OUT/gpu_check.md, else "
                                      "benchmarks/gpu_check.md; a CPU run writes only where --out says)")
    parser.add_argument("--plan", action="store_true", help="print the plan for this machine and exit")
    parser.add_argument("--backend", choices=["nccl", "gloo"],
                        help="instead of the plan: every lesson's parity on this backend, in this process")
    parser.add_argument("--world-size", type=int, help="ranks for --backend (default: GPUs up to 4 for nccl, 2)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    parser.add_argument("--gpus", type=int, default=0, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse(argv)
    if args.child:
        return run_child(args.child, args.mode, args.gpus, args.size or "tiny")
    gpus = torch.cuda.device_count()  # asks NVML: this process never initialises CUDA
    if args.device != "cpu" and gpus == 0 and args.backend != "gloo":
        build = f"CUDA {torch.version.cuda} build" if torch.version.cuda else "a CPU-only build"
        print(f"gpu-check: no CUDA GPU on this machine (torch {torch.__version__}, {build}): nothing verified; "
              f"`python tools/gpu_check.py --device cpu` runs the same plan on the CPU")
        return 2
    if args.backend:
        n = args.world_size or (min(gpus, 4) if args.backend == "nccl" else 2)
        rows = legacy_rows(n, args.backend)
        print(f"gpu-check: every lesson's parity on {args.backend}, {n} rank(s), torch {torch.__version__}")
        print(table(rows))
        return 1 if any(r["ok"] == FAIL for r in rows) else 0
    mode = mode_of("cpu" if args.device == "cpu" else "cuda", gpus)
    size = args.size or ("tiny" if mode == "cpu" else "full")
    groups = select(plan(mode, gpus), args.only)
    if args.plan:
        print(table([row(c, how, ok="") for g in groups for c, how in g.checks]))
        return 0
    path = report.output_path(args.out, mode)
    print(f"gpu-check: {len(groups)} group(s), {sum(len(g.checks) for g in groups)} check(s), mode {mode}, "
          f"budget {args.budget:.0f} s; table → {path or 'stdout only'}", flush=True)
    env, rows, spent = run_groups(groups, mode, gpus, size, args.budget)
    lines = report.header(env, mode, gpus, args.budget, spent)
    text = "\n".join(lines + ["", table(rows), "", report.LEGEND])
    print()
    print(text)
    if path:
        report.write(path, text, lines, mode, env, rows)
    return 1 if any(r["ok"] == FAIL for r in rows) else 0
