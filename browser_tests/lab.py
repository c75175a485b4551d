"""A throw-away JupyterLab for browser tests: a fresh copy of the lessons, its own settings, no process left.

JupyterLab autosaves an open notebook every 120 s, so it never serves the tracked files: `running_lab`
copies notebooks/ and exercises/ into a temporary directory and serves that. Every Jupyter directory
(config, data, runtime, workspaces, settings) points inside it too, so the user's own JupyterLab settings,
workspaces and news pop-ups cannot change what the test sees.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
COPIED = ("notebooks", "exercises")  # what the lab serves, copied fresh for every session
CHROMIUM = os.environ.get("SIMLAB_CHROMIUM", "/usr/bin/chromium")  # Debian's; never `playwright install`

# User settings written before start: no news/update toasts over the notebook, no autosave at all.
SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                         "checkForUpdates": False},
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
}


@dataclass
class Lab:
    url: str                # http://127.0.0.1:<port>
    root: Path              # the served copy: root / "notebooks" / "01_….ipynb"
    process: subprocess.Popen
    log: Path               # the server's stdout + stderr

    def lessons(self) -> list[str]:
        """Every lesson notebook in the served copy, sorted (lessons are discovered, never listed)."""
        return sorted(p.name for p in (self.root / "notebooks").glob("*.ipynb"))


def lessons() -> list[str]:
    """The repository's lesson notebooks (for parametrizing before any lab runs)."""
    return sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _jupyter() -> str:
    here = Path(sys.executable).parent / "jupyter"  # the venv's own, so kernels run the venv's Python
    return str(here) if here.exists() else "jupyter"


def _wait_until_up(url: str, process: subprocess.Popen, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"JupyterLab exited with {process.returncode}; log: {log}")
        try:
            with urllib.request.urlopen(url + "/api/status", timeout=2) as reply:
                json.load(reply)
                return
        except OSError:
            time.sleep(0.25)
    raise TimeoutError(f"JupyterLab did not answer within {timeout:.0f} s; log: {log}")


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM: the server shuts its kernels down itself; then kill whatever of its tree survived.

    Kernels run in their own sessions (jupyter_client starts them with start_new_session), so killing
    the server's process group would miss them: the tree is read from the process table instead."""
    try:
        tree = psutil.Process(process.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        tree = []
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
    _gone, alive = psutil.wait_procs(tree, timeout=10)
    for child in alive:  # these pids are our server's own descendants
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()
    psutil.wait_procs(alive, timeout=10)


@contextlib.contextmanager
def running_lab(timeout: float = 90.0):
    """Yield a `Lab` serving a fresh copy of the lessons; on exit stop it, its kernels and their children."""
    with tempfile.TemporaryDirectory(prefix="simlab-lab-") as tmp:
        tmp = Path(tmp)
        root = tmp / "serve"
        for name in COPIED:
            shutil.copytree(ROOT / name, root / name)
        env = dict(os.environ, **{var: str(tmp / var.lower()) for var in (
            "JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR",
            "JUPYTERLAB_WORKSPACES_DIR", "JUPYTERLAB_SETTINGS_DIR")})
        for name, values in SETTINGS.items():
            path = tmp / "jupyterlab_settings_dir" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(values))
        port, log = free_port(), tmp / "lab.log"
        command = [_jupyter(), "lab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
                   "--ServerApp.token=", "--ServerApp.password=", f"--ServerApp.root_dir={root}",
                   "--LabApp.expose_app_in_browser=True"]  # window.jupyterapp: run commands, read models
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            command.append("--allow-root")
        with open(log, "wb") as out:
            process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env,
                                       stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            _wait_until_up(f"http://127.0.0.1:{port}", process, log, timeout)
            yield Lab(f"http://127.0.0.1:{port}", root, process, log)
        finally:
            _stop(process)


@contextlib.contextmanager
def chromium(viewport=(1280, 900)):
    """A headless Chromium page factory: yields a Browser; pages come from `new_page(browser)`."""
    from playwright.sync_api import sync_playwright
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True)
        browser.simlab_viewport = {"width": viewport[0], "height": viewport[1]}
        try:
            yield browser
        finally:
            browser.close()


def new_page(browser):
    return browser.new_page(viewport=browser.simlab_viewport, device_scale_factor=2)  # HiDPI, like a laptop
