"""What a child measures with: the CUDA bytes it allocated (`Meter`), the device of every tensor simlab hands to
torch.distributed's collectives (`log_devices`, `logged_devices`), and torch's fake process group, in which one
process is rank r of N without moving any data (`fake_group`)."""
from __future__ import annotations

import contextlib
import functools
import gc
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from .report import one_line


def _requested(which: str) -> int:
    """The bytes live tensors asked the caching allocator for ("current") or at most ("peak"). Not
    memory_allocated(): that counts the allocator's blocks, and a block keeps a remainder under 1 MB that it
    cannot split off (the first GPU run: +1.05 MB per layer-sized tensor, +9 % on ZeRO-3's 34 MB)."""
    stats = torch.cuda.memory_stats()
    key = f"requested_bytes.all.{which}"
    if key in stats:
        return stats[key]
    return torch.cuda.memory_allocated() if which == "current" else torch.cuda.max_memory_allocated()


class Meter:
    """Bytes this process's tensors hold beyond what they held when it was made (`now`), and CUDA's most
    (`peak`; None on the CPU). On CUDA the allocator's requested bytes; on the CPU, where no allocator counts,
    every tensor storage Python can reach (`simlab.exec.held_bytes`: the dry run's check of what an engine
    really keeps; its own count once missed ZeRO-3's full weights, which only the first GPU run showed)."""

    def __init__(self, dev: torch.device):
        self.cuda = dev.type == "cuda"
        if self.cuda:
            torch.cuda.synchronize()
            self.base = _requested("current")
            torch.cuda.reset_peak_memory_stats()
        else:
            from simlab.exec.held_bytes import HeldBytes  # not at import: simlab comes after log_devices
            self.held = HeldBytes()

    def now(self):
        if not self.cuda:
            return self.held.since()
        torch.cuda.synchronize()
        return _requested("current") - self.base

    def peak(self):
        if not self.cuda:
            return None
        torch.cuda.synchronize()
        return _requested("peak") - self.base


def time_calls(fn, cuda: bool, warmup: int, count: int, before=None) -> tuple:
    """Call `fn` `warmup` times, then `count` times timed: between two CUDA events on a GPU (the kernels the call
    queued, waited for), by the wall clock on the CPU; `before`, untimed, ahead of every call. Returns (the timed
    calls' seconds, the last call's result)."""
    seconds, out = [], None
    for i in range(warmup + count):
        if before is not None:
            before()
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            out = fn()
            end.record()
            end.synchronize()
            took = start.elapsed_time(end) / 1e3
        else:
            t0 = time.perf_counter()
            out = fn()
            took = time.perf_counter() - t0
        seconds += [took] if i >= warmup else []
    return seconds, out


_WORKSPACES: list = []  # the cuBLAS workspaces' bytes, measured once per process


def warm_cublas(dev: torch.device) -> int:
    """Make cuBLAS's workspaces before any Meter starts, and return their bytes (0 on the CPU).

    cuBLAS keeps one workspace per handle in torch's caching allocator, made at a thread's first matmul: one for
    the forward's thread, one for autograd's backward thread (32 MiB each on an H200, measured on the first GPU
    run, where the first memory row of each process paid 68 MB for them). A rank holds them whatever it trains,
    so the memory model leaves them to the GPU's reserve; the rows compare what the engines hold."""
    if dev.type != "cuda":
        return 0
    if not _WORKSPACES:
        torch.cuda.synchronize()
        before = _requested("current")
        a = torch.randn(64, 64, device=dev, requires_grad=True)
        (a @ a).sum().backward()  # forward and backward: both threads' handles
        del a
        torch.cuda.synchronize()
        _WORKSPACES.append(_requested("current") - before)
    return _WORKSPACES[0]


# Collectives only: torch checks send/recv by identity (`P2POp` wants `isend is torch.distributed.isend`), and
# they run on NCCL here, which takes no CPU tensor anyway.
LOGGED = ("all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor",
          "reduce", "gather", "scatter", "all_to_all_single", "all_gather_single", "reduce_scatter_single")
LOG_ENV = "SIMLAB_GPU_CHECK_LOG"


def log_devices(folder: str) -> None:
    """Wrap torch.distributed's collectives so that each call *from simlab's code* appends the device type of
    its first tensor to `folder`/<pid>.log (forked ranks inherit the wrappers). Call before importing simlab:
    zero_shards binds its collectives at import."""
    os.environ[LOG_ENV] = folder

    def wrap(fn):
        @functools.wraps(fn)
        def logged(*args, **kwargs):
            caller = sys._getframe(1).f_globals.get("__name__", "")
            if caller.startswith("simlab.") and args:
                first = args[0][0] if isinstance(args[0], (list, tuple)) and args[0] else args[0]
                if isinstance(first, torch.Tensor):
                    with open(os.path.join(folder, f"{os.getpid()}.log"), "a") as f:
                        f.write(first.device.type + "\n")
            return fn(*args, **kwargs)
        return logged
    for name in LOGGED:
        if callable(getattr(dist, name, None)):
            setattr(dist, name, wrap(getattr(dist, name)))


def logged_devices() -> dict:
    """{device type: tensors} simlab passed to torch.distributed since the last call (the log is emptied)."""
    folder, counts = os.environ.get(LOG_ENV), {}
    if not folder:
        return counts
    for path in Path(folder).glob("*.log"):
        for line in path.read_text().split():
            counts[line] = counts.get(line, 0) + 1
        path.unlink()
    return counts


@contextlib.contextmanager
def fake_group(rank: int, world_size: int):
    """This process as rank `rank` of `world_size` in torch's fake process group: every collective returns at
    once without moving data (torch.testing._internal.distributed.fake_pg, what torch's own tests use)."""
    try:
        from torch.testing._internal.distributed.fake_pg import FakeStore  # registers the "fake" backend
    except Exception as err:
        raise RuntimeError(f"this torch has no fake process group ({one_line(err)})") from None
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)
    try:
        yield
    finally:
        gc.collect()
        dist.destroy_process_group()
