"""Lesson 2 on the command line: `simlab run dp` (nn.DataParallel's way: one process, threads) and
`simlab run ddp` (our DDP on real processes), both against one process training the whole batch.

    simlab run dp --world-size 2 --json
    simlab run ddp --world-size 4 --bucket-cap-mb 0.004 --json
"""
from __future__ import annotations

from .. import _checks
from .common import add_run_flags, add_training_flags, check_run_flags, check_training_flags, run_output

EXTRA = ("losses", "reference_losses", "optimal_bytes_per_rank", "buckets",
         "hidden_seconds", "exposed_seconds")


def cmd_dp(args) -> dict:
    """`simlab run dp`: DP on threads in one process, vs one process (and nn.DataParallel on GPUs)."""
    from ..parity.data_parallel import run_dp

    check_run_flags(args)
    check_training_flags(args)
    res = run_dp(args.world_size, steps=args.steps, global_batch=args.global_batch, seed=args.seed,
                 backend=args.backend, timeout=args.timeout)
    return run_output({"strategy": "dp"}, res, *EXTRA)


def cmd_ddp(args) -> dict:
    """`simlab run ddp`: our DDP vs one process and vs torch's DDP."""
    from ..parity.data_parallel import run_ddp

    check_run_flags(args)
    check_training_flags(args)
    _checks.check_positive("bucket_cap_mb", args.bucket_cap_mb)
    res = run_ddp(args.world_size, steps=args.steps, global_batch=args.global_batch, seed=args.seed,
                  bucket_cap_mb=args.bucket_cap_mb, backend=args.backend, timeout=args.timeout)
    return run_output({"strategy": "ddp"}, res, *EXTRA)


def add_commands(sub, run) -> None:
    dp = run.add_parser("dp", help="DP (nn.DataParallel's way: one process, a thread per device) vs one process")
    add_training_flags(dp)
    add_run_flags(dp, backends="auto | threads (DP is one process)", timeout=False)  # threads: nothing to kill
    dp.set_defaults(func=cmd_dp)
    ddp = run.add_parser("ddp", help="our DDP on real processes vs one process and torch's DDP")
    add_training_flags(ddp)
    ddp.add_argument("--bucket-cap-mb", type=float, default=0.004,
                     help="bucket size cap in MB (default 0.004: several buckets on the tiny model)")
    add_run_flags(ddp)
    ddp.set_defaults(func=cmd_ddp)
