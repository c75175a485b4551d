"""simlab.exec.launch, hardened: gloo listens on loopback only, nothing a worker starts outlives the run,
failures and timeouts name what each rank was doing, and a bad `fn` is refused before anything starts."""
import inspect
import ipaddress
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import threading
import time
import types

import pytest
import torch
import torch.distributed as dist

import simlab.exec.launch as L
import simlab.exec.launch_device as D
from simlab.exec.launch import LaunchTimeout, WorkerError, launch

REPO = pathlib.Path(L.__file__).resolve().parents[2]
HERE = pathlib.Path(__file__).name


def line_of(fn, text):
    """The line number of the first line of `fn`'s source that contains `text`."""
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def _alive(pid):
    try:  # a zombie has exited: only its parent's bookkeeping is left
        return pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


# ---------------------------------------------------------------- gloo listens on loopback only

LISTEN_SCRIPT = r'''
import ctypes, fcntl, ipaddress, json, os, socket, struct, sys

def lan_address():  # the first IPv4 address of a non-loopback interface, or None
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            try:
                raw = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name.encode()))[20:24]  # SIOCGIFADDR
            except OSError:
                continue
            if not ipaddress.ip_address(raw).is_loopback:
                return str(ipaddress.ip_address(raw))

# gloo listens where this machine's hostname resolves to. Make that a LAN address, as on the machine where a
# course run was reachable from the network: a hostname of our own (a UTS namespace) spelled as that address.
lan, renamed = lan_address(), False
libc = ctypes.CDLL(None, use_errno=True)
for flags in (0x04000000, 0x04000000 | 0x10000000):  # CLONE_NEWUTS; with CLONE_NEWUSER when not root
    if lan and not renamed and libc.unshare(flags) == 0:
        renamed = libc.sethostname(lan.encode(), len(lan)) == 0

import torch, torch.distributed as dist
import simlab.exec.launch as L
import simlab.exec.launch_device as D

def listening(pid):
    """Addresses of the TCP sockets process `pid` listens on, from /proc/<pid>/fd and /proc/net/tcp{,6}."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:  # closed meanwhile (the listing's own fd, say)
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for table in ("tcp", "tcp6"):
        for row in open(f"/proc/{pid}/net/{table}").read().splitlines()[1:]:
            fields = row.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN; field 9: the socket's inode
                address, port = fields[1].split(":")
                raw = bytes.fromhex(address)  # 32-bit words, each in host (little-endian) order
                ip = ipaddress.ip_address(b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4)))
                found.append([str(ip), int(port, 16)])
    return found

def fn(rank, world_size):
    x = torch.ones(1)
    dist.all_reduce(x)  # every pair of ranks connected: every gloo listener is open now
    return listening(os.getpid())

pinned = L.launch(fn, 2)
D.gloo_interface = lambda host: None  # what gloo does when left alone: the check must see the LAN here
unpinned = L.launch(fn, 2)
print(json.dumps(dict(lan=lan, renamed=renamed, hostname=socket.gethostname(), pinned=pinned, unpinned=unpinned)))
'''


def _is_loopback(address):
    ip = ipaddress.ip_address(address)
    return ip.is_loopback or (ip.version == 6 and ip.ipv4_mapped is not None and ip.ipv4_mapped.is_loopback)


def test_gloo_listens_on_loopback_only(tmp_path):
    script = tmp_path / "listen.py"
    script.write_text(LISTEN_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "GLOO_SOCKET_IFNAME"} | dict(PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.splitlines()[-1])
    ports = [{port for _, port in sockets} for sockets in report["pinned"]]
    for rank, sockets in enumerate(report["pinned"]):
        assert ports[rank] - ports[1 - rank], report  # gloo's own listener is among them, not only shared ones
        assert all(_is_loopback(ip) for ip, _ in sockets), f"rank {rank} listens beyond this machine: {report}"
    if report["renamed"]:  # the setup does reproduce the bug: left alone, gloo listens on the LAN
        assert not all(_is_loopback(ip) for sockets in report["unpinned"] for ip, _ in sockets), report


def test_gloo_interface_is_loopback_unless_the_user_chose(monkeypatch):
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    name = D.gloo_interface("127.0.0.1")
    assert name in [n for _, n in socket.if_nameindex()]  # a real interface of this machine ('lo')
    assert D.gloo_interface("localhost") == name
    assert D.gloo_interface("192.0.2.1") is None  # a rendezvous elsewhere (multi-host): gloo's own choice
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", name)
    assert D.gloo_interface("127.0.0.1") is None  # yours wins, and the workers keep it
    assert launch(lambda rank, ws: os.environ["GLOO_SOCKET_IFNAME"], 2, timeout=30) == [name, name]


# ---------------------------------------------------------------- nothing a worker starts outlives the run

def _start_grandchild(rank, world_size, folder, how):
    if rank == 0:
        child = subprocess.Popen(["sleep", "60"])
        (folder / "tmp").write_text(str(child.pid))
        (folder / "tmp").rename(folder / "pid")  # the rename makes the pid appear whole
        if how == "raises":
            raise ValueError("boom")
        if how in ("hangs", "interrupted"):
            time.sleep(60)
    return rank


def _interrupt_once(path):
    """Ctrl-C for this process once `path` exists (at most 30 s from now)."""
    deadline = time.monotonic() + 30
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(os.getpid(), signal.SIGINT)


@pytest.mark.parametrize("how", ["returns", "raises", "hangs", "interrupted"])
def test_a_process_a_worker_started_does_not_outlive_the_run(tmp_path, how):
    expected = {"returns": None, "raises": WorkerError, "hangs": LaunchTimeout, "interrupted": KeyboardInterrupt}[how]
    # Python's own Ctrl-C handler: a shell's background job ignores SIGINT (see test_keyboard_interrupt_kills_workers)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        if how == "interrupted":
            threading.Thread(target=_interrupt_once, args=(tmp_path / "pid",), daemon=True).start()
        if expected is None:
            assert launch(_start_grandchild, 2, tmp_path, how, timeout=30) == [0, 1]
        else:
            with pytest.raises(expected):
                launch(_start_grandchild, 2, tmp_path, how, timeout=3 if how == "hangs" else 30)
    finally:
        signal.signal(signal.SIGINT, previous)
    pid = int((tmp_path / "pid").read_text())
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        assert not _alive(pid), f"the worker's child {pid} outlived the run"
    finally:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


# ---------------------------------------------------------------- diagnostics name the right rank

def _rank0_skips(rank, world_size):
    if rank == 0:
        return "skipped"  # the bug: rank 0 never joins the all_reduce below
    x = torch.ones(1)
    dist.all_reduce(x)
    return x.item()


def test_a_rank_that_skipped_a_collective_is_blamed():
    start = time.monotonic()
    with pytest.raises(WorkerError) as info:
        launch(_rank0_skips, 4, timeout=5)
    assert time.monotonic() - start < 5
    first = str(info.value).splitlines()[0]
    assert first.startswith("rank 0 returned while ranks "), first
    assert "so rank 0 probably skipped it" in first
    assert f"waiting in all_reduce ({HERE}:{line_of(_rank0_skips, 'dist.all_reduce(')})" in first
    assert info.value.rank == 0 and "Traceback" in info.value.traceback


def _rank0_returns_rank1_raises(rank, world_size):
    if rank == 1:
        time.sleep(0.2)
        raise ValueError("its own bug")
    return rank


def test_a_real_error_is_not_blamed_on_a_rank_that_returned():
    with pytest.raises(WorkerError, match=r"^rank 1 failed: ValueError: its own bug") as info:
        launch(_rank0_returns_rank1_raises, 2, timeout=5)
    assert info.value.rank == 1


def _rank0_sleeps(rank, world_size):
    if rank == 0:
        time.sleep(60)  # busy elsewhere: never reaches the all_reduce
    dist.all_reduce(torch.ones(1))


def test_a_timeout_says_where_each_rank_waits():
    start = time.monotonic()
    with pytest.raises(LaunchTimeout) as info:
        launch(_rank0_sleeps, 4, timeout=3)
    assert time.monotonic() - start < 6
    expected = (f"timeout=3.0s: ranks [0, 1, 2, 3] still running: "
                f"ranks 1-3 waiting in all_reduce ({HERE}:{line_of(_rank0_sleeps, 'dist.all_reduce(')}); "
                f"rank 0 in _rank0_sleeps ({HERE}:{line_of(_rank0_sleeps, 'time.sleep(')})")
    assert str(info.value) == expected


def _one_returns_one_waits(rank, world_size):
    if rank == 1:
        dist.recv(torch.zeros(1), src=2)
    elif rank == 2:
        time.sleep(60)  # never sends
    return rank


def test_a_timeout_names_the_ranks_that_returned():
    with pytest.raises(LaunchTimeout) as info:
        launch(_one_returns_one_waits, 3, timeout=3)
    expected = (f"timeout=3.0s: ranks [1, 2] still running: "
                f"rank 1 waiting in recv ({HERE}:{line_of(_one_returns_one_waits, 'dist.recv(')}); "
                f"rank 2 in _one_returns_one_waits ({HERE}:{line_of(_one_returns_one_waits, 'time.sleep(')}); "
                f"rank 0 returned")
    assert str(info.value) == expected


def test_rank_lists_are_compact():
    from simlab.exec.launch_watch import _ranks
    assert [_ranks([0]), _ranks([1, 2]), _ranks([3, 1, 2, 7]), _ranks([0, 2, 3, 4, 6])] == [
        "rank 0", "ranks 1, 2", "ranks 1-3, 7", "ranks 0, 2-4, 6"]


# ---------------------------------------------------------------- a bad fn, refused before anything starts

@pytest.fixture
def nothing_starts(monkeypatch):
    monkeypatch.setattr(L.socket, "create_server", lambda *a, **k: pytest.fail("port opened"))
    monkeypatch.setattr(L.mp, "get_context", lambda method: pytest.fail("process started"))


@pytest.mark.parametrize("fn, shown", [("notcallable", "'notcallable'"), (None, "None"),
                                       (torch.zeros(30, 30), "tensor([[" + "0., " * 12 + "0.,")])
def test_a_non_callable_fn_is_refused_first(nothing_starts, fn, shown):
    with pytest.raises(TypeError) as info:
        launch(fn, 2, backend="nccl", timeout=-1)  # fn is the first thing checked
    assert str(info.value) == f"fn={shown}: must be a function, called on every rank as fn(rank, world_size, *args)"


def test_a_closure_under_spawn_is_refused_with_what_to_do(nothing_starts):
    offset = 1
    with pytest.raises(TypeError) as info:
        launch(lambda rank, ws: rank + offset, 2, start_method="spawn")
    message = str(info.value)
    assert message.startswith("fn=test_a_closure_under_spawn_is_refused_with_what_to_do.<locals>.<lambda>: "
                              "start_method='spawn' pickles the function to send it to each rank")
    assert message.endswith("define it at the top level of a module (a .py file), not inside another function "
                            "or in a notebook") and "\n" not in message


def test_a_notebook_function_under_spawn_is_refused(nothing_starts, monkeypatch):
    notebook = types.ModuleType("__main__")  # a notebook's __main__: no file a new process could import

    def cell_fn(rank, world_size):
        return rank
    cell_fn.__module__, cell_fn.__qualname__ = "__main__", "cell_fn"
    notebook.cell_fn = cell_fn  # so pickling by name works here, as it does in a notebook
    monkeypatch.setitem(sys.modules, "__main__", notebook)
    with pytest.raises(TypeError, match=r"^fn=cell_fn: start_method='forkserver' pickles .*\(it is defined in a "
                                        r"notebook or an interactive session, which a new process cannot import\)"):
        launch(cell_fn, 2, start_method="forkserver")
