"""Every `simlab run` target honours --backend or refuses it in one line before starting anything, and
prints the parity contract's core keys as strict JSON."""
import json

import pytest
import torch

from simlab.cli import main
from simlab.parity import CORE_KEYS

# each run target with small, fast arguments
TARGETS = {
    "ring-all-reduce": ["--world-size", "2", "--size", "64"], "ring-all-gather": ["--world-size", "2", "--size", "64"],
    "ring-reduce-scatter": ["--world-size", "2", "--size", "64"], "tree-broadcast": ["--world-size", "2", "--size", "64"],
    "naive-all-reduce": ["--world-size", "2", "--size", "64"],
    "dp": ["--world-size", "2", "--steps", "1"], "ddp": ["--world-size", "2", "--steps", "1"],
    "zero1": ["--world-size", "2", "--steps", "1"], "zero2": ["--world-size", "2", "--steps", "1"],
    "zero3": ["--world-size", "2", "--steps", "1"], "offload": ["--world-size", "2", "--steps", "1"],
    "pp": ["--world-size", "2", "--microbatches", "2"], "tp": ["--world-size", "2"],
    "hybrid": ["--world-size", "2", "--dp", "2", "--steps", "2"],
    "step": ["--world-size", "2", "--microbatches", "2", "--microbatch-size", "1", "--steps", "1"],
    "cp": ["--world-size", "2", "--seq", "256"], "ep": ["--world-size", "2"],
}


def test_the_table_covers_every_run_target():
    from simlab.cli import build_parser
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    run = next(a for a in sub.choices["run"]._actions if a.dest == "target")
    canonical = {name for name, p in run.choices.items() if p.prog.endswith(" " + name) and name in TARGETS}
    assert canonical == set(TARGETS) and {p.prog for p in run.choices.values()} == {f"simlab run {t}" for t in TARGETS}


@pytest.mark.parametrize("target", [t for t in TARGETS if t != "dp"])
def test_nccl_without_a_gpu_per_rank_is_refused_naming_the_flag(target, rejected, no_launch):
    assert torch.cuda.device_count() < 64  # this machine: not 64 GPUs, so NCCL cannot run 64 ranks
    batch = ["--global-batch", "64"] if "--steps" in TARGETS[target] and target not in ("hybrid", "step") else []  # over 64
    grid = ["--dp", "64"] if target == "hybrid" else []  # the 3-D grid must fill the 64 ranks
    rejected(["run", target, *TARGETS[target], *batch, *grid, "--world-size", "64", "--backend", "nccl"],
             "--backend='nccl': needs one GPU per rank, 64 for --world-size=64")


@pytest.mark.parametrize("backend", ["gloo", "nccl", "mpi"])
def test_dp_is_one_process_and_says_so(backend, rejected, no_launch):
    rejected(["run", "dp", "--backend", backend], f"--backend='{backend}': must be one of auto, threads")


@pytest.mark.parametrize("target", list(TARGETS))
def test_each_target_honours_its_backend_and_prints_the_core_keys(target, capsys):
    backend = "threads" if target == "dp" else "gloo"
    assert main(["run", target, *TARGETS[target], "--backend", backend, "--json"]) == 0
    text = capsys.readouterr().out
    out = json.loads(text, parse_constant=lambda c: pytest.fail(f"not strict JSON: {c}"))
    assert out["backend"] == backend and out["world_size"] == 2
    assert [k for k in CORE_KEYS if k != "trace"] == [k for k in out if k in CORE_KEYS]
    assert out["max_abs_diff_vs_reference"] <= 1e-5
    assert out["max_abs_diff_vs_torch"] is None and out["why_no_torch"] or out["max_abs_diff_vs_torch"] <= 1e-5
