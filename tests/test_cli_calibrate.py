"""`simlab calibrate` is bounded like every `run` (at most MAX_PROCESSES processes, and only as many as this
machine's memory holds: behind a stubbed launcher, --world-size 100000 used to pass every check), and every
command that reads this machine's calibration reads it — checked — before any work."""
import json

import pytest

from simlab.cli.common import MAX_PROCESSES

BAD_CACHE = {"4": {"matmul_flops": 4.2e10, "elementwise_bandwidth": 6e9, "op_overhead": 6.5e-6,
                   "ring_alpha": -1.0, "ring_bandwidth": 1.1e9}}
FAKE = {"matmul_flops": 1e10, "elementwise_bandwidth": 1e9, "op_overhead": 1e-5, "ring_alpha": 1e-4,
        "ring_bandwidth": 1e9, "world_size": 2, "backend": "gloo", "device": "cpu", "cpu_count": 2,
        "matmul_flops_by_shape": {}}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    path = tmp_path / "calibration.json"
    monkeypatch.setenv("SIMLAB_CALIBRATION", str(path))
    return path


@pytest.fixture
def fake_measure(monkeypatch):
    import simlab.exec.hybrid_calibrate as calibrate
    monkeypatch.setattr(calibrate, "measure", lambda world_size, **k: FAKE | {"world_size": world_size})


@pytest.mark.parametrize("n", ["100000", str(MAX_PROCESSES + 1), "4611686018427387904"])
def test_a_huge_world_size_is_refused_in_one_line_and_nothing_starts(n, cache, rejected, no_launch):
    rejected(["calibrate", "--world-size", n], f"--world-size={n}: must be between 2 and {MAX_PROCESSES}")
    assert not cache.exists()


def test_more_processes_than_memory_holds_are_refused_first(cache, rejected, no_launch, monkeypatch):
    import simlab.cli.common as common
    monkeypatch.setattr(common, "available_memory", lambda: 2e9)  # 1 GB usable: fewer than 8 × ~0.2 GB
    rejected(["calibrate", "--world-size", "8"], "--world-size=8: 8 measuring processes would need about")


def test_the_memory_estimate_is_what_a_measuring_process_holds():
    """216 MB on the 2-core machine this was measured on, where a process held 185 MB (Pss)."""
    from simlab.exec.hybrid_calibrate import host_bytes_per_rank
    assert 1e8 < host_bytes_per_rank() < 6e8


def test_a_symlink_at_the_cache_is_refused_before_measuring(cache, tmp_path, rejected, no_launch):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    cache.symlink_to(victim)
    rejected(["calibrate", "--world-size", "2"], "SIMLAB_CALIBRATION=")
    assert victim.read_text() == "precious\n"


def test_a_broken_cache_does_not_stop_calibrate_which_mends_it(cache, fake_measure, capsys):
    from simlab.cli import main
    from simlab.sim.hardware import load_calibration
    cache.write_text(json.dumps(BAD_CACHE))
    assert main(["calibrate", "--world-size", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["saved_to"] == str(cache)
    assert list(load_calibration()) == ["2"]  # the unusable entry for 4 is gone, the new one is there


@pytest.mark.parametrize("argv", [
    ["plan", "--model", "megatron-1.7b-2021", "--gpu", "cpu-this-machine", "--gpus", "4", "--global-batch", "64",
     "--tp", "1", "--pp", "1", "--dp", "4"],  # was: step_seconds -959.96, exit 0
    ["plan", "--model", "megatron-1.7b-2021", "--gpu", "cpu-this-machine", "--gpus", "4", "--global-batch", "64"],
    ["run", "hybrid", "--dp", "2"], ["run", "3d", "--dp", "2", "--backend", "gloo"],  # was: failed after the run
])
def test_a_bad_cache_is_refused_before_any_work_naming_file_and_field(argv, cache, rejected, no_launch,
                                                                      monkeypatch):
    import simlab.parity.hybrid as H
    monkeypatch.setattr(H, "reference_model", lambda *a, **k: pytest.fail("the reference started training"))
    cache.write_text(json.dumps(BAD_CACHE))
    rejected(argv, f"calibration {str(cache)!r}: world size 4: ring_alpha=-1.0: must be >= 0 seconds")


@pytest.mark.parametrize("text", ['{"4": {"matmul_flops": NaN}}', '{"4": {"matmul_flops": true}}', "{torn"])
def test_plan_prints_no_nan_and_no_made_up_rate(text, cache, rejected):
    cache.write_text(text)
    rejected(["plan", "--model", "megatron-1.7b-2021", "--gpu", "cpu-this-machine", "--gpus", "4",
              "--global-batch", "64"], f"calibration {str(cache)!r}: ")


def test_commands_that_do_not_read_the_cache_ignore_a_broken_one(cache, capsys):
    from simlab.cli import main
    cache.write_text("{torn")
    assert main(["plan", "--model", "megatron-1.7b-2021", "--gpus", "8", "--global-batch", "64", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["best"]
