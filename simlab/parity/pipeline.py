"""Lesson 4's parity: does a pipeline schedule train exactly like one process, and like torch's own
pipelining? And is its bubble the one the simulator says?

`run_pipeline("1f1b", world_size=4, microbatches=8)` builds the schedule with `simlab.sim.pipeline_schedules`,
runs every rank's action list on real processes (`simlab.exec.pipeline`), and compares the loss, every
parameter's gradient and the parameters after `steps` SGD steps with one process training the whole
model on the whole batch — and, in the same launch, with `torch.distributed.pipelining` running the same
schedule (`simlab.parity.pipeline_torch`). It also measures each action's time and the hand-over
latency, feeds them to the simulator (`simlab.sim.pipeline_calibrate`), and sets the measured bubble
beside the simulated one.

    python -c "from simlab.parity.pipeline import run_pipeline; print(run_pipeline()['max_abs_diff_vs_reference'])"
"""
from __future__ import annotations

from dataclasses import replace

import torch
import torch.distributed as dist

from .._checks import check_bool, check_divisible, check_int, check_positive
from ..exec.launch import device, launch
from ..exec.models import make_batch, make_mlp
from ..exec.pipeline import PipelineRank, owner
from ..plan import Action
from ..sim.pipeline_calibrate import bubbles
from ..sim.pipeline_check import build_schedule, check_pipeline
from ..trace import Trace
from .common import check_run, max_abs_diff, reference_model, result
from .pipeline_torch import train_torch, why_no_torch


def layered_stages(num_stages: int, layers: int, hidden: int, seed: int = 0):
    """`make_mlp([hidden] * (layers + 1))` cut into `num_stages` stages of layers / num_stages Linear
    layers each (with their GELUs; the last stage ends on the bare head): the primer's 8 layers on 2 GPUs
    is `layered_stages(2, 8, h)`, 4 + 4. With one layer per stage it is `exec.pipeline.make_stages`."""
    k = layers // num_stages
    model = make_mlp([hidden] * (layers + 1), seed)  # Linear, GELU, …, Linear: 2·layers - 1 modules
    return [model[2 * k * s:2 * k * (s + 1)] for s in range(num_stages)]


class StashCountingRank(PipelineRank):
    """The executor as it is, plus one real measurement: the most micro-batches whose activations
    (the stage's input, output and autograd graph, kept in `saved` from F until B or W frees them) this
    rank held at once during a step — what `sim.pipeline.peak_activations` predicts from the list."""

    def run(self, actions):
        self.peak_held = 0
        return super().run(actions)

    def forward(self, a: Action) -> None:
        super().forward(a)
        self.peak_held = max(self.peak_held, len(self.saved))


def train_pipeline(rank: int, world_size: int, plan, num_stages: int, hidden: int, global_batch: int,
                   microbatches: int, steps: int, seed: int, lr: float, torch_name: str | None,
                   layers: int | None = None) -> dict:
    """Worker: `steps` SGD steps, each one pass through this rank's action list `plan[rank]`; then, if
    `torch_name`, the same with torch's pipelining on twin stages."""
    actions = [Action.parse(a) for a in plan[rank]]
    stages = layered_stages(num_stages, layers or num_stages, hidden, seed)  # all built, own kept: same init
    mine = {s: stages[s].to(device()) for s in range(num_stages) if owner(s, world_size) == rank}
    x, y = (t.to(device()) for t in make_batch(global_batch, hidden, hidden, seed))  # (B, h) each
    runner = StashCountingRank(mine, num_stages, x.chunk(microbatches), y.chunk(microbatches))
    params = [p for stage in mine.values() for p in stage.parameters()]
    opt = torch.optim.SGD(params, lr=lr) if params else None

    def keyed(f):  # {(stage, parameter index): f(parameter)}, keyed like the reference
        return {(s, i): f(p) for s in mine for i, p in enumerate(mine[s].parameters())}

    out = {"losses": [], "events": [], "t0": [], "ready": [], "peak_held": [], "backend": dist.get_backend()}
    for step in range(steps):
        for p in params:
            p.grad = None
        out["events"].append(runner.run(actions))  # absolute clock readings: the parent aligns the ranks
        out["t0"].append(runner.t0)
        out["ready"].append(runner.ready)
        out["peak_held"].append(runner.peak_held)
        out["losses"].append(sum(runner.losses.values()) if num_stages - 1 in mine else None)
        if step == 0:
            out["bytes_sent"] = runner.bytes_sent  # one step's activations and input grads
        if step == steps - 1:  # the last step's grads, before the update, as the reference records them
            out["grads"] = keyed(lambda p: (p.grad if p.grad is not None else torch.zeros_like(p)).cpu().clone())
        if opt:
            opt.step()
    out["params"] = keyed(lambda p: p.detach().cpu().clone())
    if torch_name:
        out |= train_torch(torch_name, num_stages, hidden, global_batch, microbatches, steps, seed, lr)
    return out


def reference(num_stages: int, hidden: int, global_batch: int, steps: int, seed: int, lr: float,
              layers: int | None = None):
    """One process, the whole model, the whole batch: (losses, last step's grads, final params), the
    grads and params keyed (stage, index) like the ranks'."""
    layers = layers or num_stages
    k = layers // num_stages  # layers per stage
    losses, model = reference_model(lambda: make_mlp([hidden] * (layers + 1), seed),
                                    make_batch(global_batch, hidden, hidden, seed), steps, lr)
    keyed = lambda f: {(s, i): f(p) for s in range(num_stages)  # noqa: E731 — a local one-liner, keyed like the ranks
                       for i, p in enumerate(model[2 * k * s:2 * k * (s + 1)].parameters())}
    return losses, keyed(lambda p: p.grad.clone()), keyed(lambda p: p.detach().clone())


def align(ranks: list[dict], step: int) -> tuple[Trace, dict]:
    """One step's events of all ranks on one time axis: absolute perf_counter seconds (one monotonic
    clock per host) minus the earliest moment any rank left the step's starting barrier. Also
    {action name: when its output was ready} on that axis."""
    t0 = min(r["t0"][step] for r in ranks)
    trace = Trace(replace(e, start=e.start - t0, end=e.end - t0) for r in ranks for e in r["events"][step])
    return trace, {name: t - t0 for r in ranks for name, t in r["ready"][step].items()}


def _merged(ranks, key) -> dict:
    return {k: v for r in ranks for k, v in r[key].items()}


def run_pipeline(schedule="1f1b", world_size: int = 4, microbatches: int = 8, chunks: int = 1, steps: int = 1,
                 seed: int = 0, global_batch: int = 16, hidden: int = 16, lr: float = 0.1,
                 backend: str = "auto", timeout: float = 60.0, check: bool = True, compare_torch: bool = True,
                 layers: int | None = None) -> dict:
    """Launch `world_size` ranks running `schedule` (a name, or one action list per rank); compare with
    one process on the whole model and batch, and with torch's pipelining where it has the schedule.
    With steps > 1 the first step is warm-up for timing. `check=False` runs a hand-made list without
    validating it first (it may then time out). `layers`: Linear layers in the whole model, split
    evenly over the stages (default one per stage; the primer's case is world_size=2, layers=8).
    "traces": one Trace per step, seconds from that step's start, all ranks on one clock;
    "output_ready": per step, {action name: when its output was computed} on the same axis;
    "measured_peak_activations": per rank, the most micro-batches' activations it really held at once."""
    backend = check_run(world_size, backend, timeout, seed)
    check_pipeline(schedule, world_size, microbatches, chunks, global_batch)
    check_int("steps", steps, 1)
    check_int("hidden", hidden, 1)
    check_positive("lr", lr)
    check_bool("compare_torch", compare_torch)
    plan = build_schedule(schedule, world_size, microbatches, chunks, check)
    num_stages = world_size * chunks
    if layers is not None:
        check_int("layers", layers, 1)
        check_divisible("layers", layers, "stages", num_stages)
    why = why_no_torch(schedule, world_size, microbatches) if compare_torch else "compare_torch=False"
    if why is None and layers not in (None, num_stages):  # the torch twin is built one layer per stage
        why = f"layers={layers}: the torch.distributed.pipelining twin has one layer per stage"
    ref_losses, ref_grads, ref_params = reference(num_stages, hidden, global_batch, steps, seed, lr, layers)
    if why is None:
        import torch.distributed.pipelining  # noqa: F401 — import once here: every forked rank inherits it
    strs = [[str(a) for a in actions] for actions in plan]
    ranks = launch(train_pipeline, world_size, strs, num_stages, hidden, global_batch, microbatches, steps,
                   seed, lr, None if why else schedule, layers, backend=backend, timeout=timeout)
    last = ranks[owner(num_stages - 1, world_size)]
    losses, params = last["losses"], _merged(ranks, "params")
    vs_ref = max([abs(a - b) for a, b in zip(losses, ref_losses)]
                 + [max_abs_diff(_merged(ranks, "grads"), ref_grads), max_abs_diff(params, ref_params)])
    vs_torch = None if why else max([abs(a - b) for a, b in zip(losses, last["torch_losses"])]
                                    + [max_abs_diff(params, _merged(ranks, "torch_params"))])
    traces, ready = (list(x) for x in zip(*(align(ranks, step) for step in range(steps))))
    timed = traces[1:] or traces  # step 0 pays for warm-up
    return result(world_size=world_size, backend=ranks[0]["backend"], trace=traces[-1],
                  bytes_sent_per_rank=[r["bytes_sent"] for r in ranks], max_abs_diff_vs_reference=vs_ref,
                  max_abs_diff_vs_torch=vs_torch, why_no_torch=why,
                  schedule=strs, schedule_name=schedule if isinstance(schedule, str) else None,
                  microbatches=microbatches, chunks=chunks, num_stages=num_stages, losses=losses,
                  loss=losses[-1], reference_losses=ref_losses, reference_loss=ref_losses[-1], traces=traces,
                  output_ready=ready, layers=layers or num_stages,
                  measured_peak_activations=[max(r["peak_held"]) for r in ranks]) | bubbles(timed, plan, world_size,
                                                                                             num_stages)


def compare_bubbles(schedule="1f1b", world_size: int = 4, microbatches: int = 8, chunks: int = 1,
                    hidden: int = 512, microbatch_size: int = 128, steps: int = 4, seed: int = 0,
                    timeout: float = 120.0) -> dict:
    """The issue's check, for the benchmark and the lesson: a real run's bubble fraction beside the
    simulator's fed that run's per-action times and hand-over latency. Sized so one forward takes
    milliseconds (timing noise and Python overhead small) while the run still takes a second or two.
    No unit test asserts on it: timings depend on the machine (4 ranks on 2 shared cores stretch
    every wait)."""
    check_int("microbatch_size", microbatch_size, 1)
    res = run_pipeline(schedule, world_size, microbatches, chunks, steps, seed, microbatch_size * microbatches,
                       hidden, timeout=timeout, compare_torch=False)
    measured, simulated = res["measured_bubble_fraction"], res["simulated_bubble_fraction"]
    keys = ("schedule_name", "world_size", "measured_bubble_fraction", "simulated_bubble_fraction",
            "stage_times", "transfer_time", "max_abs_diff_vs_reference")
    return {k: res[k] for k in keys} | {"relative_error": abs(measured - simulated) / measured if measured else 0.0}
