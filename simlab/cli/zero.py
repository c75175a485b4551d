"""Lesson 3 on the command line: `simlab memory` (the ZeRO paper's per-GPU memory model) and
`simlab run zero1|zero2|zero3|offload` (our ZeRO on real processes; bytes measured against the model).

    simlab memory --params 7.5e9 --gpus 64 --zero 3 --json
    simlab run zero3 --world-size 4 --json
"""
from __future__ import annotations

import math

from .. import _checks
from . import hybrid
from .common import (
    add_json,
    add_run_flags,
    add_training_flags,
    check_run_flags,
    check_training_flags,
    run_output,
    summary,
)
from .hybrid_flags import add_model_flags

ZERO_RUNS = {"zero1": (1, False), "zero2": (2, False), "zero3": (3, False), "offload": (2, True)}


def cmd_memory(args) -> dict:
    """`simlab memory`: the ZeRO paper's per-GPU memory model for one configuration."""
    from ..sim.memory import check_offload, comm_volume_in_psi, comm_volume_per_step, per_gpu_bytes

    transformer = (args.model, args.layers, args.model_config, args.from_megatron_args)
    if any(x is not None for x in transformer):  # a transformer and a 3-D plan: lesson 6's model
        if args.params is not None or args.gpus is not None:
            given = "params" if args.params is not None else "gpus"
            raise ValueError(f"{given}={getattr(args, given)}: with a transformer (--model, --layers, --model-config, "
                             "--from-megatron-args) the parameters and GPUs "
                             f"follow from the model and --tp --pp --dp")
        out = hybrid.cmd_transformer_memory(args)
        if not args.json:
            print(summary({**out, "total_GB": out["bytes_per_gpu"]["total"] / 1e9}))
        return out
    args.params = 7.5e9 if args.params is None else args.params
    args.gpus = 64 if args.gpus is None else args.gpus
    if not (math.isfinite(args.params) and args.params >= 1 and args.params == int(args.params)):
        raise ValueError(f"params={args.params:g}: must be a whole number of parameters >= 1")
    _checks.check_int("gpus", args.gpus, 1)
    check_offload(args.offload, _checks.check_int("zero", args.zero, 0, 3))
    psi = int(args.params)
    mem = per_gpu_bytes(psi, args.gpus, args.zero, offload=args.offload, precision=args.precision)
    out = {"params": psi, "gpus": args.gpus, "zero": args.zero, "offload": args.offload, "precision": args.precision,
           "bytes_per_gpu": {k: mem[k] for k in ("params", "grads", "optimizer", "total")},
           "cpu_bytes_per_gpu": mem["cpu"],
           "comm_volume_per_step": comm_volume_per_step(psi, args.zero, args.gpus, args.precision),
           "comm_volume_in_psi": comm_volume_in_psi(args.zero)}
    if not args.json:
        print(summary({**out, "total_GB": mem["total"] / 1e9}))
    return out


def cmd_zero(args) -> dict:
    """`simlab run zero1|zero2|zero3|offload`: our ZeRO vs one process and torch's, bytes measured vs the model."""
    from ..parity.zero import run_zero

    check_run_flags(args)
    check_training_flags(args)
    stage, offload = ZERO_RUNS[args.target]
    res = run_zero(stage, args.world_size, steps=args.steps, global_batch=args.global_batch, seed=args.seed,
                   offload=offload, backend=args.backend, timeout=args.timeout)
    return run_output({"strategy": args.target}, res, "losses", "reference_losses", "measured_bytes_per_rank",
                      "predicted_bytes_per_rank", "predicted_bytes_sent_per_rank")


def add_commands(sub, run) -> None:
    mem = sub.add_parser("memory", help="per-GPU memory of DP and ZeRO 1/2/3 (+ Offload), the paper's model")
    mem.add_argument("--params", type=float, default=None, help="model parameters Ψ (default 7.5e9)")
    mem.add_argument("--gpus", type=int, default=None, help="data-parallel GPUs N_d (default 64)")
    mem.add_argument("--zero", type=int, default=0, help="ZeRO stage 0..3 (0 = plain DP)")
    mem.add_argument("--offload", action="store_true", help="ZeRO-Offload: gradients, optimizer states and the step on the CPU")
    mem.add_argument("--precision", choices=["mixed", "fp32", "mixed-fp32-grads"], default="mixed",
                     help="bytes per param: mixed 2+2+12 (K=12), fp32 4+4+8, mixed-fp32-grads 2+4+12 (Megatron)")
    add_model_flags(mem, plan_defaults=True)  # a transformer and a 3-D plan instead of --params
    add_json(mem)
    mem.set_defaults(func=cmd_memory, summary=False, renames={"stage": "--zero"})
    for name, (stage, offload) in ZERO_RUNS.items():
        what = f"ZeRO-{stage}" + (" + Offload" if offload else "")
        p = run.add_parser(name, help=f"our {what} on real processes vs one process and torch's")
        add_training_flags(p)
        add_run_flags(p)
        p.set_defaults(func=cmd_zero, target=name)
