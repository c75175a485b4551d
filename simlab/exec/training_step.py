"""Lesson 5b for real: one transformer layer exactly as Korthikanti et al. 2022 count it, what its forward really
keeps for the backward, the three recomputation modes, and one data-parallel step with gradient accumulation.

What it teaches:
- autograd keeps, for each operation, the tensors its gradient needs (a GEMM its input, the softmax its output,
  GeLU its input, dropout its mask). `SavedTensors` (torch's `saved_tensors_hooks`) sees each of them as the
  forward saves it; counting every storage once (a view shares its base's memory) and leaving out the parameters
  gives the layer's activation memory, labelled by the operation that saved it (`TransformerLayer.site`);
- recomputation trades that memory for time (`torch.utils.checkpoint`, non-reentrant): "selective" checkpoints the
  attention core (QKᵀ, softmax, dropout, ·V: the s² tensors), "full" the whole layer (only its input is kept). The
  gradients do not change: checkpoint restores the RNG state, so the recomputed dropout draws the same mask;
- gradient accumulation (`accumulation_step`): m micro-batches, each loss divided by m so the summed gradient is
  the whole batch's mean, then ONE all-reduce of the gradients per optimizer step (a ring over a flat buffer,
  every byte recorded) — or, to show the cost, one after every micro-batch (m× the bytes, the same update).

The layer (pre-norm, GPT-style): x + Dropout(Proj(Attention(LN(x)))), then + Dropout(FC2(GeLU(FC1(LN(x))))).
Eager attention is softmax(QKᵀ/√d + causal) with dropout on the probabilities; "flash" is torch's
`scaled_dot_product_attention` under its FlashAttention backend (the CPU kernel refuses dropout, so flash runs
without the attention-probability dropout, which FlashAttention on a GPU regenerates instead of storing).
"""
from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.checkpoint import checkpoint

from .._checks import check_choice, check_divisible, check_int, check_number
from ..trace import Recorder
from .collectives import ring_all_reduce
from .models import seeded

ATTENTION = ("eager", "flash")
RECOMPUTE = ("none", "selective", "full")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


class SavedTensors(contextlib.AbstractContextManager):
    """Inside `with SavedTensors(module) as saved:`, every tensor autograd saves for the backward is recorded as
    (site, storage key, bytes, shape, dtype), where `site` is `module.site` at that moment (the operation the
    layer is running). A storage is counted once, at the first site that saves it; `module`'s parameters not at
    all (they are model state, not activations). `bytes_by_site()` adds them up; `total` is the sum."""

    def __init__(self, module: nn.Module):
        self.module, self.records, self._seen = module, [], set()
        self._params = {p.untyped_storage().data_ptr() for p in module.parameters()}
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        key = (storage.data_ptr(), t.device)
        if key[0] not in self._params and key not in self._seen:
            self._seen.add(key)
            self.records.append((self.module.site, key, storage.nbytes(), tuple(t.shape), str(t.dtype)))
        return t  # kept as it is: we only look

    def __enter__(self):
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc):
        return self._hooks.__exit__(*exc)

    def bytes_by_site(self) -> dict:
        out: dict = {}
        for site, _, nbytes, _, _ in self.records:
            out[site] = out.get(site, 0) + nbytes
        return out

    @property
    def total(self) -> int:
        return sum(r[2] for r in self.records)


class TransformerLayer(nn.Module):
    """One pre-norm GPT layer on (b, s, h) inputs: h = hidden, a = heads (h/a features each), ffn = 4h by default;
    dropout p after the attention probabilities (eager only), after the attention block and after the MLP (p = 0:
    no dropout at all, as Llama). `site` names the operation running, for `SavedTensors`."""

    def __init__(self, hidden: int, heads: int, ffn: int = 0, *, dropout: float = 0.1, attention: str = "eager",
                 recompute: str = "none"):
        super().__init__()
        check_int("hidden", hidden, 1)
        check_int("heads", heads, 1)
        check_divisible("hidden", hidden, "heads", heads)
        check_int("ffn", ffn, 0)
        self.p = check_number("dropout", dropout, 0.0, 0.9)
        self.attention, self.recompute = check_choice("attention", attention, ATTENTION), check_choice(
            "recompute", recompute, RECOMPUTE)
        self.heads, self.head_dim, self.site = heads, hidden // heads, None
        self.ln1, self.qkv, self.proj = nn.LayerNorm(hidden), nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
        self.ln2, self.fc1 = nn.LayerNorm(hidden), nn.Linear(hidden, ffn or 4 * hidden)
        self.fc2 = nn.Linear(ffn or 4 * hidden, hidden)

    def _at(self, site: str, fn, *args):
        self.site = site
        return fn(*args)

    def _dropout(self, site: str, x):
        return self._at(site, F.dropout, x, self.p, self.training) if self.p else x  # p = 0: no mask at all

    def _core(self, q, k, v):  # (b, a, s, h/a) each → (b, a, s, h/a)
        s = q.shape[-2]
        if self.attention == "flash":  # the kernel keeps q, k, v, its output and each row's log-sum-exp
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return self._at("flash", F.scaled_dot_product_attention, q, k, v, None, 0.0, True)
        causal = torch.full((s, s), float("-inf"), device=q.device, dtype=q.dtype).triu(1)  # added: nothing saved
        scores = self._at("scores", torch.matmul, q, k.transpose(-2, -1)) / math.sqrt(self.head_dim) + causal
        probs = self._dropout("softmax_dropout", self._at("softmax", F.softmax, scores, -1))  # (b, a, s, s)
        return self._at("context", torch.matmul, probs, v)

    def _layer(self, x):  # (b, s, h)
        b, s, h = x.shape
        qkv = self._at("qkv", self.qkv, self._at("ln1", self.ln1, x))  # (b, s, 3h)
        q, k, v = (t.view(b, s, self.heads, self.head_dim).transpose(1, 2) for t in qkv.split(h, -1))  # (b, a, s, h/a)
        if self.attention == "eager":  # each in its own storage, as Megatron's copies make them: views of qkv would
            q, k, v = q.contiguous(), k.contiguous(), v.contiguous()  # make the first op saving one hold all three
        # (flash keeps the three views, one storage: q + k + v; its output then comes out (b, s, a, h/a) in memory,
        # so the output projection's input below is a view of it, not a copy)
        if self.recompute == "selective" and self.attention == "eager":  # flash keeps no s² tensor to drop
            self.site = "attention_checkpoint"
            o = checkpoint(self._core, q, k, v, use_reentrant=False)
        else:
            o = self._core(q, k, v)
        o = o.transpose(1, 2).reshape(b, s, h)  # (b, s, h): heads side by side again
        x = x + self._dropout("attention_dropout", self._at("out_proj", self.proj, o))
        up = self._at("fc1", self.fc1, self._at("ln2", self.ln2, x))  # (b, s, ffn)
        return x + self._dropout("mlp_dropout", self._at("fc2", self.fc2, self._at("gelu", F.gelu, up)))

    def forward(self, x):  # (b, s, h) → (b, s, h)
        if self.recompute == "full":
            self.site = "layer_checkpoint"
            return checkpoint(self._layer, x, use_reentrant=False)
        return self._layer(x)


def make_layer(hidden: int, heads: int, *, dtype: str = "bf16", seed: int = 0, **options) -> TransformerLayer:
    """A seeded layer (bit-identical for the same arguments, whatever `recompute`), in `dtype`, training mode."""
    check_choice("dtype", dtype, tuple(DTYPES))
    with seeded(seed):
        return TransformerLayer(hidden, heads, **options).to(DTYPES[dtype]).train()


def layer_input(microbatch: int, seq: int, hidden: int, *, dtype: str = "bf16", seed: int = 0):
    """x (b, s, h) requiring grad, and the upstream gradient dY (b, s, h), seeded."""
    gen = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(microbatch, seq, hidden, generator=gen).to(DTYPES[dtype]).requires_grad_()
    return x, torch.randn(microbatch, seq, hidden, generator=gen).to(DTYPES[dtype])


def forward_backward(layer: TransformerLayer, x, dy, seed: int = 0):
    """(saved: `SavedTensors` of the forward, grads: {name: gradient} with the input's as "input") — dropout drawn
    from `seed` without disturbing anyone's random stream."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        with SavedTensors(layer) as saved:
            y = layer(x)
        y.backward(dy)
    grads = {name: p.grad.detach().clone() for name, p in layer.named_parameters()} | {"input": x.grad.clone()}
    return saved, grads


# ---------------------------------------------------------------- data parallel with gradient accumulation

def _all_reduce_mean(params, recorder, group) -> None:
    """Average every parameter's gradient over the group: one ring all-reduce of one flat buffer (P,), recorded
    as one "comm" event whose bytes are what the ring really sent (counted by a Recorder of its own: the ring's
    restarts its clock and numbers its events by ring step)."""
    flat = torch.cat([p.grad.reshape(-1) for p in params])  # (P,)
    counter, start = (Recorder(), recorder.now()) if recorder else (None, 0.0)
    ring_all_reduce(flat, counter, group)
    if recorder:
        recorder.record("comm", start, recorder.now(), "all-reduce gradients", nbytes=counter.bytes_sent)
    flat /= torch.distributed.get_world_size(group)
    for p, g in zip(params, flat.split([p.numel() for p in params])):
        p.grad.copy_(g.view_as(p))


def accumulation_step(model: nn.Module, opt, micro_batches, loss_fn, *, recorder=None, group=None,
                      every_microbatch: bool = False) -> float:
    """One optimizer step over `micro_batches` [(x, y), …] (this rank's m micro-batches): each loss ÷ m, backward
    (gradients add up in `.grad`), then one all-reduce of the mean gradient over `group` and the step. With
    `every_microbatch` the gradients are all-reduced after each backward instead (still correct: the part already
    averaged is equal on every rank; m× the bytes). Returns the step's loss (the mean over its micro-batches)."""
    params = [p for p in model.parameters() if p.requires_grad]
    opt.zero_grad(set_to_none=False)  # zeros, not None: the flat all-reduce needs every gradient
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    m, total = len(micro_batches), 0.0
    for j, (x, y) in enumerate(micro_batches):
        def work(x=x, y=y):
            loss = loss_fn(model(x), y) / m  # the mean over the whole batch is the mean of the micro-means
            loss.backward()
            return loss.item()
        total += recorder.timed("compute", f"micro-batch {j}", work) if recorder else work()
        if every_microbatch:
            _all_reduce_mean(params, recorder, group)
    if not every_microbatch:
        _all_reduce_mean(params, recorder, group)
    opt.step()
    return total
