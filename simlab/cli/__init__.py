"""The `simlab` command line: rerun a lesson's scene on a workstation or under torchrun.

    simlab collective ring-all-reduce --ranks 4 --size 1048576 --json   # lesson 1: a plan, simulated
    simlab run ring-all-reduce --world-size 4 --json                    #   the same plan on real processes
    simlab run ring-all-reduce --trace ring.json                        #   its trace, for ui.perfetto.dev
    simlab run ddp --world-size 4 --json                                # lesson 2: ours vs torch vs 1 process
    simlab memory --params 7.5e9 --gpus 64 --zero 3 --json              # lesson 3: ZeRO memory per GPU
    simlab schedule 1f1b --stages 4 --microbatches 8 --json             # lesson 4: a schedule, simulated
    simlab split column --ranks 4 --shape 8x12                          # lesson 5: who holds which block
    simlab plan --model gpt3-175b --gpus 1024 --global-batch 1536       # lesson 6: the best 3-D plan
    simlab cp --world-size 8 --seq 131072 --heads 32 --kv-heads 8 --head-dim 128   # lesson 7: work per rank, CP's three ways
    simlab ep --tokens 16 --experts 8 --top-k 2 --capacity 1.25 --ep 4  #   MoE routing, drops, all-to-all bytes

One module per lesson (`simlab.cli.collectives`, `.data_parallel`, `.zero`, `.pipeline`,
`.tensor_parallel`, `.training_step`, `.hybrid`, `.context_parallel`, `.expert_parallel`), and lesson 6's
`.hybrid_calibrate` (`simlab calibrate`), each with `add_commands(sub, run)` and `cmd_*(args) -> dict`. Every subcommand
takes --json (strict JSON); bad arguments get one line naming the flag, before any process starts; a
failing run is one line too (--verbose shows the traceback). Under torchrun only rank 0 prints; torchrun's
variables half set, or contradicting each other, are refused before a run (`before_work`).
"""
from __future__ import annotations

import json
import os
import sys
import traceback

from . import (
    collectives,
    context_parallel,
    data_parallel,
    expert_parallel,
    hybrid,
    hybrid_calibrate,
    pipeline,
    tensor_parallel,
    training_step,
    zero,
)
from .common import OneLineParser, as_flags, is_printing_rank, summary, torchrun_worker, write_trace

# the command modules, in help order: lessons 1-7, then lesson 6's `simlab calibrate`
LESSONS = (collectives, data_parallel, zero, pipeline, tensor_parallel, training_step, hybrid, context_parallel,
           expert_parallel, hybrid_calibrate)


def build_parser() -> OneLineParser:
    parser = OneLineParser(prog="simlab", description=__doc__.split("\n")[0])
    parser.add_argument("--verbose", action="store_true", help="on failure, print the full traceback")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    run_parser = sub.add_parser("run", help="run a lesson's algorithm on real processes, checked against "
                                            "one process and torch's own")
    run = run_parser.add_subparsers(dest="target", metavar="what", required=True, parser_class=OneLineParser)
    for lesson in LESSONS:
        lesson.add_commands(sub, run)
    for action in (sub, run):  # each command's own parser, so its errors can name its own flags
        for p in action.choices.values():
            p.set_defaults(parser=p)
    return parser


def _flags(message: str, args) -> str:
    return as_flags(message, args.parser, getattr(args, "renames", None))


def before_work(args) -> None:
    """What a command checks before its own checks, because a mistake here costs a whole run. A command that
    starts processes (`run`, `calibrate`) refuses stray or inconsistent torchrun variables (`torchrun_worker`);
    `run hybrid` reads this machine's calibration now (its prediction uses it under gloo, after the run), so
    a broken cache is refused in one line before the run rather than failing it at the end."""
    if args.command not in ("run", "calibrate"):
        return  # plan, memory, schedule, collective, split: the same answer on any rank, RANK or not
    torchrun_worker()
    if args.command == "run" and args.target == "hybrid" and args.backend != "nccl":
        from ..sim.hardware import load_calibration
        load_calibration()


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    where = f"simlab {args.command}" + (f" {args.target}" if args.command == "run" else "")
    try:
        before_work(args)
        out = args.func(args)
        if is_printing_rank():
            out = write_trace(out, getattr(args, "trace", None))
        text = json.dumps(out, allow_nan=False) if args.json else summary(out) if getattr(args, "summary", True) else None
    except ValueError as err:  # bad input: refused before any work, in the words of the flags
        parser.exit(2, f"{where}: error: {_flags(str(err), args)}\n")
    except BrokenPipeError:
        sys.stdout = open(os.devnull, "w")
        return 0
    except KeyboardInterrupt:
        parser.exit(130, f"{where}: interrupted; every worker was stopped\n")
    except Exception as err:  # a run that failed: one line; the traceback only when asked for
        if args.verbose:
            traceback.print_exc()
        first = _flags((str(err).strip().splitlines() or [type(err).__name__])[0], args)
        parser.exit(1, f"{where}: failed: {first}" + ("\n" if args.verbose else " (--verbose for the traceback)\n"))
    if text is not None and is_printing_rank():
        try:
            print(text, flush=True)
        except BrokenPipeError:  # `simlab … | head`: the reader has all it wanted
            sys.stdout = open(os.devnull, "w")
    return 0


if __name__ == "__main__":
    sys.exit(main())
