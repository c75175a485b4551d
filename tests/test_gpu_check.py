"""tools/gpu_check.py (the launcher) and tools/gpu_checks/ (the checks) without a GPU: which check runs how on one
GPU and on one GPU per rank, its verdicts, the one line it prints where there is no GPU, and its CPU dry run (tiny
sizes, the same plan; no timing asserted). Also `SIMLAB_DEVICE`, the launcher's switch that lets gloo ranks share a
GPU."""
import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from sampling import sample  # tests/sampling.py: every group under make test-full

from simlab.exec.launch import device, launch

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tools" / "gpu_check.py"
PACKAGE = ROOT / "tools" / "gpu_checks"
sys.path.insert(0, str(ROOT / "tools"))
from gpu_checks import measure, memory, parity, plan, report, timing  # noqa: E402 — after sys.path gains tools/

DEVICE_ENV = "SIMLAB_DEVICE"
NO_GPU = pytest.mark.skipif(torch.cuda.device_count() > 0, reason="this machine has a GPU")


def run(*args, timeout=280):
    env = {k: v for k, v in os.environ.items() if k not in ("OUT", DEVICE_ENV)}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout, env=env)


def checks(mode, gpus):
    return {check: how for group in plan.plan(mode, gpus) for check, how in group.checks}


def doc_checks():
    """The check names of the docstring's one-GPU table ("zero: zero1/zero2" is two checks)."""
    lines = plan.__doc__.split("On ONE GPU")[1].split("\n\n")[1].splitlines()[2:]
    names = []
    for line in lines:
        prefix, rest = line.split("|")[1].strip().split(": ", 1)
        names += [f"{prefix}: {part}" for part in rest.split("/")]
    return names


# ---------------------------------------------------------------- the plan

def test_on_one_gpu_ranks_share_it_only_where_gloo_takes_cuda_tensors():
    one = checks("one-gpu", 1)
    assert sorted(one) == sorted(doc_checks())  # the docstring's table is the plan
    point_to_point = ["collectives: ring-all-reduce", "pipeline: interleaved"] + [f"zero: {z}" for z in plan.ZERO]
    for name in point_to_point:  # gloo cannot send/recv CUDA tensors; NCCL refuses two ranks on one GPU
        assert one[name] == "nccl, 1 rank on cuda:0"
    for name in ("launch: gloo on cuda", "data parallel: ddp", "tensor parallel: mlp", "tensor parallel: attention",
                 "3-d: dp·pp·tp = 1·1·2"):
        assert one[name] == "gloo, 2 ranks sharing cuda:0"
    for z in plan.ZERO:
        assert one[f"memory: {z}"] == "fake group, rank 0 of 4 on cuda:0"
    assert one["memory: 3-d last stage"] == "fake group, rank 7 of 8 on cuda:0"
    assert "nccl: 2 ranks on one gpu" in one
    assert list(one)[0] == "timing: one train step"  # the headline runs first, before the budget can run out


def test_with_one_gpu_per_rank_the_parity_runs_nccl_as_before():
    for gpus, n in ((2, 2), (4, 4), (8, 4)):
        many = checks("gpu-per-rank", gpus)
        parity_rows = [c for c in many if not c.startswith(("memory", "timing", "loss", "gemm", "llama"))]
        assert all(many[c] == f"nccl, {n} ranks, one GPU each" for c in parity_rows)
        assert all(many[f"memory: {z}"] == f"nccl, {n} ranks, one GPU each" for z in plan.ZERO)
        assert "pipeline: 1f1b" in many and "nccl: 2 ranks on one gpu" not in many
    assert "3-d: dp·pp·tp = 1·2·2" in checks("gpu-per-rank", 4)


def test_the_dry_run_is_the_one_gpu_plan_on_the_cpu():
    one, cpu = checks("one-gpu", 1), checks("cpu", 0)
    renamed = {"launch: gloo on cuda": "launch: device plumbing"}
    assert {renamed.get(c, c) for c in one} - {"nccl: 2 ranks on one gpu"} == set(cpu)
    assert cpu["zero: zero3"] == "gloo, 1 rank on cpu" and cpu["data parallel: ddp"] == "gloo, 2 ranks on cpu"
    assert plan.mode_of("cpu", 8) == "cpu" and plan.mode_of("cuda", 1) == "one-gpu"


def test_only_picks_groups_and_checks_by_prefix():
    groups = plan.select(plan.plan("one-gpu", 1), "memory: zero2,tensor")
    assert [(g.name, [c for c, _ in g.checks]) for g in groups] == [
        ("memory-zero", ["memory: zero2"]), ("tensor-parallel", ["tensor parallel: mlp", "tensor parallel: attention"])]
    assert [g.name for g in plan.select(plan.plan("cpu", 0), "_hang")] == ["_hang"]  # a test's, by name only
    assert plan.select(plan.plan("cpu", 0), None) == plan.plan("cpu", 0)


@pytest.mark.parametrize("name, gib, preset", [
    ("NVIDIA H200", 139.8, "h200"), ("NVIDIA H100 80GB HBM3", 79.1, "h100-80gb"),
    ("NVIDIA A100-SXM4-80GB", 79.2, "a100-80gb"), ("NVIDIA A100-SXM4-40GB", 39.4, "a100-40gb"),
    ("NVIDIA GeForce RTX 4090", 23.6, "rtx-4090"), ("NVIDIA B200", 178.4, "b200"), ("Tesla T4", 14.6, None)])
def test_the_time_model_takes_the_preset_named_after_the_gpu(name, gib, preset):
    assert timing.gpu_preset(name, gib * 2**30) == preset
    if preset:
        from simlab.sim.gpus import GPUS
        assert preset in GPUS


def test_sequences_per_step_fill_the_gpu_without_overflowing_it():
    assert [timing.sequences_for(g * 2**30) for g in (139.8, 79.2, 39.4)] == [8, 4, 2]


# ---------------------------------------------------------------- verdicts

def test_a_rank_that_computed_on_the_wrong_device_fails_its_row(tmp_path, monkeypatch):
    monkeypatch.setenv(measure.LOG_ENV, str(tmp_path))

    def ranks_on_cpu(twin):  # as if two ranks handed CPU tensors to torch.distributed's collectives
        (tmp_path / "1.log").write_text("cpu\ncpu\n")
        return {"max_abs_diff_vs_reference": 0.0, "max_abs_diff_vs_torch": 0.0, "backend": "gloo", "world_size": 2}
    r = parity.parity("x", "gloo, 2 ranks sharing cuda:0", ranks_on_cpu, 1e-4, "cuda")
    assert r["ok"] == "✗" and "2 on cpu" in r["measured"]
    assert parity.parity("x", "", ranks_on_cpu, 1e-4, "cpu")["ok"] == "✓"
    assert not list(tmp_path.iterdir())  # read and emptied


def test_torchs_twin_failing_is_reported_not_blamed_on_our_engine(tmp_path, monkeypatch):
    monkeypatch.setenv(measure.LOG_ENV, str(tmp_path))

    def run(twin):
        if twin:
            raise RuntimeError("rank 0 failed: ProcessGroupGloo does not support this on CUDA\nTraceback …")
        return {"max_abs_diff_vs_reference": 2e-7, "max_abs_diff_vs_torch": None, "backend": "gloo", "world_size": 2}
    r = parity.parity("tensor parallel: mlp", "", run, 1e-4, "cuda")
    assert r["ok"] == "✓" and "torch's twin failed: RuntimeError: rank 0 failed" in r["result"]
    far = parity.parity("x", "", lambda twin: {**run(False), "max_abs_diff_vs_reference": 0.3}, 1e-4, "cuda")
    assert far["ok"] == "✗"
    assert parity.parity("x", "", run, 1e-4, "cuda", torch_twin=False)["ok"] == "✗"  # no second try without a twin


def test_memory_rows_pass_within_five_percent():
    held = {"steady": 1_040_000, "peak": 3_000_000, "counted": 1_000_000}
    assert memory.memory_verdict("m", "", held, 1_000_000)["ok"] == "✓"
    assert memory.memory_verdict("m", "", held | {"steady": 1_060_000}, 1_000_000)["ok"] == "✗"
    on_cpu = memory.memory_verdict("m", "", {"steady": 1_000_000, "peak": None, "counted": 1_000_000}, 1_000_000)
    assert on_cpu["ok"] == "✓" and on_cpu["measured"].startswith("held (every tensor reachable, cpu)")


def test_the_table_is_markdown_and_one_line_per_failure():
    text = report.table([report.row("a", "b", result="x|y"), report.row("c", "d", ok="info")])
    lines = text.splitlines()
    assert lines[0].startswith("| check") and set(lines[1]) <= set("|-") and len(lines) == 4
    assert "x/y" in text  # a pipe inside a cell would split it
    err = RuntimeError("ncclInvalidUsage: invalid usage\nLast error:\nDuplicate GPU detected : rank 1 and rank 0")
    assert report.one_line(err) == "Duplicate GPU detected : rank 1 and rank 0"


# ---------------------------------------------------------------- SIMLAB_DEVICE: gloo ranks on a GPU

def _where(rank, world_size):
    return str(device())


def test_simlab_device_cpu_or_unset_keeps_gloo_on_the_cpu(monkeypatch):
    monkeypatch.setenv(DEVICE_ENV, "cpu")
    assert launch(_where, 2, backend="gloo") == ["cpu", "cpu"]
    monkeypatch.setenv(DEVICE_ENV, "cuda")
    assert device() == torch.device("cpu")  # no group in this process: the parent stays off the GPU


@NO_GPU
def test_simlab_device_is_refused_in_one_line_before_anything_starts(monkeypatch):
    monkeypatch.setenv(DEVICE_ENV, "cuda")
    with pytest.raises(ValueError, match="SIMLAB_DEVICE=cuda: this machine has no CUDA GPU"):
        launch(_where, 2, backend="gloo")
    monkeypatch.setenv(DEVICE_ENV, "gpu")
    with pytest.raises(ValueError, match="SIMLAB_DEVICE='gpu': must be one of cpu, cuda"):
        launch(_where, 2, backend="gloo")


# ---------------------------------------------------------------- the script itself

def test_each_module_says_what_it_is_and_keeps_to_300_lines():
    """simlab's rule (tests/test_layers.py) held for the checks' package too; the launcher is only a launcher."""
    for path in [SCRIPT, *sorted(PACKAGE.glob("*.py"))]:
        text = path.read_text(encoding="utf-8")
        assert ast.get_docstring(ast.parse(text)), f"{path.name} has no module docstring"
        assert len(text.splitlines()) <= 300, f"{path.name}: {len(text.splitlines())} lines"
    assert len(SCRIPT.read_text(encoding="utf-8").splitlines()) <= 30


@NO_GPU
def test_without_a_gpu_it_says_so_in_one_line_and_fails():
    out = run()
    assert out.returncode == 2
    assert out.stdout.count("\n") == 1 and "no CUDA GPU on this machine" in out.stdout and "--device cpu" in out.stdout


@pytest.mark.slow
def test_it_imports_no_widget_plotting_or_test_library():
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from gpu_checks.child import import_all; import_all(); "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'ipywidgets', 'anywidget', 'matplotlib', "
            "'pytest', 'scipy', 'pandas', 'IPython'}), [m for m in sys.modules if m.startswith('simlab.render')])")
    out = subprocess.run([sys.executable, "-c", code, str(SCRIPT.parent)], capture_output=True, text=True, cwd=ROOT,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[] []"


@pytest.mark.slow
def test_a_check_that_hangs_is_one_row_and_the_run_fails(tmp_path):
    out = run("--device", "cpu", "--only", "_hang", "--budget", "60", "--out", str(tmp_path / "t.md"))
    assert out.returncode == 1, out.stdout + out.stderr
    assert "✗ selftest: hang: timed out after 3 s" in out.stdout


GROUPS = [group.name for group in plan.plan("cpu", 0)]
# make test: the memory rows and the plumbing always, two more groups drawn each day; make test-full: all of them
DRY_RUN = sample(GROUPS, 2, always=("memory-zero", "memory-3d", "launch", "tensor-parallel"), name="gpu groups")


@pytest.mark.slow
def test_the_dry_run_passes_every_row_and_writes_its_table(tmp_path):
    path = tmp_path / "gpu_check.md"
    out = run("--device", "cpu", "--only", ",".join(DRY_RUN), "--out", str(path), timeout=290)
    assert out.returncode == 0, out.stdout + out.stderr
    text = path.read_text()
    assert "CPU dry run" in text and "| check" in text
    rows = {line.split("|")[1].strip(): line for line in text.splitlines() if line.startswith("| ")}
    expected = [check for group in plan.plan("cpu", 0) if group.name in DRY_RUN for check, _ in group.checks]
    assert {"memory: zero1", "memory: zero2", "memory: zero3", "memory: offload", "memory: 3-d first stage",
            "memory: 3-d last stage", "launch: device plumbing", "tensor parallel: mlp",
            "tensor parallel: attention"} <= set(expected)
    for name in expected:
        assert rows[name].rstrip(" |").endswith(("✓", "info")), rows[name]
    assert "tensors in collectives: 4 on cpu" in rows["tensor parallel: mlp"]


def test_the_readme_quotes_the_gpu_table_it_links():
    """README's "On GPUs" summary is typed from benchmarks/gpu_check.md (the measured table): each figure in it
    must be in that file, so the two cannot drift apart."""
    import re
    root = Path(__file__).resolve().parent.parent
    readme = root.joinpath("README.md").read_text()
    section = readme[readme.index("**Measured on a borrowed H200**"):readme.index("## For developers")]
    summary = [line for line in section.splitlines() if line.startswith("| ") and "---" not in line][1:]
    measured = root.joinpath("benchmarks", "gpu_check.md").read_text().replace(",", "")
    figures = {f for line in summary for f in re.findall(r"\d[\d,]*\.\d+|\d[\d,]{3,}", line)}
    assert len(summary) == 7 and len(figures) >= 15
    for figure in figures:
        assert figure.replace(",", "") in measured, figure


def _keeps_the_linears(original):
    def init(self, model, stage, *args, **kwargs):
        self.kept = list(model)  # what ZeroAdam did before the first GPU run: the full nn.Linears, referenced
        original(self, model, stage, *args, **kwargs)
    return init


def test_the_dry_run_sees_what_an_engine_keeps_beyond_its_own_count(monkeypatch):
    """The CPU dry run measures every tensor the rank can reach, not the engine's own count: ZeRO-3 keeping its
    full weights (found first on the H200) is a ✗ on the CPU too, while the engine's count still says shards."""
    import simlab.exec.zero as Z
    from simlab.sim.memory import per_gpu_bytes
    sizes = memory.MLP_SIZES["tiny"]
    layers = [(a + 1) * b for a, b in zip(sizes, sizes[1:])]
    model = per_gpu_bytes(layers, 4, 3, precision="fp32")["total"]
    verdicts = []
    for patched in (False, True):
        if patched:
            monkeypatch.setattr(Z.ZeroAdam, "__init__", _keeps_the_linears(Z.ZeroAdam.__init__))
        with measure.fake_group(0, 4):
            got = memory.zero_memory(0, 4, 3, False, sizes)
        assert got["counted"] == model  # the engine's own count cannot tell
        verdicts.append(memory.memory_verdict("memory: zero3", "fake group", got, model))
    assert verdicts[0]["ok"] == report.PASS and "held (every tensor reachable, cpu)" in verdicts[0]["measured"]
    assert verdicts[1]["ok"] == report.FAIL and verdicts[1]["result"].startswith("+")


def test_a_row_whose_engine_talks_through_collectives_must_see_one(monkeypatch):
    """On the first GPU run the ranks were spawned and the log's wrappers did not reach them: "tensors in
    collectives: none" passed. A row that expects collectives (`logs=True`) now fails when none was seen."""
    monkeypatch.setattr(parity, "logged_devices", lambda: {})
    res = {"max_abs_diff_vs_reference": 0.0, "max_abs_diff_vs_torch": 0.0, "backend": "gloo", "world_size": 2}
    seen_none = parity.parity("tensor parallel: mlp", "gloo", lambda twin: res, 1e-5, "cpu", logs=True)
    assert seen_none["ok"] == report.FAIL and "the device check did not run" in seen_none["result"]
    one_rank = parity.parity("pipeline: interleaved", "nccl", lambda twin: res, 1e-5, "cpu")  # sends only: none
    assert one_rank["ok"] == report.PASS


def test_a_spawned_rank_gets_the_logging_wrappers(tmp_path):
    """multiprocessing's spawn re-runs the parent's main file as __mp_main__ before unpickling the rank's function:
    tools/gpu_check.py installs the wrappers there, so spawned ranks log their collectives as forked ones do."""
    code = ("import os, runpy, sys; sys.path.insert(0, 'tools'); os.environ['SIMLAB_GPU_CHECK_LOG'] = sys.argv[1]\n"
            "import torch.distributed as dist\n"
            "before = dist.all_reduce.__code__.co_name\n"
            "runpy.run_path('tools/gpu_check.py', run_name='__mp_main__')\n"
            "print(before, dist.all_reduce.__code__.co_name)")
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=root, capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.split() == ["wrapper", "logged"], out.stdout + out.stderr  # torch's own, then log_devices'
