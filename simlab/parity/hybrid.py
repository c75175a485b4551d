"""Lesson 6's parity: does 3-D parallelism (DP × PP × TP, + ZeRO-1) train exactly like one process, carry
exactly the bytes the model predicts on each group, hold exactly the memory it predicts, and take the
time it predicts?

`run_hybrid(dp=2, pp=2, tp=2)` launches dp·pp·tp ranks of a small GPT (`simlab.exec.hybrid`), trains a
few Adam steps on a global batch, and compares the losses of every step and all parameters after the
last with one process training the whole model on the whole batch; bytes per rank on the TP, PP and DP
groups with `simlab.sim.hybrid_traffic`; each rank's model states with lesson 3's memory model; the
step time with `simlab.sim.hybrid_time` on the calibrated `cpu-this-machine` (or the GPUs' preset).

    python -c "from simlab.parity.hybrid import run_hybrid; print(run_hybrid(2, 2, 2)['max_abs_diff_vs_reference'])"
"""
from __future__ import annotations

import statistics
import time
from dataclasses import replace

import torch
import torch.distributed as dist

from .._checks import check_choice, check_divisible, check_int, check_positive
from ..exec.hybrid import DataParallelAdam, loss_for, make_chunks
from ..exec.launch import device, launch
from ..exec.mesh import new_groups
from ..exec.models import gpt_loss, make_gpt, make_tokens
from ..exec.pipeline import PipelineRank
from ..exec.tensor_parallel import CommStats
from ..sim.hybrid import Plan, check_plan
from ..sim.hybrid_traffic import bytes_per_rank, layers_per_chunk, rank_states
from ..sim.mesh import KINDS, Mesh
from ..sim.model import Transformer
from ..sim.schedules import make_schedule
from ..trace import Trace
from .common import check_run, max_abs_diff, reference_model, result

SCHEDULES = ("1f1b", "interleaved")
EPS = 1e-5  # Adam's eps in both runs (`simlab.exec.hybrid.DataParallelAdam` says why)


def shape_for(tp: int, pp: int, chunks: int = 1, layers: int | None = None, hidden: int | None = None,
              heads: int | None = None, seq: int | None = None) -> Transformer:
    """A GPT small enough for 8 processes on 2 cores: by default 2 heads of 4 features per TP rank, two
    layers per chunk, 8 tokens and a vocabulary the TP ranks split evenly (Transformer checks heads | hidden)."""
    heads = heads or 2 * tp
    return Transformer("gpt-3d", layers or 2 * pp * chunks, hidden or 4 * heads, heads, seq=seq or 8,
                       vocab=16 * tp, tied=False)


def _full_names(chunks: dict, per: int) -> dict:
    """{name in the unsplit GPT: (this rank's tensor, concat dim or None)} for the chunks a rank holds."""
    out = {}
    for c, chunk in chunks.items():
        blocks = [m for m in chunk if hasattr(m, "attn")]
        for i, block in enumerate(blocks):
            name = f"blocks.{c * per + i}"
            out |= {f"{name}.{ln}.{w}": (getattr(getattr(block, ln), w).detach(), None)
                    for ln in ("ln1", "ln2") for w in ("weight", "bias")}
            out |= {f"{name}.attn.{k}": (v.detach(), d) for k, (v, d) in block.attn.shards("data").items()}
            out |= {f"{name}.mlp.{k}": (v.detach(), d) for k, (v, d) in block.mlp.shards("data").items()}
        if hasattr(chunk[0], "pos"):
            out |= {"tok.weight": (chunk[0].weight.detach(), 0), "pos.weight": (chunk[0].pos.detach(), None)}
        if hasattr(chunk[-1], "proj"):
            head = chunk[-1]
            out |= {"ln_f.weight": (head.ln.weight.detach(), None), "ln_f.bias": (head.ln.bias.detach(), None),
                    "head.weight": (head.proj.weight.detach(), 0)}
    return {k: (v.cpu().clone(), d) for k, (v, d) in out.items()}


def train_3d(rank, world_size, shape: dict, plans: list, global_batch: int, steps: int, seed: int, lr: float):
    """Worker: every plan in turn (each a fresh model), `steps` Adam steps each."""
    first = Plan(**plans[0])
    mesh = Mesh(first.pp, first.dp, first.tp)
    groups, (pp_r, dp_r, tp_r) = new_groups(mesh), mesh.coords(rank)
    x, y = (t.to(device()) for t in make_tokens(global_batch, shape["seq"], shape["vocab"], seed))
    rows = global_batch // first.dp
    out = []
    for fields in plans:
        plan = Plan(**fields)
        gpt = make_gpt(shape["layers"], shape["hidden"], shape["heads"], shape["seq"], shape["vocab"], seed)
        stats = CommStats(groups["tp"])
        chunks = make_chunks(gpt, plan, pp_r, stats, device())
        m = rows // plan.microbatch
        mine = slice(dp_r * rows, (dp_r + 1) * rows)  # this replica's sequences
        runner = PipelineRank(chunks, plan.pp * plan.chunks, x[mine].chunk(m), y[mine].chunk(m), groups["pp"],
                              activation_shape=(plan.microbatch, shape["seq"], shape["hidden"]),
                              loss=loss_for(stats, stats.rank * (shape["vocab"] // plan.tp)))
        actions = make_schedule(plan.schedule, plan.pp, m, plan.chunks)[pp_r]
        params = [p for c in sorted(chunks) for p in chunks[c].parameters()]
        opt = DataParallelAdam(params, plan.zero, groups["dp"], lr, eps=EPS)
        losses, seconds, events = [], [], []
        for _ in range(steps):
            for p in params:
                p.grad = None
            dist.barrier()
            start = time.perf_counter()
            events.append(runner.run(actions))
            opt.step()
            seconds.append(time.perf_counter() - start)
            losses.append(sum(runner.losses.values()) if plan.pp * plan.chunks - 1 in chunks else None)
        out.append({"losses": losses, "seconds": seconds, "events": events, "t0": runner.t0,
                    "memory": opt.memory(), "bytes": {"tp": stats.bytes_sent // steps, "dp": opt.bytes_sent // steps,
                                                      "pp": runner.bytes_sent // steps},
                    "params": _full_names(chunks, layers_per_chunk(shape["layers"], plan)),
                    "coords": (pp_r, dp_r, tp_r), "backend": dist.get_backend()})
    return out


def _assemble(ranks: list[dict]) -> tuple[dict, float]:
    """The whole model as each DP replica holds it (TP slices side by side, in TP rank order): replica 0's,
    and how far the others are from it (DP must keep the replicas identical)."""
    pieces = {}
    for r in ranks:
        for name, (t, d) in r["params"].items():
            pieces.setdefault(r["coords"][1], {}).setdefault(name, []).append((r["coords"][2], t, d))
    replicas = {dp_r: {name: parts[0][1] if parts[0][2] is None else torch.cat(
        [t for _, t, _ in sorted(parts, key=lambda p: p[0])], dim=parts[0][2]) for name, parts in named.items()}
        for dp_r, named in pieces.items()}
    drift = max((max_abs_diff(replicas[d], replicas[0]) for d in replicas if d), default=0.0)
    return replicas[0], drift


def check_hybrid(dp, pp, tp, zero, schedule, chunks, microbatches, steps, microbatch=2, **sizes) -> None:
    for name, value in (("dp", dp), ("pp", pp), ("tp", tp), ("chunks", chunks), ("steps", steps),
                        ("microbatch", microbatch)):
        check_int(name, value, 1)
    check_int("zero", zero, 0, 1)
    check_choice("schedule", schedule, SCHEDULES)
    for name, value in (("microbatches", microbatches), *sizes.items()):
        if value is not None:
            check_int(name, value, 1)


def prepare(dp, pp, tp, zero=0, schedule="1f1b", chunks=1, microbatches=None, steps=3, layers=None, hidden=None,
            heads=None, seed=0, lr=1e-2, world_size=None, backend="auto", timeout=120.0, variants=(), seq=None,
            microbatch=2):
    """Every check, before anything runs: (model, plans, global batch, backend)."""
    check_hybrid(dp, pp, tp, zero, schedule, chunks, microbatches, steps, microbatch, layers=layers, hidden=hidden,
                 heads=heads, seq=seq)
    world_size = dp * pp * tp if world_size is None else world_size
    if world_size != dp * pp * tp:
        raise ValueError(f"world_size={world_size}: must be dp × pp × tp = {dp} × {pp} × {tp}")
    backend = check_run(world_size, backend, timeout, seed)
    check_positive("lr", lr)
    # the course's executor: eager attention (softmax of the stored scores), nothing overlapped
    plans = [Plan(tp=tp, pp=pp, dp=dp, microbatch=microbatch, zero=zero, schedule=schedule, chunks=chunks,
                  attention="eager", overlap="none")]
    plans += [plans[0].with_(**v) for v in variants]
    model = shape_for(tp, pp, max(p.chunks for p in plans), layers, hidden, heads, seq)
    check_divisible("vocab", model.vocab, "tp", tp)
    batch = dp * microbatch * (microbatches or 2 * pp)
    for plan in plans:
        check_plan(model, plan, world_size, batch)
        layers_per_chunk(model.layers, plan)
    return model, plans, batch, backend


def run_hybrid(dp: int = 2, pp: int = 2, tp: int = 2, zero: int = 0, schedule: str = "1f1b", chunks: int = 1,
               microbatches: int | None = None, steps: int = 3, layers: int | None = None, hidden: int | None = None,
               heads: int | None = None, seed: int = 0,
               lr: float = 1e-2, world_size: int | None = None, backend: str = "auto", timeout: float = 120.0,
               variants: tuple = (), seq: int | None = None, microbatch: int = 2) -> dict:
    """One launch of dp·pp·tp ranks; `variants` (dicts of zero/schedule/chunks) train more plans in the same
    launch and come back under "variants". m defaults to 2·p micro-batches of `microbatch` sequences of `seq`
    tokens per replica."""
    model, plans, batch, backend = prepare(dp, pp, tp, zero, schedule, chunks, microbatches, steps, layers, hidden,
                                           heads, seed, lr, world_size, backend, timeout, variants, seq, microbatch)
    world_size = dp * pp * tp
    shape = {"layers": model.layers, "hidden": model.hidden, "heads": model.heads, "seq": model.seq,
             "vocab": model.vocab}
    tokens = make_tokens(batch, model.seq, model.vocab, seed)
    ref_losses, ref = reference_model(lambda: make_gpt(**shape, seed=seed), tokens, steps, lr, "adam", gpt_loss,
                                      eps=EPS)
    ref_params = {k: v.detach().clone() for k, v in ref.named_parameters()}
    ranks = launch(train_3d, world_size, shape, [p.__dict__ for p in plans], batch, steps, seed, lr,
                   backend=backend, timeout=timeout)
    results = [_result(model, plan, [r[i] for r in ranks], batch, ref_losses, ref_params, backend)
               for i, plan in enumerate(plans)]
    return results[0] | ({"variants": results[1:]} if variants else {})


def _result(model, plan, ranks, batch, ref_losses, ref_params, backend) -> dict:
    from ..sim.hardware import cluster
    from ..sim.hybrid_time import step
    mesh = Mesh(plan.pp, plan.dp, plan.tp)
    whole, drift = _assemble(ranks)
    last = [r for r in ranks if r["losses"][0] is not None]
    losses = [sum(r["losses"][s] for r in last) / len(last) for s in range(len(ref_losses))]  # DP replicas' mean
    measured = {kind: [r["bytes"][kind] for r in ranks] for kind in KINDS}
    predicted = bytes_per_rank(model, plan, batch)
    timed = [max(r["seconds"][s] for r in ranks) for s in range(1, len(ref_losses))] or [ranks[0]["seconds"][0]]
    gpus = cluster("cpu-this-machine" if ranks[0]["backend"] == "gloo" else "a100-80gb", gpus=mesh.world_size)
    t0 = min(r["t0"] for r in ranks)
    timing = step(model, plan, gpus, batch, precision="fp32", executor=True)
    return result(
        world_size=mesh.world_size, backend=ranks[0]["backend"],
        trace=Trace(replace(e, rank=i, start=e.start - t0, end=e.end - t0)  # the last step, global ranks
                    for i, r in enumerate(ranks) for e in r["events"][-1]),
        bytes_sent_per_rank=[sum(measured[k][i] for k in KINDS) for i in range(mesh.world_size)],
        max_abs_diff_vs_reference=max([abs(a - b) for a, b in zip(losses, ref_losses)]
                                      + [max_abs_diff(whole, ref_params), drift]),
        max_abs_diff_vs_torch=None, why_no_torch="torch has no one-call 3-D trainer to set beside it; each "
        "dimension is compared with torch's own in lessons 2-5",
        config=plan.to_dict(), losses=losses, reference_losses=ref_losses,
        groups={kind: [list(g) for g in mesh.groups(kind)] for kind in KINDS},
        bytes_sent_per_group=measured, predicted_bytes_per_group=predicted,
        predicted_bytes_per_rank=[sum(predicted[k][i] for k in KINDS) for i in range(mesh.world_size)],
        measured_memory_per_rank=[r["memory"] for r in ranks],
        predicted_memory_per_rank=[rank_states(model, plan, r["coords"][0]) for r in ranks],
        measured_step_seconds=statistics.median(timed),
        predicted_step_seconds=timing["step_seconds"], predicted_breakdown=timing["breakdown"],
        model={"layers": model.layers, "hidden": model.hidden, "heads": model.heads, "seq": model.seq,
               "vocab": model.vocab}, global_batch=batch,
        max_abs_diff_across_replicas=drift)


def predicted_trace(result: dict) -> Trace:
    """The model's pipeline timeline for a `run_hybrid` result, per global rank (lesson 4's simulator with this
    machine's calibrated stage times, `sim.hybrid_time.pipeline_trace`): draw it above `result["trace"]`."""
    from ..sim.hardware import cluster
    from ..sim.hybrid_time import pipeline_trace
    plan, shape = Plan(**result["config"]), result["model"]
    model = Transformer("gpt-3d", shape["layers"], shape["hidden"], shape["heads"], seq=shape["seq"],
                        vocab=shape["vocab"], tied=False)
    gpus = cluster("cpu-this-machine" if result["backend"] == "gloo" else "a100-80gb", gpus=result["world_size"])
    return pipeline_trace(model, plan, gpus, result["global_batch"], Mesh(plan.pp, plan.dp, plan.tp))
