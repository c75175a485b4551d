"""Lesson 6's flags, shared by `simlab plan` and `simlab memory --model`: the model (a preset or its shape, and
every knob `sim.model.Transformer` has), the plan (every knob `sim.hybrid.Plan` has) and the machine (a GPU
preset, any of its numbers changed, or a small JSON file of them).

    simlab plan --model llama3-70b --gpus 64 --gpu h100-80gb --nics-per-node 8 --nic-gbps 400 --global-batch 128
    simlab plan --layers 32 --hidden 4096 --heads 32 --kv-heads 8 --gated --untied --ffn 14336 --seq 8192 \\
        --vocab 128256 --gpus 8 --gpu-memory-gib 94 --peak-tflops 900 --hbm-gbs 2400 --global-batch 16
    simlab plan --model gpt3-175b --hardware my_cluster.json --gpus 256 --global-batch 512
    simlab plan --model llama3-8b --seq 131072 --gpus 8 --gpu h100-80gb --global-batch 8 --cp-comm all-gather-kv
    simlab plan --model mixtral-8x7b --gpus 64 --gpu h100-80gb --global-batch 256 --ep 8 --capacity 1.25
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from .. import _checks
from ..sim.hybrid import ATTENTION, CP_COMMS, LOSSES, PRECISIONS, RECOMPUTE, SCHEDULES, Plan, check_overlap
from .hybrid_export import add_import_flags

SHAPE = ("layers", "hidden", "heads", "seq", "vocab")
KNOBS = ("microbatch", "tp", "pp", "dp", "chunks", "schedule", "zero", "offload", "sequence_parallel", "recompute",
         "shard", "stage_layers", "cp", "ep")
SETTINGS = ("attention", "overlap", "cp_comm", "capacity", "loss")  # the framework's: given to the search, not searched
EXPERTS = ("experts", "top_k", "expert_ffn")  # a mixture of experts' shape (lesson 7)
# --flag: (GPU or Cluster field, how a flag's value becomes the field's)
MACHINE = {"gpu_memory_gib": ("memory", lambda v: v * 2**30), "peak_tflops": ("peak_flops", lambda v: v * 1e12),
           "peak_tflops_fp8": ("peak_flops_fp8", lambda v: v * 1e12), "hbm_gbs": ("hbm_bandwidth", lambda v: v * 1e9),
           "nvlink_gbs": ("intra_bandwidth", lambda v: v * 1e9), "nvlink_alpha_us": ("intra_alpha", lambda v: v * 1e-6),
           "pcie_gbs": ("host_bandwidth", lambda v: v * 1e9)}
NETWORK = ("nics_per_node", "nic_gbps", "network_alpha_us")


def add_model_flags(p, plan_defaults: bool) -> None:
    """The model (a preset or its shape) and the plan's knobs; `plan_defaults`: knobs default to a plain
    plan (for `memory`), else to "free" (None: `plan` searches over what is not given)."""
    add_shape_flags(p)
    add_plan_flags(p, plan_defaults)


def add_shape_flags(p) -> None:
    """The model alone: a preset, an imported config, or its shape and knobs (`model_from` reads them)."""
    p.add_argument("--model", default=None, help="a preset: gpt3-175b, llama2-7b|70b, llama3-8b|70b|405b, "
                                                 "bloom-176b, mpt-7b|70b, … megatron-1.7b-2021 … megatron-1008b-2021")
    add_import_flags(p)
    for name in SHAPE:
        p.add_argument(f"--{name}", type=int, default=None, help=f"model shape: {name} (instead of --model)" if
                       name != "seq" else "model shape: seq (with --model: the training length)")
    p.add_argument("--ffn", type=int, default=None, help="MLP inner width (default 4 × hidden)")
    p.add_argument("--kv-heads", type=int, default=None, help="K/V heads (grouped-query attention; default: heads)")
    p.add_argument("--gated", action=argparse.BooleanOptionalAction, default=None, help="SwiGLU MLP (3 matrices)")
    p.add_argument("--untied", action="store_true", default=None, help="an output layer of its own")
    p.add_argument("--dropout", action=argparse.BooleanOptionalAction, default=None, help="dropout masks kept")
    p.add_argument("--biases", action=argparse.BooleanOptionalAction, default=None, help="biases and LayerNorm "
                   "(--no-biases: RMSNorm, Llama's)")
    p.add_argument("--positions", choices=("learned", "rotary"), default=None, help="a learned position table, "
                   "or rotary (no parameters)")
    p.add_argument("--experts", type=int, default=None, help="a mixture of experts: MLPs per layer (0: dense)")
    p.add_argument("--top-k", type=int, default=None, help="experts each token is routed to (default 1)")
    p.add_argument("--expert-ffn", type=int, default=None, help="an expert's MLP inner width (default --ffn)")


def add_plan_flags(p, plan_defaults: bool) -> None:
    free = lambda value: value if plan_defaults else None  # noqa: E731 — a one-line local helper
    p.add_argument("--microbatch", type=int, default=free(1), help="sequences per micro-batch b")
    for name in ("tp", "pp", "dp"):
        p.add_argument(f"--{name}", type=int, default=free(1), help=f"{name} size")
    p.add_argument("--chunks", type=int, default=free(1), help="interleaved: model chunks per rank v")
    p.add_argument("--schedule", choices=SCHEDULES, default=free("1f1b"), help="pipeline schedule")
    p.add_argument("--recompute", choices=RECOMPUTE, default=free("none"),
                   help="activation recomputation: selective is Korthikanti's (nothing to redo under flash); op-sac is "
                        "torchtitan's op-level policy (every second matmul and the element-wise work redone)")
    p.add_argument("--sequence-parallel", action="store_true", default=free(False), help="TP + sequence parallel")
    p.add_argument("--shard", type=int, default=free(0), help="ZeRO's shard group (HSDP); default: the DP group")
    p.add_argument("--cp", type=int, default=free(1), help="context-parallel size: the sequence split over cp GPUs")
    p.add_argument("--ep", type=int, default=free(1), help="expert-parallel size, carved out of DP (needs --experts)")
    p.add_argument("--cp-comm", choices=CP_COMMS, default="ring",
                   help="how CP exchanges K,V: ring (Megatron's p2p), all-gather-kv (Llama 3's), ulysses (all-to-all)")
    p.add_argument("--capacity", type=float, default=0.0,
                   help="experts' capacity factor: each takes at most capacity·k·tokens/E tokens (default 0: dropless)")
    p.add_argument("--stage-layers", default=None, help="layers per pipeline stage, e.g. 7,8,8,7 (default even)")
    p.add_argument("--attention", choices=ATTENTION, default="flash",
                   help="attention kernel: eager (stores the s² scores), flash (FlashAttention-2) or flash-triton "
                        "(FlashAttention's Triton kernel: flash's memory, slower; context parallelism needs flash) "
                        "(default flash)")
    p.add_argument("--loss", choices=LOSSES, default="fused", help="the loss over the vocabulary: fused (Megatron's, "
                   "4 bytes per logit), fp32 (plain PyTorch's cross-entropy: 12) or chunked (that loss on an eighth of "
                   "the sequence at a time, torchtitan 0.3's: 1.5) (default fused)")
    p.add_argument("--overlap", default="dp,params",
                   help="what the framework hides behind compute: none, or any of dp,params,tp (default dp,params)")
    p.add_argument("--bucket", default=None, help="parameters per DP/ZeRO gather and reduction, e.g. 5e7,5e8 "
                   "(DeepSpeed's ZeRO-3 defaults); default: one of each per layer")
    p.add_argument("--global-batch", type=int, default=None, help="sequences per step (memory: default dp·b·pp)")


def model_from(args):
    """The preset named by --model (at --seq if given), the model of --model-config or --from-megatron-args, or the
    shape given by --layers … --vocab (all five); with the knobs given (a mixture of experts' among them)."""
    from ..sim.model import Transformer, preset
    from .hybrid_export import imported_model
    given = {name: getattr(args, name) for name in SHAPE if getattr(args, name) is not None}
    imported = imported_model(args, given)
    knobs = {"ffn": args.ffn, "kv_heads": args.kv_heads, "gated": args.gated, "dropout": args.dropout,
             "tied": False if args.untied else None, "biases": args.biases,
             "learned_positions": None if args.positions is None else args.positions == "learned",
             **{name: getattr(args, name, None) for name in EXPERTS}}
    knobs = {k: v for k, v in knobs.items() if v is not None}
    if imported is not None:
        return imported.with_(**knobs) if knobs else imported
    if args.model is not None:
        shape = {k: v for k, v in given.items() if k != "seq"}  # --seq: the training length, as with --model-config
        if shape:
            raise ValueError(f"{next(iter(shape))}={next(iter(shape.values()))}: give --model or the shape, not both")
        model = preset(args.model)
        changes = knobs | ({"seq": given["seq"]} if "seq" in given else {})
        return model.with_(**changes) if changes else model
    missing = [f"--{name}" for name in SHAPE if name not in given]
    if missing:
        raise ValueError(f"model=None: give --model PRESET, or the whole shape (missing {', '.join(missing)})")
    return Transformer("custom", **given, **knobs)


def stage_layers_from(text: str | None) -> tuple:
    if text is None:
        return ()
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise ValueError(f"stage_layers={text!r}: must be whole numbers separated by commas, e.g. 7,8,8,7") from None


def bucket_from(text: str | None) -> tuple:
    if text is None:
        return ()
    try:
        out = tuple(int(float(x)) for x in text.split(","))
    except (ValueError, OverflowError):  # "a", nan, inf
        raise ValueError(f"bucket={text!r}: must be two numbers of parameters, e.g. 5e7,5e8") from None
    if len(out) != 2 or min(out) < 1:
        raise ValueError(f"bucket={text!r}: must be two positive numbers of parameters, e.g. 5e7,5e8")
    return out


def plan_from(args, **defaults) -> Plan:
    values = {name: getattr(args, name) for name in KNOBS if name != "stage_layers"}
    values = {k: (defaults[k] if v is None and k in defaults else v) for k, v in values.items()}
    check_overlap(args.overlap)
    return Plan(**values, stage_layers=stage_layers_from(args.stage_layers), precision=args.precision,
                attention=args.attention, overlap=args.overlap, bucket=bucket_from(args.bucket), cp_comm=args.cp_comm,
                capacity=args.capacity, loss=args.loss)


def add_precision_flag(p) -> None:
    """--precision, as `simlab plan` and `simlab step` both take it: the bytes of a parameter's states."""
    p.add_argument("--precision", choices=PRECISIONS, default="mixed",
                   help="bytes per parameter: 16 / 2+2+12 / 2+4+12 / FP8 matmuls (2+4+12) / all 16-bit (2+2+6)")


def add_machine_flags(p) -> None:
    p.add_argument("--gpus", type=int, default=8, help="GPUs in all (default 8)")
    p.add_argument("--gpus-per-node", type=int, default=None, help="GPUs per node (default 8)")
    add_gpu_flags(p)
    p.add_argument("--inter-node-gbps", type=float, default=None,
                   help="network Gbit/s per node: 1600 for 8×200 Gb/s InfiniBand, 25 for one 25 GbE link")
    p.add_argument("--nics-per-node", type=int, default=None, help="NICs per node (with --nic-gbps)")
    p.add_argument("--nic-gbps", type=float, default=None, help="Gbit/s per NIC (with --nics-per-node)")
    p.add_argument("--network-alpha-us", type=float, default=None, help="µs per ring step across nodes (14)")
    add_hardware_flag(p)


def add_gpu_flags(p) -> None:
    """One GPU: a preset and any of its numbers changed (`cluster_from` reads them)."""
    from ..sim.hardware import GPUS
    p.add_argument("--gpu", choices=tuple(GPUS), default="a100-80gb", help="GPU preset (default a100-80gb)")
    helps = {"gpu_memory_gib": "GiB the GPU reports", "peak_tflops": "dense BF16 TFLOP/s",
             "peak_tflops_fp8": "dense FP8 TFLOP/s", "hbm_gbs": "memory GB/s", "nvlink_gbs": "NVLink bus GB/s",
             "nvlink_alpha_us": "µs per ring step inside a node", "pcie_gbs": "host link GB/s (Offload)"}
    for name, what in helps.items():
        p.add_argument(f"--{name.replace('_', '-')}", type=float, default=None, help=f"the GPU's {what}")


def add_hardware_flag(p) -> None:
    p.add_argument("--hardware", metavar="FILE", default=None,
                   help="a JSON object of any of the machine flags above, e.g. {\"peak_tflops\": 900}; flags win")


def cluster_from(args):
    """The cluster: the --gpu preset, the file's numbers over it, then the flags' — each a positive number."""
    from ..sim.hardware import cluster
    fields = set(MACHINE) | set(NETWORK) | {"gpus_per_node", "inter_node_gbps"}
    given = {}
    if args.hardware is not None:
        try:
            given = json.loads(Path(args.hardware).read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise ValueError(f"hardware={args.hardware!r}: not a readable JSON file ({err})") from None
        if not isinstance(given, dict) or not set(given) <= fields:
            raise ValueError(f"hardware={args.hardware!r}: must be a JSON object with keys among "
                             f"{', '.join(sorted(fields))}")
    given |= {name: getattr(args, name) for name in fields if getattr(args, name, None) is not None}  # flags win
    for name, value in given.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ValueError(f"{name}={value!r}: must be a positive number")
    _checks.check_int("gpus", args.gpus, 1)
    per_node = _checks.check_int("gpus_per_node", given.get("gpus_per_node", 8), 1)
    nics, nic = given.get("nics_per_node"), given.get("nic_gbps")
    if (nics is None) != (nic is None):
        raise ValueError(f"nics_per_node={nics}: give --nics-per-node and --nic-gbps together")
    gbps = nics * nic if nics else given.get("inter_node_gbps", 1600.0)
    extra = {"inter_alpha": given["network_alpha_us"] * 1e-6} if "network_alpha_us" in given else {}
    c = cluster(args.gpu, args.gpus, per_node, gbps, **extra)
    changes = {field: convert(given[name]) for name, (field, convert) in MACHINE.items() if name in given}
    return c.with_(gpu=c.gpu.with_(**changes, name=c.gpu.name + "*")) if changes else c
