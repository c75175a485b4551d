"""Which backend and which device a rank uses, and which network interface gloo listens on.

- `resolve_backend`: "auto" is NCCL with one GPU per rank, else gloo; a backend the machine cannot run is
  refused before any process starts.
- `device()`: inside a rank, where its tensors go: its own GPU under NCCL, else the CPU — unless
  SIMLAB_DEVICE=cuda puts gloo ranks on GPUs too (`gpus_for`: rank r on GPU r mod GPUs, so several ranks
  may share one; gloo moves CUDA tensors in its collectives, not in send/recv: tools/gpu_check.py).
- `rendezvous_host`: where the launch's store listens: loopback (127.0.0.1), unless SIMLAB_MASTER_ADDR names
  another address *and* SIMLAB_ALLOW_REMOTE=1 says that exposing the run to the network is meant.
- `gloo_interface`: keep gloo on loopback when the rendezvous is on this machine.
- `gpu_count`: the GPUs, counted without touching CUDA in this process, so that ranks can still be forked.
"""
from __future__ import annotations

import ctypes
import fcntl
import functools
import ipaddress
import os
import socket
import struct
import subprocess
import sys
import warnings

import torch
import torch.distributed as dist

from simlab._checks import check_choice, check_int

BACKENDS = ("auto", "gloo", "nccl")
# torch.cuda.is_available() asks NVML instead of starting CUDA's driver, which would make every later launch
# spawn its ranks (`cuda_driver_started`); a value you set yourself is left alone
os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
DEVICES = ("cpu", "cuda")  # what SIMLAB_DEVICE may say


def resolve_backend(backend: str, world_size: int) -> str:
    """'auto' → 'nccl' with one GPU per rank, else 'gloo'. Raises ValueError before anything starts."""
    check_choice("backend", backend, BACKENDS)
    check_int("world_size", world_size, 1)
    gpus = gpu_count()
    if backend == "auto":
        return "nccl" if gpus >= world_size else "gloo"
    if backend == "nccl" and gpus < world_size:
        raise ValueError(f"backend='nccl': needs one GPU per rank, {world_size} for world_size={world_size}; "
                         f"found {gpus}")
    return backend


def gpu_count() -> int:
    """CUDA GPUs this process may use (CUDA_VISIBLE_DEVICES counted), found without poisoning fork.

    torch.cuda.device_count() asks NVML and, where NVML cannot answer (some containers), the CUDA driver itself:
    from then on every rank forked from this process fails on its first CUDA call ("Cannot re-initialize CUDA in
    forked subprocess", or "CUDA error: initialization error"), as they all did on the first GPU we borrowed
    once torch.cuda.is_available() had started the driver (`cuda_driver_started`). Where NVML cannot answer, a
    child process counts, once per CUDA_VISIBLE_DEVICES."""
    if not torch.backends.cuda.is_built():
        return 0
    if torch.cuda.is_initialized():  # CUDA is up here already: asking costs nothing more (and launch spawns)
        return torch.cuda.device_count()
    try:
        with warnings.catch_warnings():  # "Can't initialize NVML": the answer below says it better
            warnings.simplefilter("ignore")
            found = torch.cuda._device_count_nvml()  # NVML only; -1 when it cannot answer
    except Exception:  # a private function: gone or changed in another torch, ask the child
        found = -1
    return found if found >= 0 else _count_in_a_child(os.environ.get("CUDA_VISIBLE_DEVICES"))


@functools.lru_cache(maxsize=None)
def _count_in_a_child(visible: str | None) -> int:
    """torch.cuda.device_count() in a fresh process: its CUDA driver dies with it. `visible`: the cache key."""
    try:
        out = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.device_count())"],
                             capture_output=True, text=True, timeout=120, check=True)
        return int(out.stdout.split()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):  # no answer: count here after all;
        return torch.cuda.device_count()  # cuda_driver_started() says so from now on, and launch spawns


def cuda_driver_started() -> bool:
    """True when CUDA's driver runs in this process (cuInit was called): a forked rank cannot use CUDA then.

    torch.cuda.is_initialized() does not see every way in: torch.cuda.is_available() (without NVML) and
    cudaGetDeviceCount start the driver and leave it False. Measured on the first GPU we borrowed: every
    forked rank failed so. The driver itself knows: before cuInit, cuDeviceGetCount answers
    CUDA_ERROR_NOT_INITIALIZED (3), and loading the library does not call cuInit."""
    if not torch.backends.cuda.is_built():
        return False
    if torch.cuda.is_initialized():
        return True
    lib = _libcuda()
    if lib is None:  # no driver on this machine: nothing can have started it
        return False
    count = ctypes.c_int(0)
    return lib.cuDeviceGetCount(ctypes.byref(count)) != 3  # 0: started; any other error: be safe, spawn


@functools.lru_cache(maxsize=None)
def _libcuda():
    try:
        return ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None


def device() -> torch.device:
    """Where this rank should put its tensors: its own GPU under NCCL, else the CPU — unless SIMLAB_DEVICE=cuda
    puts any backend's ranks on GPUs (launch: rank r on GPU r mod GPUs; gloo ranks may share one, NCCL's may not;
    gloo moves CUDA tensors in its collectives, not in send/recv: tools/gpu_check.py). Every engine takes
    its device from its tensors or a `device=` argument; the parity runs pass this one."""
    if dist.is_initialized() and (dist.get_backend() == "nccl" or os.environ.get("SIMLAB_DEVICE") == "cuda"):
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def gpus_for(backend: str) -> int:
    """GPUs the ranks are spread over: all of them under NCCL or SIMLAB_DEVICE=cuda, else 0 (the CPU).
    Checked in the parent, before any process starts."""
    wanted = check_choice("SIMLAB_DEVICE", os.environ.get("SIMLAB_DEVICE") or "cpu", DEVICES)
    gpus = gpu_count() if backend == "nccl" or wanted == "cuda" else 0
    if wanted == "cuda" and not gpus:
        raise ValueError("SIMLAB_DEVICE=cuda: this machine has no CUDA GPU (unset it to run on the CPU)")
    return gpus


def rendezvous_host() -> str:
    """The address the rendezvous store listens on: $SIMLAB_MASTER_ADDR, 127.0.0.1 when unset.

    `launch` starts every rank on this machine, so loopback is all it needs, and anything else opens the
    store (and gloo, see `gloo_interface`) to the network: whoever connects first can join or stall the run.
    So an address that is not loopback-only is refused unless SIMLAB_ALLOW_REMOTE=1 asks for it; an empty one
    always is (it listened on every interface, and then no rank could connect to ""). Runs across machines
    go through torchrun, which sets its own MASTER_ADDR. Raises ValueError in one line naming the variable."""
    host = os.environ.get("SIMLAB_MASTER_ADDR", "127.0.0.1")
    allow = check_choice("SIMLAB_ALLOW_REMOTE", os.environ.get("SIMLAB_ALLOW_REMOTE") or "0", ("0", "1"))
    if not host.strip():
        raise ValueError(f"SIMLAB_MASTER_ADDR={host!r}: empty; unset it to rendezvous on 127.0.0.1 (this machine)")
    try:
        found = {a[4][0] for a in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)}
    except (OSError, UnicodeError) as err:  # the old check's words: tests and users know this line
        raise ValueError(f"SIMLAB_MASTER_ADDR={host!r}: cannot listen there ({getattr(err, 'strerror', None) or err})"
                         ) from None
    open_to = sorted(a for a in found if not ipaddress.ip_address(a.split("%")[0]).is_loopback)
    if open_to and allow != "1":
        raise ValueError(f"SIMLAB_MASTER_ADDR={host!r}: {', '.join(open_to)} is not loopback, so the run would be "
                         "open to the network; set SIMLAB_ALLOW_REMOTE=1 if you mean it, or unset SIMLAB_MASTER_ADDR")
    return host


def gloo_interface(host: str) -> str | None:
    """The loopback interface ('lo') when the rendezvous is on this machine, else None. gloo listens not where
    the store does but where this machine's *hostname* resolves to, often a LAN address: every course run
    would be open to the network. A GLOO_SOCKET_IFNAME you set yourself is left alone."""
    if "GLOO_SOCKET_IFNAME" in os.environ:
        return None
    try:
        if not all(ipaddress.ip_address(a[4][0]).is_loopback for a in socket.getaddrinfo(host, None)):
            return None
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            for _, name in socket.if_nameindex():
                try:  # SIOCGIFADDR: the interface's IPv4 address, in bytes 20-23 of the answer
                    address = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name.encode()))[20:24]
                except OSError:  # no IPv4 address
                    continue
                if ipaddress.ip_address(address).is_loopback:
                    return name
    except (OSError, ValueError):  # not Linux-like, or an unresolvable host: leave gloo's choice alone
        pass
    return None
