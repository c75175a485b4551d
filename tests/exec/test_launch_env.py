"""One rule decides "is this process one of torchrun's workers": `exec.launch_env.torchrun_worker`, used by
`launch.launch` and the CLI alike (before, launch took RANK + WORLD_SIZE + MASTER_ADDR as enough, the CLI
wanted all five). The CLI's own cases are in tests/test_cli_environment.py."""
from __future__ import annotations

import subprocess
import sys

import pytest

from simlab.cli import common
from simlab.exec import launch_env
from simlab.exec.launch import launch


def _never_called(rank, world_size):  # launch must refuse before any rank runs
    raise AssertionError("a rank ran")


@pytest.fixture
def clean_env(monkeypatch):
    for key in launch_env.TORCHRUN_VARS:
        monkeypatch.delenv(key, raising=False)
    return monkeypatch


def test_the_cli_uses_the_executors_rule():
    assert common.torchrun_worker is launch_env.torchrun_worker
    assert common.TORCHRUN_VARS is launch_env.TORCHRUN_VARS


@pytest.mark.parametrize("env, named", [
    ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"}, "without LOCAL_RANK, MASTER_PORT"),
    ({"RANK": "0"}, "without WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT"),
    ({"RANK": "2", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "h", "MASTER_PORT": "29500"},
     "RANK must be between 0 and WORLD_SIZE - 1"),
])
def test_launch_refuses_a_partial_or_inconsistent_torchrun_environment_before_any_rank(clean_env, env, named):
    for key, value in env.items():
        clean_env.setenv(key, value)
    with pytest.raises(ValueError) as err:
        launch(_never_called, world_size=2, timeout=5)
    assert named in str(err.value) and "\n" not in str(err.value)


def test_master_address_alone_is_a_job_scripts_export_and_launch_spawns_its_own_workers(clean_env):
    clean_env.setenv("MASTER_ADDR", "127.0.0.1")
    clean_env.setenv("MASTER_PORT", "29500")
    assert launch_env.torchrun_worker() is None
    assert launch(lambda rank, world_size: (rank, world_size), world_size=2, timeout=60) == [(0, 2), (1, 2)]


def test_the_rule_loads_no_torch():
    code = "import sys, simlab.exec.launch_env; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"
