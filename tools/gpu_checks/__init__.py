"""The checks behind `make gpu-check` (`python tools/gpu_check.py`, the launcher beside this package): every
engine's CUDA device plumbing, CUDA memory per rank against the memory model, and one real training step timed
against the time model — on one GPU (the machine we can borrow) or one GPU per rank.

    cli       the command: its flags, the one line without a GPU, the table printed and written
    plan      which check runs how on this machine (the one-GPU table and why the split is so)
    runner    the parent: each group in its own subprocess with its own timeout, within the budget
    child     inside that subprocess: the group's checks, one result line each
    timing    the timed train step against the time model (and that step's peak memory, its loss, single GEMMs)
    llama     Llama 3 8B's layers, eager and compiled, against the time model's layer
    memory    CUDA bytes per rank against the memory model: ZeRO 1/2/3 and Offload, the 3-D run's stages
    parity    every engine against one process and torch's own, and the tensors' devices
    launch    where a rank computes and the collectives it can use; NCCL with two ranks on one GPU
    measure   what a child measures with: CUDA bytes, the devices simlab hands to collectives, the fake group
    report    the rows, the markdown table, its header and where it is written

Nothing to install: torch, numpy and the repository (put on sys.path here, so it runs from anywhere). No module
imports simlab at import time: a child wraps torch.distributed's collectives first (`measure.log_devices`), and
simlab.exec.zero_shards binds them when imported.

torch: the floor is 2.6 (pyproject). The engines pass group_src/group_dst to torch.distributed, which torch 2.6
added: below that the parity rows fail on it, and the header says so. These checks use nothing newer (SDPA,
autocast, CUDA events and the allocator's counters are older) and guard what a build may lack: the fake process
group (a ✗ row naming it), fused AdamW (falls back to the default one).
"""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
if str(ROOT) not in sys.path:  # `python tools/gpu_check.py` from anywhere: the repository is simlab's home
    sys.path.insert(0, str(ROOT))
