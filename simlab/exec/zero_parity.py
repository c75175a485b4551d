"""Does our ZeRO train exactly like one process with Adam, and like torch's own ZeRO? One launch answers.

`run_zero(stage=3, world_size=4)` trains `ZeroAdam` for a few steps on each rank's slice of the batch,
then (if asked) torch's implementation on the same slices — `ZeroRedundancyOptimizer` behind DDP for
stages 1 and 2, FSDP2 `fully_shard` for stage 3 — and compares both with a single process running
torch.optim.Adam on the whole batch. It also returns the bytes each rank really keeps and the trace.

    python -c "from simlab.exec.zero_parity import run_zero; print(run_zero(3)['max_abs_diff_vs_reference'])"
"""
from __future__ import annotations

import gc

import torch
from torch import nn

from .._checks import check_int, check_positive, check_ranks
from ..trace import merge
from .models import TINY_MLP, check_batch, flat_params, make_batch, make_mlp, shard, train_steps
from .zero import ZeroAdam


def train_zero(rank: int, world_size: int, stage: int, offload: bool, sizes, steps: int, global_batch: int,
               seed: int, lr: float, compare_torch: bool, mutation: str | None = None) -> dict:
    """Worker: train with ZeroAdam (then, if asked, with torch's ZeRO) on this rank's slice."""
    x, y = shard(make_batch(global_batch, sizes[0], sizes[-1], seed), rank, world_size)  # (B/n, in), (B/n, out)
    model = make_mlp(sizes, seed)  # same init everywhere: ZeRO, unlike our DDP, does not broadcast
    opt = ZeroAdam(model, stage, rank, world_size, lr=lr, offload=offload)
    if mutation:  # break the algorithm on purpose (forked rank only): the tests must notice
        _mutate(mutation)
    losses = train_steps(model, opt, x, y, steps)
    out = {"losses": losses, "memory": opt.memory(), "events": opt.rec.events,
           "params": _full_params(opt) if stage == 3 else flat_params(model)}
    opt.close()
    del opt, model
    if compare_torch:
        out["torch_params"] = (_torch_fsdp if stage == 3 else _torch_zero)(sizes, seed, x, y, steps, lr)
    gc.collect()  # teardown trap: nothing may still hold the group when it is destroyed
    return out


def _mutate(mutation: str) -> None:
    """'no_average': sum the grads instead of averaging — Adam is scale-invariant, so barely visible;
    'local_grads': skip the reduction, each rank keeps its own slice of its own grads."""
    import torch.distributed as dist

    from . import zero as Z
    rs = Z.reduce_scatter_mean
    Z.reduce_scatter_mean = {"no_average": lambda rows, n: rs(rows, n).mul_(n),
                             "local_grads": lambda rows, n: rows[dist.get_rank()]}[mutation]


def _full_params(opt: ZeroAdam) -> torch.Tensor:
    """Stage 3 keeps shards only: gather each layer once more to compare the whole model (P,)."""
    with torch.no_grad():
        layers = [opt.model[i] for i, _ in opt.layers]
        return torch.cat([layer.gather()[:layer.numel] for layer in layers])


def _torch_zero(sizes, seed, x, y, steps, lr) -> torch.Tensor:
    """torch's ZeRO-1: DDP averages the grads, ZeroRedundancyOptimizer shards Adam's state."""
    from torch.distributed.optim import ZeroRedundancyOptimizer
    ddp = nn.parallel.DistributedDataParallel(make_mlp(sizes, seed))
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
    model, mesh = make_mlp(sizes, seed), init_device_mesh("cpu", (torch.distributed.get_world_size(),))
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
    """One-line ValueErrors before any process starts."""
    check_int("stage", stage, 1, 3)
    check_ranks("world_size", world_size)
    check_batch(global_batch, world_size)
    if not isinstance(offload, bool):
        raise ValueError(f"offload={offload!r}: must be True or False")
    if offload and stage == 1:
        raise ValueError("offload=True: needs stage 2 or 3 (ZeRO-Offload moves the sharded grads to the host)")


def reference_adam(sizes, seed, global_batch, steps, lr):
    """One process, torch.optim.Adam, the whole batch: (losses, final params (P,))."""
    model = make_mlp(sizes, seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses = train_steps(model, opt, *make_batch(global_batch, sizes[0], sizes[-1], seed), steps)
    return losses, flat_params(model)


def run_zero(stage: int, world_size: int = 4, steps: int = 5, global_batch: int = 16, seed: int = 0,
             sizes=TINY_MLP, offload: bool = False, lr: float = 1e-3, compare_torch: bool = True,
             timeout: float = 60.0, _mutation: str | None = None) -> dict:
    """Launch `world_size` ranks of ZeRO-`stage`; compare with one process and with torch's version.

    `measured_bytes_per_rank` is a list (one dict per rank) of {params, grads, optimizer, cpu} bytes kept
    after the last step; 'cpu' is the host side of offloading (0 otherwise)."""
    check_zero(stage, world_size, global_batch, offload)
    check_int("steps", steps, 1)
    check_positive("lr", lr)
    check_positive("timeout", timeout)
    # the reference first: Adam imports torch's lazy modules once, here, not in every forked rank
    ref_losses, ref_params = reference_adam(sizes, seed, global_batch, steps, lr)
    if compare_torch:  # the same for torch's ZeRO: import once in the parent, fork inherits it
        import torch.distributed.fsdp  # noqa: F401
        import torch.distributed.optim  # noqa: F401
    from .launch import launch  # here, so importing this module starts nothing
    ranks = launch(train_zero, world_size, stage, offload, list(sizes), steps, global_batch, seed, lr,
                   compare_torch, _mutation, backend="gloo", timeout=timeout)
    diff = lambda a, b: (a - b).abs().max().item()  # noqa: E731
    result = {"stage": stage, "offload": offload, "world_size": world_size, "reference_losses": ref_losses,
              "losses": [sum(step) / world_size for step in zip(*(r["losses"] for r in ranks))],
              "max_abs_diff_vs_reference": max(diff(r["params"], ref_params) for r in ranks),
              "measured_bytes_per_rank": [r["memory"] for r in ranks],
              "trace": merge(r["events"] for r in ranks)}
    if compare_torch:
        result["max_abs_diff_vs_torch"] = max(diff(r["params"], r["torch_params"]) for r in ranks)
    return result


def compare_with_walkthrough(trace, stage: int, layers: int, world_size: int, rank: int = 0) -> dict:
    """Line up a real run's step 0 (one rank) with the simulator's walkthrough of the same stage.

    The walkthrough names layers La, Lb, …; the executor L0, L1, …. Every layer must go through the
    same collectives (all-gather / reduce-scatter) in the same order in both; how layers interleave,
    and the bookkeeping around them ("free", per-layer "step"), may differ (ZeRO-1 can step layer by
    layer as soon as its reduce-scatter is done, and the executor's ZeRO-1 reduces all layers at once).
    """
    from ..sim.zero import walkthrough

    letter = {f"L{chr(ord('a') + i)}": f"L{i}" for i in range(layers)}
    sim = [" ".join(letter.get(w, w) for w in s.name.split()) for s in walkthrough(stage, layers, world_size)[1:]]
    real = [e.name for e in sorted(trace, key=lambda e: e.start) if e.rank == rank and e.step == 0]
    collectives = ("all-gather", "reduce-scatter")
    def per_layer(names):  # layer -> its collectives, in order
        ops = {}
        for op, *layers in (n.split() for n in names if n.split()[0] in collectives):
            for layer in layers:  # stage 1 runs one collective for all layers ("reduce-scatter L1 L0")
                ops.setdefault(layer, []).append(op)
        return ops
    return {"simulated": sim, "real": real, "same_collectives": per_layer(sim) == per_layer(real)}
