"""ZeRO stages 1, 2 and 3 (and optimizer offload), written from scratch on torch.distributed.

What it teaches: data parallelism keeps N identical copies of everything; ZeRO keeps one copy, cut in N.
Each Linear layer's weight+bias is flattened into one buffer padded to a multiple of N; rank r owns
elements [r·S, (r+1)·S) with S = ceil(P / N) — its *shard*. Then, per step:
  stage 1: full grads as in DDP, but reduce-scatter them (all layers in one bucket), run Adam on the own
           shard only (m, v: S each), all-gather the updated shards back into the full params;
  stage 2: as 1, but each layer's grads are reduce-scattered the moment backward produced them and the
           full grads are freed at once: only the own grad shard is kept;
  stage 3: the params themselves live as shards; a layer gathers its full params just before forward,
           frees them after, gathers again for backward and reduce-scatters its grads straight away;
  offload: the fp32 master shard, Adam's m and v and the grad shard live on the host (CPU); the device
           only computes. Here device and host are both the CPU, but the copies are the real data path.
The layout and the two collectives live in `simlab.exec.zero_shards`, the sharded and traced layers in
`simlab.exec.zero_layers`. ZeRO shards over a process `group`
(default WORLD; in 3-D parallelism the data-parallel group): N is its size, "rank" our rank in it.
Tensors stay on the model's device; offloaded state goes to the host. Every kept tensor is counted in
`memory()`, and every compute and collective lands in `rec.events` (a `simlab.trace.Recorder`; a
collective's nbytes is what this rank sent, in the ring accounting of `simlab.sim.memory`), named and
ordered as the simulator's walkthrough (`simlab.sim.zero`): forward/backward per layer, one "step".
Run it: see `simlab.parity.zero.run_zero`.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from .._checks import check_int
from ..sim.memory import check_offload
from ..trace import Recorder
from .zero_layers import ShardedLinear, TracedLinear
from .zero_shards import (
    all_gather,
    bytes_sent,
    from_rows,
    into_rows,
    new_rows,
    own_block,
    reduce_scatter_mean,
    shard_size,
)

HOST = torch.device("cpu")  # where offloaded state lives; on a GPU machine this is a real device→host copy


def adam_update(param, grad, exp_avg, exp_avg_sq, step: int, lr: float, betas=(0.9, 0.999), eps: float = 1e-8):
    """One Adam step in place, the same operations in the same order as torch.optim.Adam (single-tensor)."""
    beta1, beta2 = betas
    exp_avg.lerp_(grad, 1 - beta1)  # m ← β1·m + (1-β1)·g
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)  # v ← β2·v + (1-β2)·g²
    step_size = lr / (1 - beta1 ** step)  # bias corrections: m and v start at 0
    denom = (exp_avg_sq.sqrt() / (1 - beta2 ** step) ** 0.5).add_(eps)
    param.addcdiv_(exp_avg, denom, value=-step_size)


# ---------------------------------------------------------------- the optimizer that owns the shards

class ZeroAdam:
    """Adam on this rank's shards. Wraps `model` in place (stage 3 swaps its Linears for ShardedLinears).

    Use like any optimizer: `zero_grad()`, `loss.backward()`, `step()`. The model's parameters may live
    on any device (each rank's own GPU under NCCL); the shards, buckets and Adam state follow them.
    """

    def __init__(self, model: nn.Sequential, stage: int, group=None, lr: float = 1e-3, offload: bool = False):
        check_offload(offload, check_int("stage", stage, 1, 3))  # the memory model's rules, once
        self.model, self.stage, self.offload, self.lr, self.group = model, stage, offload, lr, group
        self.rank, self.n, self.t = dist.get_rank(group), dist.get_world_size(group), 0
        self.rec = Recorder(self.rank)
        self.layers = [(i, m) for i, m in enumerate(model) if isinstance(m, nn.Linear)]
        self.sizes = [shard_size(m.weight.numel() + m.bias.numel(), self.n) for _, m in self.layers]  # S_l
        self.offsets = [sum(self.sizes[:k]) for k in range(len(self.sizes))]  # layer k's place in a rank's row
        where = HOST if offload else self.layers[0][1].weight.device  # Adam's state: host or the model's device
        for k, (i, m) in enumerate(self.layers):  # stages 1/2: self.layers keeps the nn.Linear itself
            model[i] = ShardedLinear(m, k, group, self.rec) if stage == 3 else TracedLinear(m, k, self.rec)
        if stage == 3:  # ... stage 3 the ShardedLinear: a reference to the nn.Linear would keep its full
            self.layers = [(i, model[i]) for i, _ in self.layers]  # weights alive, ZeRO-3's saving lost
        self.exp_avg = [torch.zeros(s, device=where) for s in self.sizes]  # (S,) each
        self.exp_avg_sq = [torch.zeros(s, device=where) for s in self.sizes]
        self.grad_shards = [None] * len(self.sizes)  # stage 2 / offload: the reduced (S,) grads we keep
        self.master = ([self._own_shard(k).to(HOST, copy=True) for k in range(len(self.sizes))]
                       if offload else None)  # fp32 master shards on the host
        self._hooks = []
        self._pending = [2] * len(self.sizes)  # grads (weight, bias) each layer still waits for
        if stage == 2:  # reduce-scatter each layer as soon as backward has produced its last grad
            for k, (_, m) in enumerate(self.layers):
                for p in (m.weight, m.bias):
                    self._hooks.append(p.register_post_accumulate_grad_hook(lambda p, k=k: self._ready(k)))

    def _own_shard(self, k: int) -> torch.Tensor:
        """This rank's (S,) slice of layer k's params: stage 3 the kept shard itself (updated in place),
        stages 1/2 a transient copy cut from the full params."""
        i, m = self.layers[k]
        if self.stage == 3:
            return self.model[i].shard.detach()
        return own_block([m.weight, m.bias], self.rank, self.sizes[k])

    def _ready(self, k: int) -> None:
        self._pending[k] -= 1
        if self._pending[k] == 0:  # weight and bias grads may arrive in either order: wait for both
            self._pending[k] = 2
            self._reduce(k)

    def _reduce(self, k: int) -> None:
        """Stages 1/2: layer k's full local grads → own mean grad shard (stage 2 frees the full grads)."""
        m = self.layers[k][1]
        rows = new_rows(m.weight.numel() + m.bias.numel(), self.n, m.weight.device)  # (N, S)
        into_rows(rows, [m.weight.grad, m.bias.grad])
        shard = self.rec.timed("comm", f"reduce-scatter L{k}", lambda: reduce_scatter_mean(rows, self.group).clone(),
                               nbytes=bytes_sent("reduce-scatter", rows, self.group))  # clone: keep S, not (N, S)
        if self.stage == 2:
            m.weight.grad = m.bias.grad = None  # ZeRO-2's saving: no full grad outlives its layer's backward
        self.grad_shards[k] = shard.to(HOST, copy=True) if self.offload else shard  # device → host

    def zero_grad(self, set_to_none: bool = True) -> None:  # always to None: that frees the memory
        self.grad_shards = [None] * len(self.sizes)
        for p in self.model.parameters():
            p.grad = None

    def _reduce_all(self) -> None:
        """Stage 1: every layer's grads in ONE reduce-scatter, like DeepSpeed's flat buffer.

        The bucket is rank-major, (N, ΣS): row r holds rank r's block of every layer, so what rank r
        receives is its own blocks, layer after layer — the same ownership as per layer, for one
        collective's latency instead of one per layer. The bucket lives until `_gather_all` reuses it."""
        self._bucket = torch.empty(self.n, sum(self.sizes), device=self.layers[0][1].weight.device)  # (N, ΣS)
        for k, (_, m) in enumerate(self.layers):
            into_rows(self._block(k), [m.weight.grad, m.bias.grad])
        names = " ".join(f"L{k}" for k in reversed(range(len(self.sizes))))  # backward order, as simulated
        shard = self.rec.timed("comm", f"reduce-scatter {names}", lambda: reduce_scatter_mean(
            self._bucket, self.group), nbytes=bytes_sent("reduce-scatter", self._bucket, self.group))  # (ΣS,): our row
        self.grad_shards = [shard[o:o + s] for o, s in zip(self.offsets, self.sizes)]  # (S_k,) each

    def _block(self, k: int) -> torch.Tensor:
        return self._bucket[:, self.offsets[k]:self.offsets[k] + self.sizes[k]]  # (N, S_k): layer k's rows

    @torch.no_grad()
    def step(self) -> None:
        """Adam on every own shard (one "step" event, as the walkthrough has), then stages 1-2 gather."""
        self.t += 1
        if self.stage == 1:
            self._reduce_all()
        params = self.rec.timed("compute", "step", lambda: [self._update(k) for k in range(len(self.sizes))])
        if self.stage == 1:
            self._gather_all()
            self.grad_shards = [None] * len(self.sizes)  # transient in stage 1: the full grads are kept
        else:  # stage 2: each layer's all-gather, first layer first (stage 3 gathers in the next forward)
            for k, param in enumerate(params):
                self._write_back(k, param)
        self.rec.step += 1

    def _update(self, k: int) -> torch.Tensor:
        """Adam on layer k's own (S,) shard; returns the updated shard (stage 1: written into the bucket)."""
        grad = self.model[self.layers[k][0]].shard.grad if self.stage == 3 else self.grad_shards[k]
        if self.stage == 3 and self.offload:
            grad = self.grad_shards[k] = grad.to(HOST, copy=True)  # device → host
            self.model[self.layers[k][0]].shard.grad = None
        param = self.master[k] if self.offload else self._own_shard(k)  # (S,)
        adam_update(param, grad, self.exp_avg[k], self.exp_avg_sq[k], self.t, self.lr)
        if self.stage == 1:  # into our row of the bucket: this layer's grad shard there is used up
            self._block(k)[self.rank] = param
        return param

    def _gather_all(self) -> None:
        """Stage 1: every layer's updated own block (our row of the bucket) in ONE all-gather, in place."""
        names = " ".join(f"L{k}" for k in range(len(self.sizes)))
        self.rec.timed("comm", f"all-gather {names}", lambda: all_gather(self._bucket, self.group),
                       nbytes=bytes_sent("all-gather", self._bucket, self.group))
        for k, (_, m) in enumerate(self.layers):
            from_rows(self._block(k), [m.weight, m.bias])
        self._bucket = None  # transient: a second full-size buffer only during step()

    def _write_back(self, k: int, param: torch.Tensor) -> None:
        i, m = self.layers[k]
        if self.stage == 3:  # the next forward gathers: only our own shard needs the new values
            if self.offload:
                self.model[i].shard.copy_(param)  # host → device
            return
        rows = new_rows(m.weight.numel() + m.bias.numel(), self.n, m.weight.device)  # (N, S)
        rows[self.rank] = param  # host → device when offloading
        self.rec.timed("comm", f"all-gather L{k}", lambda: all_gather(rows, self.group),
                       nbytes=bytes_sent("all-gather", rows, self.group))
        from_rows(rows, [m.weight, m.bias])

    def memory(self) -> dict:
        """Bytes of the tensors this rank keeps now, device and host (the host only when offloading)."""

        def nbytes(ts):
            return sum(t.numel() * t.element_size() for t in ts if t is not None)

        params = [p for p in self.model.parameters()]
        grads = [p.grad for p in params] + ([] if self.offload else self.grad_shards)
        states = self.exp_avg + self.exp_avg_sq
        host = nbytes(self.master + self.grad_shards + states) if self.offload else 0
        return {"params": nbytes(params), "grads": nbytes(grads),
                "optimizer": 0 if self.offload else nbytes(states), "cpu": host}

    def close(self) -> None:
        for handle in self._hooks:
            handle.remove()
        self._hooks = []
