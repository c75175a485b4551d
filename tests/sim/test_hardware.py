"""simlab.sim.hardware: the datasheet presets stay as published; this machine's calibration is saved, merged,
loaded back (nearest world size when the asked one was not measured) and refused in one line when missing.
What the cache trusts and how it is written on a shared path: tests/sim/test_hardware_calibration.py."""
import ast
import json
import math
import os
from pathlib import Path

import pytest

import simlab.sim.hardware as hw
from simlab.sim.gpus import GB
from simlab.sim.hardware import GPUS, calibrated_gpu, calibration_path, cluster, load_calibration, save_calibration

FIELDS = {"matmul_flops": 4.2e10, "elementwise_bandwidth": 6e9, "op_overhead": 6.5e-6, "ring_alpha": 8e-4,
          "ring_bandwidth": 1.1e9, "backend": "gloo", "date": "2025-01-01T00:00:00", "cpu_count": 2}


@pytest.fixture
def calib(tmp_path, monkeypatch):
    path = tmp_path / "deep" / "dir" / "calibration.json"  # the directory does not exist yet
    monkeypatch.setenv("SIMLAB_CALIBRATION", str(path))
    return path


def test_presets_hold_their_sources_numbers():
    """Datasheets, mamf-finder's best GEMMs, nccl-tests' bus bandwidths and what torch reports as memory."""
    a100, h100, h200, b200, rtx = (GPUS[k] for k in ("a100-80gb", "h100-80gb", "h200", "b200", "rtx-4090"))
    assert (a100.peak_flops, a100.matmul_efficiency, a100.hbm_bandwidth, a100.intra_bandwidth, a100.intra_alpha,
            a100.host_bandwidth, a100.memory) == (312e12, 0.869, 2039 * GB, 235 * GB, 3.4e-6, 25 * GB, 81_049 * 2**20)
    assert (h100.peak_flops, h100.matmul_efficiency, h100.hbm_bandwidth, h100.intra_bandwidth, h100.nvls_bandwidth,
            h100.peak_flops_fp8, h100.fp8_efficiency, h100.memory) == (989e12, 0.803, 3350 * GB, 370 * GB, 480 * GB,
                                                                      1979e12, 0.709, 81_082 * 2**20)
    assert (h200.hbm_bandwidth, h200.memory, h200.fp8_efficiency) == (4800 * GB, 143_156 * 2**20, 0.734)
    assert (b200.peak_flops, b200.peak_flops_fp8, b200.matmul_efficiency, b200.flash) == (2250e12, 4500e12, 0.776,
                                                                                           None)
    assert (rtx.peak_flops, rtx.intra_alpha, rtx.nvls_bandwidth) == (165.2e12, 5.7e-6, 0.0)
    assert GPUS["a100-40gb"].memory == 42_298_834_944
    assert all(g.op_overhead == 0.0 for g in GPUS.values())
    placeholder = GPUS["cpu-this-machine"]
    assert (placeholder.peak_flops, placeholder.source, placeholder.roofline) == (
        50e9, "placeholder until calibrated on this machine", False)
    c = cluster("a100-80gb", gpus=16)  # 1600 Gb/s per node, 95 % reached, shared by 8 GPUs
    assert (c.nodes, c.gpus_per_node, c.inter_bandwidth) == (2, 8, pytest.approx(1600 / 8 * 1e9 * 0.95 / 8))
    assert cluster(gpus=4).gpus_per_node == 4 and cluster(gpus=64, gpus_per_node=4).nodes == 16


def test_path_default_and_env(monkeypatch, tmp_path):
    monkeypatch.delenv("SIMLAB_CALIBRATION", raising=False)
    assert calibration_path() == Path.home() / ".cache" / "simlab" / "calibration.json"
    monkeypatch.setenv("SIMLAB_CALIBRATION", str(tmp_path / "x.json"))
    assert calibration_path() == tmp_path / "x.json"


def test_round_trip_and_merge(calib):
    assert load_calibration() == {}
    assert save_calibration(4, FIELDS) == calib
    assert save_calibration(2, FIELDS | {"matmul_flops": 8.4e10}) == calib
    data = json.loads(calib.read_text())  # strict JSON, world sizes as string keys
    assert sorted(data) == ["2", "4"] and data["4"] == FIELDS and data["2"]["matmul_flops"] == 8.4e10
    assert load_calibration() == data
    save_calibration(4, FIELDS | {"ring_alpha": 1e-3})  # a new measurement replaces that world size only
    assert load_calibration()["4"]["ring_alpha"] == 1e-3 and load_calibration()["2"]["ring_alpha"] == 8e-4
    # no temporary file left; the lock file stays (removing it would let a third writer lock a new one)
    assert sorted(p.name for p in calib.parent.iterdir()) == ["calibration.json", "calibration.json.lock"]


def test_calibrated_gpu_fields(calib):
    save_calibration(4, FIELDS)
    g = calibrated_gpu(4)
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert g.name == "cpu-this-machine"
    assert (g.peak_flops, g.matmul_efficiency, g.matmul_flops) == (4.2e10, 1.0, 4.2e10)
    assert g.hbm_bandwidth == g.host_bandwidth == 6e9
    assert (g.intra_bandwidth, g.intra_alpha, g.op_overhead) == (1.1e9, 8e-4, 6.5e-6)
    assert g.memory == pytest.approx(ram / 4)
    assert g.source.startswith("measured with 4 processes;") and str(calib) in g.source


def test_nearest_world_size(calib):
    save_calibration(2, FIELDS | {"matmul_flops": 8e10})
    save_calibration(8, FIELDS | {"matmul_flops": 2e10})
    assert calibrated_gpu(2).source.startswith("measured with 2 processes;")
    g = calibrated_gpu(3)
    assert g.peak_flops == 8e10 and "measured with 2 processes, the nearest to 3" in g.source
    assert calibrated_gpu(16).peak_flops == 2e10
    assert calibrated_gpu(5).peak_flops == 2e10  # a tie goes to the larger (more sharing: cautious)
    assert calibrated_gpu(3).memory == pytest.approx(2 * calibrated_gpu(6).memory)  # RAM over the asked size


def test_cluster_uses_the_calibration(calib):
    placeholder = cluster("cpu-this-machine", gpus=4)
    assert placeholder.gpu is GPUS["cpu-this-machine"] and placeholder.nodes == 1
    save_calibration(4, FIELDS)
    c = cluster("cpu-this-machine", gpus=4)
    assert c.gpu == calibrated_gpu(4) and c.gpus_per_node == 4 and c.nodes == 1
    assert cluster("cpu-this-machine", gpus=12).gpus_per_node == 12  # this machine is one node
    assert cluster("a100-80gb", gpus=4).gpu is GPUS["a100-80gb"]  # other presets ignore the file


def test_missing_calibration_is_one_line(calib):
    with pytest.raises(ValueError) as err:
        calibrated_gpu(4)
    assert "simlab calibrate --world-size 4" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '{"four": {}}'])
def test_corrupt_file_is_one_line(calib, text):
    calib.parent.mkdir(parents=True)
    calib.write_text(text)
    with pytest.raises(ValueError, match="simlab calibrate") as err:
        calibrated_gpu(4)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("key, value", [("matmul_flops", 0), ("ring_bandwidth", math.inf), ("op_overhead", None),
                                        ("elementwise_bandwidth", math.nan), ("ring_alpha", -1e-3)])
def test_save_refuses_bad_fields(calib, key, value):
    with pytest.raises(ValueError, match=f"^{key}="):
        save_calibration(2, FIELDS | {key: value})
    assert not calib.exists()


@pytest.mark.parametrize("module", ["hardware", "calibration_cache", "shared_files"])
def test_no_torch_import(module):
    tree = ast.parse((Path(hw.__file__).parent / f"{module}.py").read_text(encoding="utf-8"))
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not {n for n in names if n.split(".")[0] in ("torch", "psutil", "matplotlib")}
    import subprocess
    import sys
    code = (f"import sys, simlab.sim.{module}; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
