"""`make gpu-check`: every engine's CUDA device plumbing, CUDA memory per rank against the memory model, and one
real training step timed against the time model — on one GPU (the machine we can borrow) or one GPU per rank.

    python tools/gpu_check.py                 # on this machine's GPUs; exits 2 in one line if it has none
    python tools/gpu_check.py --device cpu    # the same plan on the CPU with tiny sizes: a dry run of the logic
    python tools/gpu_check.py --plan          # print the plan for this machine, run nothing
    python tools/gpu_check.py --only timing,memory   # only the checks (or groups) whose names start so
    python tools/gpu_check.py --backend gloo --world-size 2   # every lesson's parity on one backend, in this
                                                              # process, as before the plan (CI runs this)

One command, nothing to install: torch, numpy and the repository (put on sys.path here; run it from anywhere).
It never imports simlab.render (ipywidgets), pytest or matplotlib. Budget: 450 s in all (--budget); each group
of checks runs in its own subprocess with its own timeout, so a check that raises, crashes or hangs is one ✗ row
and the others still run. The markdown table is printed and written to $OUT/gpu_check.md when $OUT is set (the
borrowed machine copies $OUT back), else to benchmarks/gpu_check.md; --out overrides (a CPU dry run writes only
where --out says). Exit status: 0 every check passed, 1 one failed, 2 no GPU here — a target that verified
nothing must not pass; `--device cpu` is the dry run for such a machine.

On ONE GPU (what this script was reshaped for: 1 GPU, ~15 minutes, no network), several ranks share cuda:0:

| check                             | backend | ranks       | compared                                           |
|-----------------------------------|---------|-------------|----------------------------------------------------|
| timing: one train step            | none    | 1 process   | median CUDA-event step vs time model (info)        |
| memory: one train step (peak)     | none    | 1 process   | max_memory_allocated vs advisor's bytes/GPU (info) |
| memory: zero1/zero2/zero3/offload | fake    | 0 of 4      | held vs lesson 3's per_gpu_bytes (5 %); peak       |
| memory: 3-d first stage           | fake    | 0 of 8      | 2·2·2, ZeRO-1: held vs rank_states (5 %); peak     |
| memory: 3-d last stage            | fake    | 7 of 8      | the same on the last stage (the output layer's)    |
| launch: gloo on cuda              | gloo    | 2 on cuda:0 | device(); all_reduce, broadcast, all_gather exact  |
| collectives: ring-all-reduce      | nccl    | 1           | ours vs exact sums vs torch's (a ring of one)      |
| data parallel: ddp                | gloo    | 2 on cuda:0 | BucketedDDP vs 1 process vs torch's DDP            |
| zero: zero1/zero2/zero3/offload   | nccl    | 1           | ZeroAdam vs 1 process vs torch's (ZeRO-1, FSDP2)   |
| pipeline: interleaved             | nccl    | 1, 2 chunks | vs 1 process vs torch.distributed.pipelining       |
| tensor parallel: mlp/attention    | gloo    | 2 on cuda:0 | vs the unsplit block vs torch's DTensor TP         |
| 3-d: dp·pp·tp = 1·1·2             | gloo    | 2 on cuda:0 | run_hybrid vs 1 process                            |
| nccl: 2 ranks on one gpu          | nccl    | 2 on cuda:0 | info: NCCL should refuse (Duplicate GPU)           |

Every parity row also counts the tensors simlab handed to torch.distributed's collectives and the devices they
were on: a gloo rank that silently computed on the CPU is a ✗. Why this split:
- NCCL refuses two ranks on one GPU, so several ranks can share the GPU only under gloo. gloo takes CUDA tensors
  in its collectives (all_reduce, broadcast, all_gather, gather, scatter, all_to_all: it stages them through
  pinned host memory) but not in send/recv, which hand the raw device pointer to its TCP transport. So the
  engines that talk only through collectives (DDP with torch's all-reduce, TP, 3-D with TP alone) run gloo with
  2 ranks on cuda:0 ($SIMLAB_DEVICE=cuda, `simlab.exec.launch.device`), and the engines whose algorithm is
  point-to-point (our ring collectives, the pipeline, ZeRO — on gloo its collectives are our ring) run NCCL with
  one rank: their tensors, models, optimizer state and offload copies are still on the GPU and still checked.
- Memory needs no second GPU: what a rank allocates depends on the shapes it holds, not on the values it
  receives. One process joins torch's fake process group (torch.testing._internal.distributed.fake_pg: every
  collective is a no-op) as rank r of N and trains: its caching allocator sees exactly what rank r of N holds.
  The values are garbage there, so those rows compare memory only (the parity rows compare values).
- Timing: a GPT of 1.1 B parameters (20 layers, h 2048, 16 heads, s 2048, V 50304, tied) trained in bf16
  autocast with SDPA attention and fused AdamW; 8 sequences per step on a ≥ 100 GiB GPU, 4 on ≥ 60 GiB, else 2
  (and 8 layers under 30 GiB). Three steps of warm-up, five timed with CUDA events; the prediction is
  `simlab.sim.advisor.evaluate_plan` (the hybrid time model) for tp = pp = dp = 1, 16-bit mixed precision and
  flash attention, on the preset named after the GPU (h200, h100-80gb, a100-80gb …; $SIMLAB_GPU_PRESET picks
  another). The ratio measured / model is reported as it is: nothing is fitted to it.
With one GPU per rank (≥ 2 GPUs) the parity rows run as they always did: NCCL on min(GPUs, 4) ranks, one GPU
each (DDP with our ring, the pipeline 1F1B), ZeRO's memory on real NCCL ranks; 3-D memory and timing as above.
CUDA_VISIBLE_DEVICES=0 runs the one-GPU plan on such a machine. On the CPU (--device cpu) the plan is the one-GPU
plan with gloo for nccl, the CPU for cuda:0, tiny sizes, and the engines' own byte counts for CUDA's.

torch: the floor is 2.6 (pyproject). The engines pass group_src/group_dst to torch.distributed, which torch 2.6
added: below that the parity rows fail on it, and the header says so. This script uses nothing newer (SDPA,
autocast, CUDA events and the allocator's counters are older) and guards what a build may lack: the fake process
group (a ✗ row naming it), fused AdamW (falls back to the default one).
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import gc
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `python tools/gpu_check.py` from anywhere: the repository is the package's home
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402 — after sys.path gains the repository
import torch.distributed as dist  # noqa: E402 — after sys.path gains the repository

FLOOR, GROUP_API = (2, 6), (2, 6)  # pyproject's torch floor: group_src/group_dst arrived in 2.6
BUDGET = 450.0  # seconds for everything: under 8 minutes with the parent's own start
MARK = "@@gpu-check@@ "  # a child's result lines on stdout start with this
TOL = {"cpu": 1e-5, "cuda": 1e-4}  # fp32 on a GPU sums in another order than the CPU reference; a bug is O(0.1)
MEMORY_TOL = 0.05
ZERO = {"zero1": (1, False), "zero2": (2, False), "zero3": (3, False), "offload": (2, True)}
MLP_SIZES = {"full": (1024,) * 9, "tiny": (64,) * 5}  # full: 8 Linear layers of 1,049,600 parameters (33.6 MB fp32)
GPT3D = {"full": dict(layers=4, hidden=1024, heads=8, seq=128, vocab=4096),
         "tiny": dict(layers=4, hidden=32, heads=4, seq=8, vocab=64)}
PLAN3D = dict(dp=2, pp=2, tp=2, microbatch=2, zero=1, attention="eager", overlap="none")
GPT_STEP = {"full": dict(layers=20, hidden=2048, heads=16, seq=2048, vocab=50304),
            "tiny": dict(layers=2, hidden=64, heads=4, seq=32, vocab=256)}
WARMUP, TIMED = {"full": 3, "tiny": 1}, {"full": 5, "tiny": 2}
COLUMNS = ("check", "run as", "measured", "expected", "result", "ok")
PASS, FAIL, INFO = "✓", "✗", "info"


# ---------------------------------------------------------------- the plan: which check runs how, per machine

def mode_of(device: str, gpus: int) -> str:
    """"cpu" (the dry run), "one-gpu" (ranks share cuda:0) or "gpu-per-rank" (NCCL, one GPU each)."""
    return "cpu" if device == "cpu" else "one-gpu" if gpus < 2 else "gpu-per-rank"


class Layout(NamedTuple):
    backend: str
    ranks: int
    shared: bool  # gloo ranks computing on the GPU ($SIMLAB_DEVICE=cuda)


def layouts(mode: str, gpus: int) -> dict:
    """How the engines run: "p2p" the point-to-point ones (ring collectives, pipeline, ZeRO), "collective" the
    ones that only call gloo's CUDA-capable collectives (DDP with torch's all-reduce, TP, 3-D with TP alone)."""
    if mode == "gpu-per-rank":
        n = min(gpus, 4)
        return {"p2p": Layout("nccl", n, False), "collective": Layout("nccl", n, False)}
    if mode == "one-gpu":
        return {"p2p": Layout("nccl", 1, False), "collective": Layout("gloo", 2, True)}
    return {"p2p": Layout("gloo", 1, False), "collective": Layout("gloo", 2, False)}


def run_as(mode: str, lay: Layout) -> str:
    if mode == "cpu":
        return f"{lay.backend}, {lay.ranks} rank{'s' * (lay.ranks > 1)} on cpu"
    if lay.shared:
        return f"gloo, {lay.ranks} ranks sharing cuda:0"
    return "nccl, 1 rank on cuda:0" if lay.ranks == 1 else f"nccl, {lay.ranks} ranks, one GPU each"


class Group(NamedTuple):
    name: str  # what --child runs
    timeout: float
    checks: tuple  # ((check name, run as), …): the rows it reports


def hybrid_layout(mode: str, gpus: int) -> tuple:
    """(dp, pp, tp) of the 3-D parity run: TP alone on shared ranks; on 4+ GPUs a pipeline too."""
    lay = layouts(mode, gpus)["collective"]
    return (1, 2, 2) if lay.backend == "nccl" and lay.ranks >= 4 else (1, 1, 2)


def plan(mode: str, gpus: int = 1) -> list:
    """Every group of checks for this machine, in the order they run (the headline, timing, first)."""
    where = "cpu" if mode == "cpu" else "cuda:0"
    lay = layouts(mode, gpus)
    p2p, coll = run_as(mode, lay["p2p"]), run_as(mode, lay["collective"])
    zero_mem = (run_as(mode, lay["p2p"]) if mode == "gpu-per-rank" else f"fake group, rank 0 of 4 on {where}")
    pipeline = "pipeline: 1f1b" if lay["p2p"].ranks > 1 else "pipeline: interleaved"
    dp, pp, tp = hybrid_layout(mode, gpus)
    step = "1 process on cuda:0, bf16 autocast, SDPA" if mode != "cpu" else "1 process on cpu, fp32"
    groups = [
        Group("timing", 240, (("timing: one train step", step), ("memory: one train step (peak)", step))),
        Group("memory-zero", 120, tuple((f"memory: {name}", zero_mem) for name in ZERO)),
        Group("memory-3d", 120, (("memory: 3-d first stage", f"fake group, rank 0 of 8 on {where}"),
                                 ("memory: 3-d last stage", f"fake group, rank 7 of 8 on {where}"))),
        Group("launch", 60, (("launch: gloo on cuda" if lay["collective"].shared else "launch: device plumbing",
                              coll),)),
        Group("collectives", 90, (("collectives: ring-all-reduce", p2p),)),
        Group("data-parallel", 90, (("data parallel: ddp", coll),)),
        Group("zero", 180, tuple((f"zero: {name}", p2p) for name in ZERO)),
        Group("pipeline", 90, ((pipeline, p2p),)),
        Group("tensor-parallel", 120, (("tensor parallel: mlp", coll), ("tensor parallel: attention", coll))),
        Group("3-d", 120, ((f"3-d: dp·pp·tp = {dp}·{pp}·{tp}", coll),)),
    ]
    if mode == "one-gpu":
        groups.append(Group("nccl-shared", 50, (("nccl: 2 ranks on one gpu", "nccl, 2 ranks on cuda:0"),)))
    return groups


def select(groups: list, only: str | None) -> list:
    """The groups (and within them the checks) whose group name or check name starts with one of `only`'s
    comma-separated prefixes; every group when `only` is None. "_hang" (a test's) is reachable only by name."""
    if not only:
        return groups
    wanted = [w.strip() for w in only.split(",") if w.strip()]
    out = [Group("_hang", 3, (("selftest: hang", "sleeps past its timeout"),))] if "_hang" in wanted else []
    for g in groups:
        if any(g.name.startswith(w) for w in wanted):
            out.append(g)
        else:
            picked = tuple(c for c in g.checks if any(c[0].startswith(w) for w in wanted))
            if picked:
                out.append(g._replace(checks=picked))
    return out


def gpu_preset(name: str, memory: float) -> str | None:
    """The `simlab.sim.gpus` preset for a device name as CUDA reports it ("NVIDIA H200", "NVIDIA A100-SXM4-80GB"
    …), `memory` in bytes telling the variants apart; None when no preset describes it."""
    n, gib = name.lower(), memory / 2**30
    if "h200" in n:
        return "h200"
    if "h100" in n:
        return "h100-96gb-hbm2e" if gib > 88 else "h100-80gb"
    if "a100" in n:
        return "a100-80gb" if gib > 48 else "a100-40gb"
    if "b200" in n:
        return "b200"
    if "4090" in n:
        return "rtx-4090"
    return None


# ---------------------------------------------------------------- rows and the table

def row(check, how, measured="", expected="", result="", ok=FAIL) -> dict:
    return dict(zip(COLUMNS, (check, how, measured, expected, result, ok)))


def one_line(err) -> str:
    text = f"{type(err).__name__}: {err}" if isinstance(err, BaseException) else str(err)
    lines = [x.strip() for x in text.strip().splitlines() if x.strip()]
    dup = [x for x in lines if "Duplicate GPU" in x]  # NCCL's reason sits lines below its error code
    line = " ".join((dup or lines or ["?"])[0].split()).replace("|", "/")
    return line if len(line) <= 180 else line[:177] + "…"


def table(rows: list) -> str:
    cells = [list(COLUMNS)] + [[str(r.get(k, "")).replace("|", "/") for k in COLUMNS] for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(COLUMNS))]
    lines = ["| " + " | ".join(v.ljust(w) for v, w in zip(c, widths)) + " |" for c in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def mb(nbytes) -> str:
    return "n/a" if nbytes is None else f"{nbytes / 1e6:,.2f} MB"


# ---------------------------------------------------------------- inside a child: what it measures with

class Meter:
    """CUDA bytes this process allocated since it was made (`now`) and at most (`peak`); None on the CPU."""

    def __init__(self, dev: torch.device):
        self.cuda = dev.type == "cuda"
        if self.cuda:
            torch.cuda.synchronize()
            self.base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()

    def now(self):
        if not self.cuda:
            return None
        torch.cuda.synchronize()
        return torch.cuda.memory_allocated() - self.base

    def peak(self):
        if not self.cuda:
            return None
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - self.base


# Collectives only: torch checks send/recv by identity (`P2POp` wants `isend is torch.distributed.isend`), and
# they run on NCCL here, which takes no CPU tensor anyway.
LOGGED = ("all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor",
          "reduce", "gather", "scatter", "all_to_all_single", "all_gather_single", "reduce_scatter_single")
LOG_ENV = "SIMLAB_GPU_CHECK_LOG"


def log_devices(folder: str) -> None:
    """Wrap torch.distributed's collectives so that each call *from simlab's code* appends the device type of
    its first tensor to `folder`/<pid>.log (forked ranks inherit the wrappers). Call before importing simlab:
    zero_shards binds its collectives at import."""
    os.environ[LOG_ENV] = folder

    def wrap(fn):
        @functools.wraps(fn)
        def logged(*args, **kwargs):
            caller = sys._getframe(1).f_globals.get("__name__", "")
            if caller.startswith("simlab.") and args:
                first = args[0][0] if isinstance(args[0], (list, tuple)) and args[0] else args[0]
                if isinstance(first, torch.Tensor):
                    with open(os.path.join(folder, f"{os.getpid()}.log"), "a") as f:
                        f.write(first.device.type + "\n")
            return fn(*args, **kwargs)
        return logged
    for name in LOGGED:
        if callable(getattr(dist, name, None)):
            setattr(dist, name, wrap(getattr(dist, name)))


def logged_devices() -> dict:
    """{device type: tensors} simlab passed to torch.distributed since the last call (the log is emptied)."""
    folder, counts = os.environ.get(LOG_ENV), {}
    if not folder:
        return counts
    for path in Path(folder).glob("*.log"):
        for line in path.read_text().split():
            counts[line] = counts.get(line, 0) + 1
        path.unlink()
    return counts


@contextlib.contextmanager
def fake_group(rank: int, world_size: int):
    """This process as rank `rank` of `world_size` in torch's fake process group: every collective returns at
    once without moving data (torch.testing._internal.distributed.fake_pg, what torch's own tests use)."""
    try:
        from torch.testing._internal.distributed.fake_pg import FakeStore  # registers the "fake" backend
    except Exception as err:
        raise RuntimeError(f"this torch has no fake process group ({one_line(err)})") from None
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)
    try:
        yield
    finally:
        gc.collect()
        dist.destroy_process_group()


# ---------------------------------------------------------------- child: timing (and the step's memory)

def gpt_model(layers, hidden, heads, seq, vocab, dev):
    """A GPT in the time model's shape (`Transformer(..., tied=True, dropout=False)`): learned positions, pre-LN
    blocks of fused QKV + causal SDPA and a GeLU MLP of 4h, biases everywhere, output tied to the embedding."""
    from torch import nn
    from torch.nn import functional as F

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(hidden, device=dev), nn.LayerNorm(hidden, device=dev)
            self.qkv, self.proj = nn.Linear(hidden, 3 * hidden, device=dev), nn.Linear(hidden, hidden, device=dev)
            self.fc1, self.fc2 = nn.Linear(hidden, 4 * hidden, device=dev), nn.Linear(4 * hidden, hidden, device=dev)

        def forward(self, x):  # (b, s, h)
            b, s, h = x.shape
            q, k, v = (t.reshape(b, s, heads, h // heads).transpose(1, 2)
                       for t in self.qkv(self.ln1(x)).split(h, dim=-1))  # (b, a, s, h/a) each
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, h)
            x = x + self.proj(o)
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, hidden, device=dev), nn.Embedding(seq, hidden, device=dev)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.ln_f = nn.LayerNorm(hidden, device=dev)

        def forward(self, tokens):  # (b, s) → logits (b, s, V)
            x = self.tok(tokens) + self.pos.weight[:tokens.shape[1]]
            for block in self.blocks:
                x = block(x)
            return F.linear(self.ln_f(x), self.tok.weight)

    return GPT()


def sequences_for(memory_bytes: float) -> int:
    """Sequences per step for the 1.1 B model: its states take ~18 GB, each sequence of 2048 tokens ~7 GB more."""
    gib = memory_bytes / 2**30
    return 8 if gib >= 100 else 4 if gib >= 60 else 2


def layers_for(memory_bytes: float) -> int:
    """20 layers (1.1 B parameters) where they fit with 2 sequences, 8 (0.5 B) on a GPU under 30 GiB."""
    return 20 if memory_bytes >= 30 * 2**30 else 8


def child_timing(mode, gpus, size):
    from torch.nn import functional as F

    from simlab.sim.advisor import evaluate_plan
    from simlab.sim.hardware import cluster
    from simlab.sim.hybrid import Plan
    from simlab.sim.model import Transformer
    checks = plan(mode, gpus)[0].checks
    cuda = mode != "cpu"
    dev = torch.device("cuda", 0) if cuda else torch.device("cpu")
    shape = GPT_STEP[size]
    if cuda:
        torch.cuda.set_device(0)
        props = torch.cuda.get_device_properties(0)
        name, memory = props.name, props.total_memory
        preset = os.environ.get("SIMLAB_GPU_PRESET") or gpu_preset(name, memory)
        batch = sequences_for(memory) if size == "full" else 2
        shape = shape | ({"layers": layers_for(memory)} if size == "full" else {})
    else:
        name, memory, preset, batch = "cpu", None, "cpu-this-machine", 2
    spec = Transformer("gpt-step", shape["layers"], shape["hidden"], shape["heads"], seq=shape["seq"],
                       vocab=shape["vocab"], tied=True, dropout=False)
    size_text = f"{spec.params / 1e9:.2f} B" if spec.params >= 1e8 else f"{spec.params / 1e6:.2f} M"
    how = f"{checks[0][1]}; GPT {size_text} parameters, {batch} × {spec.seq} tokens"
    torch.manual_seed(0)
    model = gpt_model(**shape, dev=dev)
    try:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cuda)  # fused: torch ≥ 2.0 on CUDA
    except (TypeError, RuntimeError):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, spec.vocab, (batch, spec.seq + 1), generator=gen).to(dev)
    x, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    autocast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if cuda else contextlib.nullcontext

    def train_step():
        opt.zero_grad(set_to_none=True)
        with autocast():
            loss = F.cross_entropy(model(x).reshape(-1, spec.vocab), y.reshape(-1))
        loss.backward()
        opt.step()
        return loss

    meter = Meter(dev)
    for _ in range(WARMUP[size]):
        loss = train_step()
    seconds = []
    for _ in range(TIMED[size]):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            loss = train_step()
            end.record()
            end.synchronize()
            seconds.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            loss = train_step()
            seconds.append(time.perf_counter() - t0)
    measured = statistics.median(seconds)
    peak = None if meter.peak() is None else meter.peak() + meter.base  # the whole process: model included
    finite = bool(torch.isfinite(loss.detach()).item())
    flops = spec.model_flops(batch)
    if preset is None:
        note = f"no preset in simlab.sim.gpus for {name!r}: measured only (set SIMLAB_GPU_PRESET=<name>)"
        yield row(checks[0][0], how, f"{measured * 1e3:.1f} ms/step", "n/a", note, INFO if finite else FAIL)
        yield row(checks[1][0], how, mb(peak), "n/a", note, INFO)
        return
    gpu = cluster(preset, gpus=1)
    plan_ = Plan(tp=1, pp=1, dp=1, microbatch=batch, precision="mixed" if cuda else "fp32",
                 attention="flash" if cuda else "eager", overlap="none")
    model_ = evaluate_plan(spec, gpu, batch, plan_)
    peak_flops = gpu.gpu.peak_flops
    mfu = lambda s: f"MFU {100 * flops / (s * peak_flops):.0f} %"  # noqa: E731 — a one-line local helper
    spread = f"{min(seconds) * 1e3:.1f}–{max(seconds) * 1e3:.1f}"
    yield row(checks[0][0], how, f"{measured * 1e3:.1f} ms/step (median of {len(seconds)}: {spread}; {mfu(measured)})",
              f"{model_['step_seconds'] * 1e3:.1f} ms ({preset}; {mfu(model_['step_seconds'])})",
              f"measured/model {measured / model_['step_seconds']:.2f}×" + ("" if finite else "; loss not finite"),
              INFO if finite else FAIL)
    predicted = model_["bytes_per_gpu"]["total"]
    yield row(checks[1][0], how, f"peak {mb(peak)}" if peak is not None else "n/a on cpu",
              f"{mb(predicted)} (states {mb(predicted - model_['bytes_per_gpu']['activations'])})",
              "n/a" if peak is None else f"measured/model {peak / predicted:.2f}×", INFO)


# ---------------------------------------------------------------- child: memory against the model

def zero_memory(rank, world_size, stage, offload, sizes):
    """Bytes this rank holds after two ZeroAdam steps (the data excluded): allocator and engine's own count."""
    from simlab.exec.launch import device
    from simlab.exec.models import make_batch, make_mlp, shard, train_steps
    from simlab.exec.zero import ZeroAdam
    dev = device()
    x, y = (t.to(dev) for t in shard(make_batch(8 * world_size, sizes[0], sizes[-1]), rank, world_size))
    meter = Meter(dev)
    model = make_mlp(sizes).to(dev)
    opt = ZeroAdam(model, stage, lr=1e-3, offload=offload)
    train_steps(model, opt, x, y, 2)
    steady, peak, counted = meter.now(), meter.peak(), opt.memory()
    opt.close()
    return {"steady": steady, "peak": peak, "counted": counted["params"] + counted["grads"] + counted["optimizer"]}


def memory_verdict(check, how, got: dict, model: float, extra="") -> dict:
    """One memory row: the allocator's bytes held after the step (the engine's own count on the CPU) vs `model`."""
    measured = got["steady"] if got["steady"] is not None else got["counted"]
    error = (measured - model) / model
    what = "held" if got["steady"] is not None else "counted (cpu)"
    peak = "" if got["peak"] is None else f", peak {mb(got['peak'])}"
    return row(check, how, f"{what} {mb(measured)}{peak}", f"model {mb(model)} (±{MEMORY_TOL:.0%})",
               f"{100 * error:+.2f} %{extra}", PASS if abs(error) <= MEMORY_TOL else FAIL)


def child_memory_zero(mode, gpus, size):
    from simlab.exec.launch import launch
    from simlab.sim.memory import per_gpu_bytes
    checks = dict(next(g for g in plan(mode, gpus) if g.name == "memory-zero").checks)
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
            model = per_gpu_bytes(layers, n, stage, offload=offload, precision="fp32")["total"]
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
            "microbatches": m, "batch": batch}


def child_memory_3d(mode, gpus, size):
    from simlab.sim.hybrid import Plan
    from simlab.sim.hybrid_memory import FIRST, LAST, MIDDLE, activations, knobs, model_states
    from simlab.sim.hybrid_traffic import rank_states
    from simlab.sim.model import Transformer
    checks = next(g for g in plan(mode, gpus) if g.name == "memory-3d").checks
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


# ---------------------------------------------------------------- child: parity (values, devices)

def parity(check, how, run, tol, expect, torch_twin=True) -> dict:
    """Run `run(compare_torch)`; if it raises with torch's twin on, once more without it (the twin failing on
    this backend is reported, not blamed on our engine). ✓: within `tol` of one process (and of torch), and
    every tensor simlab handed to a torch.distributed collective on the `expect`ed device type."""
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
    ok = ref <= tol and (theirs is None or theirs <= tol) and not wrong
    vs_torch = "n/a" if theirs is None else f"{theirs:.1e}"
    return row(check, how, f"vs 1 process {ref:.1e}, vs torch {vs_torch}; tensors in collectives: {sent}",
               f"≤ {tol:.0e}, tensors on {expect}", f"backend {res['backend']}, {res['world_size']} rank(s){note}",
               PASS if ok else FAIL)


def _parity_setup(mode, gpus, group_name):
    lay = layouts(mode, gpus)
    checks = dict(next(g for g in plan(mode, gpus) if g.name == group_name).checks)
    tol, expect = TOL["cpu" if mode == "cpu" else "cuda"], "cpu" if mode == "cpu" else "cuda"
    return lay, checks, tol, expect


def probe_launch(rank, world_size):
    """One rank: where device() puts it, and gloo's (or NCCL's) CUDA-capable collectives on its tensors."""
    from simlab.exec.launch import device
    dev = device()
    x = torch.full((4,), float(rank + 1), device=dev)
    dist.all_reduce(x)
    b = torch.full((4,), float(rank), device=dev)
    dist.broadcast(b, src=0)
    parts = [torch.empty(2, device=dev) for _ in range(world_size)]
    dist.all_gather(parts, torch.full((2,), float(rank), device=dev))
    return {"device": str(dev), "backend": dist.get_backend(), "all_reduce": x.cpu().tolist(),
            "broadcast": b.cpu().tolist(), "all_gather": torch.cat(parts).cpu().tolist()}


def child_launch(mode, gpus, size):
    from simlab.exec.launch import launch
    lay = layouts(mode, gpus)["collective"]
    (check, how), = next(g for g in plan(mode, gpus) if g.name == "launch").checks
    try:
        ranks = launch(probe_launch, lay.ranks, backend=lay.backend, timeout=40)  # < the group's 60 s: its reason
        n = lay.ranks
        want_dev = ["cpu"] * n if mode == "cpu" else ["cuda:0"] * n if lay.shared else [f"cuda:{r}" for r in range(n)]
        good = ([r["device"] for r in ranks] == want_dev
                and all(r["all_reduce"] == [n * (n + 1) / 2] * 4 and r["broadcast"] == [0.0] * 4
                        and r["all_gather"] == [float(q) for q in range(n) for _ in range(2)] for r in ranks))
        yield row(check, how, f"devices {', '.join(r['device'] for r in ranks)}; backend {ranks[0]['backend']}",
                  f"devices {', '.join(want_dev)}; exact sums", "all_reduce, broadcast, all_gather exact" if good
                  else f"got {ranks}", PASS if good else FAIL)
    except Exception as err:
        yield row(check, how, result=one_line(err))


def child_collectives(mode, gpus, size):
    from simlab.parity.collectives import run_collective
    lay, checks, tol, expect = _parity_setup(mode, gpus, "collectives")
    p = lay["p2p"]
    check = "collectives: ring-all-reduce"
    numel = (1 << 20) if size == "full" else 4096
    yield parity(check, checks[check], lambda twin: run_collective("ring-all-reduce", p.ranks, numel,
                                                                   backend=p.backend), tol, expect, torch_twin=False)


def child_data_parallel(mode, gpus, size):
    from simlab.parity.data_parallel import run_ddp
    lay, checks, tol, expect = _parity_setup(mode, gpus, "data-parallel")
    c = lay["collective"]
    allreduce = "ring" if c.backend == "nccl" else "torch"  # gloo has no CUDA send/recv: torch's all-reduce
    check = "data parallel: ddp"
    yield parity(check, checks[check] + f", all-reduce: {allreduce}",
                 lambda twin: run_ddp(c.ranks, steps=3, global_batch=8 * c.ranks, allreduce=allreduce,
                                      compare_torch=twin, backend=c.backend), tol, expect)


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
        run = lambda twin: run_pipeline("interleaved", 1, 2, chunks=2, global_batch=8, steps=2,  # noqa: E731 — a one-line local helper
                                        compare_torch=twin, backend=p.backend)
    else:
        run = lambda twin: run_pipeline("1f1b", p.ranks, 2 * p.ranks, global_batch=8 * p.ranks, steps=2,  # noqa: E731 — a one-line local helper
                                        compare_torch=twin, backend=p.backend)
    yield parity(check, how, run, tol, expect)


def child_tensor_parallel(mode, gpus, size):
    from simlab.parity.tensor_parallel import run_tp
    lay, checks, tol, expect = _parity_setup(mode, gpus, "tensor-parallel")
    c = lay["collective"]
    n = c.ranks
    yield parity("tensor parallel: mlp", checks["tensor parallel: mlp"], lambda twin: run_tp(
        n, "mlp", ffn=16 * n, heads=4 * n, compare_torch=twin, backend=c.backend), tol, expect)
    yield parity("tensor parallel: attention", checks["tensor parallel: attention"], lambda twin: run_tp(
        n, "attention", hidden=8 * n, heads=4 * n, compare_torch=twin, backend=c.backend), tol, expect)


def child_3d(mode, gpus, size):
    from simlab.parity.hybrid import run_hybrid
    lay, checks, tol, expect = _parity_setup(mode, gpus, "3-d")
    c = lay["collective"]
    dp, pp, tp = hybrid_layout(mode, gpus)
    (check, how), = checks.items()
    yield parity(check, how, lambda twin: run_hybrid(dp=dp, pp=pp, tp=tp, backend=c.backend), tol, expect,
                 torch_twin=False)


def _nccl_rank(rank, port, queue):
    try:
        torch.cuda.set_device(0)
        dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                                timeout=datetime.timedelta(seconds=30))
        x = torch.ones(1, device="cuda")
        dist.all_reduce(x)
        torch.cuda.synchronize()
        queue.put((rank, "ran", x.item()))
        dist.destroy_process_group()
    except Exception as err:
        queue.put((rank, "refused", f"{type(err).__name__}: {err}"))


def child_nccl_shared(mode, gpus, size):
    """Two NCCL ranks on cuda:0: NCCL is expected to refuse ("Duplicate GPU detected"); info, not a test."""
    import multiprocessing as mp
    (check, how), = next(g for g in plan(mode, gpus) if g.name == "nccl-shared").checks
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("fork")  # this process has not touched CUDA: the ranks initialise it themselves
    queue = ctx.Queue()
    procs = [ctx.Process(target=_nccl_rank, args=(r, port, queue), daemon=True) for r in range(2)]
    for p in procs:
        p.start()
    answers, deadline = {}, time.monotonic() + 35
    while len(answers) < 2 and time.monotonic() < deadline:
        try:
            r, what, detail = queue.get(timeout=1)
            answers[r] = (what, detail)
        except Exception:
            if not any(p.is_alive() for p in procs) and queue.empty():
                break
    for p in procs:
        if p.is_alive():
            p.kill()
        p.join(5)
    if not answers:
        yield row(check, how, "no answer in 35 s", "refused", "hung or died without a word", INFO)
        return
    what = "refused" if any(a[0] == "refused" for a in answers.values()) else "ran"
    detail = next((a[1] for a in answers.values() if a[0] == what), "")
    yield row(check, how, what, "refused (Duplicate GPU detected)",
              one_line(detail) if what == "refused" else f"all_reduce = {detail}: this NCCL lets ranks share a GPU",
              INFO)


def child_env(mode, gpus, size):
    info = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
            "gpus": torch.cuda.device_count()}
    if mode != "cpu":
        props = torch.cuda.get_device_properties(0)
        info |= {"name": props.name, "memory": props.total_memory, "capability": f"sm_{props.major}{props.minor}"}
        with contextlib.suppress(Exception):
            version = torch.cuda.nccl.version()  # a tuple since torch 1.x's last releases, an int before
            info["nccl"] = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
    yield {"env": info}


def child_hang(mode, gpus, size):
    time.sleep(3600)
    yield row("selftest: hang", "")


CHILDREN = {"env": child_env, "timing": child_timing, "memory-zero": child_memory_zero, "memory-3d": child_memory_3d,
            "launch": child_launch, "collectives": child_collectives, "data-parallel": child_data_parallel,
            "zero": child_zero, "pipeline": child_pipeline, "tensor-parallel": child_tensor_parallel, "3-d": child_3d,
            "nccl-shared": child_nccl_shared, "_hang": child_hang}
LAUNCHES = ("launch", "collectives", "data-parallel", "zero", "pipeline", "tensor-parallel", "3-d", "memory-zero")


def import_all() -> None:
    """Every module a child imports (tests check that none of them pulls in a widget or a test library)."""
    from torch.testing._internal.distributed import fake_pg  # noqa: F401 — imported only to see what it pulls in

    import simlab.exec.hybrid  # noqa: F401 — imported only to see what it pulls in
    import simlab.exec.launch  # noqa: F401 — imported only to see what it pulls in
    import simlab.parity.collectives  # noqa: F401 — imported only to see what it pulls in
    import simlab.parity.data_parallel  # noqa: F401 — imported only to see what it pulls in
    import simlab.parity.hybrid  # noqa: F401 — imported only to see what it pulls in
    import simlab.parity.pipeline  # noqa: F401 — imported only to see what it pulls in
    import simlab.parity.tensor_parallel  # noqa: F401 — imported only to see what it pulls in
    import simlab.parity.zero  # noqa: F401 — imported only to see what it pulls in
    import simlab.sim.advisor  # noqa: F401 — imported only to see what it pulls in
    import simlab.sim.hybrid_memory  # noqa: F401 — imported only to see what it pulls in


def run_child(group: str, mode: str, gpus: int, size: str) -> int:
    """Inside the subprocess: print one MARK line per row as each check finishes."""
    # On a GPU machine every rank computes on a GPU: NCCL's always did; this puts gloo's ranks (2 sharing cuda:0)
    # and the fake group's one rank there too (`simlab.exec.launch.device`). The dry run stays on the CPU.
    os.environ["SIMLAB_DEVICE"] = "cpu" if mode == "cpu" else "cuda"
    logs = None
    if group in LAUNCHES:
        logs = tempfile.mkdtemp(prefix="gpu-check-log-")
        log_devices(logs)
    try:
        for out in CHILDREN[group](mode, gpus, size):
            print(MARK + json.dumps(out), flush=True)
    finally:
        if logs:
            for path in Path(logs).glob("*"):
                path.unlink()
            os.rmdir(logs)
    return 0


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


# ---------------------------------------------------------------- the parent: run each group, keep to the budget

def spawn(group: Group, mode: str, gpus: int, size: str, timeout: float) -> tuple:
    """Run one group's child; returns (rows or env dicts it printed, error line or None)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", group.name, "--mode", mode, "--gpus", str(gpus),
           "--size", size]
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=ROOT, start_new_session=True)
        try:
            proc.wait(timeout=timeout)
            problem = None if proc.returncode == 0 else f"exit status {proc.returncode}"
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # its ranks die with it (PR_SET_PDEATHSIG)
            proc.wait()
            problem = f"timed out after {timeout:.0f} s"
        out.seek(0)
        err.seek(0)
        results = [json.loads(line[len(MARK):]) for line in out.read().splitlines() if line.startswith(MARK)]
        if problem:
            tail = [x for x in err.read().splitlines() if x.strip()]
            problem += f": {one_line(tail[-1])}" if tail and "timed out" not in problem else ""
        return results, problem


def header(env: dict, mode: str, gpus: int, budget: float, spent: float) -> list:
    what = {"cpu": "CPU dry run (tiny sizes; the engines' byte counts stand in for CUDA's)",
            "one-gpu": "one GPU: ranks share cuda:0 (gloo) or run alone (NCCL)",
            "gpu-per-rank": f"one GPU per rank: NCCL on {min(gpus, 4)} ranks"}[mode]
    gpu = (f"{env.get('name', '?')} ({env.get('memory', 0) / 2**30:.1f} GiB, {env.get('capability', '?')}), "
           f"{gpus} GPU(s)" if mode != "cpu" else "cpu")
    machine = (f"machine: {gpu}; torch {env.get('torch', torch.__version__)}, CUDA {env.get('cuda') or 'none'}, "
               f"NCCL {env.get('nccl', 'n/a')}, Python {env.get('python', platform.python_version())}; "
               f"{spent:.0f} s of a {budget:.0f} s budget")
    lines = [f"gpu-check {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}: {what}", machine]
    version = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2] if x.isdigit())
    if version < FLOOR:
        lines.append(f"torch {torch.__version__} is below the floor {'.'.join(map(str, FLOOR))} (pyproject)")
    if version < GROUP_API:
        lines.append(f"torch {torch.__version__}: the engines pass group_src/group_dst to torch.distributed "
                     f"(torch ≥ {'.'.join(map(str, GROUP_API))}); parity rows fail on that here")
    return lines


LEGEND = ("✓ within the stated tolerance; ✗ failed (or crashed / timed out: the reason is in the row); info: "
          "reported with no pass line (the time model's ratio is a measurement, not a test). Memory rows: "
          "bytes the rank holds after its step vs the memory model; peak = torch.cuda.max_memory_allocated.")


def output_path(arg: str | None, mode: str) -> Path | None:
    if arg:
        return Path(arg)
    if os.environ.get("OUT"):
        return Path(os.environ["OUT"]) / ("gpu_check.md" if mode != "cpu" else "gpu_check_cpu.md")
    return None if mode == "cpu" else ROOT / "benchmarks" / "gpu_check.md"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"],
                        help="auto: cuda when this machine has a GPU; cpu: the dry run")
    parser.add_argument("--only", help="comma-separated prefixes of check or group names")
    parser.add_argument("--budget", type=float, default=BUDGET, help="seconds for everything (default 450)")
    parser.add_argument("--size", choices=["full", "tiny"], help="default: full on a GPU, tiny on the CPU")
    parser.add_argument("--out", help="where the markdown table goes (default: $OUT/gpu_check.md, else "
                                      "benchmarks/gpu_check.md; a CPU run writes only where --out says)")
    parser.add_argument("--plan", action="store_true", help="print the plan for this machine and exit")
    parser.add_argument("--backend", choices=["nccl", "gloo"],
                        help="instead of the plan: every lesson's parity on this backend, in this process")
    parser.add_argument("--world-size", type=int, help="ranks for --backend (default: GPUs up to 4 for nccl, 2)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    parser.add_argument("--gpus", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return run_child(args.child, args.mode, args.gpus, args.size or "tiny")
    gpus = torch.cuda.device_count()  # asks NVML: this process never initialises CUDA
    if args.device != "cpu" and gpus == 0 and args.backend != "gloo":
        build = f"CUDA {torch.version.cuda} build" if torch.version.cuda else "a CPU-only build"
        print(f"gpu-check: no CUDA GPU on this machine (torch {torch.__version__}, {build}): nothing verified; "
              f"`python tools/gpu_check.py --device cpu` runs the same plan on the CPU")
        return 2
    if args.backend:
        n = args.world_size or (min(gpus, 4) if args.backend == "nccl" else 2)
        rows = legacy_rows(n, args.backend)
        print(f"gpu-check: every lesson's parity on {args.backend}, {n} rank(s), torch {torch.__version__}")
        print(table(rows))
        return 1 if any(r["ok"] == FAIL for r in rows) else 0
    mode = mode_of("cpu" if args.device == "cpu" else "cuda", gpus)
    size = args.size or ("tiny" if mode == "cpu" else "full")
    groups = select(plan(mode, gpus), args.only)
    if args.plan:
        print(table([row(c, how, ok="") for g in groups for c, how in g.checks]))
        return 0
    path = output_path(args.out, mode)
    print(f"gpu-check: {len(groups)} group(s), {sum(len(g.checks) for g in groups)} check(s), mode {mode}, "
          f"budget {args.budget:.0f} s; table → {path or 'stdout only'}", flush=True)
    start = time.monotonic()
    env_rows, problem = spawn(Group("env", 60, ()), mode, gpus, size, min(60.0, args.budget))
    env = env_rows[0]["env"] if env_rows else {}
    if problem:
        print(f"gpu-check: could not read the machine's description ({problem})", flush=True)
    rows = []
    for group in groups:
        left = args.budget - (time.monotonic() - start)
        if left < 5:
            got, problem = [], f"not run: the {args.budget:.0f} s budget was spent"
        else:
            got, problem = spawn(group, mode, gpus, size, min(group.timeout, left))
        wanted = dict(group.checks)
        got = [r for r in got if r.get("check") in wanted]
        done = {r["check"] for r in got}
        got += [row(c, how, result=problem or "the check printed no result") for c, how in group.checks
                if c not in done]
        for r in got:
            print(f"gpu-check: {r['ok']} {r['check']}: {r['result']}", flush=True)
        rows += got
    spent = time.monotonic() - start
    lines = header(env, mode, gpus, args.budget, spent)
    text = "\n".join(lines + ["", table(rows), "", LEGEND])
    print()
    print(text)
    if path:  # the table, and the same rows as JSON beside it for whoever reads them by machine
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n", encoding="utf-8")
        path.with_suffix(".json").write_text(json.dumps({"header": lines, "mode": mode, "env": env, "rows": rows},
                                                        indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"\ngpu-check: table written to {path} (rows as JSON: {path.with_suffix('.json').name})")
    return 1 if any(r["ok"] == FAIL for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
