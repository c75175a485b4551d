"""The parent: each group of checks in its own subprocess (`python tools/gpu_check.py --child <group>`) with its
own timeout, killed with its ranks when it runs over, within one budget for everything; a group that fails,
crashes, hangs or never started for want of time is one ✗ row per check it owed, and the others still run."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from . import ROOT
from .plan import Group
from .report import one_line, row

LAUNCHER = ROOT / "tools" / "gpu_check.py"  # the command; with --child it runs one group (child.run_child)
MARK = "@@gpu-check@@ "  # a child's result lines on stdout start with this


def spawn(group: Group, mode: str, gpus: int, size: str, timeout: float) -> tuple:
    """Run one group's child; returns (rows or env dicts it printed, error line or None)."""
    cmd = [sys.executable, str(LAUNCHER), "--child", group.name, "--mode", mode, "--gpus", str(gpus),
           "--size", size]
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=ROOT, start_new_session=True)
        try:
            proc.wait(timeout=timeout)
            problem = None if proc.returncode == 0 else f"exit status {proc.returncode}"
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # its ranks die with it (PR_SET_PDEATHSIG)
            proc.wait()
            problem = f"timed out after {timeout:.0f} s"
        out.seek(0)
        err.seek(0)
        results = [json.loads(line[len(MARK):]) for line in out.read().splitlines() if line.startswith(MARK)]
        if problem:
            tail = [x for x in err.read().splitlines() if x.strip()]
            problem += f": {one_line(tail[-1])}" if tail and "timed out" not in problem else ""
        return results, problem


def run_groups(groups: list, mode: str, gpus: int, size: str, budget: float) -> tuple:
    """The machine's description, then every group in turn while the budget lasts: (env, rows, seconds spent)."""
    start = time.monotonic()
    env_rows, problem = spawn(Group("env", 60, ()), mode, gpus, size, min(60.0, budget))
    env = env_rows[0]["env"] if env_rows else {}
    if problem:
        print(f"gpu-check: could not read the machine's description ({problem})", flush=True)
    rows = []
    for group in groups:
        left = budget - (time.monotonic() - start)
        if left < 5:
            got, problem = [], f"not run: the {budget:.0f} s budget was spent"
        else:
            got, problem = spawn(group, mode, gpus, size, min(group.timeout, left))
        wanted = dict(group.checks)
        got = [r for r in got if r.get("check") in wanted]
        done = {r["check"] for r in got}
        got += [row(c, how, result=problem or "the check printed no result") for c, how in group.checks
                if c not in done]
        for r in got:
            print(f"gpu-check: {r['ok']} {r['check']}: {r['result']}", flush=True)
        rows += got
    return env, rows, time.monotonic() - start
