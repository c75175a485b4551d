"""The bytes a process really holds in CPU tensors: every tensor storage Python can reach, each counted once.

What it teaches: an engine's own count of what it keeps (`ZeroAdam.memory()`) is a claim; what the process
can still reach is the fact. The first GPU run (an H200) found ZeRO-3 keeping its full weights while its own
count showed shards alone. A GPU's allocator counts bytes; on the CPU nothing does, so we walk the tensors.

    held = HeldBytes()               # every storage alive now, kept alive so that no address is reused
    ...                              # build, train
    held.since(exclude=(x, y))       # bytes of the storages that appeared since, the data left out

Left out always: the ring collectives' receive buffers (`collectives._SCRATCH`), kept between calls as
NCCL keeps its own; no memory model counts them. Not seen: tensors only C++ holds (autograd's saved tensors
of a graph still alive): measure after the backward, as a step's end is.
"""
from __future__ import annotations

import gc
import warnings

import torch


def cpu_storages() -> dict:
    """{address: storage} of every CPU tensor storage Python can reach."""
    gc.collect()
    with warnings.catch_warnings():  # isinstance on torch.distributed's deprecated reduce_op object warns
        warnings.simplefilter("ignore", FutureWarning)
        tensors = [obj for obj in gc.get_objects() if isinstance(obj, torch.Tensor)]
    found = {}
    for tensor in tensors:
        if tensor.device.type == "cpu" and not tensor.is_meta:
            storage = tensor.untyped_storage()
            if storage.nbytes():
                found[storage.data_ptr()] = storage
    return found


class HeldBytes:
    """The CPU bytes held now against those held when it was made (`since`)."""

    def __init__(self):
        self.before = cpu_storages()  # the storages themselves: alive, their addresses cannot be reused

    def since(self, exclude=()) -> int:
        from .collectives import _SCRATCH
        skip = {t.untyped_storage().data_ptr() for t in (*exclude, *_SCRATCH.values())}
        return sum(s.nbytes() for ptr, s in cpu_storages().items() if ptr not in self.before and ptr not in skip)
