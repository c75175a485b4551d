"""launch_device.gpu_count and cuda_driver_started: ranks can still be forked after counting GPUs. On the first GPU
we borrowed (an H200) every forked rank failed, because torch.cuda.is_available() had started CUDA's driver in the
parent while torch.cuda.is_initialized() stayed False; torch.cuda.device_count() does the same where NVML cannot
answer. These tests play such machines on a CPU build: torch.cuda.device_count must not be called here unless
the child process cannot answer; launch forks only while CUDA's driver has not started here."""
import subprocess

import pytest
import torch

import simlab.exec.launch as L
import simlab.exec.launch_device as D


class Driver:
    """libcuda.so.1 as ctypes loads it: cuDeviceGetCount answers 3 (CUDA_ERROR_NOT_INITIALIZED) before cuInit."""

    def __init__(self, started):
        self.started = started

    def cuDeviceGetCount(self, ref):  # noqa: N802 — the driver's own name
        return 0 if self.started else 3


@pytest.fixture
def cuda_build(monkeypatch):
    """A CUDA build whose CUDA is not initialised here; device_count in this process is a failure."""
    monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)

    def poisons():
        raise AssertionError("torch.cuda.device_count() ran in the parent: forked ranks would fail")
    monkeypatch.setattr(torch.cuda, "device_count", poisons)
    monkeypatch.setattr(D, "_libcuda", lambda: Driver(started=False))
    D._count_in_a_child.cache_clear()
    yield monkeypatch
    D._count_in_a_child.cache_clear()


def test_nvml_answers_and_nothing_else_is_asked(cuda_build):
    cuda_build.setattr(torch.cuda, "_device_count_nvml", lambda: 2)
    cuda_build.setattr(subprocess, "run", lambda *a, **k: pytest.fail("no child needed when NVML answers"))
    assert D.gpu_count() == 2 and not D.cuda_driver_started() and L._pick_start_method("auto") == "fork"


def test_without_nvml_a_child_counts_once(cuda_build):
    calls = []

    def child(cmd, **kwargs):
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, stdout="1\n", stderr="")
    cuda_build.setattr(torch.cuda, "_device_count_nvml", lambda: -1)
    cuda_build.setattr(subprocess, "run", child)
    assert D.gpu_count() == 1 and D.gpu_count() == 1 and len(calls) == 1  # cached per CUDA_VISIBLE_DEVICES
    assert calls[0][1:] == ["-c", "import torch; print(torch.cuda.device_count())"]
    assert not D.cuda_driver_started() and L._pick_start_method("auto") == "fork"
    cuda_build.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert D.gpu_count() == 1 and len(calls) == 2  # another visible set: asked again


def test_a_child_that_cannot_answer_counts_here(cuda_build):
    cuda_build.setattr(torch.cuda, "_device_count_nvml", lambda: -1)

    def fails(cmd, **kwargs):
        raise subprocess.CalledProcessError(1, cmd)
    cuda_build.setattr(subprocess, "run", fails)
    cuda_build.setattr(torch.cuda, "device_count", lambda: 1)  # the last resort, here
    assert D.gpu_count() == 1


def test_launch_spawns_once_the_driver_runs_here(cuda_build):
    """torch.cuda.is_initialized() is still False (an optimizer step's stream-capture check, or is_available()
    without NVML, started the driver): the driver says it runs, so ranks on GPUs are spawned; ranks on the CPU
    still fork; an explicit start method is the caller's."""
    cuda_build.setattr(D, "_libcuda", lambda: Driver(started=True))
    assert D.cuda_driver_started() and L._pick_start_method("auto") == "spawn"
    assert L._pick_start_method("auto", ranks_use_cuda=False) == "fork"  # CPU ranks never touch CUDA: a
    # notebook's functions keep working after an optimizer step has started the driver here
    assert L._pick_start_method("fork") == "fork"
    cuda_build.setattr(D, "_libcuda", lambda: None)  # no driver library at all: nothing to start
    assert not D.cuda_driver_started() and L._pick_start_method("auto") == "fork"


def test_torch_asks_nvml_for_is_available():
    """simlab sets PYTORCH_NVML_BASED_CUDA_CHECK=1 (unless set): torch.cuda.is_available() then leaves the
    driver alone. torch reads it at each call (torch.cuda._nvml_based_avail)."""
    import os
    assert os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK") == "1" and torch.cuda._nvml_based_avail()


def test_the_childs_command_really_counts():
    """The command itself, run for real: this machine's torch says how many GPUs it sees."""
    assert D._count_in_a_child.__wrapped__(None) == torch.cuda.device_count()


def test_a_cpu_build_counts_nothing(monkeypatch):
    monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: False)
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("a CPU build needs no child"))
    assert D.gpu_count() == 0
