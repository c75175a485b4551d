"""Lesson 3's parity: does our ZeRO train exactly like one process with Adam, and like torch's own ZeRO?

`run_zero(stage=3, world_size=4)` trains `ZeroAdam` for a few steps on each rank's slice of the batch,
then (if asked) torch's implementation on the same slices — `ZeroRedundancyOptimizer` behind DDP for
stages 1 and 2, FSDP2 `fully_shard` for stage 3 — and compares both with a single process running
torch.optim.Adam on the whole batch. It also returns the bytes each rank really keeps (against
`simlab.sim.memory.per_gpu_bytes`), the bytes it sends per step, and the trace.

    python -c "from simlab.parity.zero import run_zero; print(run_zero(3)['max_abs_diff_vs_reference'])"
"""
from __future__ import annotations

import gc

import torch
import torch.distributed as dist
from torch import nn

from .._checks import check_batch, check_bool, check_int, check_positive
from ..exec.held_bytes import HeldBytes
from ..exec.launch import device, launch
from ..exec.models import TINY_MLP, flat_params, make_batch, make_mlp, shard, train_steps
from ..exec.zero import ZeroAdam
from ..sim.memory import check_offload, comm_volume_per_step, per_gpu_bytes
from ..sim.zero import executor_names, walkthrough
from ..trace import merge
from .common import check_run, max_abs_diff, reference_train, result


def train_zero(rank: int, world_size: int, stage: int, offload: bool, sizes, steps: int, global_batch: int,
               seed: int, lr: float, compare_torch: bool) -> dict:
    """Worker: train with ZeroAdam (then, if asked, with torch's ZeRO) on this rank's slice."""
    held = HeldBytes()  # what this rank really keeps, beside what the engine says it keeps (`opt.memory()`)
    batch = [t.to(device()) for t in make_batch(global_batch, sizes[0], sizes[-1], seed)]
    x, y = shard(batch, rank, world_size)  # (B/n, in), (B/n, out)
    model = make_mlp(sizes, seed).to(device())  # same init everywhere: ZeRO, unlike our DDP, does not broadcast
    opt = ZeroAdam(model, stage, lr=lr, offload=offload)
    losses = train_steps(model, opt, x, y, steps)
    out = {"losses": losses, "memory": opt.memory(), "events": opt.rec.events, "backend": dist.get_backend(),
           "held": held.since(exclude=batch) if device().type == "cpu" else None,  # a GPU: gpu-check measures
           "params": (_full_params(opt) if stage == 3 else flat_params(model)).cpu()}
    opt.close()
    del opt, model
    if compare_torch:
        out["torch_params"] = (_torch_fsdp if stage == 3 else _torch_zero)(sizes, seed, x, y, steps, lr).cpu()
    gc.collect()  # teardown trap: nothing may still hold the group when it is destroyed
    return out


def _full_params(opt: ZeroAdam) -> torch.Tensor:
    """Stage 3 keeps shards only: gather each layer once more to compare the whole model (P,)."""
    with torch.no_grad():
        layers = [opt.model[i] for i, _ in opt.layers]
        return torch.cat([layer.gather()[:layer.numel] for layer in layers])


def _torch_zero(sizes, seed, x, y, steps, lr) -> torch.Tensor:
    """torch's ZeRO-1: DDP averages the grads, ZeroRedundancyOptimizer shards Adam's state."""
    from torch.distributed.optim import ZeroRedundancyOptimizer
    ddp = nn.parallel.DistributedDataParallel(make_mlp(sizes, seed).to(device()))
    opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.Adam, lr=lr)
    train_steps(ddp, opt, x, y, steps)
    params = flat_params(ddp.module)
    del ddp, opt
    gc.collect()
    return params


def _torch_fsdp(sizes, seed, x, y, steps, lr) -> torch.Tensor:
    """torch's ZeRO-3: FSDP2, one `fully_shard` per Linear (its own gather/free unit), then the root."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    model = make_mlp(sizes, seed).to(device())
    mesh = init_device_mesh(device().type, (dist.get_world_size(),))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    train_steps(model, opt, x, y, steps)
    params = torch.cat([p.full_tensor().reshape(-1) for p in model.parameters()])  # DTensor → full (P,)
    del model, opt
    gc.collect()
    return params


def check_zero(stage, world_size, global_batch, offload) -> None:
    """One-line ValueErrors before any process starts (the rules are the memory model's)."""
    check_int("stage", stage, 1, 3)
    check_offload(check_bool("offload", offload), stage)
    check_batch(global_batch, world_size)


def run_zero(stage: int, world_size: int = 4, steps: int = 5, global_batch: int = 16, seed: int = 0,
             sizes=TINY_MLP, offload: bool = False, lr: float = 1e-3, compare_torch: bool = True,
             backend: str = "auto", timeout: float = 60.0) -> dict:
    """Launch `world_size` ranks of ZeRO-`stage`; compare with one process and with torch's version.

    `measured_bytes_per_rank` is a list (one dict per rank) of {params, grads, optimizer, cpu} bytes kept
    after the last step, by the engine's own count; 'cpu' is the host side of offloading (0 otherwise).
    `held_bytes_per_rank`: every tensor each rank can still reach then, the data left out (`HeldBytes`; ranks
    on the CPU, None on a GPU), which must equal that count's sum. `bytes_sent_per_rank`: what
    each rank sent to the others in the first step (ring accounting, padding included)."""
    backend = check_run(world_size, backend, timeout, seed)
    check_zero(stage, world_size, global_batch, offload)
    check_int("steps", steps, 1)
    check_positive("lr", lr)
    check_bool("compare_torch", compare_torch)
    # the reference first: Adam imports torch's lazy modules once, here, not in every forked rank
    ref_losses, ref_params = reference_train(lambda: make_mlp(sizes, seed),
                                             make_batch(global_batch, sizes[0], sizes[-1], seed), steps, lr, "adam")
    if compare_torch:  # the same for torch's ZeRO: import once in the parent, fork inherits it
        import torch.distributed.fsdp  # noqa: F401 — import once here: every forked rank inherits it
        import torch.distributed.optim  # noqa: F401 — import once here: every forked rank inherits it
    ranks = launch(train_zero, world_size, stage, offload, list(sizes), steps, global_batch, seed, lr,
                   compare_torch, backend=backend, timeout=timeout)
    trace = merge(r["events"] for r in ranks)
    layers = [(a + 1) * b for a, b in zip(sizes, sizes[1:])]  # weight + bias per Linear: what the model counts
    predicted = per_gpu_bytes(layers, world_size, stage, offload=offload, precision="fp32")
    return result(
        world_size=world_size, backend=ranks[0]["backend"], trace=trace,
        bytes_sent_per_rank=[sum(e.nbytes for e in trace.for_rank(r).at_step(0) if e.kind == "comm")
                             for r in range(world_size)],
        max_abs_diff_vs_reference=max(max_abs_diff(r["params"], ref_params) for r in ranks),
        max_abs_diff_vs_torch=max(max_abs_diff(r["params"], r["torch_params"]) for r in ranks)
        if compare_torch else None, why_no_torch=None if compare_torch else "compare_torch=False",
        stage=stage, offload=offload, reference_losses=ref_losses,
        losses=[sum(step) / world_size for step in zip(*(r["losses"] for r in ranks))],
        measured_bytes_per_rank=[r["memory"] for r in ranks], held_bytes_per_rank=[r["held"] for r in ranks],
        predicted_bytes_per_rank=[{k: predicted[k] for k in ("params", "grads", "optimizer", "cpu")}] * world_size,
        predicted_bytes_sent_per_rank=[comm_volume_per_step(layers, stage, world_size, "fp32")] * world_size)


def compare_with_walkthrough(trace, stage: int, layers: int, world_size: int, rank: int = 0) -> dict:
    """Line up a real run's step 0 (one rank) with the simulator's walkthrough of the same stage.

    The walkthrough names layers La, Lb, …; the executor L0, L1, …. `same_order`: the real rank ran
    exactly the walkthrough's events, in its order (forward, backward, gathers, frees, reduce-scatters,
    one "step"); `same_collectives`: at least every layer went through the same collectives in the
    same order (stage 1's bucket counts for each layer in it).
    """
    sim = executor_names(walkthrough(stage, layers, world_size))
    real = [e.name for e in sorted(trace, key=lambda e: e.start) if e.rank == rank and e.step == 0]
    collectives = ("all-gather", "reduce-scatter")
    def per_layer(names):  # layer -> its collectives, in order
        ops = {}
        for op, *layers in (n.split() for n in names if n.split()[0] in collectives):
            for layer in layers:  # stage 1 runs one collective for all layers ("reduce-scatter L1 L0")
                ops.setdefault(layer, []).append(op)
        return ops
    return {"simulated": sim, "real": real, "same_order": sim == real,
            "same_collectives": per_layer(sim) == per_layer(real)}
