"""3-D parallelism on real processes: a small GPT trained with tensor parallelism inside each pipeline
stage, the pipeline across stages, and data parallelism (optionally ZeRO-1) across replicas — lessons
1 to 5 on one set of ranks, the primer's "DP+TP+PP+ZeRO-1".

What it teaches: nothing new is needed, only groups. `simlab.exec.mesh.new_groups` gives each rank its
TP, DP and PP group (Megatron's grid: TP fastest, then DP, then PP), and every engine already takes one:
- TP (lesson 5): each block's attention and MLP are `ParallelSelfAttention` / `ParallelMLP` on the TP
  group; the token table and the output layer are split by vocabulary (`VocabParallelEmbedding`, a
  column-parallel head) and the loss is the vocab-parallel cross-entropy, as in Megatron;
- PP (lesson 4): the model is cut into p·v chunks, rank r of the PP group runs chunks r, r+p, … with
  `PipelineRank` and the lesson's action lists (1F1B, interleaved), sending (b, s, h) activations;
- DP (lessons 2–3): after the pipeline flushes, the gradients are averaged over the DP group — one ring
  all-reduce of the flat gradients, or ZeRO-1: reduce-scatter, Adam on this rank's shard only, all-gather.
- CP (lesson 7): with a `ContextShard`, each rank holds the zig-zag positions of its CP coordinate
  (`sim.context_parallel.positions`), the embedding looks those positions up, and each block's attention runs
  over the CP group (`ContextParallelSelfAttention`: ring attention, or `cp_comm`'s other variants) on the TP
  rank's heads, causal. Each rank's loss is the mean over its own tokens; every rank holds as many, so the
  mean of those means over the dp-cp group is the batch's mean, and reducing gradients over dp-cp (Megatron's
  data-parallel group with context parallelism) gives its gradient.
`simlab.sim.hybrid_traffic` predicts every byte each group carries; `simlab.parity.hybrid` checks it.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from ..sim.hybrid_traffic import chunks_of, layers_per_chunk
from ..sim.model import Transformer
from ..trace import Recorder
from .collectives import ring_all_reduce
from .context_parallel import context_parallel_attention
from .models import GPT, make_gpt
from .tensor_parallel import ColumnParallelLinear, CommStats, ParallelMLP, ParallelSelfAttention, ReduceFromTP
from .zero import adam_update
from .zero_shards import all_gather, bytes_sent, from_rows, into_rows, new_rows, own_block, reduce_scatter_mean


def gpt_for(model: Transformer, seed: int = 0) -> GPT:
    """The seeded GPT of a run's `model` (`sim.hybrid_run.HybridRun.model`), whole, on the CPU: the one
    process trains it, and every rank cuts its own part out of it (`make_chunks`)."""
    return make_gpt(model.layers, model.hidden, model.heads, model.seq, model.vocab, seed)


def _vocab_rows(vocab: int, stats: CommStats) -> slice:
    """The rows of a vocabulary of `vocab` tokens this TP rank owns: [r·V/t, (r+1)·V/t)."""
    rows = vocab // stats.world_size  # `sim.hybrid_run.HybridRun` checks that t divides V
    return slice(stats.rank * rows, (stats.rank + 1) * rows)


def _copy(module: nn.Module, device) -> nn.Module:
    """A replicated module (a norm): the same on every TP rank, its own parameters."""
    out = type(module)(module.normalized_shape).to(device)
    out.load_state_dict(module.state_dict())
    return out


class VocabParallelEmbedding(nn.Module):
    """Rank r keeps rows [r·V/t, (r+1)·V/t) of the token table: it embeds the tokens it owns, zeros for the
    rest, and g's all-reduce sums the ranks' parts into every token's embedding. Positions are replicated;
    `positions` (s/cp,): the ones this CP rank's tokens sit at (None: 0, 1, … as many as there are tokens)."""

    def __init__(self, gpt: GPT, stats: CommStats, device=None, positions: torch.Tensor | None = None):
        super().__init__()
        rows, self.stats, self.positions = _vocab_rows(gpt.tok.num_embeddings, stats), stats, positions
        self.start = rows.start
        self.weight = nn.Parameter(gpt.tok.weight[rows].detach().to(device, copy=True))  # (V/t, h)
        self.pos = nn.Parameter(gpt.pos.weight.detach().to(device, copy=True))  # (s, h)

    def forward(self, tokens):  # (b, s/cp) int64 (cp = 1: the whole sequence)
        local = tokens - self.start
        outside = (local < 0) | (local >= self.weight.shape[0])
        part = F.embedding(local.masked_fill(outside, 0), self.weight).masked_fill(outside.unsqueeze(-1), 0)
        pos = self.pos[:tokens.shape[1]] if self.positions is None else self.pos[self.positions]  # (s/cp, h)
        return ReduceFromTP.apply(part, self.stats) + pos  # (b, s/cp, h)


def _reduce(x: torch.Tensor, stats: CommStats, op) -> torch.Tensor:
    """An all-reduce of the loss's small (b, s) tensors, counted with the layers' collectives."""
    start = stats.rec.now()
    dist.all_reduce(x, op=op, group=stats.group)
    stats.record("forward", "all-reduce", x.numel(), x.element_size(), start)
    return x


class VocabParallelCrossEntropy(torch.autograd.Function):
    """Cross-entropy on logits split by vocabulary (b, s, V/t), without gathering them: the ranks agree on
    each token's max, then on its sum of exponentials and its target's logit — three (b, s) all-reduces."""

    @staticmethod
    def forward(ctx, logits, targets, stats, start):  # (b, s, V/t), (b, s)
        shifted = logits - _reduce(logits.max(-1).values, stats, dist.ReduceOp.MAX).unsqueeze(-1)
        exp = shifted.exp()
        total = _reduce(exp.sum(-1), stats, dist.ReduceOp.SUM)  # (b, s)
        local = targets - start
        mine = (local >= 0) & (local < logits.shape[-1])
        picked = shifted.gather(-1, local.clamp(0, logits.shape[-1] - 1).unsqueeze(-1)).squeeze(-1)
        target = _reduce(picked * mine, stats, dist.ReduceOp.SUM)  # (b, s)
        ctx.save_for_backward(exp / total.unsqueeze(-1), local, mine)
        return (total.log() - target).mean()

    @staticmethod
    def backward(ctx, grad):  # softmax - one-hot(target), on this rank's columns only; no communication
        softmax, local, mine = ctx.saved_tensors
        out = softmax.clone()
        hit = out.gather(-1, local.clamp(0, out.shape[-1] - 1).unsqueeze(-1)).squeeze(-1) - mine.to(out.dtype)
        out.scatter_(-1, local.clamp(0, out.shape[-1] - 1).unsqueeze(-1), hit.unsqueeze(-1))
        return out * grad / local.numel(), None, None, None


@dataclass(frozen=True)
class ContextShard:
    """This rank's part of the sequence under context parallelism: the `positions` (s/cp,) its tokens sit at, the CP
    `group` attention runs over, how K,V travel (`variant`, one of `sim.context_parallel_costs.VARIANTS`), and the
    Recorder its sends are counted in (`rec.bytes_sent`: the "cp" group's bytes)."""

    positions: torch.Tensor
    group: object
    variant: str
    rec: Recorder


class ContextParallelSelfAttention(ParallelSelfAttention):
    """TP's head split (lesson 5), with the sequence split over the CP group too: this rank's queries, keys and
    values for its heads (a/t of them) and its tokens (s/cp) meet every key of the sequence through
    `exec.context_parallel.context_parallel_attention`, causal, in the zig-zag layout the positions follow."""

    context: ContextShard

    def forward(self, x):  # (b, s/cp, h): this CP rank's tokens
        b, n, _ = x.shape
        q, k, v = (z.reshape(b, n, -1, self.head_dim).transpose(1, 2)  # (b, a/t, s/cp, h/a) each
                   for z in self.qkv(x).chunk(3, dim=-1))
        c = self.context
        out = context_parallel_attention(q, k, v, variant=c.variant, group=c.group, recorder=c.rec)  # as q
        return self.wo(out.transpose(1, 2).reshape(b, n, -1))  # (b, s/cp, h/t) → (b, s/cp, h)


class ParallelBlock(nn.Module):
    def __init__(self, block: nn.Module, stats: CommStats, device=None, context: ContextShard | None = None):
        super().__init__()
        self.ln1, self.ln2 = _copy(block.ln1, device), _copy(block.ln2, device)
        if context is None:
            self.attn = ParallelSelfAttention.from_full(block.attn, stats=stats, device=device)
        else:  # the same TP split, attention over the CP group
            self.attn = ContextParallelSelfAttention.from_full(block.attn, stats=stats, device=device)
            self.attn.context = context
        self.mlp = ParallelMLP.from_full(block.mlp, stats=stats, device=device)

    def forward(self, x):  # (b, s/cp, h)
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class ParallelHead(nn.Module):
    """The final norm and the output layer, column-parallel over the vocabulary: logits (b, s, V/t)."""

    def __init__(self, gpt: GPT, stats: CommStats, device=None):
        super().__init__()
        self.ln, self.proj = _copy(gpt.ln_f, device), ColumnParallelLinear.from_full(gpt.head, stats=stats,
                                                                                     device=device)

    def forward(self, x):
        return self.proj(self.ln(x))


def make_chunks(gpt: GPT, plan, pp_rank: int, stats: CommStats, device=None,
                context: ContextShard | None = None) -> dict[int, nn.Module]:
    """{chunk index: module} this pipeline rank runs under `plan` (`sim.hybrid.Plan`); chunk c holds layers
    [c·L/S, (c+1)·L/S) of S = p·v, chunk 0 the embedding too and chunk S − 1 the output layer. `context`:
    this rank's part of the sequence when plan.cp > 1 (None: the whole sequence)."""
    per, last = layers_per_chunk(len(gpt.blocks), plan), plan.pp * plan.chunks - 1
    positions = None if context is None else context.positions
    out = {}
    for c in chunks_of(plan, pp_rank):
        parts = [VocabParallelEmbedding(gpt, stats, device, positions)] if c == 0 else []
        parts += [ParallelBlock(b, stats, device, context) for b in gpt.blocks[c * per:(c + 1) * per]]
        out[c] = nn.Sequential(*parts, *([ParallelHead(gpt, stats, device)] if c == last else []))
    return out


def loss_for(stats: CommStats, vocab: int):
    """The last chunk's loss(logits (b, s, V/t), targets (b, s)) over a vocabulary of `vocab` tokens, for
    `PipelineRank(loss=...)`: this rank's logits are the columns of the rows its embedding owns."""
    start = _vocab_rows(vocab, stats).start
    return lambda logits, targets: VocabParallelCrossEntropy.apply(logits, targets, stats, start)


class DataParallelAdam:
    """Adam after the DP group agrees on the gradients: ZeRO 0 all-reduces the flat gradients (our ring)
    and every rank updates everything; ZeRO-1 reduce-scatters one rank-major bucket (lesson 3's layout),
    updates this rank's shard only (Adam state: 2·ceil(P/N) values), and all-gathers the result.
    `eps`: the lesson uses 1e-5, not Adam's 1e-8. Some gradients are zero in exact arithmetic — the key
    bias: softmax does not change when every score of a row moves together — and float rounding leaves
    ~1e-9 there, in one process and in many alike but not equal; Adam divides by √v + eps, so with
    eps = 1e-8 that noise becomes an update of ~lr/10 per step, and the two runs drift apart for no reason."""

    def __init__(self, params: list, zero: int, group, lr: float, eps: float = 1e-5):
        self.params, self.zero, self.group, self.lr, self.eps, self.t = params, zero, group, lr, eps, 0
        self.n, self.rank = dist.get_world_size(group), dist.get_rank(group)
        self.numel = sum(p.numel() for p in params)
        self.size = -(-self.numel // self.n)  # S: this rank's shard of the flat bucket
        shape = (self.numel,) if zero == 0 else (self.size,)
        self.exp_avg, self.exp_avg_sq = (torch.zeros(shape, device=params[0].device) for _ in range(2))
        self.bytes_sent = 0

    @torch.no_grad()
    def step(self) -> None:
        self.t += 1
        grads = [p.grad for p in self.params]
        if self.zero == 0:
            flat, counted = torch.cat([g.reshape(-1) for g in grads]), Recorder(self.rank)  # (P,)
            ring_all_reduce(flat, counted, group=self.group)
            self.bytes_sent += counted.bytes_sent  # measured: what the ring really sent
            param = torch.cat([p.reshape(-1) for p in self.params])
            adam_update(param, flat.div_(self.n), self.exp_avg, self.exp_avg_sq, self.t, self.lr, eps=self.eps)
            from_rows(param.view(1, -1), self.params)
            return
        rows = new_rows(self.numel, self.n, self.params[0].device)  # (N, S)
        into_rows(rows, grads)
        self.bytes_sent += bytes_sent("reduce-scatter", rows, self.group) + bytes_sent("all-gather", rows, self.group)
        grad = reduce_scatter_mean(rows, self.group).clone()  # (S,): the mean of our shard's gradients
        mine = own_block(self.params, self.rank, self.size)
        adam_update(mine, grad, self.exp_avg, self.exp_avg_sq, self.t, self.lr, eps=self.eps)
        rows[self.rank] = mine
        from_rows(all_gather(rows, self.group), self.params)

    def memory(self) -> dict:
        nbytes = lambda ts: sum(t.numel() * t.element_size() for t in ts if t is not None)  # noqa: E731 — a one-line local helper
        return {"params": nbytes(self.params), "grads": nbytes(p.grad for p in self.params),
                "optimizer": nbytes([self.exp_avg, self.exp_avg_sq])}

