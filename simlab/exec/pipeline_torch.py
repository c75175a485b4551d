"""Our pipeline executor beside torch's own (`torch.distributed.pipelining`): same numbers? how fast?

What it teaches: torch's pipelining is the same idea — a `PipelineStage` per model chunk, a schedule
object that walks a per-rank action list — so on the same model, split and batch it must give the same
loss and gradients as our executor. Which torch class runs which of our schedules:
  naive → ScheduleGPipe with one micro-batch, gpipe → ScheduleGPipe, 1f1b → Schedule1F1B,
  interleaved → ScheduleInterleaved1F1B (stage s on rank s mod p, like ours),
  zero-bubble → ScheduleInterleavedZeroBubble with one stage per rank (its ZB1P order is our ZB-H1).
torch scales the grads by 1/m (scale_grads=True) where we scale each micro-batch's loss by 1/m.

    python -c "from simlab.exec.pipeline_torch import compare_with_torch as c; print(c('1f1b', 4))"
"""
from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist

from .._checks import check_int, check_positive
from .models import loss_fn, make_batch
from .pipeline import PipelineRank, make_stages, owner
from .pipeline_parity import build_schedule, check_pipeline


def torch_schedule(name: str, stages: dict, num_stages: int, microbatches: int, b: int, hidden: int, group):
    """torch's schedule object over this rank's `stages` {index: module}; static shapes (b, h)."""
    from torch.distributed import pipelining as tp
    def stage(s, module):  # static shapes (b, h); a stage's input needs a grad unless it is the data
        example = torch.empty(b, hidden, requires_grad=s > 0)
        return tp.PipelineStage(module, s, num_stages, torch.device("cpu"), input_args=example,
                                output_args=torch.empty(b, hidden, requires_grad=True), group=group)
    ours = [stage(s, module) for s, module in sorted(stages.items())]
    if name in ("naive", "gpipe", "1f1b"):
        cls = tp.Schedule1F1B if name == "1f1b" else tp.ScheduleGPipe
        return cls(ours[0], microbatches, loss_fn=loss_fn)
    if name == "interleaved":
        return tp.ScheduleInterleaved1F1B(ours, microbatches, loss_fn=loss_fn)
    return tp.ScheduleInterleavedZeroBubble(ours, microbatches, loss_fn=loss_fn)


def _both(rank, world_size, name, plan, num_stages, hidden, global_batch, microbatches, steps, seed):
    """Worker: our executor and torch's on twin copies of this rank's stages, alternating `steps` times.
    Returns the first step's loss and grads of both, and every step's wall time of both."""
    from ..plan import Action
    actions = [Action.parse(a) for a in plan[rank]]
    mine = [s for s in range(num_stages) if owner(s, world_size) == rank]
    ours = {s: m for s, m in enumerate(make_stages(num_stages, hidden, seed)) if s in mine}
    theirs = {s: m for s, m in enumerate(make_stages(num_stages, hidden, seed)) if s in mine}
    x, y = make_batch(global_batch, hidden, hidden, seed)  # (B, h) each
    runner = PipelineRank(rank, world_size, ours, num_stages, x.chunk(microbatches), y.chunk(microbatches))
    group = dist.new_group(list(range(world_size)))  # torch's messages never meet ours
    sched = torch_schedule(name, theirs, num_stages, microbatches, global_batch // microbatches, hidden, group)
    args = (x,) if rank == owner(0, world_size) else ()
    last = rank == owner(num_stages - 1, world_size)
    def step_ours():
        runner.run(actions)  # starts with a barrier, then sets its t0
        return time.perf_counter() - runner.t0

    def step_torch():
        dist.barrier()
        start = time.perf_counter()
        sched.step(*args, target=y if last else None, losses=losses, return_outputs=False)
        return time.perf_counter() - start

    out = {"ours_s": [], "torch_s": []}
    for step in range(steps):
        for p in [p for m in (*ours.values(), *theirs.values()) for p in m.parameters()]:
            p.grad = None
        losses = []
        for key, fn in (("ours_s", step_ours), ("torch_s", step_torch))[::1 if step % 2 == 0 else -1]:
            out[key].append(fn())  # who goes first alternates: neither always meets a warm cache
        if step == 0:
            out["loss"] = sum(runner.losses.values()) if last else None
            out["torch_loss"] = sum(t.item() for t in losses) / microbatches if last else None
            grads = lambda mods: {(s, i): p.grad.clone() for s in mods  # noqa: E731
                                  for i, p in enumerate(mods[s].parameters())}
            out["grads"], out["torch_grads"] = grads(ours), grads(theirs)
    dist.barrier()  # nobody tears down while a peer's last message is still in flight
    return out


def _launch(schedule, world_size, microbatches, chunks, steps, seed, global_batch, hidden, timeout):
    check_pipeline(schedule, world_size, microbatches, chunks, global_batch)
    if not isinstance(schedule, str):
        raise ValueError(f"schedule={schedule!r}: torch comparison needs a schedule name")
    check_int("steps", steps, 1)
    check_int("hidden", hidden, 1)
    check_positive("timeout", timeout)
    if schedule == "1f1b" and microbatches < world_size:  # torch's Schedule1F1B refuses it inside every rank
        raise ValueError(f"microbatches={microbatches}: torch's Schedule1F1B needs microbatches >= "
                         f"stages={world_size}")
    plan = build_schedule(schedule, world_size, microbatches, chunks)
    num_stages = world_size * chunks
    import torch.distributed.pipelining  # noqa: F401  import once here: every forked rank inherits it
    from .launch import launch
    return launch(_both, world_size, schedule, [[str(a) for a in acts] for acts in plan], num_stages, hidden,
                  global_batch, microbatches, steps, seed, backend="gloo", timeout=timeout)


def compare_with_torch(schedule="1f1b", world_size: int = 4, microbatches: int = 8, chunks: int = 1,
                       seed: int = 0, global_batch: int = 16, hidden: int = 16, timeout: float = 60.0) -> dict:
    """One step of ours and of torch's on the same model, split, batch and schedule: loss and grads."""
    ranks = _launch(schedule, world_size, microbatches, chunks, 1, seed, global_batch, hidden, timeout)
    last = ranks[owner(world_size * chunks - 1, world_size)]
    diffs = [(r["grads"][k] - r["torch_grads"][k]).abs().max().item() for r in ranks for k in r["grads"]]
    return {"loss": last["loss"], "torch_loss": last["torch_loss"],
            "max_abs_diff_vs_torch": max([abs(last["loss"] - last["torch_loss"])] + diffs),
            "grads": {k: v for r in ranks for k, v in r["grads"].items()},
            "torch_grads": {k: v for r in ranks for k, v in r["torch_grads"].items()}}


def time_pipeline_steps(schedule="1f1b", world_size: int = 4, microbatches: int = 8, chunks: int = 1,
                        steps: int = 5, seed: int = 0, global_batch: int = 256, hidden: int = 256,
                        timeout: float = 120.0) -> dict:
    """Wall time of one training step (forward + backward, no update), ours and torch's, alternating in
    one launched run on the same model; a step's time is its slowest rank's, the result the median
    over `steps` (after one warm-up step each). `ratio` = ours / torch: below 1 means ours is faster."""
    ranks = _launch(schedule, world_size, microbatches, chunks, steps + 1, seed, global_batch, hidden, timeout)
    per_step = lambda key: [max(r[key][i] for r in ranks) for i in range(1, steps + 1)]  # noqa: E731
    ours, theirs = statistics.median(per_step("ours_s")), statistics.median(per_step("torch_s"))
    return {"schedule": schedule, "world_size": world_size, "microbatches": microbatches, "chunks": chunks,
            "ours_s": ours, "torch_s": theirs, "ratio": ours / theirs}
