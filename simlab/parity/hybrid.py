"""Lesson 6's parity: does 3-D parallelism (TP × DP × PP, + ZeRO-1; × CP, lesson 7) train exactly like one
process, carry exactly the bytes the model predicts on each group, hold exactly the memory it predicts, and take
the time it predicts?

`run_hybrid(tp=2, dp=2, pp=2)` describes the run once (`simlab.sim.hybrid_run.HybridRun`: plan, model, batch,
every check) and `run_spec(spec)` runs it: tp·dp·pp ranks of a small GPT (`simlab.exec.hybrid`) train a few
Adam steps on a global batch, and the losses of every step and all parameters after the last are compared
with one process training the whole model on the whole batch; bytes per rank on the TP, PP and DP groups (and CP:
`run_hybrid(tp=2, cp=2, dp=2, pp=1)` splits every sequence over the CP group, gradients reduced over dp-cp)
with `simlab.sim.hybrid_traffic`; each rank's model states with lesson 3's memory model; the step time with
`simlab.sim.hybrid_time` on the calibrated `cpu-this-machine` (or the GPUs' preset).

    python -c "from simlab.parity.hybrid import run_hybrid; print(run_hybrid(tp=2, dp=2, pp=2)['max_abs_diff_vs_reference'])"
"""
from __future__ import annotations

import statistics
import time
from dataclasses import replace

import torch
import torch.distributed as dist

from ..exec.hybrid import ContextShard, DataParallelAdam, gpt_for, loss_for, make_chunks
from ..exec.launch import device, launch
from ..exec.mesh import new_groups
from ..exec.models import gpt_loss, make_tokens
from ..exec.pipeline import PipelineRank
from ..exec.tensor_parallel import CommStats
from ..sim.context_parallel import positions
from ..sim.hybrid_run import HybridRun
from ..sim.hybrid_time import pipeline_trace, step
from ..sim.hybrid_traffic import bytes_per_rank, layers_per_chunk, rank_states
from ..sim.mesh import DIMS, KINDS
from ..sim.pipeline_schedules import make_schedule
from ..trace import Recorder, Trace
from .common import check_run, max_abs_diff, reference_model, result

EPS = 1e-5  # Adam's eps in both runs (`simlab.exec.hybrid.DataParallelAdam` says why)


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


def train_hybrid(rank, world_size, spec: HybridRun):
    """Worker: every plan of the run in turn (each a fresh model), `spec.steps` Adam steps each."""
    model, mesh, cp = spec.model, spec.mesh, spec.plan.cp
    groups = new_groups(mesh, joint=("dp-cp",) if cp > 1 else ())  # gradients go over dp-cp under CP
    at = {d: mesh.index_of(d, rank) for d in DIMS}  # this rank's coordinate along every dimension
    pp_r = at["pp"]
    x, y = (t.to(device()) for t in make_tokens(spec.global_batch, model.seq, model.vocab, spec.seed))
    mine = slice(at["dp"] * spec.replica_batch, (at["dp"] + 1) * spec.replica_batch)  # this replica's sequences
    x, y = x[mine], y[mine]  # (B/d, s): this replica's sequences
    if cp > 1:  # … and this CP rank's tokens of each, at the zig-zag positions of its coordinate
        where = torch.as_tensor(positions(at["cp"], cp, model.seq), device=device())  # (s/cp,)
        x, y = x[:, where], y[:, where]  # (B/d, s/cp)
    m = spec.microbatches
    out = []
    for plan in spec.plans:
        gpt = gpt_for(model, spec.seed)
        stats = CommStats(groups["tp"])
        context = ContextShard(where, groups["cp"], plan.cp_comm, Recorder(at["cp"])) if cp > 1 else None
        chunks = make_chunks(gpt, plan, pp_r, stats, device(), context)
        runner = PipelineRank(chunks, plan.pp * plan.chunks, x.chunk(m), y.chunk(m), groups["pp"],
                              activation_shape=(plan.microbatch, model.seq // cp, model.hidden),
                              loss=loss_for(stats, model.vocab))
        actions = make_schedule(plan.schedule, plan.pp, m, plan.chunks)[pp_r]
        params = [p for c in sorted(chunks) for p in chunks[c].parameters()]
        opt = DataParallelAdam(params, plan.zero, groups.get("dp-cp", groups["dp"]), spec.lr, eps=EPS)
        losses, seconds, events = [], [], []
        for _ in range(spec.steps):
            for p in params:
                p.grad = None
            dist.barrier()
            start = time.perf_counter()
            events.append(runner.run(actions))
            opt.step()
            seconds.append(time.perf_counter() - start)
            losses.append(sum(runner.losses.values()) if plan.pp * plan.chunks - 1 in chunks else None)
        sent = {"tp": stats.bytes_sent, "dp": opt.bytes_sent, "pp": runner.bytes_sent}
        sent |= {"cp": context.rec.bytes_sent} if context else {}
        out.append({"losses": losses, "seconds": seconds, "events": events, "t0": runner.t0,
                    "memory": opt.memory(), "bytes": {k: v // spec.steps for k, v in sent.items()},
                    "params": _full_names(chunks, layers_per_chunk(model.layers, plan)),
                    "coords": at, "backend": dist.get_backend()})
    return out


def _assemble(ranks: list[dict]) -> tuple[dict, float]:
    """The whole model as each replica holds it (TP slices side by side, in TP rank order; a replica is one
    (dp, cp) coordinate: CP ranks hold the whole of their TP share too): replica (0, 0)'s, and how far the others
    are from it (the reduction over dp-cp must keep them identical)."""
    pieces = {}
    for r in ranks:
        at = r["coords"]
        for name, (t, d) in r["params"].items():
            pieces.setdefault((at["dp"], at["cp"]), {}).setdefault(name, []).append((at["tp"], t, d))
    replicas = {key: {name: parts[0][1] if parts[0][2] is None else torch.cat(
        [t for _, t, _ in sorted(parts, key=lambda p: p[0])], dim=parts[0][2]) for name, parts in named.items()}
        for key, named in pieces.items()}
    first = replicas[(0, 0)]
    drift = max((max_abs_diff(replica, first) for key, replica in replicas.items() if key != (0, 0)), default=0.0)
    return first, drift


def run_hybrid(*, tp: int = 2, dp: int = 2, pp: int = 2, cp: int = 1, cp_comm: str = "ring", zero: int = 0,
               schedule: str = "1f1b", chunks: int | None = None, microbatch: int = 2, microbatches: int | None = None,
               layers: int | None = None, hidden: int | None = None, heads: int | None = None, seq: int | None = None,
               steps: int = 3, seed: int = 0, lr: float = 1e-2, world_size: int | None = None, backend: str = "auto",
               timeout: float = 120.0, variants: tuple = ()) -> dict:
    """One launch of tp·cp·dp·pp ranks, from the knobs (`HybridRun.build` says what each defaults to and checks
    them all): `run_spec(HybridRun.build(...))`. `variants` (dicts of zero/schedule/chunks) train more plans in
    the same launch and come back under "variants"."""
    return run_spec(HybridRun.build(tp=tp, dp=dp, pp=pp, cp=cp, cp_comm=cp_comm, zero=zero, schedule=schedule,
                                    chunks=chunks, microbatch=microbatch, microbatches=microbatches, layers=layers, hidden=hidden,
                                    heads=heads, seq=seq, steps=steps, seed=seed, lr=lr, world_size=world_size,
                                    backend=backend, timeout=timeout, variants=variants))


def backend_for(spec: HybridRun) -> str:
    """The backend `spec` runs on ("auto" resolved: NCCL with one GPU per rank, else gloo), or a one-line
    refusal: the one check of a run that needs torch (it counts the GPUs), so `HybridRun` cannot make it."""
    return check_run(spec.world_size, spec.backend, spec.timeout, spec.seed)


def run_spec(spec: HybridRun, backend: str | None = None) -> dict:
    """Run a checked `HybridRun`: train the one-process reference, launch the ranks, and hold each plan to the
    reference and to the models. `backend`: `backend_for(spec)`, if the caller has asked already (`simlab run
    hybrid` does, to refuse before it prints anything); else it is asked here."""
    backend = backend_for(spec) if backend is None else backend
    model = spec.model
    tokens = make_tokens(spec.global_batch, model.seq, model.vocab, spec.seed)
    ref_losses, ref = reference_model(lambda: gpt_for(model, spec.seed), tokens, spec.steps, spec.lr, "adam",
                                      gpt_loss, eps=EPS)
    ref_params = {k: v.detach().clone() for k, v in ref.named_parameters()}
    ranks = launch(train_hybrid, spec.world_size, spec, backend=backend, timeout=spec.timeout)
    results = [_result(spec, plan, [r[i] for r in ranks], ref_losses, ref_params) for i, plan in enumerate(spec.plans)]
    return results[0] | ({"variants": results[1:]} if spec.variants else {})


def _result(spec: HybridRun, plan, ranks, ref_losses, ref_params) -> dict:
    model, mesh, batch, backend = spec.model, spec.mesh, spec.global_batch, ranks[0]["backend"]
    whole, drift = _assemble(ranks)
    last = [r for r in ranks if r["losses"][0] is not None]
    losses = [sum(r["losses"][s] for r in last) / len(last) for s in range(len(ref_losses))]  # DP replicas' mean
    kinds = KINDS + (("cp",) if plan.cp > 1 else ())  # lesson 6's three groups, and CP's where it is split
    measured = {kind: [r["bytes"][kind] for r in ranks] for kind in kinds}
    predicted = bytes_per_rank(model, plan, batch)
    timed = [max(r["seconds"][s] for r in ranks) for s in range(1, len(ref_losses))] or [ranks[0]["seconds"][0]]
    t0 = min(r["t0"] for r in ranks)
    timing = step(model, plan, spec.machine(backend), batch, executor=True)  # the plan's precision: fp32
    return result(
        world_size=mesh.world_size, backend=backend,
        trace=Trace(replace(e, rank=i, start=e.start - t0, end=e.end - t0)  # the last step, global ranks
                    for i, r in enumerate(ranks) for e in r["events"][-1]),
        bytes_sent_per_rank=[sum(measured[k][i] for k in kinds) for i in range(mesh.world_size)],
        max_abs_diff_vs_reference=max([abs(a - b) for a, b in zip(losses, ref_losses)]
                                      + [max_abs_diff(whole, ref_params), drift]),
        max_abs_diff_vs_torch=None, why_no_torch="torch has no one-call 3-D trainer to set beside it; each "
        "dimension is compared with torch's own in lessons 2-5",
        config=plan.to_dict(), losses=losses, reference_losses=ref_losses,
        groups={kind: [list(g) for g in mesh.groups(kind)] for kind in kinds}
        | ({"dp-cp": [list(g) for g in mesh.joint_groups("dp-cp")]} if plan.cp > 1 else {}),
        bytes_sent_per_group=measured, predicted_bytes_per_group=predicted,
        predicted_bytes_per_rank=[sum(predicted[k][i] for k in kinds) for i in range(mesh.world_size)],
        measured_memory_per_rank=[r["memory"] for r in ranks],
        predicted_memory_per_rank=[rank_states(model, plan, r["coords"]["pp"]) for r in ranks],
        measured_step_seconds=statistics.median(timed),
        predicted_step_seconds=timing["step_seconds"], predicted_breakdown=timing["breakdown"],
        model=spec.sizes(), global_batch=batch, max_abs_diff_across_replicas=drift)


def predicted_trace(result: dict) -> Trace:
    """The model's pipeline timeline for a `run_hybrid` result, per global rank (lesson 4's simulator with this
    machine's calibrated stage times, `sim.hybrid_time.pipeline_trace`): draw it above `result["trace"]`."""
    spec = HybridRun.from_result(result)
    return pipeline_trace(spec.model, spec.plan, spec.machine(result["backend"]), spec.global_batch, spec.mesh)
