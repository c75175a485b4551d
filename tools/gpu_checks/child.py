"""Inside a group's subprocess (`--child <group>`): run that group's checks and print each row, as it finishes,
on one line of stdout after `runner.MARK` (the "env" group prints the machine's description instead)."""
from __future__ import annotations

import contextlib
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import torch

from .launch import child_launch, child_nccl_shared
from .llama import child_llama
from .measure import log_devices
from .memory import child_memory_3d, child_memory_zero
from .parity import child_3d, child_collectives, child_data_parallel, child_pipeline, child_tensor_parallel, child_zero
from .report import row
from .runner import MARK
from .timing import child_timing


def child_env(mode, gpus, size):
    info = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
            "gpus": torch.cuda.device_count()}
    if mode != "cpu":
        props = torch.cuda.get_device_properties(0)
        info |= {"name": props.name, "memory": props.total_memory, "capability": f"sm_{props.major}{props.minor}"}
        with contextlib.suppress(Exception):
            version = torch.cuda.nccl.version()  # a tuple since torch 1.x's last releases, an int before
            info["nccl"] = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
    yield {"env": info}


def child_hang(mode, gpus, size):
    time.sleep(3600)
    yield row("selftest: hang", "")


CHILDREN = {"env": child_env, "timing": child_timing, "llama": child_llama, "memory-zero": child_memory_zero, "memory-3d": child_memory_3d,
            "launch": child_launch, "collectives": child_collectives, "data-parallel": child_data_parallel,
            "zero": child_zero, "pipeline": child_pipeline, "tensor-parallel": child_tensor_parallel, "3-d": child_3d,
            "nccl-shared": child_nccl_shared, "_hang": child_hang}
LAUNCHES = ("launch", "collectives", "data-parallel", "zero", "pipeline", "tensor-parallel", "3-d", "memory-zero")


def import_all() -> None:
    """Every module a child imports (tests check that none of them pulls in a widget or a test library)."""
    from torch.testing._internal.distributed import fake_pg  # noqa: F401 — imported only to see what it pulls in

    import simlab.exec.hybrid  # noqa: F401 — imported only to see what it pulls in
    import simlab.exec.launch  # noqa: F401 — imported only to see what it pulls in
    import simlab.parity.collectives  # noqa: F401 — imported only to see what it pulls in
    import simlab.parity.data_parallel  # noqa: F401 — imported only to see what it pulls in
    import simlab.parity.hybrid  # noqa: F401 — imported only to see what it pulls in
    import simlab.parity.pipeline  # noqa: F401 — imported only to see what it pulls in
    import simlab.parity.tensor_parallel  # noqa: F401 — imported only to see what it pulls in
    import simlab.parity.zero  # noqa: F401 — imported only to see what it pulls in
    import simlab.sim.advisor  # noqa: F401 — imported only to see what it pulls in
    import simlab.sim.hybrid_memory  # noqa: F401 — imported only to see what it pulls in


def run_child(group: str, mode: str, gpus: int, size: str) -> int:
    """Inside the subprocess: print one MARK line per row as each check finishes."""
    # On a GPU machine every rank computes on a GPU: NCCL's always did; this puts gloo's ranks (2 sharing cuda:0)
    # and the fake group's one rank there too (`simlab.exec.launch.device`). The dry run stays on the CPU.
    os.environ["SIMLAB_DEVICE"] = "cpu" if mode == "cpu" else "cuda"
    logs = None
    if group in LAUNCHES:
        logs = tempfile.mkdtemp(prefix="gpu-check-log-")
        log_devices(logs)
    try:
        for out in CHILDREN[group](mode, gpus, size):
            print(MARK + json.dumps(out), flush=True)
    finally:
        if logs:
            for path in Path(logs).glob("*"):
                path.unlink()
            os.rmdir(logs)
    return 0
