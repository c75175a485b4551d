"""What every `simlab` subcommand shares: one-line errors, the same flag with the same rule everywhere,
and one way to print a run's result (the parity contract's core keys, then the lesson's own)."""
from __future__ import annotations

import argparse
import os
import re

from .. import _checks
from ..exec.launch_env import TORCHRUN_VARS, WHO_AM_I, torchrun_worker  # noqa: F401 — the CLI's too
from ..parity import CORE_KEYS


class OneLineParser(argparse.ArgumentParser):
    """argparse, but errors are a single line (no usage dump) — easy to read in a notebook."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def add_json(p) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object")


def add_run_flags(p, backends: str = "auto | gloo | nccl", timeout: bool = True) -> None:
    """The flags of every `simlab run` target, with one meaning and one rule everywhere. `timeout=False`
    where nothing could be killed (DP runs in this one process): the flag is then not offered at all, so
    argparse refuses it instead of ignoring it."""
    p.add_argument("--world-size", type=int, default=None,
                   help="number of processes (default: $WORLD_SIZE under torchrun, else 4)")
    p.add_argument("--backend", default="auto", help=f"{backends} (default auto)")
    if timeout:
        p.add_argument("--timeout", type=float, default=120.0, help="seconds before workers are killed (default 120)")
    else:
        p.set_defaults(timeout=120.0)
    p.add_argument("--seed", type=int, default=0, help="seed of the inputs and the model (default 0)")
    p.add_argument("--trace", metavar="FILE", default=None,
                   help="also write the real run's trace as Chrome-trace JSON (open it at ui.perfetto.dev)")
    add_json(p)


def add_training_flags(p, steps: bool = True) -> None:
    if steps:
        p.add_argument("--steps", type=int, default=5, help="optimizer steps (default 5)")
    p.add_argument("--global-batch", type=int, default=16, help="samples per step, over all ranks (default 16)")


def check_run_flags(args) -> None:
    """Before any work: the world size (torchrun's by default) and the flags every run shares."""
    if args.world_size is None:  # under torchrun, default to its world size
        args.world_size = torchrun_world_size(default=4)
    _checks.check_int("world_size", args.world_size, 1, MAX_PROCESSES)
    _checks.check_int("seed", args.seed, 0)
    _checks.check_positive("timeout", args.timeout)
    if args.trace is not None:
        check_writable("--trace", args.trace)


def check_writable(flag: str, path: str) -> None:
    """Refuse, before any work, a file the run could not write at its end — or should not: a symbolic link
    (written through, it would change the file it points to; `sim.shared_files.check_target`), a folder, a
    device such as /dev/null (the atomic write renames over what is there: it would replace the device)."""
    from ..sim.shared_files import check_target
    folder = os.path.dirname(os.path.abspath(path))
    if not path:
        raise ValueError(f"{flag}={path!r}: must name a file, e.g. {flag}=run.json")
    check_target(path, flag)
    if not os.path.isdir(folder):
        raise ValueError(f"{flag}={path!r}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise ValueError(f"{flag}={path!r}: not writable")


MAX_PROCESSES = _checks.MAX_RANKS  # a course run on one machine; torchrun across machines sets its own
MAX_STEPS = 10_000  # optimizer steps of a parity run: minutes at most, not the days 2**62 steps would take


def available_memory() -> float:
    """Bytes this machine can still give (Linux's MemAvailable; else the physical memory)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024
    except OSError:
        pass
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def check_memory(flags: str, nbytes: float, what: str) -> None:
    """Refuse, before any work, a request whose estimated `nbytes` would not fit in half of what the machine
    has free: one line naming the flags that set the size (the OS's out-of-memory killer names nothing)."""
    free = available_memory()
    if nbytes > free / 2:
        raise ValueError(f"{flags}: {what} would need about {nbytes / 1e9:.3g} GB, more than half of the "
                         f"{free / 1e9:.3g} GB this machine has free; choose smaller sizes")


def torchrun_world_size(default: int) -> int:
    """torchrun's WORLD_SIZE when this process is its worker (`torchrun_worker`), else `default`."""
    worker = torchrun_worker()
    return default if worker is None else worker["world_size"]


def check_training_flags(args) -> None:
    """What every training run needs: steps, a batch the ranks can split evenly, and memory for it: each
    sample holds one activation per unit of the lessons' MLP (TINY_MLP), kept for backward, twice over."""
    from ..exec.models import TINY_MLP
    _checks.check_int("steps", args.steps, 1, MAX_STEPS)
    _checks.check_batch(args.global_batch, args.world_size)
    check_memory(f"--global-batch={args.global_batch}", 2 * 4 * args.global_batch * sum(TINY_MLP),
                 "the batch and its activations")


def is_printing_rank() -> bool:
    """Under torchrun every rank runs this CLI; only rank 0 prints. Any other process prints — one with stray
    or inconsistent torchrun variables too: a command that launches refuses those first (`main`), and one that
    does not (plan, memory, schedule, collective, split) computes the same answer wherever it runs, so the
    variables cannot change what it says and must not silence it."""
    try:
        worker = torchrun_worker()
    except ValueError:
        return True
    return worker is None or worker["rank"] == 0


class RunOutput(dict):
    """What a run prints, holding the run's trace beside it (not printed; `--trace FILE` writes it)."""

    trace = None

    def __or__(self, other: dict) -> "RunOutput":  # `run_output(…) | {more keys}` keeps the trace
        out = RunOutput(dict(self) | dict(other))
        out.trace = self.trace
        return out


def run_output(head: dict, res: dict, *extra: str) -> dict:
    """A run's printable result: what was run (`head`), the core keys of the parity contract (all but
    the trace), then the lesson's own `extra` keys — the same shape for every `simlab run` target."""
    core = {k: res[k] for k in CORE_KEYS if k != "trace"}
    why = {"why_no_torch": res["why_no_torch"]} if "why_no_torch" in res else {}
    out = RunOutput(head | core | why | {k: res[k] for k in extra if k in res})
    out.trace = res["trace"]
    return out


def write_trace(out: dict, path: str | None) -> dict:
    """`--trace FILE`: the run's trace as Chrome-trace JSON; the printed result names the file. Written all at
    once (`sim.shared_files.write_atomically`): two runs given the same FILE leave one whole trace, never a mix."""
    from ..sim.shared_files import write_atomically
    if path is None or getattr(out, "trace", None) is None:
        return out
    write_atomically(path, out.trace.to_chrome(), "--trace")
    return out | {"trace_file": path}


def summary(out: dict) -> str:
    return "\n".join(f"{key:>24}: {value}" for key, value in out.items())


def as_flags(message: str, parser, renames: dict | None = None) -> str:
    """The engines name their parameters ("world_size=3: …"); the CLI user typed flags ("--world-size=3").
    `renames`: engine parameters that a flag of another name sets (`stage` is `simlab memory --zero`)."""
    flags = {a.dest: a.option_strings[-1] for a in parser._actions if a.option_strings} | (renames or {})
    return re.sub(r"(?<![\w-])([a-z_]+)=", lambda m: f"{flags.get(m[1], m[1])}=", message)
