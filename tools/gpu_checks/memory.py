"""The memory groups: the CUDA bytes one rank holds after a step against the memory model, within 5 % — ZeRO 1/2/3
and Offload on 4 ranks (lesson 3's `per_gpu_bytes`) and the first and last stage of a dp·pp·tp = 2·2·2 run with
ZeRO-1 (lesson 6's `rank_states`), each rank played by this one process in torch's fake process group (with one
GPU per rank, ZeRO's on real NCCL ranks); the peak beside them. On the CPU every tensor the rank can reach stands in
(`measure.Meter`)."""
from __future__ import annotations

import gc

import torch

from .measure import Meter, fake_group, warm_cublas
from .plan import ZERO, checks_of, layouts
from .report import FAIL, PASS, mb, one_line, row

MEMORY_TOL = 0.05
MLP_SIZES = {"full": (1024,) * 9, "tiny": (64,) * 5}  # full: 8 Linear layers of 1,049,600 parameters (33.6 MB fp32)
GPT3D = {"full": dict(layers=4, hidden=1024, heads=8, seq=128, vocab=4096),
         "tiny": dict(layers=4, hidden=32, heads=4, seq=8, vocab=64)}
PLAN3D = dict(dp=2, pp=2, tp=2, microbatch=2, zero=1, attention="eager", overlap="none")


def zero_memory(rank, world_size, stage, offload, sizes):
    """Bytes this rank holds after two ZeroAdam steps (the data excluded): `Meter`'s and the engine's own count."""
    from simlab.exec.launch import device
    from simlab.exec.models import make_batch, make_mlp, shard, train_steps
    from simlab.exec.zero import ZeroAdam
    dev = device()
    x, y = (t.to(dev) for t in shard(make_batch(8 * world_size, sizes[0], sizes[-1]), rank, world_size))
    workspaces = warm_cublas(dev)
    meter = Meter(dev)
    model = make_mlp(sizes).to(dev)
    opt = ZeroAdam(model, stage, lr=1e-3, offload=offload)
    train_steps(model, opt, x, y, 2)
    steady, peak, counted = meter.now(), meter.peak(), opt.memory()
    opt.close()
    return {"steady": steady, "peak": peak, "counted": counted["params"] + counted["grads"] + counted["optimizer"],
            "workspaces": workspaces}


def memory_verdict(check, how, got: dict, model: float, extra="") -> dict:
    """One memory row: the bytes the rank's tensors hold after the step (`Meter`: CUDA's requested bytes, on the
    CPU every tensor Python can reach) vs `model`;
    cuBLAS's workspaces, made before the step (`warm_cublas`), are named beside the bytes, not in them."""
    measured = got["steady"]
    error = (measured - model) / model
    what = "held" if got["peak"] is not None else "held (every tensor reachable, cpu)"
    peak = "" if got["peak"] is None else f", peak {mb(got['peak'])}"
    peak += f" (besides cuBLAS's workspaces, {mb(got['workspaces'])})" if got.get("workspaces") else ""
    return row(check, how, f"{what} {mb(measured)}{peak}", f"model {mb(model)} (±{MEMORY_TOL:.0%})",
               f"{100 * error:+.2f} %{extra}", PASS if abs(error) <= MEMORY_TOL else FAIL)


def child_memory_zero(mode, gpus, size):
    from simlab.exec.launch import launch
    from simlab.sim.memory import per_gpu_bytes
    checks = dict(checks_of(mode, gpus, "memory-zero"))
    sizes = MLP_SIZES[size]
    layers = [(a + 1) * b for a, b in zip(sizes, sizes[1:])]
    real = mode == "gpu-per-rank"
    n = layouts(mode, gpus)["p2p"].ranks if real else 4
    if mode == "one-gpu":  # the fake group's rank runs here; with real ranks this process must not touch CUDA
        torch.cuda.set_device(0)
    for name, (stage, offload) in ZERO.items():
        check = f"memory: {name}"
        try:
            if real:
                ranks = launch(zero_memory, n, stage, offload, sizes, backend="nccl", timeout=120)
                got = max(ranks, key=lambda r: r["steady"])
            else:
                with fake_group(0, n):
                    got = zero_memory(0, n, stage, offload, sizes)
            want = per_gpu_bytes(layers, n, stage, offload=offload, precision="fp32")
            model = want["total"] + (want["cpu"] if mode == "cpu" else 0)  # the dry run's host is its device
            yield memory_verdict(check, checks[check], got, model)
        except Exception as err:
            yield row(check, checks[check], result=one_line(err))


def memory_3d(rank, world_size, shape, fields, steps=2):
    """Bytes rank `rank` of a dp·pp·tp run (lesson 6's executor, as `simlab.parity.hybrid.train_hybrid` builds it)
    holds after `steps` steps with its pipeline's buffers released, and at its peak."""
    from simlab.exec.hybrid import DataParallelAdam, loss_for, make_chunks
    from simlab.exec.launch import device
    from simlab.exec.mesh import new_groups
    from simlab.exec.models import make_gpt, make_tokens
    from simlab.exec.pipeline import PipelineRank
    from simlab.exec.tensor_parallel import CommStats
    from simlab.sim.hybrid import Plan
    from simlab.sim.mesh import Mesh
    from simlab.sim.pipeline_schedules import make_schedule
    plan_ = Plan(**fields)
    mesh = Mesh(pp=plan_.pp, dp=plan_.dp, tp=plan_.tp)
    groups = new_groups(mesh)
    pp_r, dp_r, _ = mesh.coords(rank)
    dev, m = device(), 2 * plan_.pp
    batch = plan_.dp * plan_.microbatch * m
    rows = batch // plan_.dp
    x, y = (t.to(dev) for t in make_tokens(batch, shape["seq"], shape["vocab"]))
    workspaces = warm_cublas(dev)
    meter = Meter(dev)
    gpt = make_gpt(shape["layers"], shape["hidden"], shape["heads"], shape["seq"], shape["vocab"])  # on the CPU
    stats = CommStats(groups["tp"])
    chunks = make_chunks(gpt, plan_, pp_r, stats, dev)
    del gpt
    mine = slice(dp_r * rows, (dp_r + 1) * rows)
    runner = PipelineRank(chunks, plan_.pp * plan_.chunks, x[mine].chunk(m), y[mine].chunk(m), groups["pp"],
                          activation_shape=(plan_.microbatch, shape["seq"], shape["hidden"]),
                          loss=loss_for(stats, stats.rank * (shape["vocab"] // plan_.tp)))
    actions = make_schedule(plan_.schedule, plan_.pp, m, plan_.chunks)[pp_r]
    params = [p for c in sorted(chunks) for p in chunks[c].parameters()]
    opt = DataParallelAdam(params, plan_.zero, groups["dp"], 1e-2)
    for _ in range(steps):
        for p in params:
            p.grad = None
        runner.run(actions)
        opt.step()
    peak = meter.peak()
    del runner
    gc.collect()
    counted = opt.memory()
    return {"steady": meter.now(), "peak": peak, "counted": sum(counted.values()), "pp_rank": pp_r,
            "microbatches": m, "batch": batch, "workspaces": workspaces}


def child_memory_3d(mode, gpus, size):
    from simlab.sim.hybrid import Plan
    from simlab.sim.hybrid_memory import FIRST, LAST, MIDDLE, activations, knobs, model_states
    from simlab.sim.hybrid_traffic import rank_states
    from simlab.sim.model import Transformer
    checks = checks_of(mode, gpus, "memory-3d")
    shape = GPT3D[size]
    plan_ = Plan(**PLAN3D)
    world = plan_.dp * plan_.pp * plan_.tp
    spec = Transformer("gpt-3d", shape["layers"], shape["hidden"], shape["heads"], seq=shape["seq"],
                       vocab=shape["vocab"], tied=False, dropout=False)
    if mode != "cpu":
        torch.cuda.set_device(0)
    for (check, how), rank in zip(checks, (0, world - 1)):
        try:
            with fake_group(rank, world):
                got = memory_3d(rank, world, shape, PLAN3D)
            model = sum(rank_states(spec, plan_, got["pp_rank"]).values())
            stage = FIRST if got["pp_rank"] == 0 else LAST if got["pp_rank"] == plan_.pp - 1 else MIDDLE
            k = knobs(plan_, spec)
            states = model_states(spec, k, "fp32", stage)
            whole = float(states["params"] + states["grads"] + states["optimizer"]
                          + activations(spec, k, got["microbatches"], "fp32", stage)["activations"])
            extra = ("" if got["peak"] is None
                     else f"; peak/model {got['peak'] / whole:.2f}× ({mb(whole)} with activations)")
            yield memory_verdict(check, how, got, model, extra)
        except Exception as err:
            yield row(check, how, result=one_line(err))
