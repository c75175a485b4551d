"""The plan: which group of checks runs how on this machine, and in what order.

On ONE GPU (what gpu-check was reshaped for: 1 GPU, ~15 minutes, no network), several ranks share cuda:0:

| check                             | backend | ranks       | compared                                           |
|-----------------------------------|---------|-------------|----------------------------------------------------|
| timing: one train step            | none    | 1 process   | median CUDA-event step vs time model (info)        |
| memory: one train step (peak)     | none    | 1 process   | peak requested bytes vs advisor's bytes/GPU (info) |
| loss: fp32 cross-entropy          | none    | 1 process   | that loss's bytes and time per logit (info)        |
| gemm: thin to square              | none    | 1 process   | single GEMMs vs gpus.gemm_seconds (info)           |
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
| llama 3 8b layers: eager/compiled | none    | 1 process   | 4 layers fwd + bwd vs layer_seconds (info)         |

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
  `simlab.sim.advisor.evaluate_plan` (the hybrid time model) for tp = pp = dp = 1, 16-bit mixed precision,
  flash attention and the fp32 loss autocast runs (cross_entropy is on its fp32 list), on the preset named
  after the GPU (h200, h100-80gb, a100-80gb …; $SIMLAB_GPU_PRESET picks another). The ratio measured / model
  is reported as it is: nothing is fitted to it. The allocator's reserved peak is reported beside the tensors'
  (the model allows 5 % fragmentation; torchtitan publishes reserved bytes), and the loss is then measured
  alone: its peak bytes and time per logit against the model's, and single GEMMs from square to a TP-8 shard
  of Llama 3 8B against the GEMM roofline (`simlab.sim.gpus.gemm_seconds`).
With one GPU per rank (≥ 2 GPUs) the parity rows run as they always did: NCCL on min(GPUs, 4) ranks, one GPU
each (DDP with our ring, the pipeline 1F1B), ZeRO's memory on real NCCL ranks; 3-D memory and timing as above.
CUDA_VISIBLE_DEVICES=0 runs the one-GPU plan on such a machine. On the CPU (--device cpu) the plan is the one-GPU
plan with gloo for nccl, the CPU for cuda:0, tiny sizes, and every tensor a rank can reach for CUDA's bytes.
"""
from __future__ import annotations

from typing import NamedTuple

ZERO = {"zero1": (1, False), "zero2": (2, False), "zero3": (3, False), "offload": (2, True)}


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
    bf16 = "bf16" if mode != "cpu" else "fp32"
    groups = [
        Group("timing", 240, (("timing: one train step", step), ("memory: one train step (peak)", step),
                              ("loss: fp32 cross-entropy", step), ("gemm: thin to square", step))),
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
    # last: its compilation takes the longest, and what the budget has left must not starve the checks above
    groups.append(Group("llama", 240, (("llama 3 8b layers: eager", f"1 process on {where}, {bf16}"),
                                       ("llama 3 8b layers: compiled", f"1 process on {where}, {bf16}, torch.compile"))))
    return groups


def checks_of(mode: str, gpus: int, group: str) -> tuple:
    """The ((check name, run as), …) of one group of this machine's plan."""
    return next(g for g in plan(mode, gpus) if g.name == group).checks


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
