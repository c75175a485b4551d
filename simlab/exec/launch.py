"""Start N real worker processes that form a `torch.distributed` group, run one function, and clean up.

What it teaches: what a launcher really does before your first collective can run —
  1. start processes (fork: fast, works for notebook functions; spawn: re-imports everything),
  2. rendezvous: every rank finds the others through one key-value store (TCPStore) at a known address,
  3. init the process group (gloo on CPU, NCCL with one GPU per rank),
  4. and the unglamorous half: a rank that raises, dies or hangs must not hang *you* —
     the parent watches every rank, kills them all on the first failure, and leaves nothing behind.

Run a demo: python -m simlab.exec.launch   (prints each rank's all_reduce result)
Under torchrun (RANK/WORLD_SIZE/MASTER_ADDR set) nothing is spawned: this process is one rank.
"""
from __future__ import annotations

import ctypes
import datetime
import gc
import os
import pickle
import signal
import socket
import sys
import time
import traceback
from multiprocessing.connection import wait

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from simlab._checks import check_choice, check_int, check_positive

BACKENDS = ("auto", "gloo", "nccl")
START_METHODS = ("auto", "fork", "spawn", "forkserver")
_SLICE = 0.2  # seconds per wait: short, so Ctrl-C and the timeout are noticed promptly
_BACKSTOP = 5.0  # extra seconds for the workers' own store/collective timeouts
_SETTLE = 0.5  # after a first failure, how long to collect the others before naming the cause


class WorkerError(RuntimeError):
    """A rank raised or died; `.rank` says which, `.traceback` holds its traceback text ('' if it died)."""

    def __init__(self, message: str, rank: int = -1, traceback: str = ""):
        super().__init__(message)
        self.rank, self.traceback = rank, traceback


class LaunchTimeout(TimeoutError):
    """The run took longer than `timeout` seconds — usually a collective that one rank never joined."""


def resolve_backend(backend: str, world_size: int) -> str:
    """'auto' → 'nccl' with one GPU per rank, else 'gloo'. Raises ValueError before anything starts."""
    check_choice("backend", backend, BACKENDS)
    check_int("world_size", world_size, 1)
    gpus = torch.cuda.device_count()  # asks NVML; is_available() would init CUDA and poison later forks
    if backend == "auto":
        return "nccl" if gpus >= world_size else "gloo"
    if backend == "nccl" and gpus < world_size:
        raise ValueError(f"backend='nccl': needs one GPU per rank, {world_size} for world_size={world_size}; "
                         f"found {gpus}")
    return backend


def device() -> torch.device:
    """Where this rank should put its tensors: its own GPU under NCCL, else the CPU. Every engine takes
    its device from its tensors or a `device=` argument; the parity runs pass this one."""
    if dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def launch(fn, world_size, *args, backend="auto", timeout=60.0, start_method="auto", **kwargs) -> list:
    """Run `fn(rank, world_size, *args, **kwargs)` on `world_size` ranks; return the results in rank order.

    Raises WorkerError when a rank raises or dies, LaunchTimeout after `timeout` seconds; either way
    every worker is stopped first. Results travel back pickled, so tensors arrive as ordinary tensors;
    return CPU tensors (`t.cpu()`): a CUDA one would initialise CUDA here, and later launches must spawn.
    """
    backend = resolve_backend(backend, world_size)
    timeout = check_positive("timeout", timeout)
    check_choice("start_method", start_method, START_METHODS)
    if all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR")):
        return _run_under_torchrun(fn, world_size, args, kwargs, backend, timeout)
    ctx = mp.get_context(_pick_start_method(start_method))
    host = os.environ.get("SIMLAB_MASTER_ADDR", "127.0.0.1")
    # Rendezvous: we bind the store's socket ourselves (port 0 → the OS picks a free one, no race) and
    # listen on `host` only. It is listening now, so workers that connect early just queue.
    sock = socket.create_server((host, 0), backlog=128)
    port = sock.getsockname()[1]
    procs, conns, store, ok = [], [], None, False
    try:
        for rank in range(world_size):
            recv_end, send_end = ctx.Pipe(duplex=False)
            conns.append(recv_end)
            worker_args = (fn, rank, world_size, args, kwargs, backend, host, port, timeout, send_end)
            proc = ctx.Process(target=_worker, args=worker_args, name=f"simlab-rank{rank}")
            try:
                proc.start()  # spawn/forkserver pickle fn here: a notebook function or closure fails
            finally:
                send_end.close()  # only the child may hold the write end
            procs.append(proc)
        # Start the store's server thread only after the last fork: a child forked while a parent thread
        # holds a lock (we caught one in its string formatting) can deadlock on that lock forever.
        store = dist.TCPStore(host, port, is_master=True, wait_for_workers=False,
                              master_listen_fd=sock.detach())  # the store owns and closes it now
        results = _collect(procs, conns, timeout)
        ok = True
        return results
    finally:
        _stop(procs, grace=2.0 if ok else 0.0)
        for conn in conns:
            conn.close()
        sock.close()  # a no-op once the store owns the socket
        del store  # stops the server thread and frees the port, even while a traceback holds this frame


def _pick_start_method(start_method: str) -> str:
    if start_method != "auto":
        return start_method
    # fork can't carry an initialised CUDA context into the child; spawn is the only safe choice then.
    if sys.platform.startswith("linux") and not torch.cuda.is_initialized():
        return "fork"
    return "spawn"


# ---------------------------------------------------------------- inside each worker process

def _worker(fn, rank, world_size, args, kwargs, backend, host, port, timeout, conn):
    torch.set_num_threads(1)  # fork trap: a forked child's matmul can hang on the parent's thread pool
    gc.freeze()  # inherited objects are the parent's: teardown's gc.collect() skips them (saves 0.2 s)
    _die_with_parent()
    payload = None
    try:
        if backend == "nccl":
            torch.cuda.set_device(rank)
        # The parent owns the clock; our own timeouts are only a backstop, so they fire a bit later.
        wait_for = datetime.timedelta(seconds=timeout + _BACKSTOP)
        store = dist.TCPStore(host, port, is_master=False, timeout=wait_for)
        dist.init_process_group(backend, store=store, rank=rank, world_size=world_size, timeout=wait_for)
        _wait_for_all(store, world_size)
        payload = pickle.dumps(("ok", fn(rank, world_size, *args, **kwargs)))
    except BaseException:  # report first: the parent stops the others while we tidy up
        conn.send_bytes(_error_message())
    try:
        _teardown()
    except BaseException:
        payload = payload and _error_message()
    if payload:
        conn.send_bytes(payload)  # sent after teardown, so a crash while tearing down is reported too
    conn.close()


def _error_message() -> bytes:
    exc = sys.exc_info()[1]  # the time stamp lets the parent tell the first failure from knock-ons
    return pickle.dumps(("err", time.time(), f"{type(exc).__name__}: {exc}", traceback.format_exc()))


def _wait_for_all(store, world_size):
    # gloo finishes connecting a pair on each side separately: a rank that returned at once and tore down
    # could cut a peer's half-made connection ("Connection closed by peer"). So: nobody starts early.
    if store.add("simlab/joined", 1) == world_size:
        store.set("simlab/all_joined", "1")
    store.wait(["simlab/all_joined"])


def _teardown():
    gc.collect()  # teardown trap: drop DDP/optimizers holding the group, or gloo may abort at exit
    if dist.is_initialized():
        dist.destroy_process_group()


def _die_with_parent():
    # Linux only, best effort: if the parent is killed (kill -9, kernel restart), SIGKILL us too.
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except Exception:
        pass


# ---------------------------------------------------------------- the parent watches

def _collect(procs, conns, timeout):
    results, failures = {}, {}  # rank → return value;  rank → (how likely the root cause, WorkerError)
    deadline = time.monotonic() + timeout
    while len(results) + len(failures) < len(procs) and time.monotonic() < deadline:
        pending = [r for r in range(len(procs)) if r not in results and r not in failures]
        owner = {conns[r]: r for r in pending} | {procs[r].sentinel: r for r in pending}
        ready = wait(list(owner), timeout=max(0.0, min(_SLICE, deadline - time.monotonic())))
        for rank in sorted({owner[x] for x in ready}):
            message = _receive(conns[rank])
            if message is None:  # died without a word: likelier the cause than others' "peer closed"
                failures[rank] = ((0, rank), _death_error(rank, procs[rank]))
            elif message[0] == "ok":
                results[rank] = message[1]
            else:  # the earliest error is the cause, later ones are knock-on effects
                _, when, header, tb = message
                failures[rank] = ((1, when), WorkerError(f"rank {rank} failed: {header}\n\n{tb}", rank, tb))
        if failures:  # let the knock-on effects (and a dying rank's sentinel) arrive before judging
            deadline = min(deadline, time.monotonic() + _SETTLE)
    if failures:
        raise min(failures.values(), key=lambda f: f[0])[1]
    if len(results) < len(procs):
        pending = [r for r in range(len(procs)) if r not in results]
        raise LaunchTimeout(f"timeout={timeout}s: ranks {pending} still running (hung collective?)")
    return [results[r] for r in range(len(procs))]


def _receive(conn):  # the rank's next message, or None if it exited without sending one
    try:
        return pickle.loads(conn.recv_bytes()) if conn.poll() else None  # no data: only its sentinel fired
    except EOFError:
        return None


def _death_error(rank, proc):
    proc.join(1.0)  # its sentinel fired, so this is quick; it makes exitcode available
    code = proc.exitcode
    how = f"was killed by signal {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
    return WorkerError(f"rank {rank} {how} before returning a result", rank)


def _stop(procs, grace):
    """Join every worker: wait `grace` s, then SIGTERM all at once, then SIGKILL stragglers."""
    deadline = time.monotonic() + grace
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + 1.0
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()
        p.close()  # releases the sentinel fd now rather than at garbage collection


# ---------------------------------------------------------------- started by torchrun

def _run_under_torchrun(fn, world_size, args, kwargs, backend, timeout):
    started = int(os.environ["WORLD_SIZE"])
    if started != world_size:
        raise ValueError(f"world_size={world_size}: torchrun started WORLD_SIZE={started} processes")
    created = not dist.is_initialized()  # a group the caller made is the caller's to destroy
    if created:
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
        dist.init_process_group(backend, init_method="env://", timeout=datetime.timedelta(seconds=timeout))
    try:
        rank = dist.get_rank()
        results = [None] * world_size
        dist.all_gather_object(results, fn(rank, world_size, *args, **kwargs))
        return results
    finally:
        if created:
            _teardown()


def _demo(rank, world_size):
    x = torch.ones(2, device=device()) * (rank + 1)
    dist.all_reduce(x)  # every rank ends with 1 + 2 + … + world_size
    return x.tolist()


if __name__ == "__main__":
    print(launch(_demo, 2))  # [[3.0, 3.0], [3.0, 3.0]]
