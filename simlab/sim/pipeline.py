"""Timing a pipeline schedule: when each action starts and ends, where the bubbles are, memory held.

Each rank runs its list in order. An action starts when its rank is free and its inputs exist:
  F of stage s, micro-batch j   needs F of stage s-1 (same j)                        — the activation
  B or I of stage s             needs B/I of stage s+1 (same j) and its own F         — the output grad
  W of stage s                  needs I of stage s (same j), not a B                  — the saved grad
plus `t_comm` when the input comes from another rank. A full backward B takes `t_b`; split, I takes
t_b - t_w and W takes t_w. The result is a `Trace` of compute events shaped exactly like the real
executor's (`simlab.exec.pipeline`), so a simulated and a real run compare with `Trace.signature()`.

    python -c "from simlab.sim import pipeline as P, pipeline_schedules as S
    print(P.bubble_fraction(P.simulate(S.one_f_one_b(4, 8)), 4))"
"""
from __future__ import annotations

import gc
import math
import sys
from contextlib import contextmanager

from .._checks import MAX_COUNT, check_choice, check_int, check_positive
from ..trace import Event, Trace
from .pipeline_engine import as_actions, deadlock_messages, run_blocking, shape
from .pipeline_schedules import SCHEDULES, make_schedule, nearest_valid


def _per_stage(name: str, value, stages: int, positive: bool = True) -> list[float]:
    values = list(value) if isinstance(value, (list, tuple)) else [value] * stages
    if len(values) != stages:
        raise ValueError(f"{name}: per-stage list has {len(values)} entries, the schedule has {stages} stages")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (v > 0 if positive else v >= 0):
            allowed = "a positive number" if positive else "a number >= 0"
            raise ValueError(f"{name}={value!r}: must be {allowed} (or one per stage)")
        if v > sys.float_info.max:  # inf (nan is refused above), or an int no float can hold
            raise ValueError(f"{name}={value!r}: must be a finite number (or one per stage)")
    return [float(v) for v in values]


@contextmanager
def _gc_paused():
    """Building 10⁵ small events sets off young-generation collections that free nothing: pause them."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def simulate(schedule, t_f=1.0, t_b=2.0, t_w=None, t_comm: float = 0.0, action_times=None) -> Trace:
    """Model-time trace of `schedule`: one compute `Event` per action, `step` = its index on its rank.

    t_f, t_b (a full backward) and t_w are numbers or per-stage lists; t_w defaults to t_b / 2.
    action_times: one list per rank of each action's own duration (e.g. measured in a real run);
    it replaces t_f/t_b/t_w, so only the waiting is simulated.
    >>> from simlab.sim.pipeline_schedules import gpipe
    >>> [(e.name, e.start, e.end) for e in simulate(gpipe(2, 1)).for_rank(1)]
    [('1F0', 1.0, 2.0), ('1B0', 2.0, 4.0)]
    >>> [(e.name, e.start, e.end) for e in simulate(gpipe(2, 1), action_times=[[1, 1], [3, 1]]).for_rank(0)]
    [('0F0', 0.0, 1.0), ('0B0', 5.0, 6.0)]
    """
    schedule = as_actions(schedule)
    if action_times is not None:
        action_times = _check_action_times(schedule, action_times)
    with _gc_paused():
        return _simulate(schedule, t_f, t_b, t_w, t_comm, action_times)


def _check_action_times(schedule, action_times) -> list[list[float]]:
    if not isinstance(action_times, (list, tuple)) or not all(isinstance(t, (list, tuple)) for t in action_times):
        raise ValueError(f"action_times={action_times!r}: must be one list of durations per rank")
    if len(action_times) != len(schedule) or any(len(t) != len(a) for t, a in zip(action_times, schedule)):
        raise ValueError("action_times: needs one duration per action, one list per rank, shaped like the schedule")
    if any(isinstance(x, bool) or not isinstance(x, (int, float)) or not 0 <= x < math.inf
           for t in action_times for x in t):  # `not 0 <= x` also catches nan
        raise ValueError("action_times: every duration must be a finite number >= 0")
    return [[float(x) for x in t] for t in action_times]


def _simulate(schedule, t_f, t_b, t_w, t_comm, action_times=None) -> Trace:
    stages, mbs = shape(schedule)
    f, b = _per_stage("t_f", t_f, stages), _per_stage("t_b", t_b, stages)
    w = [x / 2 for x in b] if t_w is None else _per_stage("t_w", t_w, stages, positive=False)
    if any(wi > bi for wi, bi in zip(w, b)):
        raise ValueError(f"t_w={t_w!r}: the weight-gradient part cannot exceed the full backward t_b={t_b!r}")
    comm = _per_stage("t_comm", t_comm, 1, positive=False)[0]
    result = run_blocking(schedule, stages, mbs, {"F": f, "B": b, "I": [bi - wi for bi, wi in zip(b, w)], "W": w},
                          comm, action_times)
    if result.blocked:
        raise ValueError("schedule cannot run: " + "; ".join(deadlock_messages(schedule, result)))
    # positional Event(rank, kind, step, peer, chunk, nbytes, name, start, end): the hot loop of big runs
    return Trace(Event(r, "compute", i, None, None, 0, str(a), s, e)
                 for r, acts in enumerate(schedule) for i, (a, (s, e)) in enumerate(zip(acts, result.times[r])))


def _check_trace(trace) -> None:
    if not isinstance(trace, list) or not all(isinstance(e, Event) for e in trace):
        raise ValueError(f"trace={trace!r}: must be a Trace (a list of Events), as simulate returns")


def makespan(trace: Trace) -> float:
    """Time from the first action's start to the last action's end."""
    _check_trace(trace)
    return max(e.end for e in trace) - min(e.start for e in trace) if trace else 0.0


def bubble_fraction(trace: Trace, ranks: int) -> float:
    """Idle device-time / (ranks × makespan): the share of the pipeline's time nobody computes.

    This course's convention (idle / total, at most 1). Megatron-LM's paper, the Zero Bubble paper and
    the Ultra-Scale Playbook divide by the ideal, busy time instead: `bubble_ratio`."""
    check_int("ranks", ranks, 1, MAX_COUNT)
    span = makespan(trace)
    busy = sum(e.end - e.start for e in trace if e.kind == "compute")
    return (ranks * span - busy) / (ranks * span) if span else 0.0


def bubble_ratio(trace: Trace, ranks: int) -> float:
    """Idle device-time / busy device-time: the papers' convention (Narayanan et al. 2021, t_pb / t_id),
    which can exceed 1. It equals fraction / (1 − fraction); inf when nobody computes at all.

    >>> from simlab.sim.pipeline_schedules import one_f_one_b
    >>> round(bubble_ratio(simulate(one_f_one_b(4, 8)), 4), 3)  # (p-1)/m
    0.375
    """
    return as_ratio(bubble_fraction(trace, ranks))


def as_ratio(fraction: float) -> float:
    """A bubble given as idle / total, rewritten as idle / ideal: f / (1 − f) (the papers' (p-1)/m
    from this course's (p-1)/(m+p-1)). A pipeline that is all bubble (f = 1) has ratio inf.

    >>> round(as_ratio(3 / 11), 12)
    0.375
    """
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 <= fraction <= 1:
        raise ValueError(f"fraction={fraction!r}: must be a bubble fraction between 0 and 1")
    return fraction / (1 - fraction) if fraction < 1 else math.inf


def peak_activations(schedule) -> list[int]:
    """Per rank, the most micro-batch activations held at once, in units of one (stage, micro-batch).

    A stage keeps micro-batch j's activation from its F until its B frees it, or until W when the
    backward is split (I still needs it, and so does W). With v chunks a rank's stages are 1/v of
    a non-interleaved rank's layers, so one unit is 1/v as big there.
    >>> from simlab.sim.pipeline_schedules import gpipe, one_f_one_b
    >>> peak_activations(gpipe(4, 8)), peak_activations(one_f_one_b(4, 8))
    ([8, 8, 8, 8], [4, 3, 2, 1])
    """
    peaks = []
    for acts in as_actions(schedule):
        held = peak = 0
        for a in acts:
            held += 1 if a.op == "F" else (-1 if a.op in "BW" else 0)
            peak = max(peak, held)
        peaks.append(peak)
    return peaks


def closed_form_bubble(name: str, stages: int, microbatches: int = 1, chunks: int = 1,
                       convention: str = "fraction") -> float:
    """The bubble for equal stage times and free transfers (tests hold `simulate` to it). As a fraction
    (idle / total, this course): naive (p-1)/p; GPipe and 1F1B (p-1)/(m+p-1); interleaved (p-1)/(v·m+p-1);
    ZB-H1 (p-1)/(3m+p-1), the last when forward, input-grad and weight-grad take equally long (t_w = t_f,
    t_b = 2·t_f). As a ratio (idle / ideal, the papers'): naive p-1; GPipe and 1F1B (p-1)/m (Narayanan
    et al. 2021); interleaved (p-1)/(v·m); ZB-H1 (p-1)/(3m).

    >>> closed_form_bubble("1f1b", 4, 8), closed_form_bubble("interleaved", 4, 8, 2)
    (0.2727272727272727, 0.15789473684210525)
    >>> closed_form_bubble("1f1b", 4, 8, convention="ratio")
    0.375
    """
    check_choice("convention", convention, ("fraction", "ratio"))
    check_choice("name", name, tuple(SCHEDULES))
    p, m, v = check_int("stages", stages, 1), check_int("microbatches", microbatches, 1), check_int("chunks", chunks, 1)
    forms = {"naive": (p - 1) / p, "gpipe": (p - 1) / (m + p - 1), "1f1b": (p - 1) / (m + p - 1),
             "interleaved": (p - 1) / (v * m + p - 1), "zero-bubble": (p - 1) / (3 * m + p - 1)}
    if name == "zero-bubble" and m < p:  # ZB-H1's Ws no longer fill the whole tail: no simple formula
        raise ValueError(f"microbatches={m}: zero-bubble's closed form needs microbatches >= stages={p}")
    if convention == "ratio":  # idle over the ideal time, the denominator without its p-1 (naive: 1 unit)
        return {"naive": float(p - 1), "gpipe": (p - 1) / m, "1f1b": (p - 1) / m, "interleaved": (p - 1) / (v * m),
                "zero-bubble": (p - 1) / (3 * m)}[name]
    return forms[name]


def explore(name: str, stages: int, microbatches: int, chunks: int = 1, ratio: float = 2.0):
    """(schedule, trace, readout) for the explorer's knobs, the same whole batch for every schedule.

    The knobs may ask for what a schedule cannot take: `nearest_valid` moves them. The batch is m
    knob-sized micro-batches, each forward taking 1 per whole stage; a fitted m runs micro-batches
    m_knob / m_fitted as big (naive: one, m_knob times as big) and a chunk holds 1/v of a stage, so
    t_F = m_knob / (m_fitted · v) and makespans compare across schedules.
    >>> explore("naive", 2, 4)[2]["makespan"]  # one micro-batch 4x as big: F 4 + 4, B 8 + 8
    24.0
    """
    m, v = nearest_valid(name, stages, microbatches, chunks)
    check_positive("ratio", ratio)
    plan = make_schedule(name, stages, m, v)
    t_f = microbatches / (m * v)
    trace = simulate(plan, t_f=t_f, t_b=ratio * t_f)
    readout = {"schedule": name, "stages": stages, "microbatches": m, "chunks": v,
               "makespan": makespan(trace), "bubble_fraction": bubble_fraction(trace, stages),
               "bubble_ratio": bubble_ratio(trace, stages), "peak_activations": peak_activations(plan)}
    return plan, trace, readout
