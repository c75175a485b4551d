"""Lesson 6 on the command line: `simlab plan` (evaluate one 3-D plan, or search them all with the advisor),
`simlab run hybrid` (a 3-D run on real processes; `run 3d`, its first name, still works) and the transformer
form of `simlab memory` (the most loaded GPU's bytes for any plan).

    simlab plan --model gpt3-175b --gpus 1024 --gpus-per-node 8 --gpu a100-80gb --global-batch 1536
    simlab plan --model megatron-1t --gpus 512 --global-batch 512 --tp 8 --pp 64 --dp 1 --recompute full
    simlab plan --model llama3-70b --gpus 64 --gpu h100-80gb --global-batch 128 --emit megatron --out train.sh
    simlab plan --model llama3-8b --seq 131072 --gpus 8 --gpu h100-80gb --global-batch 8
    simlab plan --model mixtral-8x7b --gpus 64 --gpu h100-80gb --global-batch 256 --tp 1 --pp 1 --dp 64 --ep 8
    simlab memory --model gpt3-175b --tp 8 --pp 8 --microbatch 1 --recompute selective --sequence-parallel
"""
from __future__ import annotations

from .. import _checks
from ..sim.hybrid import CP_COMMS, check_plan
from .common import add_json
from .hybrid_export import add_export_flags, check_export_flags, emit_plan, shows_report
from .hybrid_flags import (
    KNOBS,
    add_machine_flags,
    add_model_flags,
    add_precision_flag,
    bucket_from,
    cluster_from,
    model_from,
    plan_from,
)


def cmd_transformer_memory(args) -> dict:
    """`simlab memory --layers … | --model …`: bytes on the most loaded GPU for one plan."""
    from ..sim.hybrid_memory import per_gpu
    model = model_from(args)
    plan = plan_from(args, zero=args.zero)
    batch = args.global_batch if args.global_batch is not None else plan.dp * plan.microbatch * plan.pp
    check_plan(model, plan, plan.gpus, batch)
    mem = per_gpu(model, plan, batch)
    keys = ("params", "grads", "optimizer", "activations", "total")
    return {"model": model.name, "params": model.params, "config": plan.to_dict(), "precision": plan.precision,
            "global_batch": batch, "bytes_per_gpu": {k: mem[k] for k in keys}, "cpu_bytes_per_gpu": mem["cpu"]}


def cmd_plan(args) -> dict:
    """`simlab plan`: one plan when --tp, --pp and --dp are all given, else the advisor's search."""
    from ..sim.advisor import evaluate_plan, search
    check_export_flags(args)
    model = model_from(args)
    c = cluster_from(args)
    if args.global_batch is None:
        raise ValueError("global_batch=None: required, the sequences in one training step")
    _checks.check_int("global_batch", args.global_batch, 1)
    fixed = {name: getattr(args, name) for name in KNOBS if getattr(args, name) is not None}  # 0 is a value
    if all(name in fixed for name in ("tp", "pp", "dp")):
        plan = plan_from(args, microbatch=1, chunks=1, schedule="1f1b", zero=0, offload=False,
                         sequence_parallel=False, recompute="none", shard=0, cp=1, ep=1)
        out = evaluate_plan(model, c, args.global_batch, plan)
        if shows_report(args):
            show_plan(out)
        return out | ({"export": emit_plan(args, model, c, out, fixed, bucket_from(args.bucket))} if args.emit else {})
    if fixed.get("tp") and model.heads % fixed["tp"]:
        raise ValueError(f"tp={fixed['tp']}: must divide heads={model.heads}")
    if "stage_layers" in fixed:
        raise ValueError(f"stage_layers={fixed['stage_layers']}: give it with --tp, --pp and --dp (one plan); "
                         "the search tries the even split and one layer fewer on the end stages")
    found = search(model, c, args.global_batch, precision=args.precision, attention=args.attention,
                   overlap=args.overlap, bucket=bucket_from(args.bucket), cp_comm=args.cp_comm,
                   capacity=args.capacity, loss=args.loss, **fixed)
    out = {"best": found["best"], "candidates": found["candidates"], "rejected": found["rejected"],
           "explanation": found["explanation"], "ties": found["ties"], "notes": found["notes"],
           "plans_evaluated": found["plans"]}
    if shows_report(args):
        show_plan(out)
    return out | ({"export": emit_plan(args, model, c, out, fixed, bucket_from(args.bucket))} if args.emit else {})


def show_plan(out: dict) -> None:
    """The text form: the plan(s) — ZeRO's shard group if HSDP, the stage split if uneven —, one plan's exposed
    and hidden time, the explanation with its ties, and what was rejected."""
    rows = [out] if "config" in out else out["candidates"]
    for r in rows:
        c = r["config"]
        print(f"tp {c['tp']:>2} pp {c['pp']:>3} dp {c['dp']:>4} b {c['microbatch']:>2} {c['schedule']}"
              f"{'×' + str(c['chunks']) if c['chunks'] > 1 else ''}"
              f"{' stages ' + ','.join(map(str, c['stage_layers'])) if c['stage_layers'] else ''} zero {c['zero']}"
              f"{'/' + str(c['shard']) if c['shard'] else ''}{' +offload' if c['offload'] else ''}"
              f"{' +SP' if c['sequence_parallel'] else ''}{_lesson7(c)} recompute {c['recompute']:<9} "
              f"{r['bytes_per_gpu']['total'] / 1e9:6.1f} GB {'fits' if r['fits'] else 'DOES NOT FIT'}  "
              f"{r['step_seconds']:.3g} s/step  {r['tokens_per_second']:.3g} tokens/s  MFU {r['mfu']:.0%}")
    if "config" in out:
        total = out["step_seconds"]
        print("exposed: " + ", ".join(f"{k} {v:.3g} s" for k, v in out["breakdown"].items() if v > 0.001 * total)
              + "; hidden under compute: " + ", ".join(f"{k} {v:.3g} s" for k, v in out["hidden"].items()))
    from ..sim.advisor_explain import tie_line
    for line in out.get("explanation", []) + ([tie_line(out["ties"])] if out.get("ties") else []) + out.get("notes", []):
        print(line)
    for reason, n in out.get("rejected", {}).items():
        print(f"rejected {n}: {reason}")


def _lesson7(config: dict) -> str:
    """A plan's context and expert parallelism, where it has them: " cp 4 (ring)", " ep 8 capacity 1.25"."""
    cp = f" cp {config['cp']} ({config['cp_comm']})" if config.get("cp", 1) > 1 else ""
    ep = f" ep {config['ep']}" if config.get("ep", 1) > 1 else ""
    return cp + ep + (f" capacity {config['capacity']:g}" if config.get("capacity") else "")


def add_commands(sub, run) -> None:
    pl = sub.add_parser("plan", help="a 3-D parallel plan: memory, time and MFU — or the best of all of them")
    add_model_flags(pl, plan_defaults=False)
    pl.add_argument("--offload", action="store_true", default=None, help="ZeRO-Offload (needs --zero 2|3)")
    pl.add_argument("--zero", type=int, default=None, help="ZeRO stage over the DP group (default: search)")
    add_precision_flag(pl)
    add_machine_flags(pl)
    add_export_flags(pl)
    add_json(pl)
    pl.set_defaults(func=cmd_plan, summary=False)
    add_run_hybrid(run)


def cmd_run_hybrid(args) -> dict:
    """`simlab run hybrid`: TP × DP × PP (+ ZeRO-1; × CP with --cp) on real processes vs one process, bytes and
    memory vs the model, the step time vs its prediction. The run is described and checked once (`sim.hybrid_run`); this
    command adds only what a command line needs: torchrun's world size, a ceiling on steps, a writable
    --trace, room in this machine's memory, a warning when the processes outnumber the cores."""
    import os
    import sys

    from ..parity.hybrid import backend_for, run_spec
    from ..sim.hybrid_run import HybridRun
    from .common import MAX_STEPS, check_memory, check_writable, run_output, torchrun_world_size
    if args.world_size is None:  # torchrun's; else the grid fixes it (no default of 4 here)
        args.world_size = torchrun_world_size(default=None)
    _checks.check_int("steps", args.steps, 1, MAX_STEPS)
    spec = HybridRun.build(tp=args.tp, dp=args.dp, pp=args.pp, cp=args.cp, cp_comm=args.cp_comm, zero=args.zero,
                           schedule=args.schedule,
                           chunks=args.chunks, microbatches=args.microbatches, layers=args.layers,
                           hidden=args.hidden, heads=args.heads, steps=args.steps, seed=args.seed,
                           world_size=args.world_size, backend=args.backend, timeout=args.timeout)
    if args.trace is not None:
        check_writable("--trace", args.trace)
    backend = backend_for(spec)  # can it run here: the last refusal, before anything is printed
    m = spec.model
    check_memory(f"--hidden={m.hidden} --layers={m.layers} --microbatches={spec.microbatches}",
                 spec.machine_bytes(), "the GPT and its batch")
    if spec.world_size > (os.cpu_count() or 1):
        print(f"simlab run hybrid: warning: {spec.world_size} processes on {os.cpu_count()} cores take turns; "
              "the run is correct but its times stretch", file=sys.stderr)
    res = run_spec(spec, backend)
    return run_output({"config": res["config"]}, res, "losses", "reference_losses", "groups",
                      "predicted_bytes_per_rank", "bytes_sent_per_group", "predicted_bytes_per_group",
                      "measured_memory_per_rank", "predicted_memory_per_rank", "measured_step_seconds",
                      "predicted_step_seconds")


def add_run_hybrid(run) -> None:
    from .common import add_run_flags
    p = run.add_parser("hybrid", aliases=["3d"],  # "3d": the target's first name, kept for the commands in print
                       help="TP × DP × PP (+ ZeRO-1, × CP) on real processes: a small GPT vs one process")
    for name in ("tp", "dp", "pp"):  # Megatron's order
        p.add_argument(f"--{name}", type=int, default=1, help=f"{name} size (default 1)")
    p.add_argument("--cp", type=int, default=1, help="context-parallel size: each sequence split over cp ranks "
                   "(lesson 7; default 1)")
    p.add_argument("--cp-comm", choices=CP_COMMS, default="ring", help="how the CP ranks exchange keys and values "
                   "(default ring)")
    p.add_argument("--zero", type=int, default=0, help="0 or 1: ZeRO-1 shards Adam's state over the DP group")
    p.add_argument("--schedule", choices=("1f1b", "interleaved"), default="1f1b", help="pipeline schedule")
    p.add_argument("--chunks", type=int, default=None, help="interleaved: chunks per rank (default 2)")
    p.add_argument("--microbatches", type=int, default=None, help="per DP replica (default 2·pp)")
    p.add_argument("--steps", type=int, default=3, help="Adam steps (default 3, at most 8: parity holds to 1e-5)")
    for name, what in (("layers", "transformer layers (default 2·pp·chunks)"),
                       ("hidden", "hidden size (default 4·heads)"), ("heads", "attention heads (default 2·tp)")):
        p.add_argument(f"--{name}", type=int, default=None, help=what)
    add_run_flags(p)
    p.set_defaults(func=cmd_run_hybrid, target="hybrid", renames={"world_size": "--world-size"})
