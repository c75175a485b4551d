"""What a run does when it is ended from outside: SIGTERM, SIGHUP, SIGKILL, or a torchrun agent that died.

A launcher owns things that outlive it unless it cleans them up: worker processes, and a folder in the temp
directory where hung ranks dump their stacks. Ctrl-C (SIGINT) is Python's KeyboardInterrupt and runs
`launch`'s `finally`; the other signals kill a Python process at once by default, so:
- `cleaned_up_on_signals`: while a launch runs, SIGTERM and SIGHUP raise inside it instead, its `finally` stops
  the workers and removes the folder, and the signal is then delivered again, so the process still ends the
  way its sender expects (exit status 128 + signal). Only where the default action is set: a handler someone
  else installed (Jupyter's, yours) is theirs, and an ignored signal (nohup) stays ignored.
- `stack_folder`: SIGKILL cannot be caught (the workers follow their parent through PR_SET_PDEATHSIG, see
  `launch_watch.die_with_parent`, but the folder stays). So the folder's name carries the launcher's pid, and
  each launch first removes the folders of launchers that are no longer alive — only this user's, only
  real folders (never a symlink planted in a shared /tmp).
- `exit_with_parent`: under torchrun the workers are the agent's children, not ours. If the agent is killed
  (SIGKILL; it forwards the other signals), its workers would go on alone, and a peer on another node would
  wait for it. A thread in each worker polls its parent's pid and ends the worker, non-zero, when the agent is
  gone: its sockets close, so its peers' collectives fail at once (or within their timeout) instead of hanging.
  Polling, not PR_SET_PDEATHSIG: that one fires when the *thread* that started us exits, which in an agent
  may be any thread.
- `stop`: how the parent ends its workers, every way a run ends: a grace period, then SIGTERM to each worker's
  process group (what a worker started goes too), then SIGKILL to what is left.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import tempfile
import threading
import time

# SIGINT is KeyboardInterrupt already; SIGKILL cannot be caught; Windows has no SIGHUP
CAUGHT = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))
PREFIX = "simlab-launch-"
_POLL = 0.5  # seconds between two looks at the parent's pid: a dead agent's workers end within this


class Signalled(BaseException):
    """SIGTERM or SIGHUP arrived during a launch: unwinds it (its `finally` cleans up), then the signal is
    delivered again. A BaseException, so no `except Exception` in between swallows it."""

    def __init__(self, signum: int):
        super().__init__(f"{signal.Signals(signum).name} during a launch")
        self.signum = signum


@contextlib.contextmanager
def cleaned_up_on_signals():
    """Turn SIGTERM and SIGHUP into `Signalled` inside the block, then die of them after it has cleaned up.

    Python sets signal handlers in the main thread only: a launch from another thread keeps the defaults."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received = []

    def handler(signum, frame):
        received.append(signum)
        if len(received) == 1:  # a second signal during the cleanup must not cut the cleanup short
            raise Signalled(signum)

    ours = [s for s in CAUGHT if signal.getsignal(s) is signal.SIG_DFL]
    for sig in ours:
        signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig in ours:
            signal.signal(sig, signal.SIG_DFL)
        if received:  # cleaned up: now end as the sender asked (the default action, restored above)
            os.kill(os.getpid(), received[0])
            time.sleep(1.0)  # the kernel delivers it while we wait; nothing after this line runs


def stack_folder() -> str:
    """A new private folder (0700) for the ranks' stack dumps, named after this process; first removes the
    folders that killed launchers (SIGKILL) left behind."""
    remove_stale()
    return tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-")


def remove_stale(folder: str | None = None) -> list[str]:
    """Remove `simlab-launch-<pid>-*` folders in the temp directory whose launcher `pid` is not alive; return
    their paths. A pid the system reused for another process keeps its folder until that one ends: safe."""
    removed = []
    try:
        entries = list(os.scandir(folder or tempfile.gettempdir()))
    except OSError:
        return removed
    for entry in entries:
        pid = entry.name[len(PREFIX):].split("-", 1)[0]
        if not entry.name.startswith(PREFIX) or not pid.isdigit() or _alive(int(pid)):
            continue
        try:
            mine = not hasattr(os, "getuid") or entry.stat(follow_symlinks=False).st_uid == os.getuid()
            if not entry.is_dir(follow_symlinks=False) or not mine:
                continue  # another user's, or a link someone planted: not ours to remove
        except OSError:
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(entry.path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, under another user
        return True
    return True


_watching: list[int] = []  # the parent pid the watch thread compares with, once it runs


def exit_with_parent(poll: float = _POLL) -> None:
    """In a torchrun worker: start (once per process) a daemon thread that ends this process with exit code 1
    and one line on stderr as soon as its parent, the agent, is gone. os._exit, because the main thread may
    be blocked inside a C++ collective that no Python exception can reach."""
    if _watching:
        return
    parent = os.getppid()
    _watching.append(parent)

    def watch():
        while os.getppid() == parent:
            time.sleep(poll)
        print(f"simlab: torchrun's agent (pid {parent}) is gone; this rank (RANK={os.environ.get('RANK', '?')}) "
              "stops", file=sys.stderr, flush=True)
        os._exit(1)

    threading.Thread(target=watch, name="simlab-parent-watch", daemon=True).start()


# ---------------------------------------------------------------- the parent stops everything

def stop(procs, grace):
    """Wait `grace` s for the workers, then SIGTERM each one's process group (the worker and anything it
    started: a process it started would otherwise outlive the run), then SIGKILL what is left."""
    deadline = time.monotonic() + grace
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        signal_group(p, signal.SIGTERM)
        p.terminate()  # the worker too: it may not have made its own group yet (a no-op once it exited)
    deadline = time.monotonic() + 1.0
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    while any(signal_group(p, 0) for p in procs) and time.monotonic() < deadline:
        time.sleep(0.02)  # signal 0 only asks "anyone left?": give what they started the same second
    for p in procs:
        signal_group(p, signal.SIGKILL)
        p.kill()
        p.join()
        p.close()  # releases the sentinel fd now rather than at garbage collection


def signal_group(proc, sig) -> bool:
    try:  # the group's id is the worker's pid (os.setsid); it lasts while anyone in it is left
        os.killpg(proc.pid, sig)
        return True
    except OSError:  # nobody left in it
        return False
