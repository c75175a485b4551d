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

Here the "devices" are threads on the CPU and a "transfer" is a copy, counted by `Transfers` (and
recorded as send Events): the bytes are the ones nn.DataParallel would move between GPUs — and the
simulator's (`simlab.sim.data_parallel.simulate_dp`). CPU autograd runs the replicas' backward one
after another (on GPUs each device has its own thread).

Run: `simlab.parity.data_parallel.run_dp(world_size=4)` → losses and parameters vs one process (and vs
torch's own `nn.DataParallel` where there are enough GPUs), bytes per device and per phase.
"""
from __future__ import annotations

import copy
from concurrent.futures import ThreadPoolExecutor

import torch
from torch import nn

from .._checks import check_ranks
from ..trace import Recorder

PHASES = ("scatter inputs", "replicate", "gather outputs", "scatter grads", "reduce grads")  # the simulator's names


class Transfers:
    """Bytes each device sent, per phase: `sent[phase][device]`, and one send Event per transfer in
    `rec.events` (step = the training step, name = the phase). Device 0 → device 0 costs nothing."""

    def __init__(self, world_size: int):
        self.sent = {phase: [0] * world_size for phase in PHASES}
        self.rec = Recorder()

    def add(self, phase: str, src: int, dst: int, tensor: torch.Tensor) -> None:
        if src != dst:
            nbytes = tensor.numel() * tensor.element_size()
            self.sent[phase][src] += nbytes
            now = self.rec.now()
            self.rec.record("send", now, now, phase, rank=src, peer=dst, nbytes=nbytes)


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
