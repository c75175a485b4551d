"""A published run as lesson 6's tables hold it (`Run`), and how a source's figure becomes tokens per second per GPU:
from seconds per step, from DeepSpeed's blog formula, or from Megatron-LM's FLOPs per token (`published_runs` and
the held-out modules list the runs)."""
from __future__ import annotations

from dataclasses import dataclass

from .hybrid import Plan
from .model import Transformer


@dataclass(frozen=True)
class Run:
    key: str
    source: str
    framework: str
    model: Transformer
    gpu: str
    gpus: int
    inter_node_gbps: float  # per node
    plan: Plan
    global_batch: int  # sequences
    published: float  # tokens per second per GPU (converted from `printed` where needed)
    printed: str  # the figure as the source prints it
    memory_gib: float | None = None  # the published peak memory per GPU, which counts (`published._as_published`):
    memory_counts: str = "reserved"  # the allocator's reserved bytes (torchtitan's metrics.py @ 9dec370), or "tensors"
    assumptions: tuple = ()
    swing: str = ""  # the unknown knobs that could move the prediction, and how
    # the swing, priced: other values of the unknown knobs (Plan fields, or inter_node_gbps), each evaluated
    # beside the fixed assumption to show the range it spans (added after the first predictions; the fixed
    # assumption above is what every error and target is judged on)
    alternatives: tuple = ()


def megatron_flops_per_token(model: Transformer, causal: bool = True) -> float:
    """Megatron-LM's model FLOPs per token (training.py `transformer_flops`): 6 × (the layers' weights, the
    logits) + the causal attention's 6·s·h per layer (`causal=False`: 12·s·h, NeMo 24.x's count and Megatron's
    `num_floating_point_operations` of 2024, @ 8b72751, which counts top_k experts' MLPs for a mixture)."""
    h, q = model.hidden, model.hidden
    # a mixture of experts: the top_k experts a token meets (the router is not counted), as Megatron's formula
    mlp = (3 if model.gated else 2) * h * (model.expert_width * model.top_k if model.experts else model.ffn_width)
    attn = h * (q + 2 * model.kv_width) + q * h
    return 6 * (model.layers * (attn + mlp) + h * model.vocab) + (6 if causal else 12) * model.seq * model.layers * h


def per_gpu_from_step(seconds: float, batch: int, seq: int, gpus: int) -> float:
    return batch * seq / seconds / gpus


def ds_azure(model: Transformer, batch: int, gpus: int, tflops: float) -> float:
    """DeepSpeed's blog formula, FLOPs per GPU = 96·B·s·l·h²(1 + s/6h + V/(16lh)) / GPUs, to tokens/s/GPU."""
    s, h, L, V = model.seq, model.hidden, model.layers, model.vocab
    step_flops = 96 * batch * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h))
    return per_gpu_from_step(step_flops / (tflops * 1e12 * gpus), batch, s, gpus)
