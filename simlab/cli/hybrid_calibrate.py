"""Lesson 6 on the command line: `simlab calibrate` measures this machine (matmul FLOP/s, element-wise bytes/s,
the fixed cost of one operation, our ring's α and β) with N processes at once, and saves it where
`simlab.sim.hardware.calibrated_gpu` — and so `simlab plan --gpu cpu-this-machine` — finds it.

    simlab calibrate --world-size 4 --json
    SIMLAB_CALIBRATION=/tmp/calibration.json simlab calibrate --world-size 2
"""
from __future__ import annotations

import os
import sys

from .. import _checks
from .common import MAX_PROCESSES, add_json, check_memory, is_printing_rank, torchrun_world_size


def cmd_calibrate(args) -> dict:
    """`simlab calibrate`: measure (`exec.hybrid_calibrate.measure`), save (`sim.hardware.save_calibration`).
    Every refusal comes first, as for every `run`: the world size (at most `MAX_PROCESSES` on one machine), the
    memory the measuring processes need, and a cache the result could not be saved to."""
    from ..exec.hybrid_calibrate import host_bytes_per_rank, measure
    from ..exec.launch import resolve_backend
    from ..sim.hardware import save_calibration

    if args.world_size is None:  # under torchrun, its world size
        args.world_size = torchrun_world_size(default=4)
    _checks.check_int("world_size", args.world_size, 2, MAX_PROCESSES)
    _checks.check_int("repeats", args.repeats, 1, 1000)  # each is a 0.1 s window per op: 1000 is minutes
    _checks.check_positive("timeout", args.timeout)
    backend = resolve_backend(args.backend, args.world_size)
    if backend == "gloo":  # under NCCL the tensors live on each rank's own GPU
        check_memory(f"--world-size={args.world_size}", args.world_size * host_bytes_per_rank(),
                     f"{args.world_size} measuring processes")
    if is_printing_rank():  # the rank that saves
        check_cache_writable()
    cpus = os.cpu_count() or 1
    if backend == "gloo" and args.world_size > cpus and is_printing_rank():
        print(f"simlab calibrate: warning: --world-size={args.world_size} processes share {cpus} cores: each "
              f"measures its share, as a run of that size would get", file=sys.stderr, flush=True)
    out = measure(args.world_size, backend=backend, repeats=args.repeats, timeout=args.timeout)
    saved = save_calibration(args.world_size, out) if is_printing_rank() else None  # under torchrun: rank 0
    out = out | {"saved_to": str(saved) if saved is not None else None}
    if not args.json and is_printing_rank():
        show(out)
    return out


def check_cache_writable() -> None:
    """Refuse, before minutes of measuring, a cache path the result could not be saved to: a symbolic link, a
    folder, a folder without write permission. A cache that is there but broken is no reason: saving mends it."""
    from ..sim.hardware import calibration_path
    from ..sim.shared_files import check_target
    path = calibration_path()
    what = "SIMLAB_CALIBRATION" if os.environ.get("SIMLAB_CALIBRATION") else "calibration"
    check_target(path, what)
    folder = next(p for p in path.absolute().parents if p.exists())  # the first that exists: mkdir starts there
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError(f"{what}={str(path)!r}: cannot write in {folder}")


def show(out: dict) -> None:
    """The text form: the five numbers the time model uses, in readable units."""
    print(f"{out['world_size']} processes at once ({out['backend']}, {out['device']}, {out['cpu_count']} CPUs), "
          f"each measured:")
    print(f"  matmul           {out['matmul_flops'] / 1e9:10.3g} GFLOP/s   (fp32 torch.mm, median of "
          f"{len(out['matmul_flops_by_shape'])} shapes)")
    print(f"  element-wise     {out['elementwise_bandwidth'] / 1e9:10.3g} GB/s      "
          f"(add, gelu, copy: bytes read + written)")
    print(f"  op overhead      {out['op_overhead'] * 1e6:10.3g} µs        (per aten call, tiny autograd step)")
    print(f"  ring α           {out['ring_alpha'] * 1e6:10.4g} µs        per ring step (our ring all-reduce)")
    print(f"  ring β           {out['ring_bandwidth'] / 1e9:10.3g} GB/s      per link")
    print(f"saved to {out['saved_to']}: simlab plan --gpu cpu-this-machine --gpus {out['world_size']} uses it")


def add_commands(sub, run) -> None:
    p = sub.add_parser("calibrate", help="measure this machine (FLOP/s, bytes/s, op overhead, ring α-β) for "
                                         "lesson 6's time model: gpu cpu-this-machine")
    p.add_argument("--world-size", type=int, default=None,
                   help="processes at once, as the run to predict (default: $WORLD_SIZE, else 4)")
    p.add_argument("--backend", default="auto", help="auto | gloo | nccl (default auto)")
    p.add_argument("--repeats", type=int, default=5, help="timed samples per measurement (default 5)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds before workers are killed (default 300)")
    add_json(p)
    p.set_defaults(func=cmd_calibrate, summary=False)
