"""Device plumbing, on a CPU-only machine: every engine keeps its tensors on the device it is given.

Each worker builds its model and data on the CPU, then makes "meta" the default device: from then on
any tensor an engine creates without saying where (`torch.empty(shape)`) lands on "meta" and the step
fails when it meets the real CPU tensors. The engines are told `device=cpu` (or take it from their
tensors); they must pass. A hard-coded device would fail the same way on a GPU machine.
"""
import contextlib

import pytest
import torch
import torch.distributed as dist

from simlab.exec.collectives import ring_all_reduce, ring_reduce_scatter
from simlab.exec.data_parallel import BucketedDDP
from simlab.exec.launch import launch
from simlab.exec.models import make_batch, make_block, make_input, make_mlp, train_steps
from simlab.exec.pipeline import PipelineRank, make_stages
from simlab.exec.tensor_parallel import ParallelMLP, ParallelSelfAttention
from simlab.exec.zero import ZeroAdam
from simlab.sim.pipeline_schedules import zero_bubble

CPU = torch.device("cpu")


@contextlib.contextmanager
def meta_by_default():
    torch.set_default_device("meta")
    try:
        yield
    finally:
        torch.set_default_device(None)


def _probe(rank, world_size, engine):
    assert torch.empty(1).device == CPU
    with meta_by_default():
        assert torch.empty(1).is_meta  # the trap is armed
    if engine == "collectives":
        x, out, full = torch.arange(8.0) * (rank + 1), torch.empty(4), torch.arange(8.0)
        with meta_by_default():
            ring_all_reduce(x)
            ring_reduce_scatter(out, full)
        return x.device, out.device
    if engine in ("ddp", "zero1", "zero2", "zero3", "offload"):
        model, (x, y) = make_mlp((4, 6, 3), seed=0), make_batch(4, 4, 3, seed=rank)
        with meta_by_default():
            if engine == "ddp":
                wrapped = BucketedDDP(model, bucket_cap_mb=0.0001, allreduce="ring")
                opt = torch.optim.SGD(wrapped.parameters(), lr=0.1)
                train_steps(wrapped, opt, x, y, 2)
                wrapped.close()
            else:
                stage, offload = {"zero1": (1, False), "zero2": (2, False), "zero3": (3, False),
                                  "offload": (2, True)}[engine]
                opt = ZeroAdam(model, stage, lr=1e-2, offload=offload)
                train_steps(model, opt, x, y, 2)
                opt.close()
        return {p.device for p in model.parameters()}
    if engine == "pipeline":
        mine = {rank: make_stages(2, 8, seed=0)[rank]}
        x, y = make_batch(8, 8, 8, seed=0)
        with meta_by_default():
            runner = PipelineRank(mine, 2, x.chunk(4), y.chunk(4), device=CPU)
            runner.run(zero_bubble(2, 4)[rank])
        return {p.grad.device for p in mine[rank].parameters()}
    block = "mlp" if engine == "tp-mlp" else "attention"
    full, (x, dy) = make_block(block, 8, 4, 16), make_input(2, 3, 8)
    par = (ParallelMLP if block == "mlp" else ParallelSelfAttention).from_full(full, device=CPU)
    x = x.requires_grad_(True)
    with meta_by_default():
        par(x).backward(dy)
    return {p.grad.device for p in par.parameters()} | {x.grad.device}


@pytest.mark.parametrize("engine", ["collectives", "ddp", "zero1", "zero2", "zero3", "offload", "pipeline",
                                    "tp-mlp", "tp-attention"])
def test_engines_create_nothing_off_their_device(engine):
    for devices in launch(_probe, 2, engine):
        assert set(devices) == {CPU}


def _leaky(rank, world_size):
    """A deliberately careless engine: a buffer made without a device."""
    x = torch.ones(4)
    with meta_by_default():
        buf = torch.empty(4)  # the bug the test above would catch
        dist.all_reduce(x)
        return (x + buf).device


def test_the_trap_catches_a_careless_buffer():
    from simlab.exec.launch import WorkerError
    with pytest.raises(WorkerError):
        launch(_leaky, 2)
