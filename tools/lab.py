"""`make lab`: fill the learner's copy (work/), start JupyterLab on it, print where to open it — last.

JupyterLab's own log is a screenful that later lines scroll away, so it goes to work/.lab.log and this
script prints two lines once the server is up, the address last: `open http://localhost:8888/lab/tree/…?token=…`
(with the port the server really took: JupyterLab moves on when the one asked for is busy).
The Chinese course opens instead (notebooks/zh/00_start_here.ipynb) when asked: `make lab LANG=zh`, or a
Chinese locale (LANG, LC_ALL or SIMLAB_LANG starting with "zh", e.g. zh_CN.UTF-8): `course_language`.
Arguments are passed to `jupyter lab` (`make lab LAB_ARGS="--no-browser --ip=0.0.0.0 --port=8888"`);
as root (containers) `--allow-root` is added, since JupyterLab refuses to start as root without it.

The log holds the server's token, the key to your files: it is created private (0600, only you can read
it). Ctrl-C, SIGTERM or SIGHUP (a closed terminal) stop the server and its kernels: JupyterLab runs in a
process group of its own, which this script asks to stop (SIGTERM: JupyterLab shuts its kernels down), then
kills; even a SIGKILL of this script reaches the server (PR_SET_PDEATHSIG), and a kernel whose server is
gone exits by itself (ipykernel watches its parent).
"""
from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import learner_copy  # noqa: E402 — after sys.path gains tools/ (a sibling script, not a package)

LOG = ".lab.log"  # in work/; hidden in JupyterLab's file browser (a dot file)
# besides Ctrl-C (SIGINT): a `kill`, a closed terminal (Windows has no SIGHUP)
STOPPING = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


ZH_START = Path("notebooks/zh/00_start_here.ipynb")  # the Chinese course's start page (tools/build_zh.py)


def course_language(env=os.environ) -> str:
    """The course's language: "zh" when the learner asked for Chinese (SIMLAB_LANG, else LC_ALL, else LANG
    starting with "zh": make lab LANG=zh, a zh_CN.UTF-8 locale), else "en". The first one set decides."""
    for name in ("SIMLAB_LANG", "LC_ALL", "LANG"):
        value = env.get(name, "").strip().lower()
        if value:
            return "zh" if value.startswith("zh") else "en"
    return "en"


def page_for(work: Path, language: str) -> Path:
    """The page to open, relative to `work`: the Chinese start page for "zh" (where the copy has it), else the
    English one (`learner_copy.start_page`)."""
    if language == "zh" and (work / ZH_START).exists():
        return ZH_START
    return learner_copy.start_page(work)


def lab_command(work: Path, page: Path, user_args: list[str], is_root: bool) -> list[str]:
    """The `jupyter lab` command line: serve `work`, open `page` (relative to it), the user's args last."""
    command = [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={work}", str(page)]
    if is_root and "--allow-root" not in user_args:
        command.append("--allow-root")
    return command + user_args  # last, so the user's flags win over ours


def open_url(server: dict, page: Path) -> str:
    """The URL of `page` on a running server, from its runtime file (jpserver-<pid>.json)."""
    token = server.get("token") or ""
    query = f"?token={token}" if token else ""
    return f"{server['url'].rstrip('/')}/lab/tree/{page.as_posix()}{query}"


def wait_for_server(process: subprocess.Popen, runtime_dir: Path, timeout: float = 120.0) -> dict | None:
    """The server's runtime file once it is written (it is, after the port is bound); None if it exits first."""
    info = runtime_dir / f"jpserver-{process.pid}.json"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        if info.exists():
            try:
                return json.loads(info.read_text())
            except (OSError, ValueError):
                pass  # caught half-written: read it again
        time.sleep(0.2)
    return None


def _last_line(log: Path) -> str:
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1] if lines else "(empty log)"


class Stop(Exception):
    """SIGTERM or SIGHUP arrived: stop JupyterLab, then exit 128 + the signal, as the default action would."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_stop(signum, frame):
    raise Stop(signum)


def open_private(path: Path):
    """`path` for writing, readable by its owner only (0600), also when an older, readable one is there (the
    mode O_CREAT gives applies to a new file only); never through a symbolic link planted there."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
    os.fchmod(fd, 0o600)
    return os.fdopen(fd, "w")


def start_server(command: list[str], work: Path, out) -> subprocess.Popen:
    """JupyterLab in a process group of its own (so this script stops it and all it started, and is the only
    one Ctrl-C reaches), told by the kernel to stop if this script dies (Linux)."""
    parent = os.getpid()

    def follow_parent():  # in the child, before exec: no threads there, so preexec_fn is safe
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
        except Exception:  # not Linux: the signal handlers below still stop it, SIGKILL won't
            pass
        if os.getppid() != parent:  # this script died before the line above took effect
            os._exit(1)

    posix = os.name == "posix"  # process groups and preexec_fn are POSIX's
    return subprocess.Popen(command, cwd=work, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                            start_new_session=posix, preexec_fn=follow_parent if posix else None)


def main(argv: list[str] | None = None) -> int:
    user_args = sys.argv[1:] if argv is None else argv
    root = learner_copy.ROOT
    work = root / learner_copy.WORK
    if learner_copy.main([]):
        return 1  # it said why, in one line
    page = page_for(work, course_language())
    from jupyter_core.paths import jupyter_runtime_dir  # the venv's: this runs as $(BIN)/python
    log = work / LOG
    command = lab_command(work, page, user_args, is_root=hasattr(os, "geteuid") and os.geteuid() == 0)
    try:
        out = open_private(log)
    except OSError as err:  # a link planted there, a full disk
        print(f"make lab: cannot write {log} ({err.strerror or err})", file=sys.stderr)
        return 1
    for sig in STOPPING:  # before the server starts: a signal from now on stops it
        signal.signal(sig, _raise_stop)
    process = None
    try:
        # stdin from /dev/null: JupyterLab then stops on a signal instead of asking "y/[n]?" in a log
        # nobody reads.
        with out:
            process = start_server(command, work, out)
        server = wait_for_server(process, Path(jupyter_runtime_dir()))
        if server is None:
            _stop(process, grace=0.0)
            print(f"jupyter lab did not start: {_last_line(log)} (full log: {log})", file=sys.stderr)
            return 1
        print(f"JupyterLab serves {work} (your copy; answers in {root / 'solutions'}); log: {log}")
        print(f"open {open_url(server, page)}", flush=True)
        return process.wait()
    except (KeyboardInterrupt, Stop) as stop:
        if process is not None:
            _stop(process)
        print("JupyterLab stopped")
        return 128 + stop.signum if isinstance(stop, Stop) else 0


def _stop(process: subprocess.Popen, grace: float = 10.0) -> None:
    """Ask JupyterLab to stop (SIGTERM: it shuts its kernels down), wait `grace` s, then kill its group.

    JupyterLab stopped in its first seconds can hang at exit: interpreter shutdown waits for an idle anyio
    worker thread that nobody stops (most launches interrupted at once hung, none of those interrupted 6 s
    later). So: wait, then kill. A second Ctrl-C or signal kills at once."""
    try:
        _signal_group(process, signal.SIGTERM)
        process.wait(timeout=grace)
    except (subprocess.TimeoutExpired, KeyboardInterrupt, Stop):
        _signal_group(process, signal.SIGKILL)
        process.wait()
    finally:
        for sig in STOPPING:
            signal.signal(sig, signal.SIG_IGN)  # the server is gone: nothing left for a late signal to stop


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    """`sig` to JupyterLab's process group (it and what it started there), while JupyterLab is not yet
    reaped: until then its pid, the group's id, cannot belong to anyone else."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, sig)
    except (OSError, AttributeError):  # the group is gone; no process groups (Windows)
        process.send_signal(sig)


if __name__ == "__main__":
    sys.exit(main())
