"""The `simlab` command line: rerun a lesson's scene on a workstation or under torchrun.

    simlab collective ring-allreduce --ranks 4 --size 1048576 --json   # simulate a plan
    simlab run allreduce --world-size 4 --json                         # run it on real processes
    simlab run ddp --world-size 4 --json                               # train: ours vs torch vs 1 process
    simlab schedule 1f1b --stages 4 --microbatches 8 --json            # a pipeline schedule, simulated
(pipeline and tensor-parallel commands: simlab.cli_parallel)

Every subcommand takes --json. Bad arguments are rejected with one line naming the parameter,
before any process starts.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from . import _checks, cli_parallel
from .sim.collectives import PLANS

DTYPES = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4}
STRATEGIES = ("dp", "ddp")  # `simlab run dp|ddp` trains; the other names run one collective
ZERO_RUNS = {"zero1": (1, False), "zero2": (2, False), "zero3": (3, False), "offload": (2, True)}
PARALLEL_RUNS = ("pp", "tp")  # pipeline and tensor parallel: simlab.cli_parallel
RUN_NAMES = {"allreduce": "ring-allreduce", "allgather": "ring-all-gather",
             "reducescatter": "ring-reduce-scatter", "broadcast": "broadcast",
             "naive-allreduce": "naive-allreduce"}


class OneLineParser(argparse.ArgumentParser):
    """argparse, but errors are a single line (no usage dump) — easy to read in a notebook."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def _numel(size: int, dtype: str) -> int:
    _checks.check_int("--size", size, 1)
    if size % DTYPES[dtype]:
        raise ValueError(f"--size={size}: must be a multiple of {DTYPES[dtype]} bytes ({dtype})")
    return size // DTYPES[dtype]


def cmd_collective(args) -> dict:
    from .sim.cost import optimal_bytes_per_rank
    from .sim.stepper import simulate
    from .render.text import step_text

    _checks.check_ranks("--ranks", args.ranks)
    numel = _numel(args.size, args.dtype)
    _checks.check_positive("--bandwidth", args.bandwidth)
    if args.alpha < 0:
        raise ValueError(f"--alpha={args.alpha}: must be >= 0 seconds")
    plan = PLANS[args.collective](args.ranks, numel, itemsize=DTYPES[args.dtype])
    res = simulate(plan, seed=args.seed, alpha=args.alpha, bandwidth=args.bandwidth)
    out = {
        "collective": args.collective, "plan": plan.name, "ranks": args.ranks, "size_bytes": plan.nbytes,
        "dtype": args.dtype, "chunk_sizes": list(plan.chunk_sizes), "steps": plan.num_steps,
        "bytes_sent_per_rank": list(res.steps[-1].bytes_sent),
        "bytes_received_per_rank": list(res.steps[-1].bytes_received),
        "optimal_bytes_per_rank": optimal_bytes_per_rank(plan.meta["goal"], args.ranks, plan.nbytes),
        "final_state_ok": res.final_ok,
        "cost": {"alpha_s": args.alpha, "bandwidth_Bps": args.bandwidth, "seconds": res.cost.seconds,
                 "latency_seconds": res.cost.latency_seconds,
                 "bandwidth_seconds": res.cost.bandwidth_seconds},
    }
    if not args.json:
        if args.show_steps:
            for step in res.steps:
                print(step_text(step, plan), end="\n\n")
        print(_summary(out))
    return out


def cmd_run(args) -> dict:
    if args.world_size is None:  # under torchrun, default to its world size
        args.world_size = int(os.environ.get("WORLD_SIZE", 4))
    _checks.check_int("--world-size", args.world_size, 1)
    if args.collective in STRATEGIES:
        return cmd_train(args)
    if args.collective in ZERO_RUNS:
        return cmd_zero(args)
    if args.collective in PARALLEL_RUNS:
        _checks.check_positive("--timeout", args.timeout)
        command = cli_parallel.cmd_pp if args.collective == "pp" else cli_parallel.cmd_tp
        return command(args, _is_printing_rank(), _summary)
    from .exec.compare import run_collective
    from .exec.launch import resolve_backend

    numel = _numel(args.size, "float32")
    _checks.check_positive("--timeout", args.timeout)
    try:
        backend = resolve_backend(args.backend, args.world_size)
    except ValueError as err:  # name the flag the user typed
        raise ValueError(str(err).replace("world_size=", "--world-size=").replace("backend=", "--backend=")) from None
    res = run_collective(RUN_NAMES[args.collective], args.world_size, numel, backend=backend,
                         seed=args.seed, timeout=args.timeout)
    out = {"collective": args.collective, "backend": res["backend"], "world_size": res["world_size"],
           "size_bytes": numel * 4, "max_abs_diff_vs_torch": res["max_abs_diff_vs_torch"],
           "bytes_sent_per_rank": res["bytes_sent_per_rank"], "matches_simulator": res["matches_simulator"]}
    if not args.json and _is_printing_rank():
        print(_summary(out))
    return out


def _check_training(args) -> None:
    """What every training run (dp, ddp, zero*) needs: steps, and a batch the ranks can split evenly."""
    _checks.check_int("--steps", args.steps, 1)
    _checks.check_int("--global-batch", args.global_batch, 1)
    if args.global_batch % args.world_size:
        raise ValueError(f"--global-batch={args.global_batch}: must be divisible by --world-size={args.world_size}")


def cmd_train(args) -> dict:
    """`simlab run dp|ddp`: train a few steps, compare with one process (and torch's DDP)."""
    _check_training(args)
    _checks.check_positive("--bucket-cap-mb", args.bucket_cap_mb)
    if args.collective == "dp":
        from .exec.dp import run_dp
        res = run_dp(args.world_size, steps=args.steps, global_batch=args.global_batch, seed=args.seed)
    else:
        from .exec.ddp_parity import run_ddp
        from .exec.launch import resolve_backend
        backend = resolve_backend(args.backend, args.world_size)
        res = run_ddp(args.world_size, steps=args.steps, global_batch=args.global_batch, seed=args.seed,
                      bucket_cap_mb=args.bucket_cap_mb, backend=backend, timeout=args.timeout)
    keys = ["backend", "world_size", "losses", "reference_losses", "max_abs_diff_vs_reference",
            "bytes_sent_per_rank", "max_abs_diff_vs_torch_ddp", "optimal_bytes_per_rank", "buckets",
            "hidden_seconds", "exposed_seconds"]
    out = {"strategy": args.collective, **{k: res[k] for k in keys if k in res}}
    if not args.json and _is_printing_rank():
        print(_summary(out))
    return out


def cmd_memory(args) -> dict:
    """`simlab memory`: the ZeRO paper's per-GPU memory model for one configuration."""
    from .sim.memory import comm_volume_in_psi, comm_volume_per_step, per_gpu_bytes

    if not args.params >= 1 or args.params != int(args.params):
        raise ValueError(f"--params={args.params:g}: must be a whole number of parameters >= 1")
    _checks.check_int("--gpus", args.gpus, 1)
    _checks.check_int("--zero", args.zero, 0, 3)
    if args.offload and args.zero < 2:
        raise ValueError(f"--offload: ZeRO-Offload builds on stage 2 or 3, not --zero={args.zero}")
    psi = int(args.params)
    mem = per_gpu_bytes(psi, args.gpus, args.zero, offload=args.offload, precision=args.precision)
    out = {"params": psi, "gpus": args.gpus, "zero": args.zero, "offload": args.offload,
           "precision": args.precision, "bytes_per_gpu": {k: mem[k] for k in ("params", "grads", "optimizer", "total")},
           "cpu_bytes_per_gpu": mem["cpu"], "comm_volume_per_step": comm_volume_per_step(psi, args.zero, args.gpus, args.precision),
           "comm_volume_in_psi": comm_volume_in_psi(args.zero)}
    if not args.json:
        print(_summary({**out, "total_GB": mem["total"] / 1e9}))
    return out


def cmd_zero(args) -> dict:
    """`simlab run zero1|zero2|zero3|offload`: our ZeRO vs one process, bytes measured vs the model."""
    from .exec.models import TINY_MLP
    from .exec.zero_parity import run_zero
    from .sim.memory import per_gpu_bytes

    _check_training(args)
    stage, offload = ZERO_RUNS[args.collective]
    res = run_zero(stage, args.world_size, steps=args.steps, global_batch=args.global_batch, seed=args.seed,
                   offload=offload, timeout=args.timeout)
    layers = [(a + 1) * b for a, b in zip(TINY_MLP, TINY_MLP[1:])]  # weight + bias per Linear
    predicted = per_gpu_bytes(layers, args.world_size, stage, offload=offload, precision="fp32")
    keys = ("params", "grads", "optimizer", "cpu")
    out = {"strategy": args.collective, "world_size": args.world_size, "losses": res["losses"],
           "reference_losses": res["reference_losses"], "max_abs_diff_vs_reference": res["max_abs_diff_vs_reference"],
           "max_abs_diff_vs_torch": res.get("max_abs_diff_vs_torch"),
           "measured_bytes_per_rank": [{k: m[k] for k in keys} for m in res["measured_bytes_per_rank"]],
           "predicted_bytes_per_rank": [{k: predicted[k] for k in keys}] * args.world_size}
    if not args.json and _is_printing_rank():
        print(_summary(out))
    return out


def _is_printing_rank() -> bool:
    """Under torchrun every rank runs this CLI; only rank 0 prints."""
    return os.environ.get("RANK", "0") == "0"


def _summary(out: dict) -> str:
    return "\n".join(f"{key:>24}: {value}" for key, value in out.items())


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="simlab", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    col = sub.add_parser("collective", help="simulate a collective step by step (no torch)")
    col.add_argument("collective", choices=sorted(PLANS), help="which plan")
    col.add_argument("--ranks", type=int, default=4, help="number of ranks, 1..64 (default 4)")
    col.add_argument("--size", type=int, default=1 << 20, help="buffer size in bytes (default 1 MiB)")
    col.add_argument("--dtype", choices=sorted(DTYPES), default="float32", help="element type")
    col.add_argument("--alpha", type=float, default=10e-6, help="α: latency per step, seconds")
    col.add_argument("--bandwidth", type=float, default=10e9, help="1/β: bytes per second per link")
    col.add_argument("--seed", type=int, default=0, help="seed of the integer inputs")
    col.add_argument("--show-steps", action="store_true", help="print every step as a table")
    col.add_argument("--json", action="store_true", help="print one JSON object")
    col.set_defaults(func=cmd_collective)
    run = sub.add_parser("run", help="run a collective or a data-parallel strategy on real processes")
    strategies = STRATEGIES + tuple(ZERO_RUNS) + PARALLEL_RUNS
    run.add_argument("collective", metavar="what", choices=sorted(RUN_NAMES) + list(strategies),
                     help=f"a collective ({', '.join(sorted(RUN_NAMES))}) or a strategy ({', '.join(strategies)})")
    run.add_argument("--world-size", type=int, default=None,
                     help="number of processes (default: $WORLD_SIZE under torchrun, else 4)")
    run.add_argument("--size", type=int, default=1 << 20, help="buffer size in bytes, float32 (default 1 MiB)")
    run.add_argument("--backend", default="auto", help="auto | gloo | nccl (default auto)")
    run.add_argument("--timeout", type=float, default=120.0, help="seconds before workers are killed")
    run.add_argument("--seed", type=int, default=0, help="seed of the inputs (and of the model for dp/ddp)")
    run.add_argument("--steps", type=int, default=5, help="dp/ddp: optimizer steps (default 5)")
    run.add_argument("--global-batch", type=int, default=16, help="dp, ddp, zero*, pp: samples per step (default 16)")
    run.add_argument("--bucket-cap-mb", type=float, default=0.004,
                     help="ddp: bucket size cap in MB (default 0.004: several buckets on the tiny model)")
    cli_parallel.add_run_options(run)
    run.add_argument("--json", action="store_true", help="print one JSON object")
    run.set_defaults(func=cmd_run)
    mem = sub.add_parser("memory", help="per-GPU memory of DP and ZeRO 1/2/3 (+ Offload), the paper's model")
    mem.add_argument("--params", type=float, default=7.5e9, help="model parameters Ψ (default 7.5e9)")
    mem.add_argument("--gpus", type=int, default=64, help="data-parallel GPUs N_d (default 64)")
    mem.add_argument("--zero", type=int, default=0, help="ZeRO stage 0..3 (0 = plain DP)")
    mem.add_argument("--offload", action="store_true", help="ZeRO-Offload: optimizer and step on the CPU")
    mem.add_argument("--precision", choices=["mixed", "fp32"], default="mixed", help="mixed: fp16 + fp32 Adam (K=12)")
    mem.add_argument("--json", action="store_true", help="print one JSON object")
    mem.set_defaults(func=cmd_memory)
    cli_parallel.add_commands(sub, OneLineParser)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        out = args.func(args)
    except ValueError as err:
        parser.exit(2, f"simlab {args.command}: error: {err}\n")
    if args.json and _is_printing_rank():
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
