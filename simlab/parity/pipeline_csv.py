"""Lesson 4's schedule, exported as a CSV and run by torch's own pipeline runtime beside our executor.

What it teaches: a schedule is data, so it travels. `simlab.export.pipeline_csv.to_csv` writes the per-rank
action lists in the file format torch.distributed.pipelining loads (torchtitan's
``pipeline_parallel_schedule_csv``); here every rank hands that very text to torch's loader —
`_PipelineScheduleRuntime._load_csv`, the one path torch has (2.13 exports no public one) — which checks it,
lowers it with its own passes (SEND_F/RECV_F/SEND_B/RECV_B between ranks, REDUCE_GRAD after a stage's last
backward) and runs it on `PipelineStage`s. In the same launch our executor (`simlab.exec.pipeline`) runs the
same lists on the same weights and batch, and one process trains the whole model: every parameter gradient
of the three must agree to fp32 rounding.

    run_csv("zero-bubble", world_size=2, microbatches=4)   # ZB-H1: I and W reach torch as I and W

Both sides split lesson 4's model the same way (`simlab.parity.pipeline.layered_stages`, rank r holding
stages r, r+p, …). torch divides the summed gradients by m once (`scale_grads=True`, at REDUCE_GRAD) where
we divide each micro-batch's loss by m: the same numbers, rounded in another order.

    python -c "from simlab.parity.pipeline_csv import run_csv; print(run_csv('1f1b', 2, 4)['max_abs_diff_vs_torch'])"
"""
from __future__ import annotations

import os
import tempfile

import torch
import torch.distributed as dist

from .._checks import check_divisible, check_int, check_positive
from ..exec.launch import device, launch
from ..exec.models import loss_fn, make_batch
from ..exec.pipeline import owner
from ..export.pipeline_csv import to_csv
from ..i18n import _
from ..sim.pipeline_check import build_schedule, check_pipeline
from .common import check_run, max_abs_diff, result
from .pipeline import _merged, align, layered_stages, reference, train_pipeline

TOLERANCE = 1e-6  # the bar for "the same gradients": fp32 sums in another order, nothing more


def torch_runtime_from_csv(text: str, stages: dict, num_stages: int, b: int, hidden: int, microbatches: int, group):
    """torch's `_PipelineScheduleRuntime` over this rank's `stages` {index: module}, its schedule loaded from
    the CSV `text` by torch's own `_load_csv` (which also validates and lowers it); static shapes (b, h)."""
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime

    where = next(iter(stages.values()))[0].weight.device

    def stage(s, module):  # a stage's input needs a grad unless it is the data; (b, h) in and out
        return PipelineStage(module, s, num_stages, where, group=group,
                             input_args=torch.empty(b, hidden, device=where, requires_grad=s > 0),
                             output_args=torch.empty(b, hidden, device=where, requires_grad=True))
    runtime = _PipelineScheduleRuntime([stage(s, m) for s, m in sorted(stages.items())], microbatches,
                                       loss_fn=loss_fn)
    with tempfile.TemporaryDirectory(prefix="simlab-csv-") as folder:  # the loader takes a file name only
        path = os.path.join(folder, "schedule.csv")
        with open(path, "w", newline="") as f:  # newline="": the CRLFs reach csv.reader as written
            f.write(text)
        runtime._load_csv(path, format="compute_only")  # torchtitan's call: validate, then lower
    return runtime


def train_torch_csv(text: str, num_stages: int, hidden: int, global_batch: int, microbatches: int, seed: int,
                    layers: int | None) -> dict:
    """Worker side: one forward+backward of the whole batch by torch's runtime on a fresh copy of this rank's
    stages (the same seed: the same weights as ours). Its grads keyed (stage, index), its loss on the last
    stage's rank, and the schedule as torch holds it: loaded (`pipeline_order`) and lowered (with comms)."""
    rank, p = dist.get_rank(), dist.get_world_size()
    built = layered_stages(num_stages, layers or num_stages, hidden, seed)  # all built, own kept: same init
    mine = {s: built[s].to(device()) for s in range(num_stages) if owner(s, p) == rank}
    group = dist.new_group(list(range(p)))  # every rank calls it, in the same order: torch's messages apart
    runtime = torch_runtime_from_csv(text, mine, num_stages, global_batch // microbatches, hidden, microbatches,
                                     group)
    x, y = (t.to(device()) for t in make_batch(global_batch, hidden, hidden, seed))  # (B, h) each
    first, last = 0 in mine, num_stages - 1 in mine
    losses = []
    runtime.step(*((x,) if first else ()), target=y if last else None, losses=losses, return_outputs=False)
    dist.barrier(group)  # nobody tears down while a peer's last message is still in flight
    return {"torch_grads": {(s, i): q.grad.cpu().clone() for s in mine for i, q in enumerate(mine[s].parameters())},
            "torch_loss": sum(t.item() for t in losses) / microbatches if last else None,
            "torch_loaded": [str(a) for a in runtime.pipeline_order[rank] if a is not None],
            "torch_lowered": [str(a) for a in runtime.pipeline_order_with_comms[rank]]}


def _both(rank: int, world_size: int, plan, text, num_stages, hidden, global_batch, microbatches, seed, lr,
          layers) -> dict:
    """Worker: our executor on `plan[rank]` (lesson 4's `train_pipeline`, one step), then torch's runtime on the
    CSV `text` of that same plan."""
    out = train_pipeline(rank, world_size, plan, num_stages, hidden, global_batch, microbatches, 1, seed, lr,
                         None, layers)
    return out | train_torch_csv(text, num_stages, hidden, global_batch, microbatches, seed, layers)


def run_csv(schedule="1f1b", world_size: int = 4, microbatches: int = 8, chunks: int = 1, seed: int = 0,
            global_batch: int = 16, hidden: int = 16, lr: float = 0.1, layers: int | None = None,
            backend: str = "auto", timeout: float = 60.0) -> dict:
    """Export `schedule` (a name from `make_schedule`, or one action list per rank, e.g. a learner's repaired
    one) as torch's CSV, and run one training step of it on `world_size` ranks with torch's runtime and with
    ours. `layers`: Linear layers in the whole model, split evenly over the world_size·chunks stages.

    Beyond the core keys (`max_abs_diff_vs_torch`: the largest |our grad − torch's| over every parameter;
    `max_abs_diff_vs_reference`: ours against one process, grads and loss): "csv" the text torch loaded,
    "matched" whether every gradient agreed within "tolerance" ("gradients_compared" of them), "loss" and
    "torch_loss", "torch_loaded" and "torch_lowered" (per rank, the schedule as torch read it and as it ran
    it, communication included)."""
    backend = check_run(world_size, backend, timeout, seed)
    check_pipeline(schedule, world_size, microbatches, chunks, global_batch)
    check_int("hidden", hidden, 1)
    check_positive("lr", lr)
    num_stages = world_size * chunks
    if layers is not None:
        check_int("layers", layers, 1)
        check_divisible("layers", layers, "stages", num_stages)
    plan = build_schedule(schedule, world_size, microbatches, chunks)  # a hand-made list is validated here
    text = to_csv(plan)
    ref_losses, ref_grads, _ = reference(num_stages, hidden, global_batch, 1, seed, lr, layers)
    import torch.distributed.pipelining  # noqa: F401 — import once here: every forked rank inherits it
    strs = [[str(a) for a in actions] for actions in plan]
    ranks = launch(_both, world_size, strs, text, num_stages, hidden, global_batch, microbatches, seed, lr, layers,
                   backend=backend, timeout=timeout)
    last = ranks[owner(num_stages - 1, world_size)]
    grads, torch_grads = _merged(ranks, "grads"), _merged(ranks, "torch_grads")
    vs_torch = max_abs_diff(grads, torch_grads)
    vs_ref = max(abs(last["losses"][0] - ref_losses[0]), max_abs_diff(grads, ref_grads))
    trace, _steps = align(ranks, 0)
    return result(world_size=world_size, backend=ranks[0]["backend"], trace=trace,
                  bytes_sent_per_rank=[r["bytes_sent"] for r in ranks], max_abs_diff_vs_reference=vs_ref,
                  max_abs_diff_vs_torch=vs_torch, csv=text, matched=vs_torch <= TOLERANCE, tolerance=TOLERANCE,
                  gradients_compared=len(grads),
                  schedule=strs, schedule_name=schedule if isinstance(schedule, str) else None,
                  microbatches=microbatches, chunks=chunks, num_stages=num_stages, layers=layers or num_stages,
                  loss=last["losses"][0], torch_loss=last["torch_loss"],
                  torch_loaded=[r["torch_loaded"] for r in ranks], torch_lowered=[r["torch_lowered"] for r in ranks])


def run_text(res: dict, first: int = 13) -> str:
    """A `run_csv` result in the learner's language: rank 0's first actions as torch ran them (its own sends and
    receives added), both losses and whether every gradient agreed."""
    lowered = res["torch_lowered"][0]
    actions = " ".join(lowered[:first]) + (" …" if len(lowered) > first else "")
    return "\n".join([
        _("rank 0 as torch ran it: {actions}").format(actions=actions),
        _("loss: torch {torch:.6f}, ours {ours:.6f}; all {n} gradient tensors within {tolerance:g} of ours: "
          "{verdict}").format(torch=res["torch_loss"], ours=res["loss"], n=res["gradients_compared"],
                              tolerance=res["tolerance"], verdict=_("yes") if res["matched"] else _("NO"))])
