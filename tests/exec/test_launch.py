"""simlab.exec.launch: results in rank order, failures surface fast, and nothing is ever left behind."""
import json
import multiprocessing
import os
import pathlib
import pickle
import signal
import subprocess
import sys
import threading
import time
from multiprocessing import resource_tracker

import pytest
import torch
import torch.distributed as dist

import simlab.exec.launch as L
from simlab.exec.launch import LaunchTimeout, WorkerError, device, launch, resolve_backend
from simlab.exec.launch_watch import Interrupted, one_line_in_ipython

REPO = pathlib.Path(L.__file__).resolve().parents[2]
BEFORE = set(), set()  # (child pids, multiprocessing children) when the current test started


def child_pids():
    """Every process whose parent is this one, zombies included (read from /proc).

    Spawn starts the standard library's resource tracker once per interpreter and reuses it: not ours.
    """
    me, found = os.getpid(), []
    helper = getattr(resource_tracker._resource_tracker, "_pid", None)
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = pathlib.Path(f"/proc/{entry}/stat").read_text()
        except OSError:  # it exited while we looked
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == me and int(entry) != helper:  # field 4: ppid
            found.append(int(entry))
    return found


@pytest.fixture(autouse=True)
def _children_before():
    """Processes other tests left running (a fork server, say) are not ours to count."""
    global BEFORE
    BEFORE = set(child_pids()), set(multiprocessing.active_children())


def assert_clean():
    """No worker left, and the launcher still works afterwards."""
    assert set(multiprocessing.active_children()) <= BEFORE[1]
    assert set(child_pids()) <= BEFORE[0]
    assert launch(_rank, 2) == [0, 1]


def _rank(rank, world_size):
    return rank


def _sum_of_ranks(rank, world_size):  # module level, so spawn can import it
    x = torch.tensor([float(rank)])
    dist.all_reduce(x)
    return x.item()


# ---------------------------------------------------------------- the happy path

@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_results_in_rank_order_with_args_and_kwargs(world_size):
    def fn(rank, ws, a, b, *, scale):
        return (rank, ws, a, b * scale)

    assert launch(fn, world_size, "x", 2, scale=10) == [(r, world_size, "x", 20) for r in range(world_size)]


def test_collective_inside_and_tensor_results_arrive_intact():
    def fn(rank, world_size):
        x = torch.ones(4)
        dist.all_reduce(x)  # every rank: 1 + 1 + 1 = world_size
        big = torch.arange(300_000, dtype=torch.float64) + rank  # 2.4 MB: bigger than a pipe buffer
        return x, big, dist.get_backend(), str(device())

    results = launch(fn, 3)
    for rank, (x, big, backend, where) in enumerate(results):
        assert type(x) is torch.Tensor and torch.equal(x, torch.full((4,), 3.0))
        assert torch.equal(big, torch.arange(300_000, dtype=torch.float64) + rank)
        assert (backend, where) == ("gloo", "cpu")
    assert device() == torch.device("cpu")  # no group in the parent


def test_local_closure_runs_under_fork():
    offset = 100  # captured from the enclosing scope: cannot be pickled, needs fork
    assert launch(lambda rank, ws: rank + offset, 2) == [100, 101]


def test_fork_is_fast_and_auto_picks_fork_on_linux():
    launch(_rank, 4)  # warm up imports
    start = time.monotonic()
    assert launch(_rank, 4) == [0, 1, 2, 3]
    assert time.monotonic() - start < 2.0
    if sys.platform.startswith("linux") and not torch.cuda.is_initialized():
        assert L._pick_start_method("auto") == "fork"
    assert L._pick_start_method("spawn") == "spawn"


def test_fork_trap_matmul_after_parent_used_threads():
    threads = torch.get_num_threads()
    torch.set_num_threads(max(2, threads))
    try:
        a = torch.randn(800, 800)
        (a @ a).sum()  # the parent's intra-op pool is now running

        def fn(rank, world_size):
            b = torch.randn(300, 300)
            return (b @ b).shape

        assert launch(fn, 2, timeout=20) == [torch.Size([300, 300])] * 2
    finally:
        torch.set_num_threads(threads)


@pytest.mark.slow
def test_spawn_runs_a_module_level_function():
    assert launch(_sum_of_ranks, 2, start_method="spawn", timeout=120) == [1.0, 1.0]
    assert_clean()


def test_spawn_refuses_a_closure_cleanly():
    offset = 1
    with pytest.raises(TypeError, match=r"^fn=.*<lambda>: start_method='spawn' pickles the function .*"
                                        r"define it at the top level of a module"):
        launch(lambda rank, ws: rank + offset, 2, start_method="spawn")
    assert_clean()


# ---------------------------------------------------------------- failures

def test_raising_rank_surfaces_fast_while_others_block():
    def fn(rank, world_size):
        if rank == 1:
            time.sleep(0.2)
            raise ValueError("boom")
        dist.recv(torch.zeros(1), src=1)  # rank 0 waits for a message that never comes

    start = time.monotonic()
    with pytest.raises(WorkerError) as info:
        launch(fn, 2, timeout=60)
    assert time.monotonic() - start < 5
    err = info.value
    assert isinstance(err, RuntimeError) and err.rank == 1
    assert str(err).startswith("rank 1 failed: ValueError: boom")
    assert 'raise ValueError("boom")' in err.traceback and err.traceback in str(err)
    assert_clean()


def test_raising_rank_while_others_wait_in_barrier():
    def fn(rank, world_size):
        if rank == 2:
            raise KeyError("missing")
        dist.barrier()

    start = time.monotonic()
    with pytest.raises(WorkerError, match=r"^rank 2 failed: KeyError: 'missing'") as info:
        launch(fn, 3, timeout=60)
    assert time.monotonic() - start < 5 and info.value.rank == 2
    assert_clean()


@pytest.mark.parametrize("how, expected", [("exit", "exited with code 3 before returning a result$"),
                                           ("kill", r"was killed by signal SIGKILL before returning a result "
                                                    r"\(out of memory\? choose smaller sizes or fewer processes\)")])
def test_rank_dying_without_result(how, expected):
    def fn(rank, world_size):
        if rank == 1:
            os._exit(3) if how == "exit" else os.kill(os.getpid(), signal.SIGKILL)
        dist.barrier()

    with pytest.raises(WorkerError, match=f"rank 1 {expected}") as info:
        launch(fn, 2, timeout=60)
    assert info.value.rank == 1 and info.value.traceback == ""
    assert_clean()


def test_unpicklable_result_is_reported():
    with pytest.raises(WorkerError, match=r"^rank 0 failed: .*(pickle|Pickl)"):
        launch(lambda rank, ws: (lambda: None), 1)
    assert_clean()


def test_hung_collective_times_out():
    def fn(rank, world_size):
        if rank == 0:
            dist.recv(torch.zeros(1), src=1)
        else:
            time.sleep(60)  # never sends

    start = time.monotonic()
    with pytest.raises(LaunchTimeout, match=r"timeout=3.0s: ranks \[0, 1\] still running"):
        launch(fn, 2, timeout=3)
    assert time.monotonic() - start < 6
    assert_clean()


def test_keyboard_interrupt_kills_workers():
    def fn(rank, world_size):
        time.sleep(60)

    # Python's own Ctrl-C handler, whatever started pytest: a shell's background job ignores SIGINT
    # (SIG_IGN is inherited, and Python then leaves it ignored), so the signal would never arrive
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    start = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt) as stop:
            launch(fn, 2, timeout=60)
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    assert time.monotonic() - start < 5
    assert_clean()
    # one line says what happened; the launcher's frames are not the learner's business
    assert isinstance(stop.value, Interrupted) and str(stop.value) == "interrupted: 2 workers stopped"
    assert stop.value.__suppress_context__


def test_an_interrupt_shows_as_one_line_in_ipython(capsys):
    from IPython.core.interactiveshell import InteractiveShell
    shell = InteractiveShell.instance()
    try:
        one_line_in_ipython()
        assert Interrupted in shell.custom_exceptions
        shell.run_cell("from simlab.exec.launch_watch import Interrupted\n"
                       "raise Interrupted('interrupted: 8 workers stopped')")
        shown = capsys.readouterr()  # IPython prints a traceback's text to stdout
        assert (shown.out + shown.err).strip() == "Interrupted: interrupted: 8 workers stopped"
        shell.set_custom_exc((ValueError,), lambda *a, **k: None)  # someone else's hook is left alone
        one_line_in_ipython()
        assert shell.custom_exceptions == (ValueError,)
    finally:
        shell.set_custom_exc((), None)
        InteractiveShell.clear_instance()


ORPHAN_SCRIPT = """
import os, sys, time
from simlab.exec.launch import launch

def fn(rank, world_size, folder):
    with open(f"{folder}/tmp{rank}", "w") as f:
        f.write(str(os.getpid()))
    os.rename(f"{folder}/tmp{rank}", f"{folder}/pid{rank}")
    time.sleep(60)

launch(fn, 2, sys.argv[1], timeout=120)
"""


def _alive(pid):
    try:
        return pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_workers_die_when_the_parent_is_killed(tmp_path):
    script = tmp_path / "orphans.py"
    script.write_text(ORPHAN_SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    parent = subprocess.Popen([sys.executable, str(script), str(tmp_path)], env=env)
    files = [tmp_path / "pid0", tmp_path / "pid1"]
    deadline = time.monotonic() + 60
    while not all(f.exists() for f in files) and time.monotonic() < deadline and parent.poll() is None:
        time.sleep(0.05)
    pids = [int(f.read_text()) for f in files]  # fails here if the workers never started
    assert all(_alive(pid) for pid in pids)
    parent.kill()  # SIGKILL: no finally block runs in the parent, only the kernel can help
    parent.wait()
    deadline = time.monotonic() + 5
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in pids), "orphaned workers outlived their parent"


def test_worker_error_pickles_with_its_fields():
    err = pickle.loads(pickle.dumps(WorkerError("rank 3 failed: X", 3, "tb")))
    assert (str(err), err.rank, err.traceback) == ("rank 3 failed: X", 3, "tb")


# ---------------------------------------------------------------- bad input, caught before anything starts

@pytest.mark.parametrize("kwargs, name", [
    (dict(backend="mpi"), "backend"), (dict(backend="foo"), "backend"),
    (dict(world_size=0), "world_size"), (dict(world_size=1.5), "world_size"),
    (dict(timeout=0), "timeout"), (dict(timeout=-1.0), "timeout"),
    (dict(start_method="thread"), "start_method"),
])
def test_bad_input_raises_before_any_process(monkeypatch, kwargs, name):
    monkeypatch.setattr(L.socket, "create_server", lambda *a, **k: pytest.fail("port opened"))
    monkeypatch.setattr(L.mp, "get_context", lambda method: pytest.fail("process started"))
    args = dict(world_size=2) | kwargs
    with pytest.raises(ValueError, match=f"^{name}="):
        launch(_rank, args.pop("world_size"), **args)
    assert set(child_pids()) <= BEFORE[0]


def test_nccl_without_enough_gpus(monkeypatch):
    monkeypatch.setattr(L.mp, "get_context", lambda method: pytest.fail("process started"))
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    message = f"backend='nccl': needs one GPU per rank, 1000 for world_size=1000; found {gpus}"
    with pytest.raises(ValueError, match=f"^{message}$"):
        launch(_rank, 1000, backend="nccl")
    assert resolve_backend("auto", 1000) == "gloo" and resolve_backend("gloo", 2) == "gloo"


# ---------------------------------------------------------------- leaks

@pytest.mark.slow  # ~6 s on 2 cores
def test_no_fd_or_process_leak_over_100_launches():
    launch(_rank, 2)  # warm-up: first use opens a few long-lived fds (thread pools, epoll)
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(100):
        assert launch(_rank, 2) == [0, 1]
    after = len(os.listdir("/proc/self/fd"))
    assert after <= before + 5, f"{after - before} fds leaked over 100 launches"
    assert set(multiprocessing.active_children()) <= BEFORE[1] and set(child_pids()) <= BEFORE[0]


# ---------------------------------------------------------------- under torchrun: no spawning, env://

TORCHRUN_SCRIPT = """
import json, os, sys
import torch, torch.distributed as dist
from simlab.exec.launch import launch

def fn(rank, world_size, scale):
    x = torch.tensor([float(rank + 1)])
    dist.all_reduce(x)
    return [rank, world_size, x.item() * scale, os.getpid()]

try:
    launch(fn, 3, 1)
    mismatch = None
except ValueError as e:
    mismatch = str(e)
results = launch(fn, 2, 10)
report = dict(pid=os.getpid(), results=results, still_init=dist.is_initialized(), mismatch=mismatch)
with open(os.path.join(sys.argv[1], "rank" + os.environ["RANK"] + ".json"), "w") as f:
    json.dump(report, f)  # a file per rank: the ranks' prints could interleave on the shared stdout
"""


@pytest.mark.slow
def test_torchrun_runs_in_place_and_gathers_results(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(TORCHRUN_SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           str(script), str(tmp_path)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    for rank in (0, 1):
        report = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert [res[:3] for res in report["results"]] == [[0, 2, 30.0], [1, 2, 30.0]]  # 10 * (1 + 2)
        assert report["results"][rank][3] == report["pid"]  # fn ran in this very process: nothing spawned
        assert report["still_init"] is False  # the group launch created was torn down
        assert report["mismatch"] == "world_size=3: torchrun started WORLD_SIZE=2 processes"
