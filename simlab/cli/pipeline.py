"""Lesson 4 on the command line: `simlab schedule` (a schedule as per-rank action lists, simulated, no torch)
and `simlab run pp` (the same lists on real processes, against one process and torch's pipelining).

    simlab schedule 1f1b --stages 4 --microbatches 8 --json
    simlab run pp --schedule 1f1b --world-size 4 --microbatches 8 --json

Both report the bubble two ways: `bubble_fraction` = idle / (ranks × makespan), this course's (p-1)/(m+p-1),
and `bubble_ratio` = idle / busy, the (p-1)/m of Megatron-LM's paper and the Zero Bubble paper.
"""
from __future__ import annotations

from .._checks import check_int
from ..i18n import _
from ..sim.pipeline_schedules import SCHEDULES
from .common import add_json, add_run_flags, add_training_flags, check_memory, check_run_flags, run_output

NAMES = tuple(SCHEDULES)  # naive, gpipe, 1f1b, interleaved, zero-bubble


def _default_microbatches(args, name: str) -> int:
    if args.microbatches is None:  # naive runs the whole batch at once
        args.microbatches = 1 if name == "naive" else 8
    return args.microbatches


MAX_ACTIONS = 250_000  # the largest schedule printed or simulated here (~10 MB of --json)


def check_size(args, m: int) -> None:
    """Before building anything, a schedule small enough to print (32 million actions for --stages 4000
    --microbatches 4000 took 80 s and then ran out of memory). The times are the simulator's to check."""
    for name in ("stages", "chunks"):
        check_int(name, getattr(args, name), 1)
    check_int("microbatches", m, 1)
    per = 3 if args.name == "zero-bubble" else 2  # F and B (and W) for every stage and micro-batch
    actions = per * args.stages * m * args.chunks
    if actions > MAX_ACTIONS:
        raise ValueError(f"stages={args.stages} microbatches={m} chunks={args.chunks}: {actions:,} actions; at "
                         f"most {MAX_ACTIONS:,} are simulated and printed here")


def cmd_schedule(args) -> dict:
    """`simlab schedule NAME`: the per-rank action lists, simulated with t_F, t_B (and t_W)."""
    from ..render.pipeline import gantt_text
    from ..sim import pipeline, pipeline_schedules

    m = _default_microbatches(args, args.name)
    check_size(args, m)
    plan = pipeline_schedules.make_schedule(args.name, args.stages, m, args.chunks)
    trace = pipeline.simulate(plan, t_f=args.t_f, t_b=args.t_b, t_w=args.t_w)
    out = {"schedule": args.name, "stages": args.stages, "microbatches": m, "chunks": args.chunks,
           "t_f": args.t_f, "t_b": args.t_b, "t_w": args.t_w, "ranks": [[str(a) for a in acts] for acts in plan],
           "bubble_fraction": pipeline.bubble_fraction(trace, args.stages),  # idle / total (this course)
           "bubble_ratio": pipeline.bubble_ratio(trace, args.stages),  # idle / ideal (Megatron, Zero Bubble)
           "peak_activations": pipeline.peak_activations(plan), "makespan": pipeline.makespan(trace)}
    if not args.json:
        print(pipeline_schedules.format_grid(plan))
        print(_("makespan {makespan:g}, bubble fraction {fraction:.4f} (idle / total; ratio idle / ideal {ratio:.4f}), "
                "peak activations per rank {peaks}").format(makespan=out["makespan"], fraction=out["bubble_fraction"],
                                                           ratio=out["bubble_ratio"], peaks=out["peak_activations"]))
        if args.gantt:
            print(gantt_text(trace, args.stages))
    return out


def cmd_pp(args) -> dict:
    """`simlab run pp`: a schedule on real processes, checked against one process, torch's pipelining and
    the simulator. Two steps: the bubble is measured on the second, so it is not the first step's warm-up."""
    from ..parity.pipeline import run_pipeline

    check_run_flags(args)
    check_int("global_batch", args.global_batch, 1)
    # every rank and the reference hold the batch (x, y: hidden 16 each) and one activation per stage for backward
    check_memory(f"--global-batch={args.global_batch}", (args.world_size + 1) * 4 * args.global_batch * 16
                 * (2 + 2 * args.world_size), "the batch and its activations")
    if args.stages is not None and args.world_size != args.stages:
        raise ValueError(f"world_size={args.world_size}: must equal stages={args.stages} (one stage per rank)")
    m = _default_microbatches(args, args.schedule)
    res = run_pipeline(args.schedule, world_size=args.world_size, microbatches=m, chunks=args.chunks, steps=2,
                       seed=args.seed, global_batch=args.global_batch, backend=args.backend, timeout=args.timeout)
    return run_output({"schedule": res["schedule_name"]}, res, "microbatches", "chunks", "loss", "reference_loss",
                      "measured_bubble_fraction", "simulated_bubble_fraction", "measured_bubble_ratio",
                      "simulated_bubble_ratio") | {"ranks": res["schedule"]}


def add_commands(sub, run) -> None:
    sch = sub.add_parser("schedule", help="a pipeline schedule as per-rank action lists, simulated (no torch)")
    sch.add_argument("name", choices=NAMES, help="which schedule")
    sch.add_argument("--stages", type=int, default=4, help="pipeline stages p = ranks (default 4)")
    sch.add_argument("--microbatches", type=int, default=None, help="micro-batches m (default 8; naive: 1)")
    sch.add_argument("--chunks", type=int, default=1, help="interleaved: model chunks per rank v (default 1)")
    sch.add_argument("--t-f", type=float, default=1.0, help="forward time of one stage (default 1)")
    sch.add_argument("--t-b", type=float, default=2.0, help="full backward time of one stage (default 2)")
    sch.add_argument("--t-w", type=float, default=None, help="weight-gradient part of t_b (default t_b/2)")
    sch.add_argument("--gantt", action="store_true", help="also print the simulated timeline as text")
    add_json(sch)
    sch.set_defaults(func=cmd_schedule, summary=False)
    pp = run.add_parser("pp", help="a pipeline schedule on real processes vs one process and torch's pipelining")
    pp.add_argument("--schedule", choices=NAMES, default="1f1b", help="which schedule (default 1f1b)")
    pp.add_argument("--microbatches", type=int, default=None, help="micro-batches m (default 8; naive: 1)")
    pp.add_argument("--chunks", type=int, default=1, help="interleaved: model chunks per rank v (default 1)")
    pp.add_argument("--stages", type=int, default=None, help="stages, one per rank (must equal --world-size)")
    add_training_flags(pp, steps=False)
    add_run_flags(pp)
    pp.set_defaults(func=cmd_pp)
