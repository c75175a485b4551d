"""The `simlab` command line: JSON contents, help, and one-line errors before anything starts."""
import json
import subprocess
import sys

import pytest

from simlab.cli import main


def _run(*argv, check=True):
    out = subprocess.run([sys.executable, "-m", "simlab", *argv], capture_output=True, text=True, timeout=300)
    if check:
        assert out.returncode == 0, out.stderr
    return out


def test_collective_json_has_the_closed_forms(capsys):
    assert main(["collective", "ring-allreduce", "--ranks", "4", "--size", "1048576", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["steps"] == 6
    assert out["bytes_sent_per_rank"] == [1572864] * 4 == [2 * 3 * 1048576 // 4] * 4
    assert out["optimal_bytes_per_rank"] == 1572864
    assert out["final_state_ok"] is True
    assert out["cost"]["seconds"] == pytest.approx(6 * 10e-6 + 1572864 / 10e9)


def test_collective_uneven_and_naive(capsys):
    main(["collective", "naive-allreduce", "--ranks", "5", "--size", "40", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert out["steps"] == 2 and out["bytes_sent_per_rank"] == [160, 40, 40, 40, 40]
    main(["collective", "ring-allreduce", "--ranks", "3", "--size", "40", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert out["chunk_sizes"] == [4, 3, 3] and sum(out["bytes_sent_per_rank"]) == 2 * 2 * 40
    assert out["optimal_bytes_per_rank"] == 54  # ceil(2 * 2/3 * 40)


def test_collective_show_steps_prints_tables(capsys):
    main(["collective", "ring-all-gather", "--ranks", "3", "--size", "12", "--show-steps"])
    text = capsys.readouterr().out
    assert "step 2/2 of ring_all_gather" in text and "final_state_ok: True" in text


@pytest.mark.parametrize("argv, message", [
    (["collective", "ring-allreduce", "--ranks", "0"], "--ranks=0: must be between 1 and 64"),
    (["collective", "ring-allreduce", "--ranks", "65"], "--ranks=65"),
    (["collective", "ring-allreduce", "--size", "-8"], "--size=-8: must be >= 1"),
    (["collective", "ring-allreduce", "--size", "6"], "--size=6: must be a multiple of 4"),
    (["collective", "ring-allreduce", "--bandwidth", "0"], "--bandwidth=0.0"),
    (["collective", "ring-allgatherx"], "invalid choice: 'ring-allgatherx'"),
    (["run", "allreduce", "--world-size", "0"], "--world-size=0"),
    (["run", "allreduce", "--size", "-4"], "--size=-4"),
    (["run", "allreduce", "--world-size", "2", "--backend", "nccl"],
     "--backend='nccl': needs one GPU per rank, 2 for --world-size=2"),
    (["run", "allreduce", "--backend", "mpi"], "--backend='mpi'"),
    (["run", "allreducex"], "invalid choice: 'allreducex'"),
])
def test_bad_arguments_get_one_line_naming_the_parameter(argv, message, rejected):
    rejected(argv, message)


def _commands():
    """Every command and every `run` target, as argv prefixes, straight from the parser."""
    from simlab.cli import build_parser
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    run = next(a for a in sub.choices["run"]._actions if a.dest == "target")
    return [[name] for name in sub.choices if name != "run"] + [["run", name] for name in run.choices]


def test_every_command_has_help_and_json(capsys):
    for argv in [[], ["run"]] + _commands():
        with pytest.raises(SystemExit) as exit_info:
            main([*argv, "--help"])
        out = capsys.readouterr().out
        assert exit_info.value.code == 0 and "usage: simlab" in out
        assert "--json" in out or len(argv) < 2 and argv in ([], ["run"]), argv


def test_every_run_target_names_the_same_flags_the_same_way(capsys):
    for argv in (a for a in _commands() if a[0] == "run"):
        with pytest.raises(SystemExit):
            main([*argv, "--help"])
        out = capsys.readouterr().out
        for flag in ("--world-size", "--backend", "--seed", "--json"):
            assert flag in out, (argv, flag)
        # a timeout where processes could hang; DP runs threads in this one process, so it is not offered
        assert ("--timeout" in out) == (argv != ["run", "dp"]), argv


def test_run_allreduce_json_on_real_processes():
    out = json.loads(_run("run", "allreduce", "--world-size", "3", "--size", "4004", "--json").stdout)
    assert out["backend"] == "gloo" and out["world_size"] == 3
    assert out["max_abs_diff_vs_torch"] == 0.0 and out["matches_simulator"] is True
    assert sum(out["bytes_sent_per_rank"]) == 2 * 2 * 4004


def test_run_under_torchrun_prints_once():
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                          "-m", "simlab", "run", "allreduce", "--size", "64", "--json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1
    result = json.loads(lines[0])
    assert result["world_size"] == 2 and result["matches_simulator"] is True


@pytest.mark.parametrize("argv, message", [
    (["run", "ddp", "--world-size", "3"], "--global-batch=16: must be divisible by --world-size=3"),
    (["run", "dp", "--world-size", "4", "--global-batch", "10"], "--global-batch=10"),
    (["run", "ddp", "--bucket-cap-mb", "0"], "--bucket-cap-mb=0.0: must be a positive number"),
    (["run", "ddp", "--bucket-cap-mb", "-1"], "--bucket-cap-mb=-1.0"),
    (["run", "ddp", "--steps", "0"], "--steps=0"),
    (["run", "zero4"], "invalid choice: 'zero4'"),
])
def test_bad_training_arguments_are_rejected_before_starting(argv, message, rejected):
    rejected(argv, message)


def test_run_ddp_json_matches_reference_and_torch():
    out = json.loads(_run("run", "ddp", "--world-size", "4", "--json").stdout)
    for key in ("max_abs_diff_vs_reference", "losses", "reference_losses", "bytes_sent_per_rank",
                "max_abs_diff_vs_torch"):
        assert key in out
    assert out["max_abs_diff_vs_reference"] <= 1e-5 and out["max_abs_diff_vs_torch"] <= 1e-5
    assert "max_abs_diff_vs_torch_ddp" not in out  # torch's DDP is the run's torch: one key, not two
    assert out["losses"] == pytest.approx(out["reference_losses"], abs=1e-5)
    assert out["bytes_sent_per_rank"] == out["optimal_bytes_per_rank"]


def test_run_dp_json_matches_reference():
    out = json.loads(_run("run", "dp", "--world-size", "2", "--json").stdout)
    assert out["max_abs_diff_vs_reference"] <= 1e-5 and len(out["losses"]) == 5
    assert out["losses"] == pytest.approx(out["reference_losses"], abs=1e-5)
    assert len(out["bytes_sent_per_rank"]) == 2


@pytest.mark.parametrize("stage, total", [(0, 120e9), (1, 31.40625e9), (2, 16.640625e9), (3, 1.875e9)])
def test_memory_reproduces_the_zero_paper(stage, total, capsys):
    main(["memory", "--params", "7.5e9", "--gpus", "64", "--zero", str(stage), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert out["bytes_per_gpu"]["total"] == total
    assert set(out["bytes_per_gpu"]) == {"params", "grads", "optimizer", "total"}
    assert out["comm_volume_in_psi"] == (3 if stage == 3 else 2)
    per_elem = (2 * 2 + 2) if stage == 3 else 2 * 2  # ring: (N-1)/N of Ψ per collective, fp16
    assert out["comm_volume_per_step"] == 63 * (7_500_000_000 // 64) * per_elem  # Ψ/64 divides exactly


@pytest.mark.parametrize("argv, message", [
    (["memory", "--zero", "4"], "--zero=4: must be between 0 and 3"),
    (["memory", "--gpus", "0"], "--gpus=0: must be >= 1"),
    (["memory", "--params", "-1"], "--params=-1"),
    (["memory", "--zero", "1", "--offload"], "--offload=True: needs stage 2 or 3 (ZeRO-Offload builds on stage 2), "
                                             "got --zero=1"),
    (["memory", "--precision", "int8"], "invalid choice: 'int8'"),
    (["run", "zero3", "--world-size", "3"], "--global-batch=16: must be divisible by --world-size=3"),
])
def test_bad_memory_and_zero_arguments(argv, message, rejected):
    rejected(argv, message)


@pytest.mark.parametrize("what", ["zero1", "zero2", "zero3", "offload"])
def test_run_zero_measured_bytes_equal_predicted(what, capsys):
    main(["run", what, "--world-size", "4", "--steps", "2", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert out["max_abs_diff_vs_reference"] <= 1e-5
    assert out["measured_bytes_per_rank"] == out["predicted_bytes_per_rank"]
    assert set(out["measured_bytes_per_rank"][0]) >= {"params", "grads", "optimizer"}


def test_a_failing_run_is_one_line_and_the_traceback_is_behind_verbose(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "ring-all-reduce", "--world-size", "2", "--timeout", "0.001"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 1 and err.count("\n") == 1
    # the timeout holds from the rendezvous on: 1 ms ends it there (the store did not start) or with the ranks
    assert err.startswith("simlab run ring-all-reduce: failed: --timeout=0.001s: ")
    assert "rendezvous store" in err or "ranks [0, 1] still running" in err
    with pytest.raises(SystemExit):
        main(["--verbose", "run", "ring-all-reduce", "--world-size", "2", "--timeout", "0.001"])
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "LaunchTimeout" in err
