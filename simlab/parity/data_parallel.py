"""Lesson 2's parity: does DP, and does our DDP, train exactly like one process — and like torch's own?

`run_dp(world_size=4)` trains `ThreadDataParallel` (one process, a thread per device, everything through
device 0) and counts every byte it moves, per phase, against the simulator's step model. With enough
GPUs it also trains torch's `nn.DataParallel` beside it.
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

from .._checks import check_batch, check_choice, check_int, check_positive
from ..exec.data_parallel import ALLREDUCE, BucketedDDP
from ..exec.data_parallel_threads import PHASES, ThreadDataParallel
from ..exec.launch import device, launch
from ..exec.launch_device import gpu_count
from ..exec.models import TINY_MLP, flat_params, loss_fn, make_batch, make_mlp, shard, train_steps
from ..sim.collectives import ring_bytes_sent
from ..sim.data_parallel import Workload, simulate_dp
from ..trace import merge
from .common import check_run, max_abs_diff, reference_train, result

DP_BACKENDS = ("auto", "threads")  # DP is one process: its "devices" are threads here


# ---------------------------------------------------------------- DP: one process, threads

def simulated_bytes(model: nn.Module, world_size: int, global_batch: int, in_features: int,
                    out_features: int) -> dict:
    """What the simulator (`simlab.sim.data_parallel.simulate_dp`) says one DP step moves,
    {phase: bytes sent per device} — what `Transfers` must count on the real run."""
    layers = [sum(p.numel() for p in m.parameters()) for m in model.modules() if isinstance(m, nn.Linear)]
    zeros = (0.0,) * len(layers)  # timing plays no part in the bytes
    work = Workload(tuple(layers), zeros, zeros, world_size=world_size, global_batch=global_batch,
                    input_bytes=4 * in_features, output_bytes=4 * out_features, bytes_per_param=4)
    moved = {p.name: list(p.bytes_sent) for p in simulate_dp(work).phases if p.kind == "comm"}
    return {phase: moved.get(phase, [0] * world_size) for phase in PHASES}  # one device: no phase moves


def _train(dp, model, batch, steps: int, lr: float, after_step=lambda: None) -> list[float]:
    opt, losses = torch.optim.SGD(model.parameters(), lr=lr), []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(dp(batch[0]), batch[1])  # loss and backward on device 0
        loss.backward()
        opt.step()  # only device 0's model is updated; the next forward re-broadcasts it
        losses.append(loss.item())
        after_step()
    return losses


def run_dp(world_size: int, steps: int = 5, global_batch: int = 16, seed: int = 0, sizes=TINY_MLP,
           lr: float = 0.1, backend: str = "auto", timeout: float = 60.0) -> dict:
    """Train with DP for `steps` SGD steps and compare with one process on the whole batch (and with
    torch's `nn.DataParallel` where there are `world_size` GPUs). One process: `timeout` is unused."""
    check_choice("backend", backend, DP_BACKENDS)
    check_run(world_size, "gloo", timeout, seed)
    check_int("steps", steps, 1)
    check_batch(global_batch, world_size)
    batch, model = make_batch(global_batch, sizes[0], sizes[-1], seed), make_mlp(sizes, seed)
    dp = ThreadDataParallel(model, world_size)
    rec = dp.transfers.rec
    try:
        losses = _train(dp, model, batch, steps, lr, after_step=lambda: setattr(rec, "step", rec.step + 1))
    finally:
        dp.close()
    ref_losses, ref_params = reference_train(lambda: make_mlp(sizes, seed), batch, steps, lr)
    phase_bytes = {phase: [b // steps for b in sent] for phase, sent in dp.transfers.sent.items()}  # one step
    theirs, why = _torch_data_parallel(world_size, batch, sizes, seed, steps, lr)
    return result(world_size=world_size, backend="threads", trace=rec.events,
                  bytes_sent_per_rank=[sum(col) for col in zip(*phase_bytes.values())],  # one step, per device
                  max_abs_diff_vs_reference=max_abs_diff(flat_params(model), ref_params),
                  max_abs_diff_vs_torch=None if theirs is None else max_abs_diff(flat_params(model), theirs),
                  why_no_torch=why, losses=losses, reference_losses=ref_losses, phase_bytes=phase_bytes,
                  expected_phase_bytes=simulated_bytes(model, world_size, global_batch, sizes[0], sizes[-1]))


def _torch_data_parallel(world_size, batch, sizes, seed, steps, lr):
    """torch's own nn.DataParallel on `world_size` GPUs: (final params, None), or (None, why not)."""
    gpus = gpu_count()  # no CUDA context here unless we really use the GPUs
    if gpus < world_size:
        return None, f"torch's nn.DataParallel needs {world_size} GPUs, found {gpus}"
    model = make_mlp(sizes, seed).cuda()
    dp = nn.DataParallel(model, device_ids=list(range(world_size)))
    _train(dp, model, tuple(t.cuda() for t in batch), steps, lr)
    return flat_params(model).cpu(), None


# ---------------------------------------------------------------- DDP: one process per rank

def train_ddp(rank: int, world_size: int, sizes, steps: int, global_batch: int, bucket_cap_mb: float,
              seed: int, lr: float, allreduce: str, accumulate: int, compare_torch: bool) -> dict:
    """Worker: train with BucketedDDP (then, if asked, with torch's DDP) on this rank's slice."""
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
    backend = check_run(world_size, backend, timeout, seed)
    check_int("steps", steps, 1)
    check_int("accumulate", accumulate, 1)
    check_batch(global_batch, world_size, accumulate)
    check_positive("bucket_cap_mb", bucket_cap_mb)
    check_choice("allreduce", allreduce, ALLREDUCE)
    # the reference first: its optimizer imports torch's lazy modules (~2 s) once, here, not in every rank
    ref_losses, ref_params = reference_train(lambda: make_mlp(sizes, seed),
                                             make_batch(global_batch, sizes[0], sizes[-1], seed), steps, lr)
    ranks = launch(train_ddp, world_size, list(sizes), steps, global_batch, bucket_cap_mb, seed, lr, allreduce,
                   accumulate, compare_torch, backend=backend, timeout=timeout)

    def mean(key):  # per step, over the ranks
        return [sum(per_step) / world_size for per_step in zip(*(r[key] for r in ranks))]

    later = [o for r in ranks for o in (r["overlap"][1:] or r["overlap"])]  # step 0 pays for warm-up
    vs_torch = max(max_abs_diff(r["params"], r["torch_params"]) for r in ranks) if compare_torch else None
    return result(
        world_size=world_size, backend=ranks[0]["backend"], trace=merge(r["events"] for r in ranks),
        # bytes one rank sent in one optimizer step; gloo's own all-reduce does not tell us
        bytes_sent_per_rank=[r["bytes_sent"][0] for r in ranks] if allreduce == "ring" else None,
        max_abs_diff_vs_reference=max(max_abs_diff(r["params"], ref_params) for r in ranks),
        max_abs_diff_vs_torch=vs_torch, why_no_torch=None if compare_torch else "compare_torch=False",
        losses=mean("losses"), reference_losses=ref_losses,
        max_abs_diff_across_ranks=max(max_abs_diff(r["params"], ranks[0]["params"]) for r in ranks),
        optimal_bytes_per_rank=[sum(col) for col in zip(*(ring_bytes_sent("all-reduce", world_size, numel)
                                                          for numel in ranks[0]["bucket_numels"]))],
        param_names=[name for name, _ in ranks[0]["param_numels"]],
        param_numels=[numel for _, numel in ranks[0]["param_numels"]], buckets=ranks[0]["buckets"],
        hidden_seconds=sum(h for h, _ in later) / len(later),  # per step, mean over ranks
        exposed_seconds=sum(e for _, e in later) / len(later), allreduce=allreduce,
        **({"torch_losses": mean("torch_losses")} if compare_torch else {}))


# ---------------------------------------------------------------- the explorer's real run

REAL_MAX_RANKS = 4  # what a laptop runs in a few seconds (and the lesson's machine: 2 cores)


def run_dp_and_ddp(world_size: int, bucket_cap_mb: float, model_bytes: int, steps: int = 3,
                   global_batch: int = 48, seed: int = 0, backend: str = "auto", timeout: float = 60.0) -> dict:
    """Lesson 2's explorer, for real: DP and our DDP (with torch's DDP beside it) on the tiny MLP.

    The explorer's model (`model_bytes`) is far too big for a CPU run, so the cap is scaled to hold the
    same share of the tiny model that `bucket_cap_mb` holds of the big one. 48 samples split over 1-4 ranks.
    The contract's core keys are the DDP run's (its processes, trace and bytes; torch's DDP), but the
    difference from one process is the larger of the two runs'; then each run's own result, "ddp" and "dp".
    """
    if type(world_size) is int and world_size > REAL_MAX_RANKS:  # the simulator goes to 16, processes don't
        raise ValueError(f"world_size={world_size}: the real run starts at most {REAL_MAX_RANKS} processes here")
    backend = check_run(world_size, backend, timeout, seed)
    check_positive("bucket_cap_mb", bucket_cap_mb)
    check_int("model_bytes", model_bytes, 1)
    tiny_bytes = 4 * sum(p.numel() for p in make_mlp(TINY_MLP, 0).parameters())  # fp32
    cap_mb = bucket_cap_mb * tiny_bytes / model_bytes
    ddp = run_ddp(world_size, steps=steps, global_batch=global_batch, bucket_cap_mb=cap_mb, seed=seed,
                  backend=backend, timeout=timeout)
    dp = run_dp(world_size, steps=steps, global_batch=global_batch, seed=seed)
    return result(world_size=world_size, backend=ddp["backend"], trace=ddp["trace"],
                  bytes_sent_per_rank=ddp["bytes_sent_per_rank"],
                  max_abs_diff_vs_reference=max(ddp["max_abs_diff_vs_reference"], dp["max_abs_diff_vs_reference"]),
                  max_abs_diff_vs_torch=ddp["max_abs_diff_vs_torch"],  # DP's nn.DataParallel needs GPUs: in "dp"
                  ddp=ddp, dp=dp, global_batch=global_batch, steps=steps, real_cap_mb=cap_mb,
                  real_model_bytes=tiny_bytes, bucket_cap_mb=bucket_cap_mb, model_bytes=model_bytes)
