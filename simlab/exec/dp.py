"""DP the way `nn.DataParallel` does it: one process, one thread per device, everything through device 0.

Lesson 2, the "before" picture. Every step, device 0 (which owns the only real copy of the model):
  1. scatter inputs — cuts the batch into n chunks and sends chunk d to device d;
  2. replicate      — copies *all* parameters to every other device (the weights changed last step);
  3. forward        — n threads run the n replicas at once;
  4. gather outputs — collects the n outputs on device 0, which computes the loss;
  5. backward       — the gather's backward sends each device its slice of the output gradient
                      (scatter grads); the replicate's backward sums every replica's gradients
                      into device 0's parameters (reduce grads);
  6. update         — only device 0 steps its optimizer.
So device 0 sends n-1 model copies and receives n-1 gradient copies every step: its link is the
bottleneck, and it grows with n — where DDP's ring sends 2(n-1)/n of the gradients per rank, flat.

On CPU (no GPUs) the "devices" are threads and a "transfer" is a copy, counted by `Transfers`: the bytes
are the ones nn.DataParallel would move between GPUs — and the simulator's (`simulated_bytes`). CPU
autograd runs the replicas' backward one after another (on GPUs each device has its own thread).
With ≥ n GPUs, `run_dp` uses the real `nn.DataParallel` instead.

Run: `run_dp(world_size=4)` → losses and parameters vs one process, bytes per device and per phase.
"""
from __future__ import annotations

import copy
from concurrent.futures import ThreadPoolExecutor

import torch
from torch import nn

from .._checks import check_int, check_ranks
from ..sim.data_parallel import Workload, simulate_dp
from .models import TINY_MLP, check_batch, flat_params, loss_fn, make_batch, make_mlp, reference_train

PHASES = ("scatter inputs", "replicate", "gather outputs", "scatter grads", "reduce grads")  # the simulator's names


class Transfers:
    """Bytes each device sent, per phase: `sent[phase][device]`. Device 0 → device 0 costs nothing."""

    def __init__(self, world_size: int):
        self.sent = {phase: [0] * world_size for phase in PHASES}

    def add(self, phase: str, src: int, dst: int, tensor: torch.Tensor) -> None:
        if src != dst:
            self.sent[phase][src] += tensor.numel() * tensor.element_size()

    def per_device(self) -> list[int]:
        return [sum(col) for col in zip(*self.sent.values())]


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


class _Replicate(torch.autograd.Function):
    """Forward: device 0's parameters → n copies (the broadcast). Backward: sum the n copies' gradients
    into device 0's parameters (the reduce) — the same pair as torch's Broadcast/ReduceAddCoalesced."""

    @staticmethod
    def forward(ctx, transfers, n, *params):
        ctx.transfers, ctx.n = transfers, n
        copies = []
        for d in range(n):
            for p in params:
                transfers.add("replicate", 0, d, p)
                copies.append(p.view_as(p) if d == 0 else p.clone())  # device 0 uses its own weights
        return tuple(copies)

    @staticmethod
    def backward(ctx, *grads):
        k = len(grads) // ctx.n  # grads: n devices × k parameters
        sums = []
        for j in range(k):
            total = grads[j].clone()  # device 0's own gradient: no transfer
            for d in range(1, ctx.n):
                ctx.transfers.add("reduce grads", d, 0, grads[d * k + j])
                total += grads[d * k + j]
            sums.append(total)
        return (None, None, *sums)


class _Gather(torch.autograd.Function):
    """Forward: the n outputs → one tensor on device 0. Backward: its gradient, scattered back."""

    @staticmethod
    def forward(ctx, transfers, *outputs):
        ctx.transfers, ctx.rows = transfers, [o.shape[0] for o in outputs]
        for d, out in enumerate(outputs):
            transfers.add("gather outputs", d, 0, out)
        return torch.cat(outputs)  # (B, out)

    @staticmethod
    def backward(ctx, grad):
        parts = grad.split(ctx.rows)  # (B/n, out) each
        for d, part in enumerate(parts):
            ctx.transfers.add("scatter grads", 0, d, part)
        return (None, *(part.contiguous() for part in parts))


class ThreadDataParallel(nn.Module):
    """`nn.DataParallel` on CPU threads: `ThreadDataParallel(model, n)(x)` returns the gathered output."""

    def __init__(self, module: nn.Module, world_size: int):
        super().__init__()
        self.module, self.world_size = module, check_ranks("world_size", world_size)
        self.names = [name for name, _ in module.named_parameters()]
        # the module *structure* is copied once; its weights are re-broadcast every forward, as DP must
        self.replicas = [copy.deepcopy(module) for _ in range(world_size)]
        self.pool = ThreadPoolExecutor(world_size, thread_name_prefix="simlab-dp")
        self.transfers = Transfers(world_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, t = self.world_size, self.transfers
        chunks = [c if d == 0 else c.clone() for d, c in enumerate(x.chunk(n))]  # (B/n, in) each
        for d, chunk in enumerate(chunks):  # 1. scatter: device 0 sends each other device its rows
            t.add("scatter inputs", 0, d, chunk)
        copies = _Replicate.apply(t, n, *self.module.parameters())  # 2. replicate
        k = len(self.names)
        for d, replica in enumerate(self.replicas):  # plant the copies where the replica looks for weights
            for j, name in enumerate(self.names):
                owner, _, leaf = name.rpartition(".")
                replica.get_submodule(owner)._parameters[leaf] = copies[d * k + j]
        outputs = list(self.pool.map(lambda d: self.replicas[d](chunks[d]), range(n)))  # 3. forward
        return _Gather.apply(t, *outputs)  # 4. gather on device 0: (B, out)

    def close(self) -> None:
        self.pool.shutdown()


def run_dp(world_size: int, steps: int = 5, global_batch: int = 16, seed: int = 0, sizes=TINY_MLP,
           lr: float = 0.1) -> dict:
    """Train with DP for `steps` SGD steps and compare with one process on the whole batch."""
    check_ranks("world_size", world_size)
    check_int("steps", steps, 1)
    check_batch(global_batch, world_size)
    batch = make_batch(global_batch, sizes[0], sizes[-1], seed)
    model = make_mlp(sizes, seed)
    backend = "cuda" if torch.cuda.device_count() >= world_size else "threads"  # NVML only: no CUDA init
    if backend == "cuda":  # the real thing: device 0 = cuda:0; bytes: the simulator's
        dp = nn.DataParallel(model.cuda(), device_ids=list(range(world_size)))
        batch = tuple(t.cuda() for t in batch)
    else:
        dp = ThreadDataParallel(model, world_size)
    opt, losses = torch.optim.SGD(model.parameters(), lr=lr), []
    try:
        for _ in range(steps):
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(dp(batch[0]), batch[1])  # 5. loss and backward on device 0
            loss.backward()
            opt.step()  # 6. only device 0's model is updated; the next forward re-broadcasts it
            losses.append(loss.item())
    finally:
        if backend == "threads":
            dp.close()
    reference = make_batch(global_batch, sizes[0], sizes[-1], seed)
    ref_losses, ref_params = reference_train(lambda: make_mlp(sizes, seed), reference, steps, lr)
    expected = simulated_bytes(model, world_size, global_batch, sizes[0], sizes[-1])
    phase_bytes = expected if backend == "cuda" else {  # measured: one step's worth, per device
        phase: [b // steps for b in sent] for phase, sent in dp.transfers.sent.items()}
    return {"losses": losses, "reference_losses": ref_losses,
            "max_abs_diff_vs_reference": (flat_params(model).cpu() - ref_params).abs().max().item(),
            "bytes_sent_per_rank": [sum(col) for col in zip(*phase_bytes.values())],  # one step, per device
            "phase_bytes": phase_bytes, "expected_phase_bytes": expected,
            "backend": backend, "world_size": world_size}
