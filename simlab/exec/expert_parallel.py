"""Expert parallelism on real ranks: a mixture-of-experts MLP whose experts are spread over a process group,
tokens sent to them and back with all-to-all, forward and backward.

What it teaches: an MoE layer is a router and E small MLPs; each token runs through only its top-k experts.
Spread the experts over N ranks (E/N each) and every rank, holding its own tokens, must send each chosen
token to the rank holding that expert (dispatch), let it compute, and bring the result back (combine) — two
all-to-alls, with uneven splits, because the router decides the counts. Backward runs the same exchanges
reversed: `AllToAll`'s backward is the all-to-all with the splits swapped (as TP's f and g are autograd
Functions over their collectives). The steps and their names are `simlab.sim.expert_parallel_dispatch.STEPS`;
the routing rules (softmax then top-k, capacity, drops in GShard's order) are `simlab.sim.expert_parallel`'s,
written here again in torch, the vectorised way Megatron writes them (a cumulative sum per expert).

`MoE` is the unsplit layer in one process (the reference); `ExpertParallelMoE.from_full(moe, group)` cuts it
for this rank: the whole router (replicated) and its E/N experts. `exchange="torch"` swaps our AllToAll for
torch's differentiable `all_to_all_single_autograd` (what torchtitan's expert parallelism uses).
Each all-to-all records one "send" and one "recv" Event per peer it exchanged rows with (global ranks,
nbytes = rows × row bytes; the rank's own rows stay put); route, experts and weighted sum one "compute" each.

Run it: python -c "from simlab.parity.expert_parallel import run_expert_parallel as r; print(r(world_size=2))"
"""
from __future__ import annotations

import copy
import math

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from .._checks import check_choice, check_divisible
from ..sim.expert_parallel import capacity
from ..sim.expert_parallel_dispatch import STEPS
from ..trace import Recorder

EXCHANGES = ("ours", "torch")


def route(logits: torch.Tensor, top_k: int, capacity_factor: float | None, renormalize: bool = False):
    """(T, E) logits → experts (T, k) best first, weights (T, k) (differentiable), kept (T, k) bool.

    Top-k on the logits (softmax keeps their order); weights are the softmax probabilities of the chosen
    experts. Drops: a choice's place in its expert's buffer is the number of earlier claims on that expert,
    counting every token's first choice before any second choice (choice-major order), kept if < capacity."""
    tokens, experts = logits.shape
    chosen = logits.topk(top_k, dim=1).indices  # (T, k)
    weights = logits.softmax(dim=1).gather(1, chosen)  # (T, k)
    if renormalize:
        weights = weights / weights.sum(dim=1, keepdim=True)
    cap = capacity(tokens, experts, top_k, capacity_factor)
    if cap is None:
        return chosen, weights, torch.ones_like(chosen, dtype=torch.bool)
    claims = F.one_hot(chosen.T.reshape(-1), experts)  # (k·T, E): choice-major, tokens in order within a choice
    place = (claims.cumsum(dim=0) * claims).sum(dim=1) - 1  # (k·T,): earlier claims on the same expert
    return chosen, weights, (place < cap).reshape(top_k, tokens).T


class ExpertMLP(nn.Module):
    """One expert: Linear(h, ffn) → GeLU → Linear(ffn, h)."""

    def __init__(self, hidden: int, ffn: int):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(hidden, ffn), nn.Linear(ffn, hidden)

    def forward(self, x):  # (rows, h)
        return self.fc2(F.gelu(self.fc1(x)))  # (rows, h)


class MoE(nn.Module):
    """The unsplit layer, in one process: router (no bias) and E experts; every expert on its own rows."""

    def __init__(self, hidden: int, ffn: int, experts: int, top_k: int, capacity_factor: float | None = 1.0,
                 renormalize: bool = False):
        super().__init__()
        self.router = nn.Linear(hidden, experts, bias=False)
        self.experts = nn.ModuleList(ExpertMLP(hidden, ffn) for _ in range(experts))
        self.top_k, self.capacity_factor, self.renormalize = top_k, capacity_factor, renormalize

    def forward(self, x):  # (T, h): one group's tokens (capacity counts over them)
        chosen, weights, kept = route(self.router(x), self.top_k, self.capacity_factor, self.renormalize)
        out = torch.zeros_like(x)  # (T, h)
        for e, expert in enumerate(self.experts):
            tok, choice = ((chosen == e) & kept).nonzero(as_tuple=True)  # the tokens expert e keeps
            out = out.index_add(0, tok, weights[tok, choice].unsqueeze(1) * expert(x[tok]))
        return out


def make_moe(hidden: int, ffn: int, experts: int, top_k: int, capacity_factor: float | None = 1.0,
             renormalize: bool = False, seed: int = 0) -> MoE:
    """The same seeded layer on every rank and in the reference."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return MoE(hidden, ffn, experts, top_k, capacity_factor, renormalize)


def make_tokens(ranks: int, tokens: int, hidden: int, seed: int = 0):
    """X (ranks, T, h), every rank's own tokens, and the upstream gradient dY of the same shape."""
    gen = torch.Generator().manual_seed(seed + 1)
    return torch.randn(ranks, tokens, hidden, generator=gen), torch.randn(ranks, tokens, hidden, generator=gen)


class EPComm:
    """The expert-parallel group a layer exchanges tokens on (None: WORLD) and what it records there."""

    def __init__(self, group=None, rec: Recorder | None = None):
        self.group, self.rank, self.size = group, dist.get_rank(group), dist.get_world_size(group)
        self.global_ranks = [dist.get_global_rank(group, r) if group is not None else r for r in range(self.size)]
        self.rec = rec or Recorder(dist.get_rank())

    def record(self, name: str, sent: list[int], received: list[int], row_bytes: int, start: float) -> None:
        """One all-to-all that began at `start`: a send and a recv Event per peer with rows (global ranks)."""
        step, end, me = STEPS.index(name), self.rec.now(), self.rank
        for peer, (out, into) in enumerate(zip(sent, received)):
            if peer == me:  # own rows: a copy in memory, no link
                continue
            for kind, rows in (("send", out), ("recv", into)):
                if rows:
                    self.rec.record(kind, start, end, name, step=step, peer=self.global_ranks[peer],
                                    nbytes=rows * row_bytes)


def all_to_all_rows(x: torch.Tensor, send: list[int], recv: list[int], comm: EPComm, name: str) -> torch.Tensor:
    """all_to_all_single: send[j] rows of x (in order) to group rank j; recv[j] rows arrive from j, in order."""
    out, start = x.new_empty(sum(recv), *x.shape[1:]), comm.rec.now()
    dist.all_to_all_single(out, x.contiguous(), recv, send, group=comm.group)
    comm.record(name, send, recv, math.prod(x.shape[1:]) * x.element_size(), start)
    return out


class AllToAll(torch.autograd.Function):
    """Rows to peers by `send`, from peers by `recv`; backward sends the gradients' rows back (splits swapped)."""

    @staticmethod
    def forward(ctx, x, send, recv, comm, names):
        ctx.send, ctx.recv, ctx.comm, ctx.name = send, recv, comm, names[1]
        return all_to_all_rows(x, send, recv, comm, names[0])

    @staticmethod
    def backward(ctx, grad):
        return all_to_all_rows(grad, ctx.recv, ctx.send, ctx.comm, ctx.name), None, None, None, None


def torch_exchange(x, send, recv, comm, names):
    """torch's own differentiable all-to-all (unrecorded): the comparison for ours."""
    from torch.distributed._functional_collectives import all_to_all_single_autograd
    group = comm.group if comm.group is not None else dist.group.WORLD
    return all_to_all_single_autograd(x.contiguous(), recv, send, group) + 0  # + 0: waits, a plain tensor


class ExpertParallelMoE(nn.Module):
    """This rank's part of an MoE layer: the whole router and experts [r·E/N, (r+1)·E/N) of the group's N.

    After a forward it keeps what the plan is built from and checked against: `logits` (T, E), `routing`
    (chosen, kept) and `send_counts` (rows sent to each group rank in dispatch)."""

    def __init__(self, router: nn.Linear, experts: nn.ModuleList, num_experts: int, top_k: int,
                 capacity_factor: float | None, renormalize: bool, comm: EPComm, exchange: str = "ours"):
        super().__init__()
        self.router, self.experts, self.comm = router, experts, comm
        self.num_experts, self.top_k, self.capacity_factor, self.renormalize = (num_experts, top_k, capacity_factor,
                                                                                 renormalize)
        self.exchange = check_choice("exchange", exchange, EXCHANGES)
        self.first = comm.rank * len(experts)  # global index of this rank's first expert

    @classmethod
    def from_full(cls, moe: MoE, group=None, device=None, exchange: str = "ours",
                  rec: Recorder | None = None) -> ExpertParallelMoE:
        check_choice("exchange", exchange, EXCHANGES)  # before any process group is touched
        comm = EPComm(group, rec)
        local = check_divisible("experts", len(moe.experts), "ep", comm.size) // comm.size
        mine = moe.experts[comm.rank * local:(comm.rank + 1) * local]
        return cls(copy.deepcopy(moe.router).to(device), copy.deepcopy(mine).to(device), len(moe.experts),
                   moe.top_k, moe.capacity_factor, moe.renormalize, comm, exchange)

    def _all_to_all(self, x, send, recv, names):
        move = AllToAll.apply if self.exchange == "ours" else torch_exchange
        return move(x, send, recv, self.comm, names)

    def forward(self, x):  # (T, h): this rank's own tokens
        comm, rec, n, local = self.comm, self.comm.rec, self.comm.size, len(self.experts)
        # route: top-k and capacity on this rank's tokens; rows to send, sorted by expert (so by rank)
        start = rec.now()
        self.logits = self.router(x)  # (T, E); kept for the plan
        chosen, weights, kept = route(self.logits, self.top_k, self.capacity_factor, self.renormalize)
        self.routing = (chosen.detach(), kept)
        flat = kept.reshape(-1).nonzero(as_tuple=True)[0]  # kept choices, token-major: t·k + c
        dest = chosen.reshape(-1)[flat]  # their experts
        order = flat[dest.argsort(stable=True)]  # grouped by expert, so by rank; tokens in order within
        tok = order // self.top_k  # (A,): the token each row carries
        per_expert = torch.bincount(dest, minlength=self.num_experts)  # (E,)
        rec.record("compute", start, rec.now(), "route", step=STEPS.index("route"))
        # counts: row j of (N, E/N) tells rank j how many rows of each of its experts come from me
        mine = per_expert.reshape(n, local)
        theirs = torch.empty_like(mine)  # (N, E/N): [i, l] rows from rank i for my expert l
        start = rec.now()
        dist.all_to_all_single(theirs, mine, group=comm.group)
        comm.record("counts", [local] * n, [local] * n, mine.element_size(), start)
        self.send_counts = mine.sum(dim=1).tolist()  # rows to each rank
        send, recv = self.send_counts, theirs.sum(dim=1).tolist()
        # dispatch, experts, combine
        rows = self._all_to_all(x[tok], send, recv, ("dispatch", "dispatch backward"))  # (R, h): by source, expert
        start = rec.now()
        expert_of = torch.arange(local, device=x.device).repeat(n).repeat_interleave(theirs.reshape(-1))  # (R,)
        grouped = expert_of.argsort(stable=True)  # rows grouped by my local expert
        pieces = rows[grouped].split(theirs.sum(dim=0).tolist())
        outs = torch.cat([expert(piece) for expert, piece in zip(self.experts, pieces)])  # (R, h), grouped
        outs = outs[grouped.argsort()]  # back in the order the rows arrived
        rec.record("compute", start, rec.now(), "experts", step=STEPS.index("experts"))
        back = self._all_to_all(outs, recv, send, ("combine", "combine backward"))  # (A, h): my rows, my order
        # weighted sum: a token's kept choices, each weighted by its router probability; dropped ones add nothing
        start = rec.now()
        w = weights.reshape(-1)[order].unsqueeze(1)  # (A, 1)
        out = torch.zeros_like(x).index_add(0, tok, w * back)  # (T, h)
        rec.record("compute", start, rec.now(), "weighted sum", step=STEPS.index("weighted sum"))
        return out

    def expert_grads(self) -> dict[str, torch.Tensor]:
        """Each local expert's parameter gradients, named as in the unsplit MoE ("experts.{global e}.fc1.weight")."""
        return {f"experts.{self.first + i}.{name}": p.grad for i, expert in enumerate(self.experts)
                for name, p in expert.named_parameters()}
