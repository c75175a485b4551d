"""Fit the pipeline simulator to a measured run: per-stage times, hand-over latency, and the bubble
the simulator predicts when fed a real trace's own action times (lesson 4's "measured vs simulated").

Pure arithmetic on `Trace`s (as `simlab.sim.data_parallel_calibrate` is for DDP): what is left to disagree between a
real run and the simulation is only the waiting.
"""
from __future__ import annotations

import statistics

from ..plan import Action
from .pipeline import as_ratio, bubble_fraction, simulate


def stage_times(traces, num_stages: int) -> dict:
    """Mean measured seconds per stage: t_f, t_b (a full backward: B, or I + W) and t_w (None if no W)."""
    per = {}
    for trace in traces:
        for e in trace:
            a = Action.parse(e.name)
            per.setdefault((a.stage, a.op), []).append(e.end - e.start)

    def mean(s, op):
        return statistics.fmean(per[(s, op)]) if (s, op) in per else None

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
    hand-over latency (medians over the timed steps): what is left to disagree is only the waiting.
    The same two as ratios (idle / busy) too."""
    latencies = [transfer_time(t, world_size, num_stages) for t in traces]
    sims = [simulate(plan, t_comm=lat, action_times=action_times(t, world_size)) for t, lat in zip(traces, latencies)]
    measured = statistics.median(bubble_fraction(t, world_size) for t in traces)
    simulated = statistics.median(bubble_fraction(s, world_size) for s in sims)
    # both conventions: idle / total (this course) and idle / ideal (the papers'); the ratio of the median
    # fraction is the median ratio, as f / (1 - f) only grows with f
    return {"measured_bubble_fraction": measured, "simulated_bubble_fraction": simulated,
            "measured_bubble_ratio": as_ratio(measured), "simulated_bubble_ratio": as_ratio(simulated),
            "stage_times": stage_times(traces, num_stages), "transfer_time": statistics.fmean(latencies),
            "simulated_trace": sims[-1]}
