"""`simlab plan … --emit TARGET [--out FILE]`: the evaluated plan, or the advisor's best, as a framework takes it
(`simlab.export`); and the two ways a model comes in from outside, `--model-config config.json` (Hugging Face)
and `--from-megatron-args "…"` (`simlab.export.model_config`, `simlab.export.megatron_args`).

    simlab plan --model llama3-70b --gpus 64 --gpu h100-80gb --global-batch 128 --emit megatron
    simlab plan --model-config config.json --seq 8192 --gpus 64 --global-batch 128 --emit deepspeed --out ds.json
    simlab plan --from-megatron-args "--num-layers 96 --hidden-size 12288 …" --gpus 1024 --global-batch 1536 \\
        --tp 8 --pp 16 --dp 8 --microbatch 1 --emit pipeline-csv --out schedule.csv
"""
from __future__ import annotations

import sys
from pathlib import Path

from ..export import TARGETS


def add_export_flags(p) -> None:
    p.add_argument("--emit", choices=TARGETS, default=None,
                   help="write the plan (the one given, or the search's best) as this framework takes it")
    p.add_argument("--out", metavar="FILE", default=None, help="with --emit: write it to FILE, not to the screen")


def add_import_flags(p) -> None:
    p.add_argument("--model-config", metavar="FILE", default=None,
                   help="the model from a Hugging Face config.json (read offline); --seq sets the training length")
    p.add_argument("--from-megatron-args", metavar="ARGS", default=None,
                   help='the model from Megatron-LM arguments, e.g. "--num-layers 32 --hidden-size 4096 …"')


def imported_model(args, given: dict):
    """The model named by --model-config or --from-megatron-args, or None. --seq may go with --model-config (a
    config.json gives the longest context, not the training length); Megatron's arguments hold --seq-length."""
    from ..export.megatron_args import from_megatron_args
    from ..export.model_config import from_hf_config
    sources = {"model_config": args.model_config, "from_megatron_args": args.from_megatron_args,
               "model": args.model}
    chosen = {k: v for k, v in sources.items() if v is not None}
    if not set(chosen) & {"model_config", "from_megatron_args"}:
        return None
    if len(chosen) > 1:
        raise ValueError(f"{next(iter(chosen))}={next(iter(chosen.values()))!r}: give one of --model, "
                         "--model-config and --from-megatron-args")
    megatron = args.from_megatron_args is not None
    extra = set(given) - (set() if megatron else {"seq"})
    if extra:
        name = sorted(extra)[0]
        raise ValueError(f"{name}={given[name]}: the imported model sets its shape"
                         + ("; give --seq-length inside --from-megatron-args" if megatron and name == "seq"
                            else "; only --seq (the training length) may go with --model-config"))
    if megatron:
        return from_megatron_args(args.from_megatron_args)
    return from_hf_config(args.model_config, seq=given.get("seq"))


def check_export_flags(args) -> None:
    """Before any search: --out needs --emit and a writable place."""
    if args.out is not None:
        if args.emit is None:
            raise ValueError(f"out={args.out!r}: give --emit with it (one of {', '.join(TARGETS)})")
        from .common import check_writable
        check_writable("--out", args.out)


def shows_report(args) -> bool:
    """The plan's report goes to the screen unless the export itself does (--emit without --out, so that
    `simlab plan … --emit megatron > train.sh` holds the file alone)."""
    return not args.json and not (args.emit and args.out is None)


def emit_plan(args, model, c, out: dict, fixed: dict, bucket: tuple = ()) -> dict:
    """Export what `simlab plan` evaluated (a plan the framework cannot say is refused in one line), or, after a
    search, the fastest plan the framework can say: the advisor's best when it can, else the next best it accepts,
    with why and at what cost on stderr. A plan that does not fit is exported with a warning; printed, or
    written to --out."""
    from ..export import emit
    from ..export.expressible import best_expressible
    from ..sim.hybrid import Plan
    if "config" in out:
        row, note = out, None
        plan = Plan(**row["config"], precision=args.precision)
        text = emit(args.emit, model, c, args.global_batch, plan)
    else:
        found = best_expressible(args.emit, model, c, args.global_batch, precision=args.precision,
                                 attention=args.attention, bucket=bucket, cp_comm=args.cp_comm,
                                 capacity=args.capacity, **fixed)
        row = found["best"]
        if row is None:
            why = found["overall_refused"] or "no plan fits"
            raise ValueError(f"emit={args.emit}: no plan that fits can be written for it ({why})")
        note = (None if found["overall_refused"] is None else
                f"{args.emit} cannot run the best plan ({found['overall_refused']}); exported the fastest plan it "
                f"can run, {found['slower']:.2f}× the best's step time")
        plan, text = found["plan"], found["text"]  # written once, when best_expressible tried it
    for line in ([note] if note else []) + ([] if row["fits"] else [
            "warning: this plan does not fit in the GPU's memory; exported as asked"]):
        print(f"simlab plan: {line}", file=sys.stderr)
    if not shows_report(args) and not args.json:
        c_ = row["config"]
        print(f"simlab plan: {args.emit}: tp {c_['tp']} pp {c_['pp']} dp {c_['dp']}, {row['step_seconds']:.3g} s per "
              "step (simlab plan without --emit shows the whole report)", file=sys.stderr)
    # JSON holds no comments: DeepSpeed's meanings, launcher and model-code parts are printed beside the file
    explained = None
    if args.emit == "deepspeed":
        from ..export.deepspeed import explain
        explained = explain(model, c, args.global_batch, plan)
    if args.out is not None:
        Path(args.out).write_text(text, encoding="utf-8")
        if not args.json:
            print(f"wrote {args.out} ({args.emit})" + ("\n" + explained.rstrip("\n") if explained else ""))
    elif not args.json:
        print(text, end="" if text.endswith("\n") else "\n")
        if explained:
            print(explained, end="", file=sys.stderr)
    return {"target": args.emit, "file": args.out, "text": text, "config": row["config"],
            "step_seconds": row["step_seconds"], "note": note, "explanation": explained}
