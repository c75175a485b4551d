"""Start N real worker processes that form a `torch.distributed` group, run one function, and clean up.

What it teaches: what a launcher really does before your first collective can run —
  1. start processes (fork: fast, works for notebook functions; spawn: re-imports everything),
  2. rendezvous: every rank finds the others through one key-value store (TCPStore) at a known address,
  3. init the process group (gloo on CPU, NCCL with one GPU per rank; gloo kept on loopback, see below),
  4. and the unglamorous half: a rank that raises, dies or hangs must not hang *you* — the parent watches
     every rank, says which one did what (launch_watch.py), stops them all on the first failure with
     whatever they started, and leaves nothing behind.

Run a demo: python -m simlab.exec.launch   (prints each rank's all_reduce result)
Under torchrun (`launch_env.torchrun_worker`: its five variables, consistent) nothing is spawned: this
process is one rank.
Ended from outside (SIGTERM, SIGHUP, SIGKILL, a torchrun agent killed), a run still cleans up: launch_signals.py.
"""
from __future__ import annotations

import datetime
import faulthandler
import gc
import os
import pickle
import shutil
import signal
import socket
import sys
import threading
import time
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from simlab._checks import check_choice, check_positive
from simlab.exec import launch_device, launch_env, launch_signals

# re-exported: every engine and parity run imports device and resolve_backend from here
from simlab.exec.launch_device import BACKENDS, device, resolve_backend  # noqa: F401 — re-exported
from simlab.exec.launch_watch import (  # noqa: F401 — re-exported: the watch's errors are launch's API
    Interrupted,
    LaunchTimeout,
    WorkerError,
    collect,
    die_with_parent,
    interrupted,
    locate,
)

START_METHODS = ("auto", "fork", "spawn", "forkserver")
_BACKSTOP = 5.0  # extra seconds for the workers' own store/collective timeouts


def launch(fn, world_size, *args, backend="auto", timeout=60.0, start_method="auto", **kwargs) -> list:
    """Run `fn(rank, world_size, *args, **kwargs)` on `world_size` ranks; return the results in rank order.

    Raises WorkerError when a rank raises or dies, LaunchTimeout after `timeout` seconds; either way
    every worker is stopped first. Results travel back pickled, so tensors arrive as ordinary tensors;
    return CPU tensors (`t.cpu()`): a CUDA one would initialise CUDA here, and later launches must spawn.
    """
    _check_fn(fn)
    backend = resolve_backend(backend, world_size)
    gpus = launch_device.gpus_for(backend)  # rank r works on GPU r mod gpus (0: the CPU)
    timeout = check_positive("timeout", timeout)
    check_choice("start_method", start_method, START_METHODS)
    worker = launch_env.torchrun_worker()  # torchrun's five variables, consistent; some of them: refused here
    if worker is not None:
        return _run_under_torchrun(fn, world_size, worker, args, kwargs, backend, timeout)
    method = _pick_start_method(start_method, ranks_use_cuda=gpus > 0)
    if method != "fork":
        _check_picklable(fn, method)
    host = launch_device.rendezvous_host()  # loopback unless asked for: refused in one line, before anything
    with launch_signals.cleaned_up_on_signals():  # SIGTERM, SIGHUP: stop the workers, remove the folder, then die
        return _launch_here(fn, world_size, args, kwargs, mp.get_context(method), host, backend, gpus, timeout)


def _launch_here(fn, world_size, args, kwargs, ctx, host, backend, gpus, timeout) -> list:
    # Rendezvous: we bind the store's socket ourselves (port 0 → the OS picks a free one, no race) and
    try:  # listen on `host` only. It is listening now, so workers that connect early just queue.
        sock = socket.create_server((host, 0), backlog=128)
    except OSError as err:  # a name that resolves but is not this machine's: name the variable
        raise ValueError(f"SIMLAB_MASTER_ADDR={host!r}: cannot listen there ({err.strerror or err})") from None
    port = sock.getsockname()[1]
    setup = dict(backend=backend, host=host, port=port, timeout=timeout, gpus=gpus,
                 gloo_ifname=launch_device.gloo_interface(host))
    stacks = launch_signals.stack_folder()  # where a hung rank dumps its stack when asked
    stack_files = [os.path.join(stacks, f"rank{rank}.stack") for rank in range(world_size)]
    procs, conns, store, ok = [], [], None, False
    try:
        for rank in range(world_size):
            recv_end, send_end = ctx.Pipe(duplex=False)
            conns.append(recv_end)
            worker_args = (fn, rank, world_size, args, kwargs, setup, stack_files[rank], send_end)
            proc = ctx.Process(target=_worker, args=worker_args, name=f"simlab-rank{rank}")
            try:
                proc.start()  # spawn/forkserver pickle fn and its arguments here
            finally:
                send_end.close()  # only the child may hold the write end
            procs.append(proc)
        # The clock starts once every rank is started, and holds through the rendezvous (the store) too.
        deadline = time.monotonic() + timeout
        store = _serve_store(host, port, sock, timeout)
        results = collect(procs, conns, timeout, stack_files, deadline)
        ok = True
        return results
    except KeyboardInterrupt:  # stop the workers (finally, below), then say so in one line
        raise interrupted(world_size) from None
    finally:
        launch_signals.stop(procs, grace=2.0 if ok else 0.0)
        for conn in conns:
            conn.close()
        sock.close()  # a no-op once the store owns the socket
        del store  # stops the server thread and frees the port, even while a traceback holds this frame
        shutil.rmtree(stacks, ignore_errors=True)


def _serve_store(host, port, sock, timeout):
    """The rendezvous store's server, on the socket we bound, ready within `timeout`, or LaunchTimeout.

    Started only after the last fork: a child forked while a parent thread holds a lock (we caught one in
    the store's string formatting) can deadlock on that lock forever. Its constructor also connects to itself
    as a client, in C++, where Ctrl-C cannot reach, and torch retries a failed connection for up to ~2.5 × the
    store's timeout (measured: 2.1 s for 1 s, 7.5 s for 3 s). So the store gets a third of the launch's
    timeout, and its constructor runs in a thread this one waits for in short slices: Ctrl-C still works."""
    made = {}

    def make():
        try:
            made["store"] = dist.TCPStore(host, port, is_master=True, wait_for_workers=False,
                                          timeout=datetime.timedelta(seconds=timeout / 3),
                                          master_listen_fd=sock.detach())  # the store owns and closes it now
        except Exception as err:  # torch's multi-line C++ message: its first line is enough
            made["error"] = (str(err).strip().splitlines() or [type(err).__name__])[0]

    thread = threading.Thread(target=make, name="simlab-store", daemon=True)
    thread.start()
    while thread.is_alive():  # bounded by the store's own timeout, well inside the launch's
        thread.join(0.2)
    if "store" not in made:
        raise LaunchTimeout(f"timeout={timeout}s: the rendezvous store at {host}:{port} did not start "
                            f"({made.get('error', 'no answer')})")
    return made["store"]


def _check_fn(fn):
    if not callable(fn):
        shown = " ".join(repr(fn).split())[:60]  # one line, even for a tensor passed by mistake
        raise TypeError(f"fn={shown}: must be a function, called on every rank as fn(rank, world_size, *args)")


def _check_picklable(fn, method):
    """spawn and forkserver send `fn` to each rank pickled, i.e. as "module + name" the new process imports."""
    name = getattr(fn, "__qualname__", type(fn).__name__)
    try:
        pickle.dumps(fn)
        reason = None
        main_file = getattr(sys.modules["__main__"], "__file__", None) or ""  # none in a notebook or a REPL
        if getattr(fn, "__module__", None) == "__main__" and not os.path.isfile(main_file):
            reason = "it is defined in a notebook or an interactive session, which a new process cannot import"
    except Exception as exc:
        reason = " ".join(str(exc).split())
    if reason:
        raise TypeError(f"fn={name}: start_method={method!r} pickles the function to send it to each rank, "
                        f"and this one cannot be pickled ({reason}): define it at the top level of a module "
                        f"(a .py file), not inside another function or in a notebook")


def _pick_start_method(start_method: str, ranks_use_cuda: bool = True) -> str:
    if start_method != "auto":
        return start_method
    # A forked rank cannot use CUDA once the driver runs here (on a CUDA build an optimizer step starts it: torch
    # asks for the current stream, to check for graph capture), so ranks on GPUs are spawned then. Ranks on the
    # CPU never touch CUDA: they fork, as functions defined in a notebook need.
    if sys.platform.startswith("linux") and not (ranks_use_cuda and launch_device.cuda_driver_started()):
        return "fork"
    return "spawn"


# ---------------------------------------------------------------- inside each worker process

def _worker(fn, rank, world_size, args, kwargs, setup, stack_file, conn):
    os.setsid()  # a session of our own: at the end the parent stops it whole, with anything we started
    for sig in launch_signals.CAUGHT:  # a forked rank inherits the parent's handlers: SIGTERM must kill it
        signal.signal(sig, signal.SIG_DFL)
    die_with_parent()
    stacks = open(stack_file, "w")  # if the run hangs, the parent asks where we are: SIGUSR1 dumps our stack
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)  # works even inside a C++ collective
    torch.set_num_threads(1)  # fork trap: a forked child's matmul can hang on the parent's thread pool
    gc.freeze()  # inherited objects are the parent's: teardown's gc.collect() skips them (saves 0.2 s)
    payload = None
    try:
        if setup["gpus"]:  # NCCL: GPU `rank`, one each; SIMLAB_DEVICE=cuda: GPU rank mod GPUs, maybe shared
            torch.cuda.set_device(rank % setup["gpus"])
        if setup["gloo_ifname"]:  # loopback only, see _gloo_interface
            os.environ.setdefault("GLOO_SOCKET_IFNAME", setup["gloo_ifname"])
        # The parent owns the clock; our own timeouts are only a backstop, so they fire a bit later.
        wait_for = datetime.timedelta(seconds=setup["timeout"] + _BACKSTOP)
        store = dist.TCPStore(setup["host"], setup["port"], is_master=False, timeout=wait_for)
        dist.init_process_group(setup["backend"], store=store, rank=rank, world_size=world_size, timeout=wait_for)
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
    stacks.close()


def _error_message() -> bytes:
    # The time stamp and where it failed (inside a collective?) let the parent tell the cause from knock-ons.
    exc = sys.exc_info()[1]
    frames = [(f.filename, f.lineno, f.name) for f in reversed(traceback.extract_tb(exc.__traceback__))]
    header = f"{type(exc).__name__}: {exc}"
    return pickle.dumps(("err", time.time(), header, traceback.format_exc(), locate(frames)))


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


# ---------------------------------------------------------------- started by torchrun

def _run_under_torchrun(fn, world_size, worker, args, kwargs, backend, timeout):
    started = worker["world_size"]
    if started != world_size:
        raise ValueError(f"world_size={world_size}: torchrun started WORLD_SIZE={started} processes")
    if "TORCHELASTIC_RUN_ID" in os.environ:  # torchrun's agent is our parent: end with it, not after it
        launch_signals.exit_with_parent()
    created = not dist.is_initialized()  # a group the caller made is the caller's to destroy
    if created:
        if backend == "nccl" or os.environ.get("SIMLAB_DEVICE") == "cuda":
            torch.cuda.set_device(worker["local_rank"] % torch.cuda.device_count())
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
