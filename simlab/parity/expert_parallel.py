"""Expert parallelism's parity: does the MoE layer spread over real ranks compute exactly what one process's
unsplit layer computes, sending exactly the bytes the simulator's plan says, and the same as with torch's own
differentiable all-to-all? One launch.

`run_expert_parallel(world_size=4, dp=2)` lays out Mesh(ep=world_size/dp, dp) (`sim.expert_parallel_layout`):
every rank holds its own `tokens` tokens, the whole router and E/ep experts; one forward and backward (the
upstream gradient seeded), then the experts' gradients summed over the expert-data-parallel group and the
router's over the dense group. Compared with one process running the unsplit `MoE` on every rank's tokens
(capacity counted per rank's tokens, as on the ranks): each rank's output and input gradient, the router's
gradient and every expert's, dropped tokens included. The plan is built by the simulator from the logits
the ranks' routers produced (`sim.expert_parallel.route`, then `dispatch_plan` per ep group): the torch
routing must pick the same experts and drop the same choices, every rank's bytes must equal the plan's, and
the real trace the plan's trace (timing aside); `bytes_sent_by_group` is what the ranks recorded, group by group,
set beside `plan_bytes_by_group`, and `groups` the ep, expert-dp and dense-dp groups the ranks ran on. The run
is repeated with torch's `all_to_all_single_autograd` in place of our AllToAll: `max_abs_diff_vs_torch`.
"""
from __future__ import annotations

import gc

import numpy as np
import torch
import torch.distributed as dist

from .._checks import check_bool, check_divisible, check_int, check_positive
from ..exec.expert_parallel import ExpertParallelMoE, make_moe, make_tokens
from ..exec.expert_parallel_layout import new_layout_groups, sum_gradients
from ..exec.launch import device, launch
from ..sim.expert_parallel import route
from ..sim.expert_parallel_dispatch import dispatch_plan
from ..sim.expert_parallel_layout import expert_data_parallel
from ..sim.mesh import Mesh
from ..trace import Recorder, merge
from .common import check_run, max_abs_diff, result


def check_moe(world_size, dp, experts, top_k, capacity_factor, tokens, hidden, ffn, renormalize) -> Mesh:
    """One-line ValueErrors before any process starts; returns the mesh Mesh(ep=world_size/dp, dp=dp)."""
    check_int("dp", dp, 1)
    check_divisible("world_size", world_size, "dp", dp)
    for name, value in (("tokens", tokens), ("hidden", hidden), ("ffn", ffn), ("experts", experts)):
        check_int(name, value, 1)
    check_divisible("experts", experts, "ep", world_size // dp)
    check_int("top_k", top_k, 1, experts)
    if capacity_factor is not None:
        check_positive("capacity_factor", capacity_factor)
    check_bool("renormalize", renormalize)
    return Mesh(ep=world_size // dp, dp=dp)


def _one_pass(moe, x, grad_out, groups, exchange: str, rec: Recorder) -> dict:
    """Forward + backward + gradient sums of this rank's part of `moe`; CPU copies of what is compared."""
    par = ExpertParallelMoE.from_full(moe, group=groups["ep"], device=x.device, exchange=exchange, rec=rec)
    x = x.clone().requires_grad_(True)
    out = par(x)
    out.backward(grad_out)
    sum_gradients(par, groups, rec)
    grads = {"router.weight": par.router.weight.grad} | par.expert_grads()
    chosen, kept = par.routing
    return {"out": out.detach().cpu(), "x.grad": x.grad.cpu(), "grads": {k: g.cpu() for k, g in grads.items()},
            "logits": par.logits.detach().cpu(), "chosen": chosen.cpu(), "kept": kept.cpu(),
            "send_counts": par.send_counts}


def ep_worker(rank: int, world_size: int, dp: int, experts: int, top_k: int, capacity_factor, tokens: int,
              hidden: int, ffn: int, renormalize: bool, seed: int) -> dict:
    """One rank: ours (recorded), then torch's all-to-all on the same layer and tokens (unrecorded)."""
    layout = expert_data_parallel(Mesh(ep=world_size // dp, dp=dp), experts, 0, 0)
    groups = new_layout_groups(layout)
    moe = make_moe(hidden, ffn, experts, top_k, capacity_factor, renormalize, seed).to(device())
    xs, gs = make_tokens(world_size, tokens, hidden, seed)
    x, grad_out = xs[rank].to(device()), gs[rank].to(device())
    dist.barrier()
    rec = Recorder(rank)  # from here on: times from the barrier all ranks left together
    ours = _one_pass(moe, x, grad_out, groups, "ours", rec)
    theirs = _one_pass(moe, x, grad_out, groups, "torch", Recorder(rank))
    del groups
    gc.collect()  # teardown trap: nothing may hold a group when it is destroyed
    return {"ours": ours, "torch": theirs, "events": rec.events, "backend": dist.get_backend(),
            "bytes_sent": sum(e.nbytes for e in rec.events if e.kind in ("send", "comm"))}


def sent_by_group(events) -> dict[str, int]:
    """What one rank sent, by group, as it recorded it: its all-to-all transfers ("send" events, in its ep group)
    and each gradient all-reduce ("comm" events, named after theirs: expert or dense)."""
    out = {"all-to-all": 0, "expert all-reduce": 0, "dense all-reduce": 0}
    for e in events:
        if e.kind in ("send", "comm"):
            out["all-to-all" if e.kind == "send" else e.name] += e.nbytes
    return out


def reference(moe, xs, gs) -> dict:
    """One process, the unsplit layer, each rank's tokens as its own group: outputs, dX, every gradient."""
    xs = xs.clone().requires_grad_(True)
    out = torch.stack([moe(x) for x in xs])  # (ranks, T, h)
    out.backward(gs)
    return {"out": out.detach(), "x.grad": xs.grad, "grads": {n: p.grad for n, p in moe.named_parameters()}}


def _diff(run: list[dict], ref: dict) -> float:
    """max |diff| over every rank's output, dX, router gradient and its experts' gradients."""
    return max(max(max_abs_diff(r["out"], ref["out"][i]), max_abs_diff(r["x.grad"], ref["x.grad"][i]),
                   max_abs_diff(r["grads"], {n: ref["grads"][n] for n in r["grads"]})) for i, r in enumerate(run))


def run_expert_parallel(*, world_size: int = 2, dp: int = 1, experts: int = 4, top_k: int = 2,
                        capacity_factor: float | None = 1.0, tokens: int = 8, hidden: int = 8, ffn: int = 16,
                        renormalize: bool = False, seed: int = 0, backend: str = "auto",
                        timeout: float = 60.0) -> dict:
    """Launch Mesh(ep=world_size/dp, dp) ranks of the MoE layer; compare with one process, the plan, torch's a2a.

    `tokens` is each rank's own (the group its capacity counts over); `capacity_factor=None` is dropless."""
    backend = check_run(world_size, backend, timeout, seed)
    mesh = check_moe(world_size, dp, experts, top_k, capacity_factor, tokens, hidden, ffn, renormalize)
    moe = make_moe(hidden, ffn, experts, top_k, capacity_factor, renormalize, seed)
    xs, gs = make_tokens(world_size, tokens, hidden, seed)
    ref = reference(moe, xs, gs)
    import torch._dynamo  # noqa: F401 — torch's functional all-to-all imports it on first use (~3 s): once, here,
    # and every forked rank inherits it
    ranks = launch(ep_worker, world_size, dp, experts, top_k, capacity_factor, tokens, hidden, ffn, renormalize,
                   seed, backend=backend, timeout=timeout)
    ours, theirs = [r["ours"] for r in ranks], [r["torch"] for r in ranks]
    # the plan, from the logits the ranks' routers produced
    routings = [route(r["logits"].double().numpy(), top_k, capacity_factor, renormalize) for r in ours]
    same_routing = all(np.array_equal(s.experts, r["chosen"].numpy()) and np.array_equal(s.kept, r["kept"].numpy())
                       for s, r in zip(routings, ours))
    expert_params = sum(p.numel() for p in moe.experts[0].parameters())
    layout = expert_data_parallel(mesh, experts, expert_params, moe.router.weight.numel())
    plans = [dispatch_plan([routings[r] for r in group], hidden, xs.element_size()) for group in layout.ep_groups]
    by_group = layout.step_bytes(plans)
    sent = [sent_by_group(r["events"]) for r in ranks]
    measured = {k: [s[k] for s in sent] for k in sent[0]} | {"total": [r["bytes_sent"] for r in ranks]}
    trace = merge(r["events"] for r in ranks)
    return result(
        world_size=world_size, backend=ranks[0]["backend"], trace=trace,
        bytes_sent_per_rank=[r["bytes_sent"] for r in ranks], max_abs_diff_vs_reference=_diff(ours, ref),
        max_abs_diff_vs_torch=max(max_abs_diff({k: a[k] for k in ("out", "x.grad", "grads")},
                                               {k: b[k] for k in ("out", "x.grad", "grads")})
                                  for a, b in zip(ours, theirs)),
        ep=mesh.ep, dp=dp, experts=experts, top_k=top_k, capacity=routings[0].capacity,
        plan_bytes_sent_per_rank=by_group["total"], plan_bytes_by_group=by_group, bytes_sent_by_group=measured,
        groups={"ep": layout.ep_groups, "expert dp": layout.expert_groups, "dense dp": layout.dense_groups},
        send_counts=[[ours[r]["send_counts"] for r in group] for group in layout.ep_groups],
        plan_send_counts=[p.send_counts.tolist() for p in plans],
        routing_matches_simulator=same_routing, trace_matches_plan=trace.matches(layout.to_trace(plans)),
        load_per_rank=[r.load.tolist() for r in routings], dropped_per_rank=[r.dropped for r in routings],
        tokens_dropped_per_rank=[r.tokens_dropped for r in routings],
        imbalance_per_rank=[r.imbalance for r in routings], layout=layout.lines())
