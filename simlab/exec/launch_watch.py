"""The parent side of `launch`: watch every rank, and when the run goes wrong, say which rank did what.

A failed distributed run usually fails *somewhere else* than where the mistake is: the rank that skipped a
collective returns happily, and the ranks that did enter it are the ones that error out ("connection closed
by peer") or hang. So the messages here place every rank: where it failed, where it waits, or that it returned.
Where a hung rank waits comes from its own stack: each worker lets `faulthandler` dump its Python stack to a
file on SIGUSR1, which works even while the rank is blocked inside a C++ collective.
"""
from __future__ import annotations

import ctypes
import os
import pickle
import re
import signal
import sys
import sysconfig
import time
from multiprocessing.connection import wait

import torch

_SLICE = 0.2  # seconds per wait: short, so Ctrl-C and the timeout are noticed promptly
_SETTLE = 0.5  # after a first failure, how long to collect the others before naming the cause
_PROBE = 1.0  # on timeout, how long to wait for the hung ranks' stacks
_TORCH = os.path.dirname(torch.__file__) + os.sep
_DISTRIBUTED = os.path.join(_TORCH, "distributed") + os.sep
_NOT_YOURS = (_TORCH, os.path.join(sysconfig.get_paths()["stdlib"], ""))  # torch's and Python's own files
_LAUNCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "launch.py")
_FRAME = re.compile(r'^\s*File "(.*)", line (\d+) in (.*)$')


class WorkerError(RuntimeError):
    """A rank raised or died; `.rank` says which, `.traceback` holds its traceback text ('' if it died)."""

    def __init__(self, message: str, rank: int = -1, traceback: str = ""):
        super().__init__(message)
        self.rank, self.traceback = rank, traceback


class LaunchTimeout(TimeoutError):
    """The run took longer than `timeout` seconds — usually a collective that one rank never joined."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (or Jupyter's interrupt) while ranks ran: every worker was stopped first."""


def interrupted(world_size: int) -> Interrupted:
    """What Ctrl-C during a run becomes, once every worker is stopped: one line, also in a notebook."""
    one_line_in_ipython()
    return Interrupted(f"interrupted: {world_size} worker{'s' if world_size != 1 else ''} stopped")


def die_with_parent() -> None:
    """In a worker: if the parent is killed (kill -9, a kernel restart), SIGKILL us too (Linux, best effort)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except Exception:
        pass


ONE_LINE: list[type] = [Interrupted]  # exceptions a notebook shows as their message, not a traceback


def one_line_in_ipython(*kinds: type) -> None:
    """In a notebook, show these exceptions (and an `Interrupted`) as their one line, not a traceback.

    IPython's own hook for this (`set_custom_exc`) holds one handler for a tuple of types: simlab keeps
    its types in ONE_LINE and sets the hook only where no one else set one. The cell still fails (its
    execute reply is an error), so Run All stops there and nbval reports it."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None or not set(shell.custom_exceptions) <= set(ONE_LINE):
        return
    ONE_LINE.extend(k for k in kinds if k not in ONE_LINE)

    def show(shell, etype, value, tb, tb_offset=None):
        line = f"{etype.__name__}: {value}"
        if hasattr(shell, "_showtraceback"):  # ipykernel: an error output of one line, so nbval sees the failure
            shell._showtraceback(etype, value, [line])
        else:
            print(line, file=sys.stderr)

    shell.set_custom_exc(tuple(ONE_LINE), show)


def locate(frames):
    """(collective, function, 'file.py:line') for a stack given innermost first as (file, line, function).

    The place is the innermost frame of *your* code (outside torch and Python's standard library; simlab's
    own code counts as yours); collective is the torch.distributed call it is in ('all_reduce'), or None.
    """
    collective = None
    for file, line, function in frames:
        if not file.startswith(_NOT_YOURS):
            return collective, function, f"{os.path.basename(file)}:{line}"
        if file.startswith(_DISTRIBUTED) and not function.startswith("_") and function != "wrapper":
            collective = function  # the outermost public one: all_reduce, not the helpers it calls
    return collective, "?", "?"


def _doing(place) -> str:
    if place is None:
        return "gave no stack"
    collective, function, where = place
    if function == "_wait_for_all":
        return "waiting for the other ranks to start"
    return f"waiting in {collective} ({where})" if collective else f"in {function} ({where})"


def _ranks(ranks) -> str:
    """[1, 2, 3, 5] → 'ranks 1-3, 5';  [0] → 'rank 0'."""
    ranks, runs = sorted(ranks), []
    for r in ranks:
        if runs and r == runs[-1][1] + 1:
            runs[-1][1] = r
        else:
            runs.append([r, r])
    text = ", ".join(f"{a}" if a == b else f"{a}-{b}" if b > a + 1 else f"{a}, {b}" for a, b in runs)
    return f"rank {text}" if len(ranks) == 1 else f"ranks {text}"


def _summary(places: dict) -> str:
    """{rank: place} → 'ranks 1-3 waiting in all_reduce (f.py:7); rank 0 in fn (f.py:5)', collectives first."""
    groups = {}
    for rank in sorted(places):
        groups.setdefault(_doing(places[rank]), []).append(rank)
    order = sorted(groups, key=lambda d: (not d.startswith("waiting in"), groups[d][0]))
    return "; ".join(f"{_ranks(groups[d])} {d}" for d in order)


# ---------------------------------------------------------------- watching the ranks

def collect(procs, conns, timeout, stack_files, deadline=None):
    """Every rank's result in rank order; raises WorkerError or LaunchTimeout (workers are stopped by the caller).
    `deadline` (time.monotonic()): when `timeout` runs out, if its clock started earlier (at the rendezvous)."""
    results, failures = {}, {}  # rank → return value;  rank → (how likely the root cause, WorkerError, place)
    deadline = time.monotonic() + timeout if deadline is None else deadline
    while len(results) + len(failures) < len(procs) and time.monotonic() < deadline:
        pending = [r for r in range(len(procs)) if r not in results and r not in failures]
        owner = {conns[r]: r for r in pending} | {procs[r].sentinel: r for r in pending}
        ready = wait(list(owner), timeout=max(0.0, min(_SLICE, deadline - time.monotonic())))
        for rank in sorted({owner[x] for x in ready}):
            message = _receive(conns[rank])
            if message is None:  # died without a word: likelier the cause than others' "peer closed"
                failures[rank] = ((0, rank), _death_error(rank, procs[rank]), None)
            elif message[0] == "ok":
                results[rank] = message[1]
            else:  # the earliest error is the cause, later ones are knock-on effects
                _, when, header, tb, place = message
                error = WorkerError(f"rank {rank} failed: {header}\n\n{tb}", rank, tb)
                failures[rank] = ((1, when), error, place)
        if failures:  # let the knock-on effects (and a dying rank's sentinel) arrive before judging;
            # failures inside collectives only are knock-ons, the cause may be a rank yet to report: wait longer
            knock_ons = all(place and place[0] for _, _, place in failures.values())
            deadline = min(deadline, time.monotonic() + _SETTLE * (4 if knock_ons else 1))
    if failures:
        raise _blame(results, failures)
    if len(results) < len(procs):
        pending = [r for r in range(len(procs)) if r not in results]
        where = _summary(_stacks(procs, pending, stack_files))
        returned = f"; {_ranks(results)} returned" if results else ""
        raise LaunchTimeout(f"timeout={timeout}s: ranks {pending} still running: {where}{returned}")
    return [results[r] for r in range(len(procs))]


def _blame(results, failures):
    """The error to raise: the likeliest cause, or, when ranks returned while the others failed inside
    collectives, the ranks that returned: their leaving is what broke the others' connections."""
    first = min(failures.values(), key=lambda f: f[0])
    places = {rank: place for rank, (_, _, place) in failures.items()}
    if not results or not all(place and place[0] for place in places.values()):
        return first[1]
    returned, tb = _ranks(results), first[1].traceback
    were = "was" if len(places) == 1 else "were"  # "rank 3 was", "ranks 1-3 were"
    message = (f"{returned} returned while {_ranks(places)} {were} in a collective, so {returned} probably "
               f"skipped it: {_summary(places)}")
    return WorkerError(f"{message}\n\n{tb}", min(results), tb)


def _receive(conn):  # the rank's next message, or None if it exited without sending one
    try:
        return pickle.loads(conn.recv_bytes()) if conn.poll() else None  # no data: only its sentinel fired
    except EOFError:
        return None


def _death_error(rank, proc):
    proc.join(1.0)  # its sentinel fired, so this is quick; it makes exitcode available
    code = proc.exitcode
    how = f"was killed by signal {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
    # SIGKILL that we did not send is almost always the kernel's out-of-memory killer: say what to change
    hint = " (out of memory? choose smaller sizes or fewer processes)" if code == -signal.SIGKILL else ""
    return WorkerError(f"rank {rank} {how} before returning a result{hint}", rank)


# ---------------------------------------------------------------- where a hung rank waits

def _stacks(procs, ranks, stack_files):
    """{rank: place or None}: ask each rank for its stack (SIGUSR1 → faulthandler) and locate it."""
    for rank in ranks:
        try:
            os.kill(procs[rank].pid, signal.SIGUSR1)
        except OSError:  # already gone
            pass
    found, deadline = {}, time.monotonic() + _PROBE
    while True:
        for rank in ranks:
            if rank not in found and (frames := _worker_frames(stack_files[rank])):
                found[rank] = locate(frames)
        silent = [r for r in ranks if r not in found and procs[r].is_alive()]  # a dead rank never answers
        if not silent or time.monotonic() > deadline:
            return {rank: found.get(rank) for rank in ranks}
        time.sleep(0.02)


def _worker_frames(path):
    """The frames of the thread running the worker, innermost first, from `_worker` inwards, or None if
    the dump isn't (completely) there yet. faulthandler writes innermost first, one thread after another."""
    try:
        with open(path, errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    frames = []
    for line in lines:
        match = _FRAME.match(line)
        if not match:  # "Thread 0x…" / "Current thread 0x…": the next thread's stack begins
            frames = []
            continue
        file, number, function = match[1], int(match[2]), match[3].strip()
        frames.append((file, number, function))
        if function == "_worker" and os.path.abspath(file) == _LAUNCH:
            return frames
    return None
