"""Is this pipeline schedule runnable? The grader behind the schedule exercises, in plain words.

`validate(schedule)` returns every problem it finds, each naming the rank, the step (index in that
rank's list) and the action; an empty list means the schedule is valid. It checks, in order:
  1. each action names a real stage and micro-batch, and runs on the rank that owns its stage;
  2. every forward and backward appears exactly once (B, or I followed later by W — never B with I or W);
     missing actions are listed up to MISSING_SHOWN, then counted;
  3. on each rank, nothing runs before an output it needs from that same rank: a backward before
     its own forward, a W before its I, or a later stage before the earlier stage feeding it;
  4. running all ranks with blocking receives, nobody waits forever (a deadlock).

    python -c "from simlab.sim.pipeline_check import validate; print(validate([['0B0', '0F0']]))"
"""
from __future__ import annotations

from collections import defaultdict
from itertools import islice

from .._checks import check_choice, check_divisible, check_int, check_ranks
from .message import Message
from .pipeline_engine import as_actions, deadlock_messages, run_blocking, shape
from .pipeline_schedules import SCHEDULES, make_schedule

_WHAT = {"F": Message("forward"), "B": Message("backward"), "I": Message("input-gradient backward"),
         "W": Message("weight-gradient backward")}


def _where(places) -> str:
    """'rank 0 step 1, rank 2 step 0', each place a Message (one template per place, joined)."""
    return Message(", ".join(f"{{p{k}}}" for k in range(len(places))),
                   **{f"p{k}": Message("rank {r} step {i}", r=r, i=i) for k, (r, i) in enumerate(places)})


def placement_problems(schedule, stages: int, microbatches: int) -> list[str]:
    """Actions naming a stage or micro-batch that does not exist, or sitting on the wrong rank."""
    p, out = len(schedule), []
    for r, acts in enumerate(schedule):
        for i, a in enumerate(acts):
            at = Message("rank {r}, step {i}: {action}", r=r, i=i, action=a)
            if a.stage >= stages:
                out.append(Message("{at} names stage {stage}, but the stages are 0..{last}", at=at, stage=a.stage,
                                   last=stages - 1))
            elif a.stage % p != r:
                out.append(Message("{at} is on the wrong rank: stage {stage} lives on rank {owner} (rank r holds "
                                   "stages r, r+{p}, r+{p2}, …)", at=at, stage=a.stage, owner=a.stage % p, p=p,
                                   p2=2 * p))
            if a.mb >= microbatches:
                out.append(Message("{at} names micro-batch {mb}, but the micro-batches are 0..{last}", at=at,
                                   mb=a.mb, last=microbatches - 1))
    return out


MISSING_SHOWN = 10  # a typo such as '2000F2000' would otherwise list millions of missing actions


def count_problems(schedule, stages: int, microbatches: int) -> list[str]:
    """Each (stage, micro-batch) needs one F and one backward: a B, or an I and a W (never B with I or W)."""
    seen = defaultdict(list)  # (stage, op, mb) → [(rank, step), …]
    for r, acts in enumerate(schedule):
        for i, a in enumerate(acts):
            seen[a.stage, a.op, a.mb].append((r, i))
    split = any(op in "IW" for _, op, _ in seen)  # which backward to ask for when none is there
    out = []
    for (s, op, j), places in sorted(seen.items()):
        if len(places) > 1:
            out.append(Message("duplicate: {action} appears {n} times ({where}); each action runs exactly once",
                               action=f"{s}{op}{j}", n=len(places), where=_where(places)))
    touched = sorted({(s, j) for s, _, j in seen if s < stages and j < microbatches})
    for s, j in touched:
        split_too = [f"{s}{op}{j}" for op in "IW" if (s, op, j) in seen]
        if (s, "B", j) in seen and split_too:
            out.append(Message("duplicate backward: {backward} and {split}: a micro-batch's backward is either B, "
                               "or I then W", backward=f"{s}B{j}", split=Message.series(split_too)))
    return out + _missing(seen, stages, microbatches, split, len(schedule))


def _missing(seen, stages: int, microbatches: int, split: bool, ranks: int) -> list[str]:
    """'missing: …' lines in (stage, micro-batch) order: the first MISSING_SHOWN, then a count of the rest."""
    def lacks(s, j):
        has = {op: (s, op, j) in seen for op in "FBIW"}
        wanted = "F" + ("" if has["B"] else ("IW" if split or has["I"] or has["W"] else "B"))
        return [op for op in wanted if not has[op]]
    touched = {(s, j) for s, _, j in seen if s < stages and j < microbatches}
    untouched = stages * microbatches - len(touched)  # each lacks all of F and the default backward
    total = sum(len(lacks(s, j)) for s, j in touched) + untouched * (3 if split else 2)
    lines = (Message("missing: {action}: stage {s} never runs the {what} of micro-batch {j} (it belongs on rank "
                     "{owner})", action=f"{s}{op}{j}", s=s, what=_WHAT[op], j=j, owner=s % ranks)
             for s in range(stages) for j in range(microbatches) for op in lacks(s, j))
    out = list(islice(lines, MISSING_SHOWN))  # lazily: only the pairs up to the tenth missing action
    more = Message("… and {n} more missing actions", n=total - MISSING_SHOWN)
    return out + ([more] if total > MISSING_SHOWN else [])


def _chain(a, stages: int) -> float:
    """Position in micro-batch a.mb's dependency chain F0 → … → F(S-1) → B(S-1) → … → B0.

    W hangs off its I (half a step after it) and feeds nothing."""
    if a.op == "F":
        return a.stage
    return 2 * stages - 1 - a.stage + (0.5 if a.op == "W" else 0.0)


def order_problems(schedule, stages: int) -> list[str]:
    """Within one rank: an action placed before an action of that rank whose output it needs.

    No timing can fix these: the rank would have to run the later action first.
    """
    out = []
    for r, acts in enumerate(schedule):
        later = defaultdict(dict)  # mb → {chain position: step} of this rank's later actions
        first = {}  # a repeated action's output exists from its first run: only that one counts
        for i, a in enumerate(acts):
            first.setdefault(a, i)
        found = []
        for i in range(len(acts) - 1, -1, -1):
            a = acts[i]
            pos = _chain(a, stages)
            needed = [q for q in later[a.mb] if q < pos]  # later actions that feed this one
            if needed:
                k = later[a.mb][max(needed)]  # the nearest one makes the clearest message
                found.append(_order_message(r, i, a, acts[k], k, stages))
            if a.op != "W" and first[a] == i:  # W feeds nothing: it can come late without harm
                later[a.mb][pos] = i
        out += reversed(found)
    return out


def _order_message(r: int, i: int, a, b, k: int, stages: int) -> str:
    at = Message("rank {r}, step {i}: {a} comes before {b} (step {k})", r=r, i=i, a=a, b=b, k=k)
    if a.stage == b.stage and a.op in "BI" and b.op == "F":
        return Message("{at}: a backward needs the activations its own forward saves", at=at)
    if a.stage == b.stage and a.op == "W":
        return Message("{at}: W needs the output gradient that {op} brings in", at=at, op=b.op)
    if _chain(a, stages) - _chain(b, stages) > 1:
        return Message("{at}, but {a} needs {b}'s output (through the stages in between): no timing can fix this "
                       "order", at=at, a=a, b=b)
    return Message("{at}, but {a} needs {b}'s output: no timing can fix this order", at=at, a=a, b=b)


def validate(schedule, stages: int | None = None, microbatches: int | None = None, chunks: int = 1) -> list[str]:
    """Every problem with `schedule`, in plain words; [] when it is valid.

    `stages` defaults to ranks × `chunks` (more if the actions name higher stages, in whole chunks);
    `microbatches` to the largest micro-batch named + 1 (at least 1: empty lists are not a schedule).
    >>> for problem in validate([["0F0", "0B0"], ["1B0", "1F0"]]):
    ...     print(problem)
    rank 1, step 0: 1B0 comes before 1F0 (step 1): a backward needs the activations its own forward saves
    deadlock: rank 0 is stuck at step 1 (0B0), waiting for 1B0 from rank 1 (step 0), which is itself stuck at step 0
    deadlock: rank 1 is stuck at step 0 (1B0), waiting for 1F0, which it only runs later (step 1)
    """
    schedule = as_actions(schedule)
    check_int("chunks", chunks, 1)
    if stages is not None:
        check_int("stages", stages, 1)
    if microbatches is not None:
        check_int("microbatches", microbatches, 1)
    if stages is None:  # ranks × chunks, or more when the actions name higher stages (whole chunks)
        p = max(len(schedule), 1)
        stages = max(p * check_int("chunks", chunks, 1), -(-shape(schedule)[0] // p) * p)
    microbatches = max(shape(schedule)[1], 1) if microbatches is None else microbatches
    problems = placement_problems(schedule, stages, microbatches)
    problems += count_problems(schedule, stages, microbatches)
    problems += order_problems(schedule, stages)
    if any(a.stage >= stages or a.mb >= microbatches for acts in schedule for a in acts):
        return problems  # the run below needs every action to exist
    durations = {op: [0.0] * stages for op in "FBIW"}
    return problems + deadlock_messages(schedule, run_blocking(schedule, stages, microbatches, durations))


def check_pipeline(schedule, world_size, microbatches, chunks, global_batch) -> None:
    """A real run's arguments, in one line each, before any process starts. A named schedule's own rules
    (naive runs one micro-batch, only interleaved has chunks, …) are `make_schedule`'s (`build_schedule`)."""
    check_ranks("world_size", world_size)
    check_int("microbatches", microbatches, 1)
    check_int("chunks", chunks, 1)
    check_int("global_batch", global_batch, 1)
    if isinstance(schedule, str):
        check_choice("schedule", schedule, tuple(SCHEDULES))
    elif not isinstance(schedule, (list, tuple)) or len(schedule) != world_size:
        raise ValueError(f"schedule={schedule!r}: must be a name or one action list per rank ({world_size})")
    check_divisible("global_batch", global_batch, "microbatches", microbatches)


def build_schedule(schedule, world_size: int, microbatches: int, chunks: int, check: bool = True):
    """A named schedule from the generators, or a hand-made list (Actions or '2F0' strings), which must
    pass `validate` first (unless `check=False`: then a broken list runs and shows what real ranks do)."""
    if isinstance(schedule, str):
        return make_schedule(schedule, world_size, microbatches, chunks)
    plan = as_actions(schedule)
    problems = validate(plan, world_size * chunks, microbatches) if check else []
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ValueError(f"schedule: {problems[0]}{more}")
    return plan
