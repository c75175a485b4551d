"""torchrun's variables in the environment (`cli.common.torchrun_worker`): a process is one of torchrun's workers
only when RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT are all there and agree. Before, a stray RANK
silenced every command (exit 0, nothing printed) while `run 3d` still did the whole run, and a RANK ≥ WORLD_SIZE
waited about a minute, then printed C++ stack frames. Now a command that launches refuses a partial or
inconsistent set in one line, at once; a command that does not launch ignores it and prints."""
import json
import time

import pytest

from simlab.cli import main
from simlab.cli.common import TORCHRUN_VARS, is_printing_rank, torchrun_worker

TORCHRUN = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
NOT_LAUNCHING = [["plan", "--model", "megatron-1.7b-2021", "--gpus", "8", "--global-batch", "64"],
                 ["memory", "--params", "7.5e9", "--gpus", "64", "--zero", "3"],
                 ["schedule", "1f1b", "--stages", "2", "--microbatches", "4"],
                 ["collective", "ring-all-reduce", "--ranks", "4", "--size", "64"],
                 ["split", "column", "--ranks", "2", "--shape", "4x4"]]
LAUNCHING = [["run", "ring-all-reduce"], ["run", "ddp"], ["run", "dp"], ["run", "zero3"], ["run", "pp"],
             ["run", "tp"], ["run", "3d", "--dp", "2"], ["run", "hybrid", "--dp", "2"], ["calibrate"]]


@pytest.fixture
def clean_env(monkeypatch):
    for key in TORCHRUN_VARS:
        monkeypatch.delenv(key, raising=False)
    return monkeypatch


@pytest.fixture
def no_reference(monkeypatch):
    """`run hybrid` trains its one-process reference before it launches: that counts as work too."""
    import simlab.parity.hybrid as H
    monkeypatch.setattr(H, "reference_model", lambda *a, **k: pytest.fail("the reference started training"))


def _printed(argv, capsys) -> str:
    assert main(argv) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("argv", NOT_LAUNCHING, ids=lambda a: a[0])
@pytest.mark.parametrize("json_flag", [[], ["--json"]], ids=["text", "json"])
def test_a_stray_rank_does_not_silence_a_command_that_does_not_launch(argv, json_flag, clean_env, capsys):
    """Such a command computes the same answer on any rank; a stray RANK can only have silenced it."""
    expected = _printed(argv + json_flag, capsys)
    assert expected.strip()
    for stray in ({"RANK": "1"}, {"RANK": "7", "WORLD_SIZE": "2"}, {"RANK": "-1"}, {"RANK": "x"}):
        for key, value in stray.items():
            clean_env.setenv(key, value)
        assert _printed(argv + json_flag, capsys) == expected, stray
        for key in stray:
            clean_env.delenv(key)


def test_under_a_real_torchrun_only_rank_0_prints_a_command_that_does_not_launch(clean_env, capsys):
    for key, value in (TORCHRUN | {"RANK": "1"}).items():
        clean_env.setenv(key, value)
    assert _printed(NOT_LAUNCHING[0] + ["--json"], capsys) == ""
    clean_env.setenv("RANK", "0")
    assert json.loads(_printed(NOT_LAUNCHING[0] + ["--json"], capsys))["best"]


@pytest.mark.parametrize("argv", LAUNCHING, ids=lambda a: "-".join(a[:2]))
def test_a_stray_rank_is_refused_before_a_launch(argv, clean_env, rejected, no_launch, no_reference):
    clean_env.setenv("RANK", "1")
    rejected(argv, "RANK=1 (environment) without WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT: "
                   "not a torchrun worker; unset RANK, or start simlab with torchrun")


@pytest.mark.parametrize("changes, says", [
    ({"RANK": "5"}, "RANK must be between 0 and WORLD_SIZE - 1"),  # waited 44-57 s, then C++ frames
    ({"RANK": "2"}, "RANK must be between 0 and WORLD_SIZE - 1"),
    ({"RANK": "-1"}, "RANK must be between 0 and WORLD_SIZE - 1"),
    ({"WORLD_SIZE": "0"}, "WORLD_SIZE must be at least 1"),
    ({"LOCAL_RANK": "1"}, "LOCAL_RANK must be between 0 and RANK"),  # RANK 0 is nobody's second local rank
    ({"MASTER_ADDR": ""}, "MASTER_ADDR must name the rendezvous host"),
    ({"MASTER_PORT": "0"}, "MASTER_PORT must be a port"), ({"MASTER_PORT": "http"}, "MASTER_PORT must be a port"),
    ({"RANK": "one"}, "RANK='one' (environment): must be a whole number"),
    ({"LOCAL_RANK": "1.5"}, "LOCAL_RANK='1.5' (environment): must be a whole number"),
    ({"WORLD_SIZE": "abc"}, "WORLD_SIZE='abc' (environment): must be a whole number of processes"),
], ids=lambda x: str(x) if isinstance(x, dict) else None)
@pytest.mark.parametrize("argv", [["run", "allreduce"], ["run", "hybrid", "--dp", "2"], ["calibrate"]],
                         ids=lambda a: "-".join(a[:2]))
def test_inconsistent_torchrun_variables_are_refused_at_once(argv, changes, says, clean_env, rejected, no_launch,
                                                             no_reference):
    for key, value in (TORCHRUN | changes).items():
        clean_env.setenv(key, value)
    started = time.perf_counter()
    rejected(argv, says)
    assert time.perf_counter() - started < 5  # was 44-57 s of waiting for peers that never come


@pytest.mark.parametrize("present", [("RANK", "WORLD_SIZE"), ("RANK", "WORLD_SIZE", "MASTER_ADDR"),
                                     ("WORLD_SIZE",), ("LOCAL_RANK",), ("RANK", "WORLD_SIZE", "LOCAL_RANK",
                                                                      "MASTER_ADDR")])
def test_a_partial_set_names_what_is_there_and_what_is_missing(present, clean_env, rejected, no_launch):
    for key in present:
        clean_env.setenv(key, TORCHRUN[key])
    missing = [k for k in TORCHRUN_VARS if k not in present]
    rejected(["run", "allreduce"], f"without {', '.join(missing)}: not a torchrun worker")


def test_the_rule_itself(clean_env):
    assert torchrun_worker() is None and is_printing_rank()
    clean_env.setenv("MASTER_ADDR", "node0")  # a job script's export, for the torchrun it will start: ignored
    clean_env.setenv("MASTER_PORT", "29500")
    assert torchrun_worker() is None and is_printing_rank()
    for key, value in (TORCHRUN | {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}).items():
        clean_env.setenv(key, value)
    assert torchrun_worker() == {"rank": 3, "world_size": 4, "local_rank": 1} and not is_printing_rank()
    clean_env.setenv("RANK", "9")  # inconsistent: refused where it matters (a launch), never silencing
    with pytest.raises(ValueError, match="RANK must be between"):
        torchrun_worker()
    assert is_printing_rank()
