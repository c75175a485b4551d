"""Measure this machine the way lesson 6's time model sees a GPU, so it can predict a real run here.

Teaches: a time model is only as good as its four constants, and they must be measured the way the run
will use the machine. `measure(world_size)` starts `world_size` processes *at once* (on a CPU they share
the cores, exactly as a real 3-D run will) and each one measures, while all are busy:
  - matmul FLOP/s: fp32 `torch.mm` of a transformer layer's MLP shapes, (b·s, h) × (h, 4h);
  - element-wise bandwidth: bytes read + written per second by `add`, `gelu`, `copy_` on tensors larger
    than the last-level cache (the model's norms, GeLU, dropout are memory-bound);
  - per-operation overhead: seconds per aten call of a tiny autograd forward + backward (a chain of
    multiplies on 4 numbers, counted with a `TorchDispatchMode`): Python, dispatch, autograd, launch — the
    fixed cost `hybrid_time` charges per operation it counts in a layer (`hybrid_layer.OPS_LAYER`);
  - α (seconds per ring step) and β (seconds per byte; 1/β is the bandwidth, as in lesson 1) of OUR ring
    all-reduce (`exec.collectives.ring_all_reduce`),
    fitted over a sweep of sizes by lesson 1's least squares (`simlab.sim.cost.fit_alpha_beta`).
Compute rates are time-boxed: every rank repeats its op for `window` seconds, all ranks in the same window
(after a barrier), so oversubscribed cores show up as the lower rate the real run will get — timing one
short op would catch a rank while it happened to own a core. Under NCCL each rank times its own GPU
(`torch.cuda.synchronize` around every timing). `simlab calibrate` saves the result
(`simlab.sim.hardware.save_calibration`); `hardware.calibrated_gpu(n)` turns it into a `GPU`.
"""
from __future__ import annotations

import datetime
import os
import time

import numpy as np
import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode

from .._checks import check_int, check_positive
from ..sim.cost import fit_alpha_beta
from .collectives import ring_all_reduce
from .launch import device, launch, resolve_backend

MATMUL_SHAPES = ((256, 128), (512, 256), (1024, 256), (1024, 512))  # (b·s tokens, h): (b·s, h) × (h, 4h)
RING_BYTES = tuple(4096 * 4 ** k for k in range(7))  # 4 KiB … 16 MiB, per all-reduce buffer
RING_CALLS = 4  # all-reduces per timed sample
CHAIN = 16  # multiplies in the tiny autograd graph that measures the per-operation overhead
MIN_ELEMENTWISE = 1 << 22  # floats per element-wise operand: at least 16 MiB (and twice the L3 cache)
PROCESS_BYTES = 64 << 20  # a worker's own memory beside its tensors (Python, torch, gloo): ~60 MiB measured


def host_bytes_per_rank() -> float:
    """Host memory one measuring process holds at its peak on the CPU: the three element-wise operands, the
    largest ring buffer twice (the buffer and what the ring receives into), the largest matmul's three
    matrices, and the process itself. On a 2-core machine (16 MiB L3): 216 MB estimated, 185 MB measured (Pss)."""
    tokens, h = max(MATMUL_SHAPES, key=lambda s: s[0] * s[1])
    matmul = 4 * (tokens * h + h * 4 * h + tokens * 4 * h)
    return float(3 * 4 * _elementwise_numel(torch.device("cpu")) + 2 * max(RING_BYTES) + matmul + PROCESS_BYTES)


def measure(world_size: int, backend: str = "gloo", repeats: int = 5, timeout: float = 300.0,
            window: float = 0.1) -> dict:
    """Measure matmul FLOP/s, element-wise bytes/s, op overhead (s) and the ring's α (s) and bandwidth 1/β (bytes/s) per
    process while `world_size` processes run at once. Medians: over repeats, shapes or ops, then ranks.

    Keys: matmul_flops, elementwise_bandwidth, op_overhead, ring_alpha, ring_bandwidth (what
    `hardware.calibrated_gpu` reads), then world_size, backend, device, device_memory (bytes of one GPU
    under NCCL, else None: the CPU's share of RAM is used), cpu_count, torch_version, date,
    repeats, window, and the details: matmul_flops_by_shape, elementwise_bandwidth_by_op, ring_bytes,
    ring_seconds (median per size), ring_bytes_per_rank (what each rank sends: 2(n-1)/n of the buffer),
    per_rank (each rank's own matmul_flops, elementwise_bandwidth, op_overhead) and seconds (wall time).
    """
    check_int("world_size", world_size, 2)  # the ring needs two processes to have a link to measure
    check_int("repeats", repeats, 1)
    timeout = check_positive("timeout", timeout)
    window = check_positive("window", window)
    backend = resolve_backend(backend, world_size)
    started = time.perf_counter()
    ranks = launch(_measure_rank, world_size, repeats, window, backend=backend, timeout=timeout)
    seconds = time.perf_counter() - started

    def median(key):
        return float(np.median([r[key] for r in ranks]))

    def by(key):
        return {name: float(np.median([r[key][name] for r in ranks])) for name in ranks[0][key]}

    ring_seconds = [float(np.median([d for r in ranks for d in r["ring"][i]])) for i in range(len(RING_BYTES))]
    sent = [2 * (world_size - 1) / world_size * n for n in RING_BYTES]
    alpha, bandwidth = _fit_ring(ring_seconds, sent, world_size)
    return {"matmul_flops": median("matmul_flops"), "elementwise_bandwidth": median("elementwise_bandwidth"),
            "op_overhead": median("op_overhead"), "ring_alpha": alpha, "ring_bandwidth": bandwidth,
            "world_size": world_size, "backend": backend, "device": ranks[0]["device"],
            "device_memory": ranks[0]["device_memory"],
            "cpu_count": os.cpu_count(), "torch_version": torch.__version__,
            "date": datetime.datetime.now().isoformat(timespec="seconds"), "repeats": repeats, "window": window,
            "matmul_flops_by_shape": by("matmul_by_shape"), "elementwise_bandwidth_by_op": by("elementwise_by_op"),
            "ring_bytes": list(RING_BYTES), "ring_seconds": ring_seconds, "ring_bytes_per_rank": sent,
            "per_rank": {key: [r[key] for r in ranks] for key in ("matmul_flops", "elementwise_bandwidth",
                                                                  "op_overhead")},
            "seconds": seconds}


def _fit_ring(durations, nbytes, world_size) -> tuple[float, float]:
    """Lesson 1's α-β fit. If noise on the big sizes pushes the intercept below zero (the fit then calls the
    link infinitely fast), β comes from the sizes of 64 KiB and up and α from what the smallest size leaves."""
    alpha, bandwidth = fit_alpha_beta(durations, nbytes, world_size)
    if not np.isfinite(bandwidth):
        big = [i for i, n in enumerate(RING_BYTES) if n >= 1 << 16]
        slope = np.polyfit([nbytes[i] for i in big], [durations[i] for i in big], 1)[0]
        if slope <= 0:
            raise RuntimeError(f"ring durations {durations} do not grow with size: cannot fit a bandwidth")
        bandwidth = float(1 / slope)
        alpha = max(durations[0] - nbytes[0] / bandwidth, 0.0) / (2 * (world_size - 1))
    return float(alpha), float(bandwidth)


# ---------------------------------------------------------------- inside each worker process

def _measure_rank(rank, world_size, repeats, window) -> dict:
    dev = device()
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    cuda = dev.type == "cuda"
    matmul, elementwise = _matmul(dev, repeats, window, sync), _elementwise(dev, repeats, window, sync)
    tiny, ops = _tiny_autograd(dev)
    return {"device": torch.cuda.get_device_name(dev) if cuda else "cpu",
            "device_memory": torch.cuda.get_device_properties(dev).total_memory if cuda else None,
            "matmul_by_shape": matmul, "matmul_flops": float(np.median(list(matmul.values()))),
            "elementwise_by_op": elementwise, "elementwise_bandwidth": float(np.median(list(elementwise.values()))),
            "op_overhead": 1 / (ops * _rates(tiny, repeats, window, sync)),
            "ring": _ring(dev, repeats, sync)}


class CountOps(TorchDispatchMode):
    """Counts the aten calls made while it is active: the "operation" of `GPU.op_overhead`, here and in the
    tests that hold `hybrid_layer`'s operation counts to the model's code."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls += 1
        return func(*args, **(kwargs or {}))


def _tiny_autograd(dev):
    """(step, aten calls per step): forward and backward through CHAIN multiplies of 4 numbers."""
    x = torch.ones(4, device=dev, requires_grad=True)

    def step():
        x.grad = None
        y = x
        for _ in range(CHAIN):
            y = y * 1.0
        y.sum().backward()

    with CountOps() as count:
        step()
    return step, count.calls


def _matmul(dev, repeats, window, sync) -> dict:
    """FLOP/s of (b·s, h) × (h, 4h) per shape: an MLP's first matmul."""
    flops = {}
    for tokens, h in MATMUL_SHAPES:
        a, b = torch.randn(tokens, h, device=dev), torch.randn(h, 4 * h, device=dev)
        c = torch.empty(tokens, 4 * h, device=dev)
        rate = _rates(lambda a=a, b=b, c=c: torch.mm(a, b, out=c), repeats, window, sync)
        flops[f"{tokens}x{h}x{4 * h}"] = 2 * tokens * h * 4 * h * rate
    return flops


def _elementwise(dev, repeats, window, sync) -> dict:
    """Bytes read + written per second, per op, on operands larger than the cache (fp32)."""
    n = _elementwise_numel(dev)
    x, y, z = (torch.randn(n, device=dev) for _ in range(3))
    ops = {"add": (lambda: torch.add(x, y, out=z), 12), "gelu": (lambda: torch._C._nn.gelu(x, out=z), 8),
           "copy": (lambda: z.copy_(x), 8)}  # bytes per element: add reads 2 and writes 1, the others 1 and 1
    return {name: per * n * _rates(op, repeats, window, sync) for name, (op, per) in ops.items()}


def _ring(dev, repeats, sync) -> list:
    """Per size in RING_BYTES, `repeats` samples of seconds per ring all-reduce: RING_CALLS back to back after
    a barrier (the steady state a training run sees, not one lucky or unlucky wake-up)."""
    seconds = []
    for nbytes in RING_BYTES:
        t = torch.zeros(nbytes // 4, device=dev)  # zeros: the sums stay finite however often we repeat
        ring_all_reduce(t)  # warm-up: connections, scratch buffers, first-touch page faults
        durations = []
        for _ in range(repeats):
            dist.barrier()
            sync()
            start = time.perf_counter()
            for _ in range(RING_CALLS):
                ring_all_reduce(t)
            sync()
            durations.append((time.perf_counter() - start) / RING_CALLS)
        seconds.append(durations)
    return seconds


def _rates(op, repeats, window, sync) -> float:
    """Median over `repeats` windows of ops per second. Each window starts with a barrier (all ranks busy
    together) and runs `op` in batches, syncing after each, until `window` seconds have passed; a batch
    doubles while it takes under a twentieth of the window, so the clock is read rarely."""
    op()
    sync()  # warm-up: first-touch page faults, kernel selection
    rates, batch = [], 1
    for _ in range(repeats):
        dist.barrier()
        done, start = 0, time.perf_counter()
        while True:
            begin = time.perf_counter()
            for _ in range(batch):
                op()
            sync()
            now, done = time.perf_counter(), done + batch
            if now - start >= window:
                break
            if now - begin < window / 20:
                batch *= 2
        rates.append(done / (now - start))
    return float(np.median(rates))


def _elementwise_numel(dev) -> int:
    """Floats per operand: larger than the last-level cache (read from Linux's sysfs), at least 16 MiB, at most
    128 MiB; on a GPU 64 MiB (well past any L2)."""
    if dev.type == "cuda":
        return 1 << 24
    try:
        with open("/sys/devices/system/cpu/cpu0/cache/index3/size") as f:
            text = f.read().strip()
        cache = int(text[:-1]) * {"K": 1 << 10, "M": 1 << 20}[text[-1]] if text[-1] in "KM" else int(text)
    except (OSError, ValueError, IndexError):
        cache = 32 << 20
    return int(min(max(MIN_ELEMENTWISE, 2 * cache // 4), 1 << 25))
