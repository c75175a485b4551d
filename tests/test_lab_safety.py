"""`make lab` and `make work-reset` when things go wrong: a copy killed half-way or cut short by a full disk
leaves the old file or none, never a torn one; a torn lesson is named at start with the command that
replaces it; a full disk is one line saying where the learner's copy is. And tools/lab.py: the log with the
server's token is private, and killing the script (SIGTERM, SIGHUP, SIGKILL) stops JupyterLab and its kernel."""
import errno
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import lab  # noqa: E402 — after sys.path gains tools/
import learner_copy  # noqa: E402 — after sys.path gains tools/

NOTEBOOK = json.dumps({"cells": [{"cell_type": "markdown", "metadata": {}, "source": "x" * 5000}], "metadata": {},
                       "nbformat": 4, "nbformat_minor": 5})


@pytest.fixture
def course(tmp_path, monkeypatch):
    """A repository in miniature with real notebooks: lessons 01 and 03, exercise 03, the glossary."""
    root = tmp_path / "repo"
    for name in ("notebooks/01_collectives.ipynb", "notebooks/03_zero.ipynb", "exercises/03_zero.ipynb"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(NOTEBOOK)
    (root / "GLOSSARY.md").write_text("terms")
    monkeypatch.setattr(learner_copy, "ROOT", root)
    return root


def _cut_short(error, copyfileobj=shutil.copyfileobj):
    """A copyfileobj that writes half of a notebook, then fails as `error` does (a kill, a full disk)."""
    def copy(src, dst):
        if ".ipynb" not in dst.name:
            return copyfileobj(src, dst)
        data = src.read()
        dst.write(data[:len(data) // 2])
        dst.flush()
        raise error
    return copy


def _left(work):
    return sorted(str(p.relative_to(work)) for p in work.rglob("*") if p.is_file())


# ---------------------------------------------------------------- the copy: whole or absent

def test_a_copy_interrupted_half_way_leaves_no_file_and_the_next_fill_completes_it(course, monkeypatch):
    monkeypatch.setattr(learner_copy.shutil, "copyfileobj", _cut_short(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        learner_copy.fill(course)
    work = course / "work"
    assert _left(work) == ["GLOSSARY.md"]  # the lesson is absent, and so is its temporary file
    monkeypatch.undo()
    assert learner_copy.fill(course) and learner_copy.broken(course) == []
    assert (work / "notebooks/01_collectives.ipynb").read_text() == NOTEBOOK


def test_a_copy_killed_half_way_leaves_only_a_hidden_partial_which_the_next_fill_removes(course):
    """SIGKILL: no Python cleanup runs at all."""
    kill = (f"import os, shutil, signal, sys; sys.path.insert(0, {str(ROOT / 'tools')!r}); import learner_copy\n"
            "def copy(src, dst):\n"
            "    dst.write(src.read()[:100]); dst.flush(); os.kill(os.getpid(), signal.SIGKILL)\n"
            "shutil.copyfileobj = copy\n"
            f"learner_copy.fill(learner_copy.Path({str(course)!r}))\n")
    assert subprocess.run([sys.executable, "-c", kill]).returncode == -signal.SIGKILL
    work = course / "work"
    partials = [p for p in _left(work) if p.endswith(learner_copy.PARTIAL)]
    assert len(partials) == 1 and Path(partials[0]).name.startswith(".")  # hidden in JupyterLab
    partial = work / partials[0]
    assert not partial.with_name(partial.name[1:].rsplit(".", 2)[0]).exists()  # .<name>.<pid>.partial: no <name>
    learner_copy.fill(course)
    assert not any(p.endswith(learner_copy.PARTIAL) for p in _left(work)) and learner_copy.broken(course) == []


def test_a_torn_lesson_is_named_at_start_with_the_reset_that_replaces_it(course, capsys):
    learner_copy.fill(course)
    torn = course / "work/notebooks/03_zero.ipynb"
    torn.write_text(NOTEBOOK[:777])  # what a full disk left before this fix
    (course / "work/exercises/03_zero.ipynb").write_text("")  # and what a kill left
    assert learner_copy.main([]) == 0  # the other lessons still open
    lines = capsys.readouterr().err.splitlines()
    assert lines == [f"work/{name} is not a notebook (a copy cut short?); `make work-reset LESSON=03` copies it "
                     "afresh and keeps this one aside" for name in ("notebooks/03_zero.ipynb", "exercises/03_zero.ipynb")]
    assert torn.read_text() == NOTEBOOK[:777]  # the learner's file: named, never replaced behind their back
    learner_copy.reset("03", course)
    assert learner_copy.broken(course) == []


def test_a_full_disk_during_make_lab_is_one_line_and_leaves_nothing_half_written(course, monkeypatch, capsys):
    monkeypatch.setattr(learner_copy.shutil, "copyfileobj", _cut_short(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))))
    assert learner_copy.main([]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("make lab: could not copy the course into work/ (No space left on "
                                                   f"device: {course / 'work'}") and "nothing half-written" in err
    assert _left(course / "work") == ["GLOSSARY.md"]


def test_a_full_disk_during_work_reset_is_one_line_saying_where_the_learners_copy_is(course, monkeypatch, capsys):
    learner_copy.fill(course)
    mine = course / "work/notebooks/03_zero.ipynb"
    mine.write_text(NOTEBOOK.replace("x" * 10, "my answer!"))
    monkeypatch.setattr(learner_copy.shutil, "copyfileobj", _cut_short(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))))
    assert learner_copy.main(["--reset", "03"]) == 2
    err = capsys.readouterr().err
    assert err == ("make work-reset: lesson 03 not copied afresh (No space left on device: "
                   f"{course / 'work/notebooks/03_zero.ipynb'}); your copy is at work/notebooks/03_zero.ipynb, "
                   "work/exercises/03_zero.ipynb\n")
    assert "my answer!" in mine.read_text()  # back where it was, whole
    assert not any(".before-reset-" in p or p.endswith(learner_copy.PARTIAL) for p in _left(course / "work"))


# ---------------------------------------------------------------- tools/lab.py: the log, and being killed

def test_the_log_is_private_even_when_an_older_one_was_not(tmp_path):
    log = tmp_path / ".lab.log"
    log.write_text("an old log")
    log.chmod(0o644)
    with lab.open_private(log) as out:
        out.write("token=abc")
    assert stat.S_IMODE(log.stat().st_mode) == 0o600 and log.read_text() == "token=abc"
    log.unlink()
    (tmp_path / "elsewhere").write_text("someone's file")
    log.symlink_to(tmp_path / "elsewhere")  # a link planted where the log goes is refused, never followed
    with pytest.raises(OSError):
        lab.open_private(log)
    assert (tmp_path / "elsewhere").read_text() == "someone's file"


def _children(pid):
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat_line = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if int(stat_line.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry))
    return found


def _alive(pid):
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow  # a real JupyterLab and a real kernel: ~15 s each on 2 cores
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGKILL], ids=lambda s: s.name)
def test_killing_lab_py_stops_jupyterlab_and_its_kernel(course, tmp_path, sig):
    shutil.copytree(ROOT / "tools", course / "tools", ignore=shutil.ignore_patterns("__pycache__"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"))
    launched = subprocess.Popen(
        [sys.executable, str(course / "tools/lab.py"), "--no-browser", "--ip=127.0.0.1", f"--port={port}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, env=env)
    server = kernel = None
    try:
        url = [launched.stdout.readline() for _ in range(3)][2].strip().removeprefix("open ")
        token = url.split("token=", 1)[1]
        log = course / "work" / lab.LOG
        assert token in log.read_text() and stat.S_IMODE(log.stat().st_mode) == 0o600
        # the port the printed address names: JupyterLab moves on when the one asked for was taken meanwhile (a
        # parallel test's socket), and a user opens what lab.py prints
        served = urllib.parse.urlsplit(url).netloc
        request = urllib.request.Request(f"http://{served}/api/kernels?token={token}", data=b"{}", method="POST")
        json.load(urllib.request.urlopen(request, timeout=60))  # a kernel, as opening a notebook starts one
        server = _children(launched.pid)[0]
        deadline = time.monotonic() + 60
        while not _children(server) and time.monotonic() < deadline:
            time.sleep(0.1)
        kernel = _children(server)[0]
        launched.send_signal(sig)
        code = launched.wait(timeout=30)
        assert code == (-sig if sig == signal.SIGKILL else 128 + sig)
        deadline = time.monotonic() + 30
        while (_alive(server) or _alive(kernel)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(server), "JupyterLab outlived lab.py"
        assert not _alive(kernel), "the kernel outlived lab.py"
    finally:
        for pid in (launched.pid, server, kernel):
            if pid and _alive(pid):
                os.kill(pid, signal.SIGKILL)
        launched.wait()
