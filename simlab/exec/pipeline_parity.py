"""Does a pipeline schedule train exactly like one process? And is its bubble the one the simulator says?

`run_pipeline("1f1b", world_size=4, microbatches=8)` builds the schedule with `simlab.sim.schedules`,
runs every rank's action list on real gloo processes (`simlab.exec.pipeline`), and compares the loss,
every parameter's gradient and the parameters after `steps` SGD steps with one process training the
whole model on the whole batch. It also measures each action's time and the hand-over latency,
feeds them to `simlab.sim.pipeline.simulate`, and sets the measured bubble beside the simulated one.

    python -c "from simlab.exec.pipeline_parity import run_pipeline; print(run_pipeline()['max_abs_diff_vs_reference'])"
"""
from __future__ import annotations

import statistics
from dataclasses import replace

import torch

from .._checks import check_choice, check_int, check_positive, check_ranks
from ..plan import Action
from ..trace import Trace
from .models import loss_fn, make_batch, make_mlp
from ..sim.schedules import SCHEDULES
from .pipeline import PipelineRank, make_stages, owner


def check_pipeline(schedule, world_size, microbatches, chunks, global_batch) -> None:
    """One-line ValueErrors before any process starts. A named schedule's own rules (naive runs one
    micro-batch, only interleaved has chunks, …) are `make_schedule`'s, checked in `build_schedule`."""
    check_ranks("world_size", world_size)
    check_int("microbatches", microbatches, 1)
    check_int("chunks", chunks, 1)
    check_int("global_batch", global_batch, 1)
    if isinstance(schedule, str):
        check_choice("schedule", schedule, tuple(SCHEDULES))
    elif not isinstance(schedule, (list, tuple)) or len(schedule) != world_size:
        raise ValueError(f"schedule={schedule!r}: must be a name or one action list per rank ({world_size})")
    if global_batch % microbatches:
        raise ValueError(f"global_batch={global_batch}: must be divisible by microbatches={microbatches}")


def build_schedule(schedule, world_size: int, microbatches: int, chunks: int, check: bool = True):
    """A named schedule from the simulator's generators, or a hand-made list (Actions or '2F0' strings),
    which the simulator's validator must pass first (unless `check=False`: then a broken list runs and
    shows what happens on real ranks)."""
    if isinstance(schedule, str):
        from ..sim.schedules import make_schedule
        return make_schedule(schedule, world_size, microbatches, chunks)
    from ..sim.pipeline import as_actions
    from ..sim.pipeline_check import validate
    plan = as_actions(schedule)
    problems = validate(plan, world_size * chunks, microbatches) if check else []
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ValueError(f"schedule: {problems[0]}{more}")
    return plan


def train_pipeline(rank: int, world_size: int, plan, num_stages: int, hidden: int, global_batch: int,
                   microbatches: int, steps: int, seed: int, lr: float) -> dict:
    """Worker: `steps` SGD steps, each one pass through this rank's action list `plan[rank]`."""
    actions = [Action.parse(a) for a in plan[rank]]
    stages = make_stages(num_stages, hidden, seed)  # every rank builds all, keeps its own: same init
    mine = {s: stages[s] for s in range(num_stages) if owner(s, world_size) == rank}
    x, y = make_batch(global_batch, hidden, hidden, seed)  # (B, h) each
    runner = PipelineRank(rank, world_size, mine, num_stages, x.chunk(microbatches), y.chunk(microbatches))
    params = [p for stage in mine.values() for p in stage.parameters()]
    opt = torch.optim.SGD(params, lr=lr) if params else None
    out = {"losses": [], "events": [], "t0": [], "ready": []}
    for step in range(steps):
        for p in params:
            p.grad = None
        out["events"].append(runner.run(actions))  # absolute clock readings: the parent aligns the ranks
        out["t0"].append(runner.t0)
        out["ready"].append(runner.ready)
        out["losses"].append(sum(runner.losses.values()) if num_stages - 1 in mine else None)
        if step == steps - 1:  # the last step's grads, before the update, as the reference records them
            out["grads"] = {(s, i): p.grad.clone() if p.grad is not None else torch.zeros_like(p)
                            for s in mine for i, p in enumerate(mine[s].parameters())}
        if opt:
            opt.step()
    out["params"] = {(s, i): p.detach().clone() for s in mine for i, p in enumerate(mine[s].parameters())}
    return out


def reference(num_stages: int, hidden: int, global_batch: int, steps: int, seed: int, lr: float):
    """One process, the whole model, the whole batch: (losses, last step's grads, final params), the
    grads and params keyed (stage, index) like the ranks'."""
    model = make_mlp([hidden] * (num_stages + 1), seed)
    x, y = make_batch(global_batch, hidden, hidden, seed)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    losses, keyed = [], lambda f: {(s, i): f(p) for s in range(num_stages)  # noqa: E731
                                   for i, p in enumerate(model[2 * s:2 * s + 2].parameters())}
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        losses.append(loss.item())
        grads = keyed(lambda p: p.grad.clone())
        opt.step()
    return losses, grads, keyed(lambda p: p.detach().clone())


def align(ranks: list[dict], step: int) -> tuple[Trace, dict]:
    """One step's events of all ranks on one time axis: absolute perf_counter seconds (one monotonic
    clock per host) minus the earliest moment any rank left the step's starting barrier. Also
    {action name: when its output was ready} on that axis."""
    t0 = min(r["t0"][step] for r in ranks)
    trace = Trace(replace(e, start=e.start - t0, end=e.end - t0) for r in ranks for e in r["events"][step])
    return trace, {name: t - t0 for r in ranks for name, t in r["ready"][step].items()}


def stage_times(traces, num_stages: int) -> dict:
    """Mean measured seconds per stage: t_f, t_b (a full backward: B, or I + W) and t_w (None if no W)."""
    per = {}
    for trace in traces:
        for e in trace:
            a = Action.parse(e.name)
            per.setdefault((a.stage, a.op), []).append(e.end - e.start)
    mean = lambda s, op: statistics.fmean(per[(s, op)]) if (s, op) in per else None  # noqa: E731
    t_f = [mean(s, "F") for s in range(num_stages)]
    t_w = [mean(s, "W") for s in range(num_stages)]
    t_b = [mean(s, "B") if mean(s, "B") is not None else mean(s, "I") + (w or 0.0) for s, w in enumerate(t_w)]
    return {"t_f": t_f, "t_b": t_b, "t_w": None if None in t_w else t_w}


def transfer_time(trace, world_size: int, num_stages: int) -> float:
    """Mean hand-over latency between ranks: consumer start − producer end, over the cross-rank
    dependencies the consumer really sat waiting for (its previous action ended before the producer)."""
    done = {e.name: e for e in trace}  # each action runs on one rank only
    at = {(e.rank, e.step): e for e in trace}
    gaps = []
    for e in trace:
        a = Action.parse(e.name)
        if a.op == "F" and a.stage > 0:
            producers = [f"{a.stage - 1}F{a.mb}"]
        elif a.op in "BI" and a.stage < num_stages - 1:
            producers = [f"{a.stage + 1}B{a.mb}", f"{a.stage + 1}I{a.mb}"]
        else:
            continue
        prod = next((done[n] for n in producers if n in done), None)
        if prod is None or prod.rank == e.rank:
            continue
        prev = at.get((e.rank, e.step - 1))
        if prev is None or prev.end <= prod.end:  # idle when the data left: the gap is the transfer
            gaps.append(max(0.0, e.start - prod.end))
    return statistics.fmean(gaps) if gaps else 0.0


def action_times(trace, world_size: int) -> list[list[float]]:
    """Each action's measured duration, one list per rank in execution order (what `simulate` takes)."""
    return [[e.end - e.start for e in sorted(trace.for_rank(r), key=lambda e: e.step)] for r in range(world_size)]


def bubbles(traces, plan, world_size: int, num_stages: int) -> dict:
    """Measured bubble fraction and the simulator's, fed each step's measured per-action times and
    hand-over latency (medians over the timed steps): what is left to disagree is only the waiting."""
    from ..sim.pipeline import bubble_fraction, simulate
    latencies = [transfer_time(t, world_size, num_stages) for t in traces]
    sims = [simulate(plan, t_comm=lat, action_times=action_times(t, world_size)) for t, lat in zip(traces, latencies)]
    return {"measured_bubble_fraction": statistics.median(bubble_fraction(t, world_size) for t in traces),
            "simulated_bubble_fraction": statistics.median(bubble_fraction(s, world_size) for s in sims),
            "stage_times": stage_times(traces, num_stages), "transfer_time": statistics.fmean(latencies),
            "simulated_trace": sims[-1]}


def run_pipeline(schedule="1f1b", world_size: int = 4, microbatches: int = 8, chunks: int = 1, steps: int = 1,
                 seed: int = 0, global_batch: int = 16, hidden: int = 16, lr: float = 0.1,
                 timeout: float = 60.0, check: bool = True) -> dict:
    """Launch `world_size` ranks running `schedule` (a name, or one action list per rank); compare with
    one process on the whole model and batch. With steps > 1 the first step is warm-up for timing.
    `check=False` runs a hand-made list without validating it first (it may then time out).
    "traces": one Trace per step, seconds from that step's start, all ranks on one clock;
    "output_ready": per step, {action name: when its output was computed} on the same axis."""
    check_pipeline(schedule, world_size, microbatches, chunks, global_batch)
    check_int("steps", steps, 1)
    check_int("hidden", hidden, 1)
    check_positive("lr", lr)
    check_positive("timeout", timeout)
    plan = build_schedule(schedule, world_size, microbatches, chunks, check)
    num_stages = world_size * chunks
    ref_losses, ref_grads, ref_params = reference(num_stages, hidden, global_batch, steps, seed, lr)
    from .launch import launch  # here, so importing this module starts nothing
    strs = [[str(a) for a in actions] for actions in plan]
    ranks = launch(train_pipeline, world_size, strs, num_stages, hidden, global_batch, microbatches, steps,
                   seed, lr, backend="gloo", timeout=timeout)
    losses = ranks[owner(num_stages - 1, world_size)]["losses"]
    diffs = [abs(a - b) for a, b in zip(losses, ref_losses)]
    for key, ref in (("grads", ref_grads), ("params", ref_params)):
        mine = {k: v for r in ranks for k, v in r[key].items()}
        if mine.keys() != ref.keys():  # a stage nobody ran would otherwise simply go unchecked
            raise RuntimeError(f"{key}: the ranks hold {sorted(mine)}, the model has {sorted(ref)}")
        diffs += [(mine[k] - ref[k]).abs().max().item() for k in ref]
    traces, ready = zip(*(align(ranks, step) for step in range(steps)))
    traces, ready = list(traces), list(ready)
    timed = traces[1:] or traces  # step 0 pays for warm-up
    result = {"schedule": strs, "schedule_name": schedule if isinstance(schedule, str) else None,
              "world_size": world_size, "microbatches": microbatches, "chunks": chunks,
              "num_stages": num_stages, "losses": losses,
              "loss": losses[-1], "reference_losses": ref_losses, "reference_loss": ref_losses[-1],
              "max_abs_diff_vs_reference": max(diffs), "trace": traces[-1], "traces": traces,
              "output_ready": ready}
    return result | bubbles(timed, plan, world_size, num_stages)


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
                       hidden, timeout=timeout)
    measured, simulated = res["measured_bubble_fraction"], res["simulated_bubble_fraction"]
    keys = ("schedule_name", "world_size", "measured_bubble_fraction", "simulated_bubble_fraction",
            "stage_times", "transfer_time", "max_abs_diff_vs_reference")
    return {k: res[k] for k in keys} | {"relative_error": abs(measured - simulated) / measured if measured else 0.0}
