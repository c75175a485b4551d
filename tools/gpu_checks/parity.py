"""The parity groups: every engine (our ring all-reduce, DDP, ZeRO 1/2/3 and Offload, the pipeline, tensor
parallelism, lesson 6's 3-D run) against one process and against torch's own, on the backend and ranks the plan
gives it; a row also fails when simlab handed a collective a tensor on another device than expected. And the
--backend run: every lesson's parity on one backend, in this process (what CI runs on gloo)."""
from __future__ import annotations

import os

from .measure import logged_devices
from .plan import ZERO, checks_of, hybrid_layout, layouts
from .report import FAIL, PASS, one_line, row

TOL = {"cpu": 1e-5, "cuda": 1e-4}  # fp32 on a GPU sums in another order than the CPU reference; a bug is O(0.1)


def parity(check, how, run, tol, expect, torch_twin=True, logs=False) -> dict:
    """Run `run(compare_torch)`; if it raises with torch's twin on, once more without it (the twin failing on
    this backend is reported, not blamed on our engine). ✓: within `tol` of one process (and of torch), and
    every tensor simlab handed to a torch.distributed collective on the `expect`ed device type — and, where
    the engine talks through collectives (`logs`), at least one such tensor seen: on the first GPU run the
    ranks were spawned, the log's wrappers did not reach them, and "none" passed unseen."""
    logged_devices()
    note = ""
    try:
        res = run(True)
    except Exception as err:
        if not torch_twin:
            return row(check, how, result=one_line(err))
        note = f"; torch's twin failed: {one_line(err)}"
        logged_devices()
        try:
            res = run(False)
        except Exception as err2:
            return row(check, how, result=one_line(err2))
    ref, theirs = res["max_abs_diff_vs_reference"], res["max_abs_diff_vs_torch"]
    devices = logged_devices()
    wrong = {d: k for d, k in devices.items() if d != expect}
    sent = ", ".join(f"{k} on {d}" for d, k in sorted(devices.items())) or "none"
    ok = ref <= tol and (theirs is None or theirs <= tol) and not wrong and (devices or not logs)
    vs_torch = "n/a" if theirs is None else f"{theirs:.1e}"
    note += "; no tensor seen in a collective: the device check did not run" if logs and not devices else ""
    return row(check, how, f"vs 1 process {ref:.1e}, vs torch {vs_torch}; tensors in collectives: {sent}",
               f"≤ {tol:.0e}, tensors on {expect}", f"backend {res['backend']}, {res['world_size']} rank(s){note}",
               PASS if ok else FAIL)


def _parity_setup(mode, gpus, group_name):
    lay = layouts(mode, gpus)
    checks = dict(checks_of(mode, gpus, group_name))
    tol, expect = TOL["cpu" if mode == "cpu" else "cuda"], "cpu" if mode == "cpu" else "cuda"
    return lay, checks, tol, expect


def child_collectives(mode, gpus, size):
    from simlab.parity.collectives import run_collective
    lay, checks, tol, expect = _parity_setup(mode, gpus, "collectives")
    p = lay["p2p"]
    check = "collectives: ring-all-reduce"
    numel = (1 << 20) if size == "full" else 4096
    yield parity(check, checks[check], lambda twin: run_collective("ring-all-reduce", p.ranks, numel,
                                                                   backend=p.backend), tol, expect, torch_twin=False,
                 logs=True)


def child_data_parallel(mode, gpus, size):
    from simlab.parity.data_parallel import run_ddp
    lay, checks, tol, expect = _parity_setup(mode, gpus, "data-parallel")
    c = lay["collective"]
    allreduce = "ring" if c.backend == "nccl" else "torch"  # gloo has no CUDA send/recv: torch's all-reduce
    check = "data parallel: ddp"
    yield parity(check, checks[check] + f", all-reduce: {allreduce}",
                 lambda twin: run_ddp(c.ranks, steps=3, global_batch=8 * c.ranks, allreduce=allreduce,
                                      compare_torch=twin, backend=c.backend), tol, expect,
                 logs=c.ranks > 1 and allreduce == "torch")  # our ring sends point to point: none logged


def child_zero(mode, gpus, size):
    from simlab.parity.zero import run_zero
    lay, checks, tol, expect = _parity_setup(mode, gpus, "zero")
    p = lay["p2p"]
    for name, (stage, offload) in ZERO.items():
        check = f"zero: {name}"
        yield parity(check, checks[check], lambda twin, s=stage, o=offload: run_zero(
            s, p.ranks, steps=3, global_batch=8 * p.ranks, offload=o, compare_torch=twin, backend=p.backend),
            tol, expect)


def child_pipeline(mode, gpus, size):
    from simlab.parity.pipeline import run_pipeline
    lay, checks, tol, expect = _parity_setup(mode, gpus, "pipeline")
    p = lay["p2p"]
    (check, how), = checks.items()
    if p.ranks == 1:  # two chunks on the one rank: stages hand over on the device, no sends
        def run(twin):
            return run_pipeline("interleaved", 1, 2, chunks=2, global_batch=8, steps=2, compare_torch=twin,
                                backend=p.backend)
    else:
        def run(twin):
            return run_pipeline("1f1b", p.ranks, 2 * p.ranks, global_batch=8 * p.ranks, steps=2,
                                compare_torch=twin, backend=p.backend)
    yield parity(check, how, run, tol, expect)


def child_tensor_parallel(mode, gpus, size):
    from simlab.parity.tensor_parallel import run_tp
    lay, checks, tol, expect = _parity_setup(mode, gpus, "tensor-parallel")
    c = lay["collective"]
    n = c.ranks
    yield parity("tensor parallel: mlp", checks["tensor parallel: mlp"], lambda twin: run_tp(
        n, "mlp", ffn=16 * n, heads=4 * n, compare_torch=twin, backend=c.backend), tol, expect, logs=n > 1)
    yield parity("tensor parallel: attention", checks["tensor parallel: attention"], lambda twin: run_tp(
        n, "attention", hidden=8 * n, heads=4 * n, compare_torch=twin, backend=c.backend), tol, expect, logs=n > 1)


def child_3d(mode, gpus, size):
    from simlab.parity.hybrid import run_hybrid
    lay, checks, tol, expect = _parity_setup(mode, gpus, "3-d")
    c = lay["collective"]
    dp, pp, tp = hybrid_layout(mode, gpus)
    (check, how), = checks.items()
    yield parity(check, how, lambda twin: run_hybrid(dp=dp, pp=pp, tp=tp, backend=c.backend), tol, expect,
                 torch_twin=False, logs=dp * pp * tp > 1)


def legacy_rows(n: int, backend: str) -> list:
    """--backend/--world-size: every lesson's parity on `backend` with `n` ranks, in this process (what CI runs on
    gloo, and what this script did before the plan above)."""
    from simlab.parity.collectives import run_collective
    from simlab.parity.data_parallel import run_ddp
    from simlab.parity.pipeline import run_pipeline
    from simlab.parity.tensor_parallel import run_tp
    from simlab.parity.zero import run_zero
    runs = {"collectives: ring-all-reduce": lambda twin: run_collective("ring-all-reduce", n, 1 << 20, backend=backend),
            "data parallel: ddp": lambda twin: run_ddp(n, steps=3, global_batch=8 * n, compare_torch=twin,
                                                        backend=backend)}
    runs |= {f"zero: {name}": (lambda twin, s=s, o=o: run_zero(s, n, steps=3, global_batch=8 * n, offload=o,
                                                                compare_torch=twin, backend=backend))
             for name, (s, o) in ZERO.items()}
    runs |= {"pipeline: 1f1b": lambda twin: run_pipeline("1f1b", n, 2 * n, global_batch=8 * n, steps=2,
                                                          compare_torch=twin, backend=backend),
             "tensor parallel: mlp": lambda twin: run_tp(n, "mlp", ffn=16 * n, heads=4 * n, compare_torch=twin,
                                                         backend=backend),
             "tensor parallel: attention": lambda twin: run_tp(n, "attention", hidden=8 * n, heads=4 * n,
                                                               compare_torch=twin, backend=backend)}
    cuda = backend == "nccl" or os.environ.get("SIMLAB_DEVICE", "").strip().lower() == "cuda"
    how = f"{backend}, {n} ranks" + (" on GPUs" if cuda else " on cpu")
    return [parity(name, how, run, TOL["cuda" if cuda else "cpu"], "cuda" if cuda else "cpu",
                   torch_twin=not name.startswith("collectives")) for name, run in runs.items()]
