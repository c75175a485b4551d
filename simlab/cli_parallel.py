"""`simlab schedule`, `simlab split`, `simlab run pp` and `simlab run tp`: lessons 4 and 5 on the command line.

    simlab schedule 1f1b --stages 4 --microbatches 8 --json        # a schedule as data, simulated
    simlab run pp --schedule 1f1b --world-size 4 --microbatches 8   # the same list on real processes
    simlab split column --ranks 4 --shape 8x12                      # who holds which block of a weight
    simlab run tp --world-size 4 --json                             # Megatron MLP + attention, real

`simlab.cli` builds the parser and calls `add_commands`; checks run before any process starts.
"""
from __future__ import annotations

import re

from . import _checks
from .sim.schedules import SCHEDULES

SCHEDULE_NAMES = tuple(SCHEDULES)  # naive, gpipe, 1f1b, interleaved, zero-bubble


def as_flags(err: ValueError) -> ValueError:
    """The engines name their parameters ("microbatches=3: …"); the CLI user typed flags."""
    text = re.sub(r"\b(stages|microbatches|chunks|t_f|t_b|t_w|world_size|global_batch|ranks|hidden|ffn|heads|block)=",
                  lambda m: "--" + m[1].replace("_", "-") + "=", str(err))
    return ValueError(text)


def _schedule_out(name: str, stages: int, microbatches: int, chunks: int, t_f: float, t_b: float,
                  t_w: float | None) -> tuple[dict, list]:
    from .sim import pipeline, schedules
    try:
        plan = schedules.make_schedule(name, stages, microbatches, chunks)
        trace = pipeline.simulate(plan, t_f=t_f, t_b=t_b, t_w=t_w)
    except ValueError as err:
        raise as_flags(err) from None
    out = {"schedule": name, "stages": stages, "microbatches": microbatches, "chunks": chunks,
           "t_f": t_f, "t_b": t_b, "t_w": t_w, "ranks": [[str(a) for a in acts] for acts in plan],
           "bubble_fraction": pipeline.bubble_fraction(trace, stages),
           "peak_activations": pipeline.peak_activations(plan), "makespan": pipeline.makespan(trace)}
    return out, plan


def cmd_schedule(args) -> dict:
    """`simlab schedule NAME`: the per-rank action lists, simulated with t_F, t_B (and t_W)."""
    from .sim.schedules import format_grid
    if args.microbatches is None:
        args.microbatches = 1 if args.name == "naive" else 8
    out, plan = _schedule_out(args.name, args.stages, args.microbatches, args.chunks, args.t_f, args.t_b, args.t_w)
    if not args.json:
        print(format_grid(plan))
        print(f"makespan {out['makespan']:g}, bubble fraction {out['bubble_fraction']:.4f}, "
              f"peak activations per rank {out['peak_activations']}")
        if args.gantt:
            from .render.pipeline_view import gantt_text
            from .sim.pipeline import simulate
            print(gantt_text(simulate(plan, t_f=args.t_f, t_b=args.t_b, t_w=args.t_w), args.stages))
    return out


def cmd_pp(args, is_printing_rank: bool, summary) -> dict:
    """`simlab run pp`: a schedule on real processes, checked against one process and the simulator.
    Two steps: the bubble is measured on the second, so it is not the first step's warm-up."""
    from .exec.pipeline_parity import run_pipeline
    if args.world_size != args.stages and args.stages is not None:
        raise ValueError(f"--world-size={args.world_size}: must equal --stages={args.stages} (one stage per rank)")
    if args.microbatches is None:  # as `simlab schedule`: naive runs the whole batch at once
        args.microbatches = 1 if args.schedule == "naive" else 8
    try:
        res = run_pipeline(args.schedule, world_size=args.world_size, microbatches=args.microbatches,
                           chunks=args.chunks, steps=2, seed=args.seed, global_batch=args.global_batch,
                           timeout=args.timeout)
    except ValueError as err:
        raise as_flags(err) from None
    keys = ["world_size", "microbatches", "chunks", "loss", "reference_loss",
            "max_abs_diff_vs_reference", "measured_bubble_fraction", "simulated_bubble_fraction"]
    out = {"schedule": res["schedule_name"], **{k: res[k] for k in keys if k in res}, "ranks": res["schedule"]}
    if not args.json and is_printing_rank:
        print(summary(out))
    return out


def parse_shape(text: str) -> tuple[int, int]:
    """'8x12' → (8, 12); a zero or malformed dimension is a one-line error."""
    match = re.fullmatch(r"\s*(\d+)\s*[xX×]\s*(\d+)\s*", str(text))
    if not match:
        raise ValueError(f"--shape={text!r}: expected ROWSxCOLS, e.g. 8x12")
    rows, cols = int(match[1]), int(match[2])
    if rows == 0 or cols == 0:
        raise ValueError(f"--shape={text}: dimensions must be >= 1")
    return rows, cols


def cmd_split(args) -> dict:
    """`simlab split column|row`: each rank's block of a weight, its input and how outputs combine."""
    from .sim.tensor_parallel import shard_plan
    _checks.check_ranks("--ranks", args.ranks)
    try:
        plan = shard_plan(args.kind, args.ranks, parse_shape(args.shape))
    except ValueError as err:
        raise as_flags(err) from None
    if not args.json:
        print(plan.to_text())
    return plan.to_dict()


def cmd_tp(args, is_printing_rank: bool, summary) -> dict:
    """`simlab run tp`: Megatron MLP and attention split over ranks, vs the unsplit modules."""
    from .exec.tensor_parallel_parity import run_tp
    try:
        res = run_tp(world_size=args.world_size, block=args.block, hidden=args.hidden, heads=args.heads,
                     ffn=args.ffn, seed=args.seed, timeout=args.timeout)
    except ValueError as err:
        raise as_flags(err) from None
    out = {k: v for k, v in res.items() if not k.startswith("_") and k not in ("trace",)}
    if not args.json and is_printing_rank:
        print(summary(out))
    return out


def add_commands(sub, parser_class) -> None:
    """Register `schedule` and `split` (`run pp|tp` options are added by `add_run_options`)."""
    sch = sub.add_parser("schedule", help="a pipeline schedule as per-rank action lists, simulated (no torch)")
    sch.add_argument("name", choices=SCHEDULE_NAMES, help="which schedule")
    sch.add_argument("--stages", type=int, default=4, help="pipeline stages p = ranks (default 4)")
    sch.add_argument("--microbatches", type=int, default=None, help="micro-batches m (default 8; naive: 1)")
    sch.add_argument("--chunks", type=int, default=1, help="interleaved: model chunks per rank v (default 1)")
    sch.add_argument("--t-f", type=float, default=1.0, help="forward time of one stage (default 1)")
    sch.add_argument("--t-b", type=float, default=2.0, help="full backward time of one stage (default 2)")
    sch.add_argument("--t-w", type=float, default=None, help="weight-gradient part of t_b (default t_b/2)")
    sch.add_argument("--gantt", action="store_true", help="also print the simulated timeline as text")
    sch.add_argument("--json", action="store_true", help="print one JSON object")
    sch.set_defaults(func=cmd_schedule)
    spl = sub.add_parser("split", help="tensor-parallel shard plan of one weight (no torch)")
    spl.add_argument("kind", choices=["column", "row"], help="split the weight's columns or its rows")
    spl.add_argument("--ranks", type=int, default=4, help="tensor-parallel size (default 4)")
    spl.add_argument("--shape", default="8x12", help="weight shape ROWSxCOLS, i.e. in x out (default 8x12)")
    spl.add_argument("--json", action="store_true", help="print one JSON object")
    spl.set_defaults(func=cmd_split)


def add_run_options(run) -> None:
    run.add_argument("--schedule", choices=SCHEDULE_NAMES, default="1f1b", help="pp: which schedule")
    run.add_argument("--microbatches", type=int, default=None, help="pp: micro-batches (default 8; naive: 1)")
    run.add_argument("--chunks", type=int, default=1, help="pp: interleaved model chunks per rank")
    run.add_argument("--stages", type=int, default=None, help="pp: stages (must equal --world-size)")
    run.add_argument("--block", choices=["mlp", "attention"], default="mlp", help="tp: which block to split")
    run.add_argument("--hidden", type=int, default=8, help="tp: hidden size h (default 8)")
    run.add_argument("--ffn", type=int, default=16, help="tp: MLP inner size, divisible by --world-size (default 16)")
    run.add_argument("--heads", type=int, default=4, help="tp: attention heads, divisible by --world-size (default 4)")
