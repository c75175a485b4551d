"""Lesson 5 on the command line: `simlab split` (who holds which block of a weight, no torch) and
`simlab run tp` (Megatron's MLP or attention split over real processes, against the unsplit block, the
plan's collectives and torch's DTensor TP).

    simlab split column --ranks 4 --shape 8x12
    simlab run tp --world-size 4 --block attention --json
"""
from __future__ import annotations

import re

from .. import _checks
from .common import add_json, add_run_flags, check_memory, check_run_flags, run_output


def parse_shape(text: str) -> tuple[int, int]:
    """'8x12' → (8, 12); a zero or malformed dimension is a one-line error."""
    match = re.fullmatch(r"\s*(\d+)\s*[xX×]\s*(\d+)\s*", str(text))
    if not match:
        raise ValueError(f"shape={text!r}: expected ROWSxCOLS, e.g. 8x12")
    rows, cols = int(match[1]), int(match[2])
    if rows == 0 or cols == 0:
        raise ValueError(f"shape={text}: dimensions must be >= 1")
    return rows, cols


def cmd_split(args) -> dict:
    """`simlab split column|row`: each rank's block of a weight, its input and how outputs combine."""
    from ..sim.tensor_parallel import shard_plan

    _checks.check_ranks("ranks", args.ranks)
    plan = shard_plan(args.kind, args.ranks, parse_shape(args.shape))
    if not args.json:
        print(plan.to_text())
    return plan.to_dict()


def cmd_tp(args) -> dict:
    """`simlab run tp`: Megatron MLP and attention split over ranks, vs the unsplit modules."""
    from ..parity.tensor_parallel import run_tp

    check_run_flags(args)
    for name in ("hidden", "ffn", "heads"):
        _checks.check_int(name, getattr(args, name), 1)
    h, f = args.hidden, args.ffn
    params = 2 * h * f + h + f if args.block == "mlp" else 4 * h * h + 4 * h
    tokens = 2 * 16  # erring high: run_tp's default input is (b, s) = (2, 4)
    # every process: the whole block, its grads and DTensor's copy, and activations of the widest layer
    check_memory(f"--hidden={h} --ffn={f}" if args.block == "mlp" else f"--hidden={h}",
                 (args.world_size + 1) * 4 * (3 * params + 4 * tokens * max(h, f)), f"the {args.block} block")
    res = run_tp(world_size=args.world_size, block=args.block, hidden=args.hidden, heads=args.heads, ffn=args.ffn,
                 seed=args.seed, backend=args.backend, timeout=args.timeout)
    extra = [k for k in res if k not in ("trace", "block")]
    return run_output({"block": res["block"]}, res, *extra)


def add_commands(sub, run) -> None:
    spl = sub.add_parser("split", help="tensor-parallel shard plan of one weight (no torch)")
    spl.add_argument("kind", choices=["column", "row"], help="split the weight's columns or its rows")
    spl.add_argument("--ranks", type=int, default=4, help="tensor-parallel size (default 4)")
    spl.add_argument("--shape", default="8x12", help="weight shape ROWSxCOLS, i.e. in x out (default 8x12)")
    add_json(spl)
    spl.set_defaults(func=cmd_split, summary=False)
    tp = run.add_parser("tp", help="Megatron's MLP or attention split over real processes")
    tp.add_argument("--block", choices=["mlp", "attention"], default="mlp", help="which block to split")
    tp.add_argument("--hidden", type=int, default=8, help="hidden size h (default 8)")
    tp.add_argument("--ffn", type=int, default=16, help="MLP inner size, divisible by --world-size (default 16)")
    tp.add_argument("--heads", type=int, default=4, help="attention heads, divisible by --world-size (default 4)")
    add_run_flags(tp)
    tp.set_defaults(func=cmd_tp)
