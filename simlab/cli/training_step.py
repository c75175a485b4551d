"""Lesson 5b on the command line: `simlab step` (one training step of a model on one GPU — where its memory goes
and where its time goes, by lesson 6's model) and `simlab run step` (data parallel with gradient accumulation on
real processes, against one process on the whole batch and torch's DDP under no_sync()).

    simlab step --model gpt3-175b --gpu a100-80gb --microbatch 1 --microbatches 8 --attention eager
    simlab step --model llama2-7b --gpu h100-80gb --microbatch 2 --recompute selective --precision mixed --json
    simlab run step --world-size 2 --microbatches 4 --microbatch-size 2
"""
from __future__ import annotations

from ..i18n import _
from ..sim.hybrid import LAYER_ATTENTION, LAYER_RECOMPUTE
from .common import add_json, add_run_flags, check_run_flags, run_output
from .hybrid_flags import (
    add_gpu_flags,
    add_hardware_flag,
    add_precision_flag,
    add_shape_flags,
    cluster_from,
    model_from,
)

GB = 1e9


def cmd_step(args) -> dict:
    """`simlab step`: `sim.training_step.one_step` for the model and GPU the flags give."""
    from ..sim.training_step import one_step
    model = model_from(args)
    args.gpus = 1  # cluster_from's: one GPU, whatever a --hardware file says of nodes and networks
    gpu = cluster_from(args).gpu
    out = one_step(model, gpu, args.microbatch, args.microbatches, attention=args.attention,
                   recompute=args.recompute, precision=args.precision)
    if not args.json:
        show_step(out)
    return out


def show_step(out: dict) -> None:
    """The text form: what ran, the memory by part against the GPU's usable memory, the time by part, MFU and HFU."""
    c, mem, t = out["config"], out["memory"], out["time"]
    print(_("{model} on one {gpu}: b = {b} sequences of {s} tokens per micro-batch, m = {m} per step (global batch "
            "{B}), {attention} attention, recompute {recompute}, precision {precision}").format(
        model=c["model"], gpu=c["gpu"], m=c["microbatches"], b=c["microbatch"], s=c["seq"], B=c["global_batch"],
        attention=c["attention"], recompute=c["recompute"], precision=c["precision"]))
    print(_("memory (GB): weights {params:.3g}, gradients {grads:.3g}, fp32 master {master:.3g}, Adam m {adam_m:.3g} "
            "and v {adam_v:.3g}, activations {activations:.3g}: total {total:.3g}").format(
        **{k: mem[k] / GB for k in ("params", "grads", "master", "adam_m", "adam_v", "activations", "total")}))
    print(_("the GPU (GB): {capacity:.3g} as torch reports it, less CUDA context {cuda_context:.3g}, NCCL {nccl:.3g} "
            "and fragmentation {fragmentation:.3g}: {usable:.3g} usable").format(
        **{k: mem[k] / GB for k in ("capacity", "cuda_context", "nccl", "fragmentation", "usable")}))
    print(_("fits, {free:.3g} GB free").format(free=mem["free"] / GB) if mem["fits"] else
          _("DOES NOT FIT: {over:.3g} GB over").format(over=-mem["free"] / GB))
    print(_("time (s): forward {forward:.3g}, backward {backward:.3g}, recompute {recompute:.3g}, output layer "
            "{output_layer:.3g}, optimizer {optimizer:.3g}: step {step_seconds:.3g}; MFU {mfu:.1%}, HFU {hfu:.1%}").format(
        **t, mfu=out["mfu"], hfu=out["hfu"]))


def cmd_run_step(args) -> dict:
    """`simlab run step`: `parity.training_step.run_training_step` with the flags given."""
    from ..parity.training_step import run_training_step
    check_run_flags(args)
    res = run_training_step(world_size=args.world_size, microbatches=args.microbatches,
                            microbatch_size=args.microbatch_size, steps=args.steps, seed=args.seed,
                            backend=args.backend, timeout=args.timeout)
    head = {"global_batch": res["global_batch"], "microbatches": res["microbatches"],
            "microbatch_size": res["microbatch_size"]}
    return run_output(head, res, "losses", "reference_losses", "torch_losses", "max_abs_grad_diff_vs_reference",
                      "allreduces_per_step", "bytes_per_rank_closed_form", "bytes_sent_every_microbatch",
                      "bytes_every_microbatch_closed_form", "max_abs_diff_every_microbatch")


def add_commands(sub, run) -> None:
    p = sub.add_parser("step", help="one training step on one GPU: memory (states, activations by tensor) and "
                                    "time (forward, backward, recompute, optimizer), MFU")
    add_shape_flags(p)
    p.add_argument("--microbatch", type=int, default=1, help="sequences per micro-batch b (default 1)")
    p.add_argument("--microbatches", type=int, default=1, help="micro-batches accumulated per step m (default 1)")
    p.add_argument("--attention", choices=LAYER_ATTENTION, default="flash", help="attention kernel (default flash)")
    p.add_argument("--recompute", choices=LAYER_RECOMPUTE, default="none",
                   help="activation recomputation (default none)")
    add_precision_flag(p)
    add_gpu_flags(p)
    add_hardware_flag(p)
    add_json(p)
    p.set_defaults(func=cmd_step, summary=False)
    r = run.add_parser("step", help="data parallel with gradient accumulation on real processes: one all-reduce "
                                    "per step, vs one process on the whole batch and torch's DDP (no_sync)")
    r.add_argument("--microbatches", type=int, default=4, help="micro-batches per rank and step m (default 4)")
    r.add_argument("--microbatch-size", type=int, default=2, help="sequences per micro-batch b (default 2)")
    r.add_argument("--steps", type=int, default=2, help="Adam steps (default 2, at most 16)")
    add_run_flags(r)
    r.set_defaults(func=cmd_run_step, target="step")
