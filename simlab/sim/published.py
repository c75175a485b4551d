"""The published numbers lesson 6's model is held to, and the model's prediction beside each.

Sources (quoted in full, with where to find them, in ARCHITECTURE.md's "Measured facts"):
- Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models" (arXiv 2205.05198):
  Table 3 (the runs), Figure 1 (memory; its values as the paper's formulas give them, which is also what
  Calculon's validation reads off), Table 4 (one 22B layer, ms), Table 5 (iteration seconds).
- Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM"
  (arXiv 2104.04473): Table 1 (teraFLOP/s per GPU, 1.7B to 1T on up to 3072 A100s).
- Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models" (arXiv
  1910.02054): Figure 1 (model states per GPU, Ψ = 7.5B, 64 GPUs, K = 12: 120 / 31.4 / 16.6 / 1.9 GB).
- `simlab.sim.published_runs.RUNS`: 26 training runs of 2021–2025 nobody fitted (A100 and H100; Megatron,
  DeepSpeed, FSDP, torchtitan, NeMo), each with its plan, throughput and stated assumptions (`validation`).
The papers' runs are on A100 80GB (DGX A100 nodes: 8 GPUs, NVLink, 8 × 200 Gb/s InfiniBand); every GPU
type has one set of constants (`simlab.sim.gpus`).

    >>> rows = korthikanti_table_5()
    >>> rows[0]["what"], rows[0]["published"]
    ('22B, full recompute', 1.42)
"""
from __future__ import annotations

from dataclasses import replace

from .advisor import fits
from .gpus import FRAGMENTATION
from .hardware import cluster
from .hybrid import Plan, check_plan
from .hybrid_memory import per_gpu
from .hybrid_time import step
from .memory import per_gpu_bytes
from .message import Message
from .model import NARAYANAN_SHAPES, PRESETS
from .published_runs import RUNS

GIB = 2**30
# Korthikanti Table 3 plans: model, plan, global batch, GPUs
OLD = dict(attention="eager", overlap="none")  # Megatron-LM 2021-22: fused softmax, no DP overlap with PP
KORTHIKANTI_RUNS = {"22B": ("megatron-22b", Plan(tp=8, microbatch=4, **OLD), 4, 8),
                    "175B": ("gpt3-175b", Plan(tp=8, pp=8, schedule="interleaved", chunks=3, **OLD), 64, 64),
                    "530B": ("megatron-530b", Plan(tp=8, pp=35, schedule="interleaved", chunks=3, **OLD), 280, 280),
                    "1T": ("megatron-1t", Plan(tp=8, pp=64, **OLD), 512, 512)}
# Figure 1, GiB: parameters + optimizer state of the layers; activations, baseline and with SP + selective
KORTHIKANTI_FIGURE_1 = {"22B": (45.5625, 59.25, 9.5625), "175B": (45.5625, 66.84375, 12.3515625),
                        "530B": (31.640625, 114.0234375, 23.076171875), "1T": (32.958984375, 131.25, 26.5625)}
KORTHIKANTI_TABLE_5 = {"22B": (1.42, 1.10), "175B": (18.13, 13.75), "530B": (49.05, 37.83), "1T": (94.42, 71.49)}
# Narayanan Table 1: tp, pp, GPUs, batch, teraFLOP/s per GPU (sizes and shapes: model.NARAYANAN_SHAPES)
NARAYANAN_TABLE_1 = [(1, 1, 32, 512, 137), (2, 1, 64, 512, 138), (4, 1, 128, 512, 142), (8, 1, 256, 1024, 135),
                     (8, 2, 512, 1536, 138), (8, 4, 1024, 1792, 140), (8, 8, 1536, 2304, 148),
                     (8, 16, 1920, 2160, 155), (8, 35, 2520, 2520, 163), (8, 64, 3072, 3072, 163)]
MODES = {"full recompute": dict(recompute="full"),
         "SP + selective": dict(recompute="selective", sequence_parallel=True)}


def _row(what: str, published: float, ours: float) -> dict:
    return {"what": what, "published": published, "ours": ours, "error": ours / published - 1}


ZERO_FIGURE_1 = (120, 31.4, 16.6, 1.9)  # GB per GPU, stages 0-3 (the paper prints one decimal)


def zero_figure_1() -> list[dict]:
    """Lesson 3's memory model against the ZeRO paper's Figure 1 (our GB rounded to the paper's decimal)."""
    rows = []
    for stage, published in enumerate(ZERO_FIGURE_1):
        ours = per_gpu_bytes(7_500_000_000, 64, stage, precision="mixed")["total"] / 1e9
        rows.append({**_row(Message("stage {stage}", stage=stage), published, ours),
                     "error": round(ours, 1) / published - 1})
    return rows


def korthikanti_figure_1() -> list[dict]:
    rows = []
    for size, (name, plan, batch, _) in KORTHIKANTI_RUNS.items():
        states, baseline, present = KORTHIKANTI_FIGURE_1[size]
        plan = plan.with_(precision="mixed-fp32-grads")  # 18 B per parameter: Megatron's fp32 gradients
        base = per_gpu(PRESETS[name], plan, batch)
        work = per_gpu(PRESETS[name], plan.with_(**MODES["SP + selective"]), batch)
        # the rows' names are Messages: a renderer says them in the reader's language
        rows += [_row(Message("{size}, parameters + optimizer", size=size), states, base["layer_states"] / GIB),
                 _row(Message("{size}, activations, baseline", size=size), baseline, base["layer_activations"] / GIB),
                 _row(Message("{size}, activations, SP + selective", size=size), present,
                      work["layer_activations"] / GIB)]
    return rows


def korthikanti_table_5() -> list[dict]:
    rows = []
    for size, (name, plan, batch, gpus) in KORTHIKANTI_RUNS.items():
        for (mode, knobs), published in zip(MODES.items(), KORTHIKANTI_TABLE_5[size]):
            seconds = step(PRESETS[name], plan.with_(**knobs), cluster(gpus=gpus), batch)["step_seconds"]
            what = (Message("{size}, full recompute", size=size) if mode == "full recompute" else
                    Message("{size}, SP + selective", size=size) if mode == "SP + selective" else f"{size}, {mode}")
            rows.append(_row(what, published, seconds))
    return rows


def narayanan_plan(size: str, tp: int, pp: int, gpus: int, batch: int) -> Plan:
    """Table 1's runs: full recomputation, micro-batch 1, "the interleaved schedule" (2 chunks where m
    allows: the paper does not give v)."""
    dp = gpus // (tp * pp)
    v = 2 if pp > 1 and (batch // dp) % pp == 0 else 1
    plan = Plan(tp=tp, pp=pp, dp=dp, recompute="full", schedule="interleaved" if v > 1 else "1f1b", chunks=v, **OLD)
    check_plan(PRESETS[f"megatron-{size}-2021"], plan, gpus, batch)
    return plan


def narayanan_table_1() -> list[dict]:
    """teraFLOP/s per GPU as the paper counts them: Eq. 3, 96·B·s·l·h²(1 + s/6h + V/16lh), per second and GPU."""
    rows = []
    for (size, _, h, L), (tp, pp, gpus, batch, published) in zip(NARAYANAN_SHAPES, NARAYANAN_TABLE_1):
        seconds = step(PRESETS[f"megatron-{size}-2021"], narayanan_plan(size, tp, pp, gpus, batch),
                       cluster(gpus=gpus), batch)["step_seconds"]
        flops = 96 * batch * 2048 * L * h * h * (1 + 2048 / (6 * h) + 51200 / (16 * L * h))
        rows.append(_row(f"{size} ({tp}×{pp}, {gpus} GPUs)", published, flops / (seconds * gpus) / 1e12))
    return rows


def _predict(run, **changes):
    """(cluster, plan, tokens/s per GPU) of `run`, with `changes` to its plan, `inter_node_gbps` or `gpu` (a dict of
    `GPU` fields: another reading of the part's datasheet)."""
    gbps = changes.pop("inter_node_gbps", run.inter_node_gbps)
    c = cluster(run.gpu, gpus=run.gpus, inter_node_gbps=gbps)
    c = replace(c, gpu=c.gpu.with_(**changes.pop("gpu"))) if "gpu" in changes else c
    plan = run.plan.with_(**changes)
    check_plan(run.model, plan, run.gpus, run.global_batch)
    return c, plan, step(run.model, plan, c, run.global_batch)["tokens_per_second"] / run.gpus


def _as_published(tensors: float, run) -> float:
    """The model's peak bytes of tensors as the run's source counts memory: the allocator's reserved bytes hold them
    and its fragmentation, the share `usable_memory` sets aside for it (measured on the H200: 1.06×)."""
    return tensors / (1 - FRAGMENTATION) if run.memory_counts == "reserved" else tensors


def validation(runs=RUNS) -> list[dict]:
    """Every published run: tokens/s per GPU published and ours, the error, the range the unknown knobs'
    alternatives span, peak memory per GPU (GiB) where published (ours counted as the source counts it), and whether
    the model says it fits. `runs`: lesson 6's (`RUNS`, the default), lesson 7's long-sequence and mixture-of-experts
    runs (`LONG_AND_MOE_RUNS`), or the held-out ones (`published_held_out.HELD_OUT_RUNS`, `published_held_out_mpt`)."""
    rows = []
    for run in runs:
        c, plan, ours = _predict(run)
        mem = per_gpu(run.model, plan, run.global_batch)
        swing = [_predict(run, **alt)[2] / run.published - 1 for alt in run.alternatives]
        rows.append({**_row(run.key, run.published, ours), "gpu": run.gpu, "gpus": run.gpus,
                     "framework": run.framework, "printed": run.printed, "swing": swing,
                     "memory_gib": run.memory_gib, "ours_gib": _as_published(mem["total"], run) / GIB,
                     "fits": bool(fits(mem, c))})
    return rows


def summary(rows: list[dict]) -> dict:
    """What the README and lesson 6 say of `validation()`: runs within 20 % and 35 %, the median |error|, the
    mean error (its sign says which way the model leans), the worst run, plans it says do not fit, and the
    published peak memories within 10 %."""
    errors = sorted(abs(r["error"]) for r in rows)
    memory = [r for r in rows if r["memory_gib"]]
    worst = max(rows, key=lambda r: abs(r["error"]))
    return {"runs": len(rows), "within_20": sum(e <= 0.20 for e in errors), "within_35": sum(e <= 0.35 for e in errors),
            "median": errors[len(errors) // 2], "mean": sum(r["error"] for r in rows) / len(rows),
            "worst": worst["what"], "worst_error": worst["error"], "not_fitting": sum(not r["fits"] for r in rows),
            "memory": len(memory), "memory_within_10": sum(abs(r["ours_gib"] / r["memory_gib"] - 1) <= 0.1
                                                          for r in memory)}
