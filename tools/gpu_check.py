"""`make gpu-check`: every lesson's parity on NCCL, and ZeRO's CUDA memory against the memory model.

    python tools/gpu_check.py                        # on a machine with NVIDIA GPUs (NCCL, one GPU per rank)
    python tools/gpu_check.py --backend gloo --world-size 2   # the same script on CPUs (what CI runs)

Prints one table: each lesson's run with its backend, max |diff| against one process and against torch's
own, and for ZeRO the bytes of model state each GPU holds between steps (`torch.cuda.memory_allocated`,
the data excluded) against `simlab.sim.memory.per_gpu_bytes` — target within 5 % — with the step's peak
(`torch.cuda.max_memory_allocated`) beside it: peak − steady is activations plus the transient buffers
(stage 1's bucket, stage 3's gathered layer). Exits 1 if a check fails, 2 if there is no GPU.
"""
from __future__ import annotations

import argparse
import sys

import torch

from simlab.exec.launch import device, launch
from simlab.exec.models import make_batch, make_mlp, shard, train_steps
from simlab.exec.zero import ZeroAdam
from simlab.parity.collectives import run_collective
from simlab.parity.data_parallel import run_ddp
from simlab.parity.pipeline import run_pipeline
from simlab.parity.tensor_parallel import run_tp
from simlab.parity.zero import run_zero
from simlab.sim.memory import per_gpu_bytes

TOL, MEMORY_TOL = 1e-5, 0.05
ZERO = {"zero1": (1, False), "zero2": (2, False), "zero3": (3, False), "offload": (2, True)}
BIG = (1024,) * 9  # 8 Linear layers of 1,049,600 parameters: 33.6 MB of fp32 params, allocator rounding negligible


def parity_rows(n: int, backend: str) -> list[dict]:
    runs = {"collectives: ring-all-reduce": lambda: run_collective("ring-all-reduce", n, 1 << 20, backend=backend),
            "data parallel: ddp": lambda: run_ddp(n, steps=3, global_batch=8 * n, backend=backend)}
    runs |= {f"zero: {name}": (lambda s=s, o=o: run_zero(s, n, steps=3, global_batch=8 * n, offload=o,
                                                          backend=backend)) for name, (s, o) in ZERO.items()}
    runs |= {"pipeline: 1f1b": lambda: run_pipeline("1f1b", n, 2 * n, global_batch=8 * n, steps=2, backend=backend),
             "tensor parallel: mlp": lambda: run_tp(n, "mlp", ffn=16 * n, heads=4 * n, backend=backend),
             "tensor parallel: attention": lambda: run_tp(n, "attention", hidden=8 * n, heads=4 * n, backend=backend)}
    rows = []
    for name, run in runs.items():
        res = run()
        torch_diff = res["max_abs_diff_vs_torch"]
        ok = res["max_abs_diff_vs_reference"] <= TOL and (torch_diff is None or torch_diff <= TOL)
        rows.append({"check": name, "backend": res["backend"], "vs 1 process": f"{res['max_abs_diff_vs_reference']:.1e}",
                     "vs torch": "n/a" if torch_diff is None else f"{torch_diff:.1e}", "ok": "✓" if ok else "✗"})
    return rows


def _zero_memory(rank, world_size, stage, offload):
    """Bytes this GPU holds between steps (model state only) and at the step's peak, past the data."""
    x, y = (t.to(device()) for t in shard(make_batch(8 * world_size, BIG[0], BIG[-1]), rank, world_size))
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    model = make_mlp(BIG).to(device())
    opt = ZeroAdam(model, stage, lr=1e-3, offload=offload)
    train_steps(model, opt, x, y, 2)
    torch.cuda.synchronize()
    steady, peak = torch.cuda.memory_allocated() - base, torch.cuda.max_memory_allocated() - base
    opt.close()
    return steady, peak


def memory_rows(n: int) -> list[dict]:
    layers = [(a + 1) * b for a, b in zip(BIG, BIG[1:])]
    rows = []
    for name, (stage, offload) in ZERO.items():
        steady, peak = max(launch(_zero_memory, n, stage, offload, backend="nccl", timeout=300))
        model = per_gpu_bytes(layers, n, stage, offload=offload, precision="fp32")["total"]
        error = abs(steady - model) / model
        rows.append({"check": f"memory: {name}", "backend": "nccl", "model MB": f"{model / 1e6:.2f}",
                     "measured MB": f"{steady / 1e6:.2f}", "error": f"{100 * error:.2f} %",
                     "peak MB": f"{peak / 1e6:.2f}", "ok": "✓" if error <= MEMORY_TOL else "✗"})
    return rows


def table(rows: list[dict]) -> str:
    keys = list(dict.fromkeys(k for r in rows for k in r))
    cells = [keys] + [[str(r.get(k, "")) for k in keys] for r in rows]
    widths = [max(len(row[c]) for row in cells) for c in range(len(keys))]
    return "\n".join("| " + " | ".join(v.ljust(w) for v, w in zip(row, widths)) + " |" for row in cells)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="nccl", choices=["nccl", "gloo"])
    parser.add_argument("--world-size", type=int, default=None, help="default: every GPU, at most 4")
    args = parser.parse_args(argv)
    gpus = torch.cuda.device_count()
    if args.backend == "nccl" and gpus == 0:
        print("gpu-check: no CUDA GPU on this machine, so the NCCL path cannot be checked here")
        return 2
    n = args.world_size or (min(gpus, 4) if args.backend == "nccl" else 2)
    rows = parity_rows(n, args.backend) + (memory_rows(n) if args.backend == "nccl" else [])
    print(f"gpu-check: {n} rank(s), backend {args.backend}, {gpus} GPU(s): "
          f"{torch.cuda.get_device_name(0) if gpus else 'none'}, torch {torch.__version__}")
    print(table(rows))
    return 0 if all(r["ok"] == "✓" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
