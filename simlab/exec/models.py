"""Tiny deterministic models and data: the same network in every process, so every parallel run can be
checked against one process training it whole (`simlab.parity`).

What it teaches: parallelism must not change the maths. Everything here is seeded (`seeded`), so two
calls with the same arguments build bit-identical models and batches — in any process, on any rank.
The MLP (`make_mlp`) serves DP, DDP, ZeRO and the pipeline; the transformer blocks (`MLP`,
`SelfAttention`, `make_block`) are the unsplit layers tensor parallelism cuts up.

    >>> model = make_mlp([8, 16, 4], seed=0)
    >>> num_params(model)
    212
    >>> x, y = make_batch(6, 8, 4, seed=0)
    >>> tuple(x.shape), tuple(y.shape)
    ((6, 8), (6, 4))
"""
from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F
from torch import nn

from .._checks import check_int

TINY_MLP = (16, 32, 32, 32, 4)  # 2,788 parameters: parity runs take well under a second


@contextlib.contextmanager
def seeded(seed: int):
    """nn.Linear draws its init from torch's global generator: pin it to `seed` inside, restore it after,
    so building a model never disturbs (nor depends on) anyone else's random stream."""
    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        yield
    finally:
        torch.random.set_rng_state(state)


def make_mlp(sizes, seed: int = 0) -> nn.Sequential:
    """Linear → GELU → … → Linear with widths `sizes` (first = inputs, last = outputs), float32, on the CPU.

    The parameter count is Σ (sizes[i] + 1)·sizes[i+1]; use `mlp_sizes(params)` to hit a target.
    """
    sizes = [check_int(f"sizes[{i}]", s, 1) for i, s in enumerate(sizes)]
    if len(sizes) < 2:
        raise ValueError(f"sizes={sizes}: need at least an input and an output width")
    with seeded(seed):
        layers = []
        for i, (fan_in, fan_out) in enumerate(zip(sizes, sizes[1:])):
            layers.append(nn.Linear(fan_in, fan_out, dtype=torch.float32, device="cpu"))
            if i < len(sizes) - 2:  # no activation after the last layer: it is a regression head
                layers.append(nn.GELU())
        return nn.Sequential(*layers)


def mlp_sizes(params: int, depth: int = 4, in_features: int | None = None,
              out_features: int | None = None) -> list[int]:
    """Widths of a `depth`-layer MLP with about `params` parameters (square hidden layers)."""
    check_int("params", params, 1)
    check_int("depth", depth, 1)
    width = max(1, math.ceil(math.sqrt(params / depth)))  # each layer holds ≈ width² weights
    sizes = [width] * (depth + 1)
    sizes[0] = in_features or width
    sizes[-1] = out_features or width
    return sizes


def num_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def make_batch(global_batch: int, in_features: int, out_features: int, seed: int = 0):
    """Inputs (B, in) and regression targets (B, out): standard normal, from their own generator."""
    check_int("global_batch", global_batch, 1)
    gen = torch.Generator().manual_seed(seed + 1)  # +1: never the same stream as the model's init
    x = torch.randn(global_batch, in_features, generator=gen)  # (B, in)
    y = torch.randn(global_batch, out_features, generator=gen)  # (B, out)
    return x, y


def loss_fn(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean squared error, averaged over the batch: the mean is what makes 'average the grads' right."""
    return nn.functional.mse_loss(out, target)


def flat_params(model: nn.Module) -> torch.Tensor:
    """All parameters as one detached 1-D float32 vector (P,), in `parameters()` order."""
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone()


def shard(batch, rank: int, world_size: int):
    """Rank `rank`'s contiguous slice of every tensor in `batch`: rows [rank·b, (rank+1)·b)."""
    out = []
    for t in batch:
        b = t.shape[0] // world_size  # callers check divisibility before any process starts
        out.append(t[rank * b:(rank + 1) * b])  # (B/n, ...)
    return tuple(out)


def train_steps(model, opt, x, y, steps: int, accumulate: int = 1, loss=None) -> list[float]:
    """`steps` SGD steps on (x, y); each step splits into `accumulate` micro-batches, all but the last
    under `model.no_sync()` (DDP's gradient accumulation). Dividing each micro-loss by `accumulate`
    makes the accumulated gradient the whole batch's mean gradient. Returns one loss per step."""
    losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for j, (xm, ym) in enumerate(zip(x.chunk(accumulate), y.chunk(accumulate))):  # (b/a, in), (b/a, out)
            with contextlib.nullcontext() if j == accumulate - 1 else model.no_sync():
                micro = (loss or loss_fn)(model(xm), ym) / accumulate
                micro.backward()
            total += micro.item()
        opt.step()
        losses.append(total)
    return losses


# ---------------------------------------------------------------- transformer blocks (tensor parallel)

def attend(q, k, v, head_dim: int):
    """Causal softmax attention on however many heads q, k, v (b, s, k·h/a) hold (k heads of h/a each: all a,
    or a/N on a tensor-parallel rank); returns (b, s, k·h/a)."""
    b, s, _ = q.shape
    q, k, v = (t.reshape(b, s, -1, head_dim).transpose(1, 2) for t in (q, k, v))  # (b, k, s, h/a)
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (b, k, s, h/a)
    return o.transpose(1, 2).reshape(b, s, -1)  # (b, s, k·h/a)


class MLP(nn.Module):
    """The unsplit transformer MLP: fc2(GeLU(fc1(x))), hidden → ffn → hidden."""

    def __init__(self, hidden: int, ffn: int):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(hidden, ffn), nn.Linear(ffn, hidden)

    def forward(self, x):  # (b, s, h)
        return self.fc2(F.gelu(self.fc1(x)))  # (b, s, ffn) → (b, s, h)


class SelfAttention(nn.Module):
    """The unsplit self-attention: wo(attention(wq x, wk x, wv x)). The head count follows from the shapes,
    so torch's parallelize_module can run this very forward on its local (a/N-head) tensors."""

    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.head_dim = hidden // heads
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(hidden, hidden) for _ in range(4))

    def forward(self, x):  # (b, s, h)
        return self.wo(attend(self.wq(x), self.wk(x), self.wv(x), self.head_dim))


def make_block(block: str, hidden: int, heads: int, ffn: int, seed: int = 0) -> nn.Module:
    """The seeded full block ("mlp" or "attention"), on the CPU: bit-identical in every process."""
    with seeded(seed):
        return MLP(hidden, ffn) if block == "mlp" else SelfAttention(hidden, heads)


def make_input(batch: int, seq: int, hidden: int, seed: int = 0):
    """X (b, s, h) and the upstream gradient dY (b, s, h), from their own generator."""
    gen = torch.Generator().manual_seed(seed + 1)
    return torch.randn(batch, seq, hidden, generator=gen), torch.randn(batch, seq, hidden, generator=gen)


# ---------------------------------------------------------------- a small GPT (lesson 6's 3-D run)

class Block(nn.Module):
    """A pre-norm transformer layer: x + attention(LN(x)), then x + MLP(LN(x))."""

    def __init__(self, hidden: int, heads: int, ffn: int):
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(hidden), SelfAttention(hidden, heads)
        self.ln2, self.mlp = nn.LayerNorm(hidden), MLP(hidden, ffn)

    def forward(self, x):  # (b, s, h)
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """Token + position embeddings, `layers` blocks, a final norm and an untied output layer: tokens (b, s)
    → logits (b, s, V). Its parameters are `simlab.sim.model.Transformer(..., tied=False)`'s, exactly."""

    def __init__(self, layers: int, hidden: int, heads: int, seq: int, vocab: int, ffn: int = 0):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, hidden), nn.Embedding(seq, hidden)
        self.blocks = nn.ModuleList(Block(hidden, heads, ffn or 4 * hidden) for _ in range(layers))
        self.ln_f, self.head = nn.LayerNorm(hidden), nn.Linear(hidden, vocab, bias=False)

    def forward(self, tokens):  # (b, s) int64
        x = self.tok(tokens) + self.pos.weight[:tokens.shape[1]]  # (b, s, h)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))  # (b, s, V)


def make_gpt(layers: int, hidden: int, heads: int, seq: int, vocab: int, seed: int = 0) -> GPT:
    with seeded(seed):
        return GPT(layers, hidden, heads, seq, vocab)


def make_tokens(batch: int, seq: int, vocab: int, seed: int = 0):
    """Random token sequences (B, s) and their next tokens as targets (B, s), int64, seeded."""
    gen = torch.Generator().manual_seed(seed + 2)
    tokens = torch.randint(0, vocab, (batch, seq + 1), generator=gen)
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def gpt_loss(logits, targets):
    """Cross-entropy over all tokens: logits (b, s, V), targets (b, s)."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
