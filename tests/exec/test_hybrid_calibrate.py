"""simlab.exec.hybrid_calibrate and `simlab calibrate`: a real (small) measurement of this machine gives numbers of
sane orders, the CLI saves them where $SIMLAB_CALIBRATION says and prints strict JSON, bad flags are refused first."""
import json
import math

import pytest

from simlab.exec.hybrid_calibrate import MATMUL_SHAPES, RING_BYTES, measure
from simlab.sim.hardware import calibrated_gpu


@pytest.fixture(scope="module")
def measured():
    return measure(2, repeats=2, window=0.05, timeout=120)


def test_measure_gives_sane_orders_of_magnitude(measured):
    m = measured
    assert 1e8 < m["matmul_flops"] < 1e13
    assert 1e8 < m["elementwise_bandwidth"] < 1e12
    assert 1e-7 < m["op_overhead"] < 1e-2
    assert 0 < m["ring_alpha"] < 1 and 1e6 < m["ring_bandwidth"] < 1e12
    numbers = [m[k] for k in ("matmul_flops", "elementwise_bandwidth", "op_overhead", "ring_alpha", "ring_bandwidth")]
    assert all(math.isfinite(x) and x > 0 for x in numbers)
    assert (m["world_size"], m["backend"], m["device"], m["repeats"]) == (2, "gloo", "cpu", 2)
    assert m["cpu_count"] >= 1 and m["torch_version"] and m["date"][:2] == "20"
    assert len(m["matmul_flops_by_shape"]) == len(MATMUL_SHAPES) and set(m["elementwise_bandwidth_by_op"]) == {
        "add", "gelu", "copy"}
    assert len(m["ring_seconds"]) == len(RING_BYTES) and all(s > 0 for s in m["ring_seconds"])
    assert m["ring_bytes_per_rank"] == list(RING_BYTES)  # 2(n-1)/n of the buffer: all of it with 2 ranks
    assert all(len(v) == 2 for v in m["per_rank"].values())
    json.dumps(m, allow_nan=False)  # strict JSON as it is


def test_cli_saves_and_prints_strict_json(tmp_path, monkeypatch, capsys):
    from simlab.cli import main
    path = tmp_path / "sub" / "calibration.json"
    monkeypatch.setenv("SIMLAB_CALIBRATION", str(path))
    assert main(["calibrate", "--world-size", "2", "--repeats", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(f"not strict JSON: {c}"))
    assert out["saved_to"] == str(path) and out["world_size"] == 2
    saved = json.loads(path.read_text())
    assert list(saved) == ["2"] and saved["2"]["matmul_flops"] == out["matmul_flops"]
    g = calibrated_gpu(2)
    assert (g.peak_flops, g.intra_alpha, g.op_overhead) == (out["matmul_flops"], out["ring_alpha"], out["op_overhead"])


@pytest.mark.parametrize("argv, message", [
    (["calibrate", "--world-size", "0"], "--world-size=0: must be between 2 and 64"),
    (["calibrate", "--world-size", "1"], "--world-size=1: must be between 2 and 64"),
    (["calibrate", "--backend", "mpi"], "--backend='mpi': must be one of auto, gloo, nccl"),
    (["calibrate", "--repeats", "0"], "--repeats=0: must be between 1 and 1000"),
    (["calibrate", "--timeout", "0"], "--timeout=0.0: must be a positive number"),
    (["calibrate", "--world-size", "2", "--backend", "nccl"], "--backend='nccl': needs one GPU per rank"),
])
def test_bad_arguments_are_refused_first(argv, message, rejected, no_launch, tmp_path, monkeypatch):
    monkeypatch.setenv("SIMLAB_CALIBRATION", str(tmp_path / "c.json"))
    rejected(argv, message)
    assert not (tmp_path / "c.json").exists()


def test_more_processes_than_cores_warns_in_one_line(tmp_path, monkeypatch, capsys):
    import simlab.exec.hybrid_calibrate as calibrate
    from simlab.cli import main
    monkeypatch.setenv("SIMLAB_CALIBRATION", str(tmp_path / "c.json"))
    monkeypatch.setattr("os.cpu_count", lambda: 1)
    fake = {"matmul_flops": 1e10, "elementwise_bandwidth": 1e9, "op_overhead": 1e-5, "ring_alpha": 1e-4,
            "ring_bandwidth": 1e9, "world_size": 2, "backend": "gloo", "device": "cpu", "cpu_count": 1,
            "matmul_flops_by_shape": {}}
    monkeypatch.setattr(calibrate, "measure", lambda *a, **k: fake)
    assert main(["calibrate", "--world-size", "2"]) == 0
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and "warning: --world-size=2 processes share 1 cores" in captured.err
    assert "GFLOP/s" in captured.out and "saved to" in captured.out
