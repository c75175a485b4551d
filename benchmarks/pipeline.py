"""How fast are our pipeline schedules next to torch.distributed.pipelining's own?

Section "schedule": interleaved 1F1B with p=32 ranks, m=256 micro-batches, v=4 chunks (65,536 actions).
  ours          simlab.sim.pipeline_schedules.interleaved + simlab.sim.pipeline.simulate: every rank's order AND its
                timed trace (one Event per action)
  torch         ScheduleInterleaved1F1B(stages, 256): the constructor builds `pipeline_order` for all 32
                ranks and lowers it with send/recv actions — what a torch user pays to get the schedule
  ours-order    (information) interleaved() alone: the bare order, no simulation
  torch-order   (information) only its `_calculate_single_rank_operations` for the 32 ranks: the bare order
Prints the median of --repeats runs and speed-up = torch / ours (target ≥ 3). Before timing it checks
that both produce the same order, action for action.
Section "step": a real training step of our executor vs torch.distributed.pipelining (ours/torch).
Section "bubble": a real run's bubble fraction vs the simulator fed its measured per-action times.

torch needs stage objects: rank 0's four real `PipelineStage`s (nn.Identity, CPU) on a 32-rank
process group of torch's "fake" backend (torch.testing._internal.distributed.fake_pg), which lives
in this one process and communicates nothing — the cheapest honest way, since the schedule classes
only read the group's size and rank, and every rank computes the whole pipeline_order anyway.

    .venv/bin/python benchmarks/pipeline.py
    .venv/bin/python benchmarks/pipeline.py --repeats 9 --json

Timings need a quiet machine: the script prints the 1-min load average and warns above 1.5.
"""
from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from _common import load_warning  # benchmarks/ is on sys.path when run as a script
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
from simlab.plan import Action  # noqa: E402 — after sys.path gains the checkout
from simlab.sim.pipeline import simulate  # noqa: E402 — after sys.path gains the checkout
from simlab.sim.pipeline_schedules import interleaved  # noqa: E402 — after sys.path gains the checkout

TARGET = 3.0  # ours must be at least this many times faster than torch's constructor


def _median_seconds(contenders: dict, repeats: int) -> dict:
    """Median seconds per contender; they take turns in rotating order, each after a full collection,
    so load drift and garbage left by another contender hit all alike."""
    names, times = list(contenders), {name: [] for name in contenders}
    for i in range(repeats):
        for name in names[i % len(names):] + names[:i % len(names)]:
            gc.collect()
            start = time.perf_counter()
            contenders[name]()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(ts) for name, ts in times.items()}


def _torch_stages(p: int, v: int):
    """Rank 0's v stages (global indices 0, p, 2p, …) on a fake p-rank process group."""
    from torch.distributed.pipelining import PipelineStage
    from torch.testing._internal.distributed.fake_pg import FakeStore
    dist.init_process_group("fake", rank=0, world_size=p, store=FakeStore())
    return [PipelineStage(nn.Identity(), c * p, p * v, torch.device("cpu")) for c in range(v)]


def schedule_section(p: int = 32, m: int = 256, v: int = 4, repeats: int = 5) -> dict:
    """Median seconds to produce the interleaved schedule: ours (order + simulated trace) vs torch."""
    from torch.distributed.pipelining import ScheduleInterleaved1F1B
    stages = _torch_stages(p, v)
    try:
        theirs = ScheduleInterleaved1F1B(stages, m)
        ours = interleaved(p, m, v)
        order = [[Action.parse(str(a)) for a in theirs.pipeline_order[r] if a is not None] for r in range(p)]
        if order != ours:
            raise AssertionError("our interleaved order differs from torch's: the timing would compare apples to pears")
        row = {"p": p, "m": m, "v": v, "actions": sum(map(len, ours)), "repeats": repeats}
        medians = _median_seconds({
            "ours_s": lambda: simulate(interleaved(p, m, v)),
            "torch_s": lambda: ScheduleInterleaved1F1B(stages, m),
            "ours_order_s": lambda: interleaved(p, m, v),
            "torch_order_s": lambda: [theirs._calculate_single_rank_operations(r) for r in range(p)]}, repeats)
        row.update(medians)
    finally:
        dist.destroy_process_group()
    row["speedup"] = row["torch_s"] / row["ours_s"]
    row["order_only_speedup"] = row["torch_order_s"] / row["ours_order_s"]
    row["target"] = TARGET
    return row


def print_schedule(row: dict) -> None:
    print(f"interleaved 1F1B, p={row['p']} m={row['m']} v={row['v']} ({row['actions']:,} actions), "
          f"median of {row['repeats']}")
    print(f"{'contender':<13} {'seconds':>8} {'torch/ours':>11} {'target':>7}")
    print(f"{'ours':<13} {row['ours_s']:>8.3f} {row['speedup']:>11.2f} {'≥' + format(TARGET, '.0f'):>7}"
          f"   (order + simulated trace)")
    print(f"{'torch':<13} {row['torch_s']:>8.3f} {'':>11} {'':>7}   (ScheduleInterleaved1F1B constructor)")
    print(f"{'ours-order':<13} {row['ours_order_s']:>8.3f} {row['order_only_speedup']:>11.2f} {'info':>7}"
          f"   (interleaved() only, vs torch-order)")
    print(f"{'torch-order':<13} {row['torch_order_s']:>8.3f} {'':>11} {'':>7}   (its per-rank order only)")


STEP_RUNS = [("gpipe", 1), ("1f1b", 1), ("interleaved", 2), ("zero-bubble", 1)]
STEP_HIDDEN, STEP_BATCH = 512, 1024  # one micro-batch's forward takes milliseconds: overheads stay small


def step_section(repeats: int = 5) -> dict:
    """Our executor vs torch.distributed.pipelining: same model, split, micro-batches and schedule,
    4 gloo ranks, steps alternating in one launched run (simlab.parity.pipeline_torch.time_pipeline_steps)."""
    from simlab.parity.pipeline_torch import time_pipeline_steps
    rows = [time_pipeline_steps(name, 4, 8, v, steps=max(repeats, 3), global_batch=STEP_BATCH, hidden=STEP_HIDDEN)
            for name, v in STEP_RUNS]
    return {"world_size": 4, "microbatches": 8, "hidden": STEP_HIDDEN, "global_batch": STEP_BATCH, "runs": rows}


def print_step(row: dict) -> None:
    print(f"\ntraining step (fwd + bwd), {row['world_size']} gloo ranks, m={row['microbatches']}, "
          f"MLP h={row['hidden']}, batch {row['global_batch']}: ours vs torch.distributed.pipelining")
    print(f"{'schedule':<13} {'ours ms':>8} {'torch ms':>9} {'ours/torch':>11}")
    for r in row["runs"]:
        name = r["schedule"] + (f" v={r['chunks']}" if r["chunks"] > 1 else "")
        print(f"{name:<13} {1e3 * r['ours_s']:>8.1f} {1e3 * r['torch_s']:>9.1f} {r['ratio']:>11.2f}")


def bubble_section(repeats: int = 5) -> dict:
    """The measured bubble of a real run beside the simulator's fed that run's per-action times
    (simlab.parity.pipeline.compare_bubbles); the issue's target: within 10 %."""
    from simlab.parity.pipeline import compare_bubbles
    return {"runs": [compare_bubbles(name, 4, 8, v, steps=max(repeats, 3)) for name, v in STEP_RUNS]}


def print_bubble(row: dict) -> None:
    print("\nbubble fraction, 4 gloo ranks, m=8: real vs simulated with the real run's per-action times")
    print(f"{'schedule':<13} {'measured':>9} {'simulated':>10} {'rel. error':>11}")
    for r in row["runs"]:
        print(f"{r['schedule_name']:<13} {r['measured_bubble_fraction']:>9.3f} "
              f"{r['simulated_bubble_fraction']:>10.3f} {r['relative_error']:>11.1%}")


SECTIONS = {"schedule": (schedule_section, print_schedule), "step": (step_section, print_step),
            "bubble": (bubble_section, print_bubble)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per contender (median)")
    parser.add_argument("--only", default=None, help=f"comma-separated subset of {','.join(SECTIONS)}")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats={args.repeats}: must be >= 1")
    names = [n.strip() for n in args.only.split(",")] if args.only else list(SECTIONS)
    if unknown := [n for n in names if n not in SECTIONS]:
        parser.error(f"--only: unknown {unknown}; choose from {','.join(SECTIONS)}")
    load = load_warning()
    rows = {name: SECTIONS[name][0](repeats=args.repeats) for name in names}
    if args.json:
        print(json.dumps({"load_1min": load, **rows}, indent=2))
        return 0
    for name in names:
        SECTIONS[name][1](rows[name])
    return 0


if __name__ == "__main__":
    sys.exit(main())
