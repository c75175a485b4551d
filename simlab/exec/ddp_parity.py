"""Does our DDP train exactly like one process, and like torch's DDP? One launch answers both.

`run_ddp(world_size=4)` trains `BucketedDDP` for a few steps on each rank's slice of the batch, then
torch's `DistributedDataParallel` on the same slices, and compares both with a single process on the
whole batch: losses every step, parameters at the end, bytes sent per rank against the all-reduce
optimum, and the real compute/communication trace for the lesson's timeline.
"""
from __future__ import annotations

import gc

import torch
import torch.distributed as dist
from torch import nn

from .._checks import check_choice, check_int, check_positive, check_ranks
from ..sim.collectives import ring_all_reduce as ring_plan
from ..trace import merge
from .ddp import ALLREDUCE, BucketedDDP
from .models import TINY_MLP, check_batch, flat_params, make_batch, make_mlp, reference_train, shard, train_steps


def train_ddp(rank: int, world_size: int, sizes, steps: int, global_batch: int, bucket_cap_mb: float,
              seed: int, lr: float, allreduce: str, accumulate: int, compare_torch: bool) -> dict:
    """Worker: train with BucketedDDP (then, if asked, with torch's DDP) on this rank's slice."""
    from .launch import device
    batch = [t.to(device()) for t in make_batch(global_batch, sizes[0], sizes[-1], seed)]
    x, y = shard(batch, rank, world_size)  # (B/n, in), (B/n, out)
    model = make_mlp(sizes, seed + rank).to(device())  # different on purpose: the broadcast must equalise
    ddp = BucketedDDP(model, bucket_cap_mb, allreduce, count_bytes=True)
    try:
        opt = torch.optim.SGD(ddp.parameters(), lr=lr)
        out = {"losses": train_steps(ddp, opt, x, y, steps, accumulate), "params": flat_params(model).cpu(),
               "events": ddp.events, "bytes_sent": ddp.bytes_sent, "overlap": ddp.overlap, "buckets": ddp.buckets,
               "bucket_numels": [sum(ddp.params[i].numel() for i in b) for b in ddp.buckets],
               "param_numels": [(name, p.numel()) for name, p in model.named_parameters()],
               "backend": dist.get_backend()}
    finally:
        ddp.close()
    del ddp, opt
    if compare_torch:
        theirs = nn.parallel.DistributedDataParallel(make_mlp(sizes, seed + rank).to(device()),
                                                  bucket_cap_mb=bucket_cap_mb)
        opt = torch.optim.SGD(theirs.parameters(), lr=lr)
        out["torch_losses"] = train_steps(theirs, opt, x, y, steps, accumulate)
        out["torch_params"] = flat_params(theirs.module).cpu()
        del theirs, opt
    gc.collect()  # teardown trap: no DDP may still hold the group when it is destroyed
    return out


def run_ddp(world_size: int, steps: int = 5, global_batch: int = 16, bucket_cap_mb: float = 0.004,
            seed: int = 0, sizes=TINY_MLP, lr: float = 0.1, allreduce: str = "ring",
            accumulate: int = 1, compare_torch: bool = True, backend: str = "auto", timeout: float = 60.0) -> dict:
    """Launch `world_size` ranks; compare with one process on the whole batch and with torch's DDP.
    The default cap (4 KiB) cuts the tiny default model into 5 buckets, so the overlap is visible."""
    check_ranks("world_size", world_size)
    check_int("steps", steps, 1)
    check_int("accumulate", accumulate, 1)
    check_batch(global_batch, world_size, accumulate)
    check_positive("bucket_cap_mb", bucket_cap_mb)
    check_choice("allreduce", allreduce, ALLREDUCE)
    # the reference first: its optimizer imports torch's lazy modules (~2 s) once, here, not in every rank
    ref_losses, ref_params = reference_train(lambda: make_mlp(sizes, seed),
                                             make_batch(global_batch, sizes[0], sizes[-1], seed), steps, lr)
    from .launch import launch  # here, so importing this module starts nothing
    ranks = launch(train_ddp, world_size, list(sizes), steps, global_batch, bucket_cap_mb, seed, lr, allreduce,
                   accumulate, compare_torch, backend=backend, timeout=timeout)
    mean = lambda key: [sum(per_step) / world_size for per_step in zip(*(r[key] for r in ranks))]  # noqa: E731
    later = [o for r in ranks for o in (r["overlap"][1:] or r["overlap"])]  # step 0 pays for warm-up
    result = {"losses": mean("losses"), "reference_losses": ref_losses,
              "max_abs_diff_vs_reference": max(_diff(r["params"], ref_params) for r in ranks),
              "max_abs_diff_across_ranks": max(_diff(r["params"], ranks[0]["params"]) for r in ranks),
              # bytes one rank sent in one optimizer step; gloo's own all-reduce does not tell us
              "bytes_sent_per_rank": [r["bytes_sent"][0] for r in ranks] if allreduce == "ring" else None,
              "optimal_bytes_per_rank": _ring_bytes(ranks[0]["bucket_numels"], world_size),
              "param_names": [name for name, _ in ranks[0]["param_numels"]],
              "param_numels": [numel for _, numel in ranks[0]["param_numels"]],
              "trace": merge(r["events"] for r in ranks), "buckets": ranks[0]["buckets"],
              "hidden_seconds": sum(h for h, _ in later) / len(later),  # per step, mean over ranks
              "exposed_seconds": sum(e for _, e in later) / len(later),
              "allreduce": allreduce, "backend": ranks[0]["backend"], "world_size": world_size}
    if compare_torch:
        result["torch_losses"] = mean("torch_losses")
        result["max_abs_diff_vs_torch_ddp"] = max(_diff(r["params"], r["torch_params"]) for r in ranks)
    return result


def _ring_bytes(bucket_numels, world_size: int) -> list[int]:
    """What each rank must send: one fp32 ring all-reduce per bucket (exact, uneven chunks included)."""
    per_bucket = [ring_plan(world_size, numel).bytes_sent_per_rank() for numel in bucket_numels]
    return [sum(column) for column in zip(*per_bucket)]


def _diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()
