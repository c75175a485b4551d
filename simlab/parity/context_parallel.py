"""Context parallelism's parity: attention over a sequence split across real ranks, forward and backward, against
one process, against the plan, and against torch's own ring.

`run_context_parallel(world_size=4, seq=16, …)` builds the same seeded Q, K, V and upstream gradient dO on every
rank, gives each rank its tokens (`sim.context_parallel.positions`: zig-zag or contiguous), runs one variant
(`exec.context_parallel.context_parallel_attention`: "ring", "all-gather-kv" or "ulysses") forward and backward,
and puts the ranks' outputs and dQ, dK, dV back in token order. They are compared with:

- one process: torch's `scaled_dot_product_attention` on the whole sequence and its autograd (≤ 1e-5 in float32);
- the plan: the run's Events equal `sim.context_parallel.plan_trace` of `sim.context_parallel_costs.make_plan`
  (the same transfers at the same steps, the same ranks computing at the same steps); the bytes each rank sent
  equal the closed form `costs(…).bytes_sent`; the (query, key) pairs each rank scored equal the simulator's;
- torch: its ring (`parity.context_parallel_torch`) on the same shards, on CPUs.

    >>> res = run_context_parallel(world_size=2, seq=8, heads=2, head_dim=4)
    >>> res["max_abs_diff_vs_reference"] <= 1e-5, res["matches_plan"], res["bytes_sent_per_rank"]
    (True, True, [1024, 1024])
"""
from __future__ import annotations

import gc
import importlib

import torch
import torch.distributed as dist
import torch.nn.functional as F

from .._checks import check_bool, check_int
from ..exec.context_parallel import context_parallel_attention
from ..exec.launch import device, launch
from ..sim.context_parallel import plan_trace, positions, step_work, work_per_rank
from ..sim.context_parallel_costs import check_shape, costs, make_plan
from ..trace import Recorder, merge
from .common import check_run, max_abs_diff, result
from .context_parallel_torch import torch_compared, torch_ring_attention, why_no_torch

NAMES = ("out", "dq", "dk", "dv")


def make_inputs(*, batch: int, heads: int, kv_heads: int, seq: int, head_dim: int, seed: int):
    """Seeded Q (b, a, s, d), K, V (b, kv_heads, s, d) and upstream gradient dO (b, a, s, d), float32 on the CPU:
    the same on every rank and in the parent."""
    gen = torch.Generator().manual_seed(seed)
    shapes = [(batch, heads, seq, head_dim), (batch, kv_heads, seq, head_dim), (batch, kv_heads, seq, head_dim),
              (batch, heads, seq, head_dim)]
    return [torch.randn(*shape, generator=gen, device="cpu") for shape in shapes]


def reference(q, k, v, dout, causal: bool) -> dict:
    """One process, the whole sequence: torch's SDPA (K,V heads shared as GQA lays them out) and its autograd."""
    q, k, v = (t.clone().requires_grad_(True) for t in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=k.shape[1] != q.shape[1])
    out.backward(dout)
    return {"out": out.detach(), "dq": q.grad, "dk": k.grad, "dv": v.grad}


def plan_work(variant: str, world_size: int, seq: int, layout: str, causal: bool) -> list[int]:
    """The (query, key) pairs each rank scores, by the simulator: its tiles for the ring and all-gather-kv; for
    Ulysses every pair of the whole sequence (on heads/N heads)."""
    if variant == "ulysses":
        return [seq * (seq + 1) // 2 if causal else seq * seq] * world_size
    return list(work_per_rank(world_size, seq, layout, causal))


def cp_worker(rank: int, world_size: int, variant: str, layout: str, causal: bool, shape: dict, seed: int,
              compare_torch: bool) -> dict:
    """One rank: our variant forward and backward on its tokens; then, if asked, torch's ring on the same."""
    dev = device()
    full = [t.to(dev) for t in make_inputs(**shape, seed=seed)]
    mine = torch.from_numpy(positions(rank, world_size, shape["seq"], layout)).to(dev)
    q, k, v, dout = (t[:, :, mine].contiguous() for t in full)  # (b, heads, s/N, d): this rank's tokens
    ours = [t.clone().requires_grad_(True) for t in (q, k, v)]
    rec, work = Recorder(rank), {}
    dist.barrier()  # every rank's clock starts together
    rec.restart()
    out = context_parallel_attention(*ours, variant=variant, layout=layout, causal=causal, recorder=rec, work=work)
    out.backward(dout)
    res = {"out": out.detach().cpu(), "dq": ours[0].grad.cpu(), "dk": ours[1].grad.cpu(), "dv": ours[2].grad.cpu(),
           "events": rec.events, "work": work, "bytes_sent": rec.bytes_sent, "backend": dist.get_backend(),
           "why_no_torch": why_no_torch(dev) if compare_torch else "compare_torch=False"}
    if res["why_no_torch"] is None:
        theirs = torch_ring_attention(q, k, v, dout, variant=variant, layout=layout, causal=causal)
        res["vs_torch"] = max(max_abs_diff(res[name], t) for name, t in zip(NAMES, theirs))
    del out, ours
    gc.collect()  # teardown trap: nothing may hold the group when it is destroyed
    return res


def run_context_parallel(*, world_size: int = 4, seq: int = 16, heads: int = 2, head_dim: int = 4,
                         kv_heads: int | None = None, batch: int = 1, variant: str = "ring", layout: str = "zigzag",
                         causal: bool = True, seed: int = 0, compare_torch: bool = True, backend: str = "auto",
                         timeout: float = 60.0) -> dict:
    """Launch `world_size` ranks of context-parallel attention; compare with one process, the plan and torch.

    Own keys: the run's shape; `plan` (its CollectivePlan) and `matches_plan` (the trace's signature equals the
    plan's); `plan_bytes_sent_per_rank` (the closed form); `work_per_rank` (pairs each rank scored) beside
    `plan_work_per_rank` (the forward's; the backward scores the same pairs), and `work_per_step` ({plan step:
    pairs} per rank, forward and backward); `max_abs_diff_per_tensor` (out, dq, dk, dv against one process); `torch_compared`."""
    backend = check_run(world_size, backend, timeout, seed)
    kv_heads = check_shape(variant, world_size=world_size, seq=seq, heads=heads, head_dim=head_dim, kv_heads=kv_heads,
                           batch=batch, layout=layout)
    check_bool("causal", causal)
    check_bool("compare_torch", compare_torch)
    check_int("seed", seed, 0)
    shape = dict(batch=batch, heads=heads, kv_heads=kv_heads, seq=seq, head_dim=head_dim)
    ref = reference(*make_inputs(**shape, seed=seed), causal)
    if compare_torch:  # import once here, every forked rank inherits them: torch's functional collectives import
        # torch._dynamo on their first call, seconds in every rank otherwise
        for module in ("torch.distributed.tensor.experimental._context_parallel._attention", "torch._dynamo"):
            importlib.import_module(module)
    ranks = launch(cp_worker, world_size, variant, layout, causal, shape, seed, compare_torch, backend=backend,
                   timeout=timeout)
    whole = {name: torch.empty_like(ref[name]) for name in NAMES}
    for rank, res in enumerate(ranks):  # each rank's tokens back in their places
        for name in NAMES:
            whole[name][:, :, torch.from_numpy(positions(rank, world_size, seq, layout))] = res[name]
    per_tensor = {name: max_abs_diff(whole[name], ref[name]) for name in NAMES}
    plan = make_plan(variant, world_size=world_size, seq=seq, heads=heads, head_dim=head_dim, kv_heads=kv_heads,
                     batch=batch, layout=layout)
    trace = merge(r["events"] for r in ranks)
    why = ranks[0]["why_no_torch"]
    price = costs(variant, world_size=world_size, seq=seq, heads=heads, head_dim=head_dim, kv_heads=kv_heads,
                  batch=batch, layout=layout)
    return result(
        world_size=world_size, backend=ranks[0]["backend"], trace=trace,
        bytes_sent_per_rank=[r["bytes_sent"] for r in ranks], max_abs_diff_vs_reference=max(per_tensor.values()),
        max_abs_diff_vs_torch=None if why else max(r["vs_torch"] for r in ranks), why_no_torch=why,
        variant=variant, layout=layout, causal=causal, seq=seq, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
        batch=batch, max_abs_diff_per_tensor=per_tensor, plan=plan,
        matches_plan=trace.signature() == plan_trace(plan, step_work(world_size, seq, layout, causal)).signature(),
        plan_bytes_sent_per_rank=[price.bytes_sent] * world_size,
        work_per_rank=[sum(w for step, w in r["work"].items() if plan.meta["compute_steps"][step] == "attention")
                       for r in ranks],
        work_per_step=[dict(sorted(r["work"].items())) for r in ranks],
        plan_work_per_rank=plan_work(variant, world_size, seq, layout, causal),
        **({} if why else {"torch_compared": torch_compared()}))
