"""simlab.exec.launch, ended from outside or pointed elsewhere: the rendezvous stays on this machine unless
asked, a timeout holds through the rendezvous, SIGTERM/SIGHUP/SIGKILL leave no folder and no process
behind, and a torchrun worker whose agent is killed ends instead of running on alone."""
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import pytest
import torch.distributed as dist

import simlab.exec.launch as L
import simlab.exec.launch_signals as S
from simlab.exec.launch import LaunchTimeout, launch
from simlab.exec.launch_device import rendezvous_host

from .test_launch import ORPHAN_SCRIPT  # a launch of 2 workers that record their pids, then sleep

REPO = pathlib.Path(L.__file__).resolve().parents[2]
MARGIN = 1.5  # seconds past the timeout: stopping the workers, on a busy 2-core machine


def _rank(rank, world_size):
    return rank


def _alive(pid):
    try:  # a zombie has exited: only its parent's bookkeeping is left
        return pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_gone(pids, seconds):
    deadline = time.monotonic() + seconds
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(_alive(p) for p in pids)


def _folders(tmp):
    return sorted(p.name for p in pathlib.Path(tmp).glob(f"{S.PREFIX}*"))


# ---------------------------------------------------------------- where the rendezvous listens

@pytest.mark.parametrize("address, says", [
    ("", "SIMLAB_MASTER_ADDR='': empty; unset it to rendezvous on 127.0.0.1"),
    ("  ", "SIMLAB_MASTER_ADDR='  ': empty"),
    ("0.0.0.0", "SIMLAB_MASTER_ADDR='0.0.0.0': 0.0.0.0 is not loopback, so the run would be open to the network; "
                "set SIMLAB_ALLOW_REMOTE=1"),
])
def test_an_empty_or_open_address_is_refused_before_anything_starts(monkeypatch, address, says):
    """The issue's case: SIMLAB_MASTER_ADDR= listened on 0.0.0.0 and hung past 420 s despite timeout=10."""
    monkeypatch.setenv("SIMLAB_MASTER_ADDR", address)
    monkeypatch.setattr(L.socket, "create_server", lambda *a, **k: pytest.fail("port opened"))
    with pytest.raises(ValueError) as refused:
        launch(_rank, 2, timeout=10)
    assert str(refused.value).startswith(says) and "\n" not in str(refused.value)


def test_an_open_address_is_taken_only_when_asked_for(monkeypatch):
    monkeypatch.setenv("SIMLAB_MASTER_ADDR", "0.0.0.0")
    monkeypatch.setenv("SIMLAB_ALLOW_REMOTE", "1")
    assert rendezvous_host() == "0.0.0.0"
    monkeypatch.setenv("SIMLAB_ALLOW_REMOTE", "yes")
    with pytest.raises(ValueError, match=r"^SIMLAB_ALLOW_REMOTE='yes': must be one of 0, 1$"):
        rendezvous_host()
    monkeypatch.delenv("SIMLAB_ALLOW_REMOTE")
    for loopback in ("127.0.0.1", "localhost", "::1"):
        monkeypatch.setenv("SIMLAB_MASTER_ADDR", loopback)
        assert rendezvous_host() == loopback


@pytest.mark.parametrize("who", ["everyone", "the workers"])
def test_a_rendezvous_that_cannot_complete_ends_within_the_timeout(monkeypatch, who):
    """Every store connection (the parent's to itself too) goes to a port nobody listens on: torch's C++
    retries for ~2.5 × a store's timeout there, where Ctrl-C cannot reach. The launch's clock still holds."""
    real, dead = dist.TCPStore, socket.socket()
    dead.bind(("127.0.0.1", 0))  # bound, never listening: every connection is refused

    def nowhere(host, port, is_master=False, timeout=None, **kwargs):
        if is_master and who == "the workers":
            return real(host, port, is_master=True, timeout=timeout, **kwargs)
        return real(host, dead.getsockname()[1], is_master=False, timeout=timeout)

    monkeypatch.setattr(dist, "TCPStore", nowhere)  # forked ranks inherit it
    start = time.monotonic()
    try:
        with pytest.raises(LaunchTimeout, match=r"^timeout=3.0s: ") as late:
            launch(_rank, 2, timeout=3)
    finally:
        dead.close()
    assert time.monotonic() - start < 3 + MARGIN
    assert "\n" not in str(late.value), str(late.value)  # one line, whoever could not connect


# ---------------------------------------------------------------- signals from outside

def _start_run(tmp_path):
    """A launch in a process of its own, its temp directory `tmp_path/tmp`; returns it and its workers' pids."""
    (tmp_path / "tmp").mkdir()
    script = tmp_path / "run.py"
    script.write_text(ORPHAN_SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(REPO), TMPDIR=str(tmp_path / "tmp"))
    parent = subprocess.Popen([sys.executable, str(script), str(tmp_path)], env=env,
                              preexec_fn=lambda: [signal.signal(s, signal.SIG_DFL) for s in S.CAUGHT])
    files = [tmp_path / "pid0", tmp_path / "pid1"]
    deadline = time.monotonic() + 60
    while not all(f.exists() for f in files) and time.monotonic() < deadline and parent.poll() is None:
        time.sleep(0.05)
    pids = [int(f.read_text()) for f in files]  # fails here if the workers never started
    assert len(_folders(tmp_path / "tmp")) == 1  # the stacks' folder, while it runs
    return parent, pids


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_sigterm_and_sighup_stop_the_workers_and_remove_the_folder(tmp_path, sig):
    parent, pids = _start_run(tmp_path)
    start = time.monotonic()
    parent.send_signal(sig)
    assert parent.wait(timeout=10) == -sig  # it still dies of the signal, as its sender expects
    assert time.monotonic() - start < 3
    assert _wait_gone(pids, 5), "workers outlived the run"
    assert _folders(tmp_path / "tmp") == []


def test_after_a_sigkill_the_next_launch_removes_the_folder_it_left(tmp_path, monkeypatch):
    parent, pids = _start_run(tmp_path)
    parent.kill()  # nothing in the parent runs: the workers follow it (PR_SET_PDEATHSIG), the folder stays
    parent.wait()
    assert _wait_gone(pids, 5)
    left = _folders(tmp_path / "tmp")
    assert len(left) == 1 and left[0].startswith(f"{S.PREFIX}{parent.pid}-")
    tmp = tmp_path / "tmp"
    (tmp / f"{S.PREFIX}1-alive").mkdir()  # pid 1 is alive: its folder stays
    (tmp_path / "elsewhere").mkdir()
    (tmp / f"{S.PREFIX}{parent.pid}-planted").symlink_to(tmp_path / "elsewhere")  # a link is never followed
    monkeypatch.setattr("tempfile.tempdir", str(tmp))
    assert launch(_rank, 2) == [0, 1]
    assert _folders(tmp) == [f"{S.PREFIX}1-alive", f"{S.PREFIX}{parent.pid}-planted"]
    assert (tmp_path / "elsewhere").is_dir()


# ---------------------------------------------------------------- torchrun: an agent killed

AGENT_SCRIPT = """
import os, sys, time
import torch, torch.distributed as dist
from simlab.exec.launch import launch

def fn(rank, world_size, folder):
    with open(f"{folder}/w{rank}.tmp", "w") as f:
        f.write(str(os.getpid()))
    os.rename(f"{folder}/w{rank}.tmp", f"{folder}/w{rank}")
    for _ in range(60):  # 30 s of steps: the run would outlast the test
        dist.all_reduce(torch.ones(1))
        time.sleep(0.5)
    return rank

launch(fn, 2, sys.argv[1], timeout=10)
"""


@pytest.mark.slow  # two torchrun agents: ~10 s on 2 cores
def test_killing_one_torchrun_agent_ends_its_worker_and_fails_the_other_node(tmp_path):
    """Before: the killed agent's worker ran on alone, and the other node exited 0 after torchrun's 300 s exit
    barrier. Now the orphan ends within a second; its peer's collective fails and that node exits non-zero."""
    script = tmp_path / "job.py"
    script.write_text(AGENT_SCRIPT)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    agents = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank",
                                str(n), "--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--master-port",
                                str(port), str(script), str(tmp_path)], env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True) for n in (0, 1)]
    try:
        files = [tmp_path / "w0", tmp_path / "w1"]
        deadline = time.monotonic() + 120
        while not all(f.exists() for f in files) and time.monotonic() < deadline:
            time.sleep(0.1)
        orphan = int(files[1].read_text())
        agents[1].kill()
        start = time.monotonic()
        assert _wait_gone([orphan], 3), "the killed agent's worker ran on alone"
        assert agents[0].wait(timeout=10 + 30) != 0  # the timeout, and torchrun's own stopping
        assert time.monotonic() - start < 10 + 30
    finally:
        for agent in agents:
            if agent.poll() is None:
                os.killpg(agent.pid, signal.SIGKILL)
            agent.wait()
