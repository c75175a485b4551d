"""`make lab`: fill the learner's copy (work/), start JupyterLab on it, print where to open it — last.

JupyterLab's own log is a screenful that later lines scroll away, so it goes to work/.lab.log and this
script prints two lines once the server is up, the address last: `open http://localhost:8888/lab/tree/…?token=…`
(with the port the server really took: JupyterLab moves on when the one asked for is busy).
Arguments are passed to `jupyter lab` (`make lab LAB_ARGS="--no-browser --ip=0.0.0.0 --port=8888"`);
as root (containers) `--allow-root` is added, since JupyterLab refuses to start as root without it.
Ctrl-C stops the server.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import learner_copy  # noqa: E402 — after sys.path gains tools/ (a sibling script, not a package)

LOG = ".lab.log"  # in work/; hidden in JupyterLab's file browser (a dot file)


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


def main(argv: list[str] | None = None) -> int:
    user_args = sys.argv[1:] if argv is None else argv
    root = learner_copy.ROOT
    work = root / learner_copy.WORK
    learner_copy.main([])
    page = learner_copy.start_page(work)
    from jupyter_core.paths import jupyter_runtime_dir  # the venv's: this runs as $(BIN)/python
    log = work / LOG
    command = lab_command(work, page, user_args, is_root=hasattr(os, "geteuid") and os.geteuid() == 0)
    # stdin from /dev/null: JupyterLab then stops on the first Ctrl-C instead of asking "y/[n]?" in a
    # log nobody reads.
    with open(log, "w") as out:
        process = subprocess.Popen(command, cwd=work, stdin=subprocess.DEVNULL, stdout=out, stderr=out)
    try:
        server = wait_for_server(process, Path(jupyter_runtime_dir()))
        if server is None:
            if process.poll() is None:
                process.terminate()
            print(f"jupyter lab did not start: {_last_line(log)} (full log: {log})", file=sys.stderr)
            return 1
        print(f"JupyterLab serves {work} (your copy; answers in {root / 'solutions'}); log: {log}")
        print(f"open {open_url(server, page)}", flush=True)
        return process.wait()
    except KeyboardInterrupt:
        _stop(process)
        print("JupyterLab stopped")
        return 0


def _stop(process: subprocess.Popen, grace: float = 10.0) -> None:
    """After Ctrl-C (the terminal sent SIGINT to the whole process group, JupyterLab included).

    JupyterLab interrupted in its first seconds can hang at exit: interpreter shutdown waits for an
    idle anyio worker thread that nobody stops (most launches interrupted at once hung, none of those
    interrupted 6 s later). So: wait, then kill. A second Ctrl-C kills at once."""
    try:
        process.wait(timeout=grace)
    except (subprocess.TimeoutExpired, KeyboardInterrupt):
        process.kill()
        process.wait()


if __name__ == "__main__":
    sys.exit(main())
