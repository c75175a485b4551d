"""Set-up: which torch build `make setup` installs (tools/setup_torch.py), the learner's copy that
`make lab` opens (tools/learner_copy.py) and the launcher that prints its URL last (tools/lab.py)."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import lab  # noqa: E402 — after sys.path gains tools/
import learner_copy  # noqa: E402 — after sys.path gains tools/
import setup_torch  # noqa: E402 — after sys.path gains tools/
from setup_torch import CPU_INDEX, CPU_SPEC, GPU_SPEC, choose  # noqa: E402 — after sys.path gains tools/


def _never(url):
    raise AssertionError(f"probed {url} where the answer does not matter")


def _reachable(url):
    return True


# ---- which torch -------------------------------------------------------------------------------------

@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_linux_without_a_gpu_gets_the_cpu_build_from_pytorchs_cpu_index(machine):
    args, notice = choose("Linux", machine, False, _reachable)
    assert args == ["install", "--quiet", CPU_SPEC, "--index-url", CPU_INDEX] and notice is None


def test_linux_without_a_gpu_falls_back_to_the_default_index_with_a_one_line_notice():
    asked = []
    args, notice = choose("Linux", "x86_64", False, lambda url: asked.append(url) or False)
    assert asked == [CPU_INDEX]
    assert args == ["install", "--quiet", CPU_SPEC]  # no index flag: pip's configured index (PyPI)
    assert notice.startswith("notice: ") and "\n" not in notice
    assert CPU_INDEX in notice and "unreachable" in notice and "CUDA build" in notice


def test_linux_with_a_gpu_gets_the_cuda_build_from_pypi_without_probing():
    args, notice = choose("Linux", "x86_64", True, _never)
    assert args == ["install", "--quiet", GPU_SPEC] and "--index-url" not in args
    assert "NVIDIA GPU found" in notice and "\n" not in notice


@pytest.mark.parametrize("gpu", [False, True])
def test_macos_takes_pypis_wheel_which_is_cpu_and_mps_already(gpu):
    args, notice = choose("Darwin", "arm64", gpu, _never)
    assert args == ["install", "--quiet", CPU_SPEC] and notice is None


def test_an_intel_mac_is_told_before_pip_fails():
    args, notice = choose("Darwin", "x86_64", False, _never)
    assert args == ["install", "--quiet", CPU_SPEC]
    assert "Intel Macs" in notice and "environment.yml" in notice and "\n" not in notice


def test_windows_takes_pypis_cpu_wheel_and_says_where_cuda_is_with_a_gpu():
    assert choose("Windows", "AMD64", False, _never) == (["install", "--quiet", CPU_SPEC], None)
    args, notice = choose("Windows", "AMD64", True, _never)
    assert args == ["install", "--quiet", CPU_SPEC]
    assert "CPU build" in notice and "--index-url" in notice and "\n" not in notice


def test_the_makefiles_overrides_reach_the_choice():
    args, _ = choose("Linux", "x86_64", False, _reachable, cpu="torch==2.5.1", cpu_index="https://mirror/cpu")
    assert args == ["install", "--quiet", "torch==2.5.1", "--index-url", "https://mirror/cpu"]
    args, _ = choose("Linux", "x86_64", True, _never, gpu="torch==2.6.0")
    assert args == ["install", "--quiet", "torch==2.6.0"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _refused_url() -> str:
    """A loopback port nobody listens on: connecting is refused at once (no traffic leaves the machine)."""
    return f"http://127.0.0.1:{_free_port()}/whl/cpu"


def test_an_index_that_refuses_is_unreachable_quickly():
    start = time.monotonic()
    assert setup_torch.index_reachable(_refused_url(), timeout=5) is False
    assert time.monotonic() - start < 3


@pytest.mark.slow
def test_the_fallback_really_installs_from_the_default_index(capfd):
    """What `make setup` does on a GPU-less Linux machine whose CPU index is unreachable, with pip's
    --dry-run: the notice, then pip resolves torch from the default index."""
    code = setup_torch.main(["--cpu-index", _refused_url(), "--dry-run"], system="Linux", machine="x86_64",
                            gpu_found=False)
    out = capfd.readouterr().out  # pip's too: it writes to the same file descriptor
    assert code == 0
    assert out.startswith("notice: PyTorch's CPU wheel index") and "Would install torch-2.13.0" in out


def test_a_failed_pip_run_is_one_line_after_pips_own_message(monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(setup_torch, "install", lambda args, dry_run=False: calls.append(args) or 1)
    monkeypatch.setattr(setup_torch, "index_reachable", _reachable)
    assert setup_torch.main([], system="Linux", machine="x86_64", gpu_found=False) == 1
    # the CPU index answered but pip failed there: the default index is tried once more
    assert calls == [["install", "--quiet", CPU_SPEC, "--index-url", CPU_INDEX], ["install", "--quiet", CPU_SPEC]]
    captured = capsys.readouterr()
    assert "trying your default index" in captured.out
    assert captured.err == "torch could not be installed (pip exit 1); pip's message is above\n"


# ---- the learner's copy --------------------------------------------------------------------------------

@pytest.fixture
def course(tmp_path):
    """A repository in miniature: two lessons, one exercise, the glossary, a checkpoint that must stay."""
    root = tmp_path / "repo"
    for name, text in {"notebooks/01_collectives.ipynb": "lesson 1", "notebooks/03_zero.ipynb": "lesson 3",
                       "exercises/03_zero.ipynb": "exercise 3", "solutions/03_zero.ipynb": "answer 3",
                       "notebooks/.ipynb_checkpoints/01_collectives-checkpoint.ipynb": "old",
                       "GLOSSARY.md": "terms"}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_fill_copies_lessons_exercises_and_glossary_but_never_answers(course):
    copied = learner_copy.fill(course)
    assert sorted(map(str, copied)) == ["GLOSSARY.md", "exercises/03_zero.ipynb", "notebooks/01_collectives.ipynb",
                                        "notebooks/03_zero.ipynb"]
    work = course / "work"
    assert (work / "exercises/03_zero.ipynb").read_text() == "exercise 3"
    assert not (work / "solutions").exists() and not (work / "notebooks/.ipynb_checkpoints").exists()


def test_fill_never_overwrites_the_learners_work_and_adds_new_lessons(course):
    learner_copy.fill(course)
    mine = course / "work/notebooks/01_collectives.ipynb"
    mine.write_text("my answers")
    (course / "notebooks/01_collectives.ipynb").write_text("lesson 1, improved upstream")  # a git pull
    (course / "notebooks/02_data_parallel.ipynb").write_text("lesson 2")  # a new lesson
    assert learner_copy.fill(course) == [Path("notebooks/02_data_parallel.ipynb")]
    assert mine.read_text() == "my answers"
    (course / "work/notebooks/03_zero.ipynb").unlink()  # how a learner refreshes one lesson by hand
    assert learner_copy.fill(course) == [Path("notebooks/03_zero.ipynb")]
    assert learner_copy.fill(course) == []


def test_reset_moves_the_learners_copy_aside_and_copies_the_lesson_afresh(course):
    learner_copy.fill(course)
    work = course / "work"
    (work / "notebooks/03_zero.ipynb").write_text("my lesson 3")
    (work / "exercises/03_zero.ipynb").write_text("my exercise 3")
    (work / "notebooks/01_collectives.ipynb").write_text("my lesson 1")
    moved = learner_copy.reset("3", course, now=0)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(0))
    assert sorted(map(str, moved)) == [f"exercises/03_zero.before-reset-{stamp}.ipynb",
                                       f"notebooks/03_zero.before-reset-{stamp}.ipynb"]
    assert (work / moved[0]).read_text().startswith("my ")
    assert (work / "notebooks/03_zero.ipynb").read_text() == "lesson 3"
    assert (work / "notebooks/01_collectives.ipynb").read_text() == "my lesson 1"  # other lessons untouched


@pytest.mark.parametrize("lesson", ["9", "07_x", "3_zero"])
def test_reset_of_no_such_lesson_is_refused_in_one_line(course, lesson):
    with pytest.raises(ValueError, match=r"^no lesson .*; lessons: 01_collectives, 03_zero$"):
        learner_copy.reset(lesson, course)
    assert not (course / "work").exists()  # refused before anything moved or was copied


def test_reset_twice_in_one_second_keeps_both_old_copies(course):
    learner_copy.fill(course)
    lesson = course / "work/notebooks/03_zero.ipynb"
    lesson.write_text("my first try")
    first = learner_copy.reset("03", course, now=0)
    lesson.write_text("my second try")
    second = learner_copy.reset("03", course, now=0)  # the same timestamp: the name is taken
    assert set(first).isdisjoint(second)
    kept = sorted((course / "work" / p).read_text() for p in first + second if p.parent.name == "notebooks")
    assert kept == ["my first try", "my second try"] and lesson.read_text() == "lesson 3"


def test_work_reset_from_make_without_a_lesson_says_how_to_name_one():
    done = subprocess.run(["make", "-s", "work-reset", "LESSON="], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode != 0
    first = done.stderr.splitlines()[0]  # make adds its own "make: *** … Error 2" line after ours
    assert first.startswith("make work-reset: which lesson? e.g. LESSON=03; lessons: ") and "01_collectives" in first
    names = first.split("lessons: ", 1)[1].split(", ")
    assert names == sorted(names) and {p.stem for p in (ROOT / "notebooks").glob("*.ipynb")} <= set(names)


def test_the_start_page_falls_back_to_lesson_one(course):
    work = course / "work"
    learner_copy.fill(course)
    assert learner_copy.start_page(work) == Path("notebooks/01_collectives.ipynb")
    (work / "notebooks/00_start_here.ipynb").write_text("start")
    assert learner_copy.start_page(work) == Path("notebooks/00_start_here.ipynb")


# ---- make lab --------------------------------------------------------------------------------------------

def test_lab_serves_work_adds_allow_root_only_as_root_and_passes_the_users_flags_last():
    work, page = Path("/r/work"), Path("notebooks/01_collectives.ipynb")
    as_user = lab.lab_command(work, page, ["--no-browser", "--port=8888"], is_root=False)
    assert as_user[1:] == ["-m", "jupyterlab", "--ServerApp.root_dir=/r/work", str(page), "--no-browser",
                           "--port=8888"]
    assert lab.lab_command(work, page, [], is_root=True)[-1] == "--allow-root"
    assert lab.lab_command(work, page, ["--allow-root"], is_root=True).count("--allow-root") == 1


def test_the_url_opens_the_start_page_with_the_token():
    server = {"url": "http://localhost:8890/", "token": "abc"}
    page = Path("notebooks/00_start_here.ipynb")
    assert lab.open_url(server, page) == "http://localhost:8890/lab/tree/notebooks/00_start_here.ipynb?token=abc"
    assert lab.open_url({"url": "http://h:1/", "token": ""}, page) == "http://h:1/lab/tree/notebooks/00_start_here.ipynb"


@pytest.mark.slow
def test_make_lab_prints_a_working_url_last_and_stops_on_ctrl_c(course):
    """tools/lab.py for real, in a copy of the repository in miniature: JupyterLab on a loopback port."""
    shutil.copytree(ROOT / "tools", course / "tools", ignore=shutil.ignore_patterns("__pycache__"))
    (course / "notebooks/01_collectives.ipynb").write_text(json.dumps(
        {"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    port = _free_port()
    # SIGINT back to its default in the child: a test runner started as a background job ignores it
    launched = subprocess.Popen(
        [sys.executable, str(course / "tools/lab.py"), "--no-browser", "--ip=127.0.0.1", f"--port={port}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        lines = [launched.stdout.readline() for _ in range(3)]
        assert lines[0].startswith("work/: copied 4 new file(s)")
        assert lines[1].startswith(f"JupyterLab serves {course / 'work'}")
        url = lines[2].strip().removeprefix("open ")
        assert url.startswith(f"http://127.0.0.1:{port}/lab/tree/notebooks/01_collectives.ipynb?token=")
        api = url.replace("/lab/tree/notebooks/01_collectives.ipynb", "/api/contents/notebooks")
        listing = json.load(urllib.request.urlopen(api, timeout=30))
        assert {item["name"] for item in listing["content"]} == {"01_collectives.ipynb", "03_zero.ipynb"}
        assert "Serving notebooks from local directory" in (course / "work/.lab.log").read_text()
        os.killpg(launched.pid, signal.SIGINT)  # what Ctrl-C in the terminal does
        assert launched.wait(timeout=60) == 0  # lab.py waits 10 s, then kills a JupyterLab that hangs
        assert launched.stdout.read() == "JupyterLab stopped\n" and launched.stderr.read() == ""
    finally:
        if launched.poll() is None:
            os.killpg(launched.pid, signal.SIGKILL)
