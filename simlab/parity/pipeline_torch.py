"""Our pipeline executor beside torch's own (`torch.distributed.pipelining`): same numbers? how fast?

What it teaches: torch's pipelining is the same idea — a `PipelineStage` per model chunk, a schedule
object that walks a per-rank action list — so on the same model, split and batch it must give the same
loss, gradients and updates as our executor. Which torch class runs which of our schedules:
  naive → ScheduleGPipe with one micro-batch, gpipe → ScheduleGPipe, 1f1b → Schedule1F1B,
  interleaved → ScheduleInterleaved1F1B (stage s on rank s mod p, like ours),
  zero-bubble → ScheduleInterleavedZeroBubble with one stage per rank (its ZB1P order is our ZB-H1).
torch scales the grads by 1/m (scale_grads=True) where we scale each micro-batch's loss by 1/m.
`simlab.parity.pipeline.run_pipeline` trains both in one launch; `time_pipeline_steps` races them.

    python -c "from simlab.parity.pipeline_torch import compare_with_torch as c; print(c('1f1b', 4))"
"""
from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist

from .._checks import check_int
from ..exec.launch import device, launch
from ..exec.models import loss_fn, make_batch
from ..exec.pipeline import PipelineRank, make_stages, owner
from ..plan import Action
from ..sim.pipeline_check import build_schedule, check_pipeline
from .common import check_run, max_abs_diff


def why_no_torch(schedule, world_size: int, microbatches: int) -> str | None:
    """Why torch has no counterpart for this run, naming the argument (None: it has one)."""
    if not isinstance(schedule, str):
        return "schedule: a hand-made list has no torch.distributed.pipelining class"
    if schedule == "1f1b" and microbatches < world_size:  # torch's Schedule1F1B refuses it inside every rank
        return f"microbatches={microbatches}: torch's Schedule1F1B needs microbatches >= stages={world_size}"
    return None


def torch_schedule(name: str, stages: dict, num_stages: int, microbatches: int, b: int, hidden: int, group):
    """torch's schedule object over this rank's `stages` {index: module}; static shapes (b, h), on the
    stages' device."""
    from torch.distributed import pipelining as tp
    where = next(iter(stages.values()))[0].weight.device

    def stage(s, module):  # a stage's input needs a grad unless it is the data
        example = torch.empty(b, hidden, device=where, requires_grad=s > 0)
        return tp.PipelineStage(module, s, num_stages, where, input_args=example,
                                output_args=torch.empty(b, hidden, device=where, requires_grad=True), group=group)
    ours = [stage(s, module) for s, module in sorted(stages.items())]
    if name in ("naive", "gpipe", "1f1b"):
        cls = tp.Schedule1F1B if name == "1f1b" else tp.ScheduleGPipe
        return cls(ours[0], microbatches, loss_fn=loss_fn)
    if name == "interleaved":
        return tp.ScheduleInterleaved1F1B(ours, microbatches, loss_fn=loss_fn)
    return tp.ScheduleInterleavedZeroBubble(ours, microbatches, loss_fn=loss_fn)


class TorchPipeline:
    """torch's pipelining on twin copies of this rank's stages, on its own process group (so torch's
    messages never meet ours): `step(x, y)` runs one forward+backward of the whole batch."""

    def __init__(self, name: str, num_stages: int, hidden: int, global_batch: int, microbatches: int, seed: int):
        rank, p = dist.get_rank(), dist.get_world_size()
        self.stages = {s: m.to(device()) for s, m in enumerate(make_stages(num_stages, hidden, seed))
                       if owner(s, p) == rank}
        group = dist.new_group(list(range(p)))  # every rank calls it, in the same order
        self.schedule = torch_schedule(name, self.stages, num_stages, microbatches, global_batch // microbatches,
                                       hidden, group)
        self.first, self.last = rank == owner(0, p), rank == owner(num_stages - 1, p)
        self.m = microbatches

    def parameters(self):
        return [p for m in self.stages.values() for p in m.parameters()]

    def step(self, x, y) -> float | None:
        """One forward+backward (grads accumulate in .grad); the loss on the last stage's rank, else None."""
        losses = []
        self.schedule.step(*((x,) if self.first else ()), target=y if self.last else None, losses=losses,
                           return_outputs=False)
        return sum(t.item() for t in losses) / self.m if self.last else None

    def keyed(self, f) -> dict:
        return {(s, i): f(p) for s, m in self.stages.items() for i, p in enumerate(m.parameters())}


def train_torch(name, num_stages, hidden, global_batch, microbatches, steps, seed, lr) -> dict:
    """Worker side: `steps` SGD steps with torch's pipelining; its losses and final params."""
    pipe = TorchPipeline(name, num_stages, hidden, global_batch, microbatches, seed)
    x, y = (t.to(device()) for t in make_batch(global_batch, hidden, hidden, seed))
    opt, losses = torch.optim.SGD(pipe.parameters(), lr=lr), []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        losses.append(pipe.step(x, y))
        opt.step()
    return {"torch_losses": losses, "torch_params": pipe.keyed(lambda p: p.detach().cpu().clone())}


def _race(rank, world_size, name, plan, num_stages, hidden, global_batch, microbatches, steps, seed):
    """Worker: our executor and torch's on twin stages, alternating `steps` times (no update).
    Returns the first step's loss and grads of both, and every step's wall time of both."""
    actions = [Action.parse(a) for a in plan[rank]]
    ours = {s: m.to(device()) for s, m in enumerate(make_stages(num_stages, hidden, seed)) if owner(s, world_size) == rank}
    x, y = (t.to(device()) for t in make_batch(global_batch, hidden, hidden, seed))
    runner = PipelineRank(ours, num_stages, x.chunk(microbatches), y.chunk(microbatches))
    theirs = TorchPipeline(name, num_stages, hidden, global_batch, microbatches, seed)

    def step_ours():
        runner.run(actions)  # starts with a barrier, then sets its t0
        return time.perf_counter() - runner.t0

    def step_torch():
        dist.barrier()
        start = time.perf_counter()
        out["torch_loss_now"] = theirs.step(x, y)
        return time.perf_counter() - start

    out = {"ours_s": [], "torch_s": []}

    def grads(mods):
        return {(s, i): p.grad.cpu().clone() for s in mods for i, p in enumerate(mods[s].parameters())}

    for step in range(steps):
        for p in [p for m in ours.values() for p in m.parameters()] + theirs.parameters():
            p.grad = None
        for key, fn in (("ours_s", step_ours), ("torch_s", step_torch))[::1 if step % 2 == 0 else -1]:
            out[key].append(fn())  # who goes first alternates: neither always meets a warm cache
        if step == 0:
            out["loss"] = sum(runner.losses.values()) if theirs.last else None
            out["torch_loss"] = out["torch_loss_now"]
            out["grads"], out["torch_grads"] = grads(ours), grads(theirs.stages)
    dist.barrier()  # nobody tears down while a peer's last message is still in flight
    return out


def _launch(schedule, world_size, microbatches, chunks, steps, seed, global_batch, hidden, backend, timeout):
    backend = check_run(world_size, backend, timeout, seed)
    check_pipeline(schedule, world_size, microbatches, chunks, global_batch)
    check_int("steps", steps, 1)
    check_int("hidden", hidden, 1)
    why = why_no_torch(schedule, world_size, microbatches)
    if why:
        raise ValueError(why)
    plan = build_schedule(schedule, world_size, microbatches, chunks)
    import torch.distributed.pipelining  # noqa: F401 — import once here: every forked rank inherits it
    return launch(_race, world_size, schedule, [[str(a) for a in acts] for acts in plan], world_size * chunks,
                  hidden, global_batch, microbatches, steps, seed, backend=backend, timeout=timeout)


def compare_with_torch(schedule="1f1b", world_size: int = 4, microbatches: int = 8, chunks: int = 1,
                       seed: int = 0, global_batch: int = 16, hidden: int = 16, backend: str = "auto",
                       timeout: float = 60.0) -> dict:
    """One step of ours and of torch's on the same model, split, batch and schedule: loss and grads."""
    ranks = _launch(schedule, world_size, microbatches, chunks, 1, seed, global_batch, hidden, backend, timeout)
    last = ranks[owner(world_size * chunks - 1, world_size)]
    grads = {k: v for r in ranks for k, v in r["grads"].items()}
    torch_grads = {k: v for r in ranks for k, v in r["torch_grads"].items()}
    return {"loss": last["loss"], "torch_loss": last["torch_loss"], "grads": grads, "torch_grads": torch_grads,
            "max_abs_diff_vs_torch": max(abs(last["loss"] - last["torch_loss"]), max_abs_diff(grads, torch_grads))}


def time_pipeline_steps(schedule="1f1b", world_size: int = 4, microbatches: int = 8, chunks: int = 1,
                        steps: int = 5, seed: int = 0, global_batch: int = 256, hidden: int = 256,
                        backend: str = "auto", timeout: float = 120.0) -> dict:
    """Wall time of one training step (forward + backward, no update), ours and torch's, alternating in
    one launched run on the same model; a step's time is its slowest rank's, the result the median
    over `steps` (after one warm-up step each). `ratio` = ours / torch: below 1 means ours is faster."""
    ranks = _launch(schedule, world_size, microbatches, chunks, steps + 1, seed, global_batch, hidden, backend,
                    timeout)

    def per_step(key):  # the slowest rank's time each step, the first (warm-up) left out
        return [max(r[key][i] for r in ranks) for i in range(1, steps + 1)]

    ours, theirs = statistics.median(per_step("ours_s")), statistics.median(per_step("torch_s"))
    return {"schedule": schedule, "world_size": world_size, "microbatches": microbatches, "chunks": chunks,
            "ours_s": ours, "torch_s": theirs, "ratio": ours / theirs}
