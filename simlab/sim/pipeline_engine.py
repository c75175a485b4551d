"""The dependency engine under the pipeline simulator and the validator: run every rank's action list
with blocking receives and see when each action can start, or who waits forever.

An action needs outputs of others: F of stage s needs F of stage s-1 (same micro-batch); B or I of
stage s needs its own F and B/I of stage s+1; W needs its own I. `run_blocking` walks the ranks'
lists event by event; `simlab.sim.pipeline` adds timing on top, `simlab.sim.pipeline_check` uses the
same run to name deadlocks. Both import this module, neither imports the other.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..plan import Action
from .message import Message


def as_actions(schedule) -> list[list[Action]]:
    """The schedule with every entry an `Action` ("2F0" strings are parsed); a one-line error otherwise."""
    rows_ok = all(isinstance(r, (list, tuple)) for r in schedule) if isinstance(schedule, (list, tuple)) else False
    if not schedule or not rows_ok:
        raise ValueError("schedule: must be a list with one list of actions per rank (at least one rank)")
    out = []
    for r, acts in enumerate(schedule):
        row = []
        for i, a in enumerate(acts):
            if isinstance(a, str):
                a = Action.parse(a)
            if not isinstance(a, Action) or a.op not in ("F", "B", "I", "W") or a.stage < 0 or a.mb < 0:
                raise ValueError(f"schedule[{r}][{i}]={a!r}: must be an Action such as Action(2, 'F', 0)")
            row.append(a)
        out.append(row)
    return out


def shape(schedule) -> tuple[int, int]:
    """(number of stages, number of micro-batches) that the actions name."""
    stages = max((a.stage for acts in schedule for a in acts), default=-1) + 1
    return stages, max((a.mb for acts in schedule for a in acts), default=-1) + 1


@dataclass
class BlockingRun:
    """Result of one pass: per rank, the (start, end) of each action it ran and where it stopped."""

    times: list[list[tuple[float, float]]]
    blocked: dict[int, tuple[int, int, int]]  # stuck rank → the (kind, stage, mb) it waits for


def run_blocking(schedule: list[list[Action]], stages: int, microbatches: int, durations,
                 t_comm: float = 0.0, action_times=None) -> BlockingRun:
    """Run every rank's list with blocking receives, event-driven: a rank that must wait parks on the
    one output it needs and is woken when that output is produced, so each action is tried O(1) times.

    `durations[op][stage]` is the time of op on that stage, unless `action_times[rank][i]` gives each
    action's own. Ranks left waiting form a deadlock.
    """
    n, mbs = stages * microbatches, microbatches
    # outputs by kind: 0 F's activation, 1 B/I's input grad, 2 W's weight grads, 3 the grad I keeps for W
    end = [-1.0] * (4 * n)  # end time of each (kind, stage, mb) output; -1: not produced yet
    where = [-1] * (4 * n)  # the rank that produced it: same rank means no communication
    times = [[] for _ in schedule]
    pos, free = [0] * len(schedule), [0.0] * len(schedule)
    parked: dict[int, list[int]] = {}
    ready = list(range(len(schedule)))
    while ready:
        r = ready.pop()
        acts, i, t, out = schedule[r], pos[r], free[r], times[r]
        while i < len(acts):
            a = acts[i]
            s, op, k = a.stage, a.op, a.stage * mbs + a.mb
            if op == "F":
                needs, made = ((k - mbs,) if s else ()), k
            elif op == "W":  # only an I leaves the saved grad behind: a full B has used it up
                needs, made = (3 * n + k,), 2 * n + k
            else:  # B or I: own activation, and the gradient coming back from the next stage
                needs, made = ((k, n + k + mbs) if s < stages - 1 else (k,)), n + k
            start, missing = t, -1
            for d in needs:
                e = end[d]
                if e < 0:
                    missing = d
                    break
                e = e + t_comm if where[d] != r else e
                start = e if e > start else start
            if missing >= 0:
                parked.setdefault(missing, []).append(r)
                break
            t = start + (action_times[r][i] if action_times else durations[op][s])
            end[made], where[made] = t, r
            out.append((start, t))
            i += 1
            woken = parked.pop(made, None)
            if woken:
                ready.extend(woken)
            if op == "I":  # I also leaves W its saved grad
                end[3 * n + k], where[3 * n + k] = t, r
                ready.extend(parked.pop(3 * n + k, ()))
        pos[r], free[r] = i, t
    blocked = {q: _decode(d, n, mbs) for d, qs in parked.items() for q in qs}
    return BlockingRun(times, blocked)


def _decode(d: int, n: int, mbs: int) -> tuple[int, int, int]:
    kind, k = divmod(d, n)
    return kind, k // mbs, k % mbs


def deadlock_messages(schedule, result: BlockingRun) -> list[str]:
    """One line per rank that waits forever: its step, its action and what it waits for."""
    placed = {}
    for r, acts in enumerate(schedule):
        for i, a in enumerate(acts):
            placed.setdefault((a.stage, a.op, a.mb), (r, i))
    out = []
    for r in sorted(result.blocked):
        kind, s, j = result.blocked[r]
        i = len(result.times[r])
        ops = {0: "F", 1: "BI", 3: "I"}[kind]  # 3: the grad only an I leaves for its W
        need = next((f"{s}{op}{j}" for op in ops if (s, op, j) in placed), f"{s}{ops[0]}{j}")
        src = next((placed[s, op, j] for op in ops if (s, op, j) in placed), None)
        stuck = dict(r=r, i=i, action=schedule[r][i], need=need)  # Messages: the printing layer translates them
        if src is None:
            out.append(Message("deadlock: rank {r} is stuck at step {i} ({action}), waiting for {need}, which no "
                               "rank runs", **stuck))
        elif src[0] == r:
            out.append(Message("deadlock: rank {r} is stuck at step {i} ({action}), waiting for {need}, which it "
                               "only runs later (step {k})", **stuck, k=src[1]))
        else:  # a rank that finished would have produced it: the producer is stuck too
            out.append(Message("deadlock: rank {r} is stuck at step {i} ({action}), waiting for {need} from rank "
                               "{src} (step {k}), which is itself stuck at step {at}", **stuck, src=src[0], k=src[1],
                               at=len(result.times[src[0]])))
    return out
