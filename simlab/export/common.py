"""What every exporter shares: a setting as the framework spells it, what it means and where the course taught it;
the checks every export starts with; and the explanation printed beside a file that holds no comments (JSON).

A `Setting` is one line of a framework's configuration:

- `name`, the framework's own spelling (`--tensor-model-parallel-size`, `zero_optimization.stage`);
- `value`, what it is set to (True: a switch that takes no value; None: an environment variable to unset);
- `meaning`, the course's sentence in the learner's language (already through `simlab.i18n._`);
- `lesson`, where the course taught it: 1 collectives, 2 data parallelism, 3 ZeRO and Offload, 4 pipelines,
  5 tensor and sequence parallelism, 6 choosing a strategy (recomputation, overlap, precision, attention);
  0 for the model's own shape, which no lesson chooses;
- `where` it goes when that is not the file itself: "env" (the environment), "launcher" (torchrun's or
  deepspeed's command line), "model" (the training script's Python, which a config file cannot reach).

    >>> s = Setting("--tensor-model-parallel-size", 8, "split each layer's matrices over 8 GPUs", 5)
    >>> comment(s)
    "lesson 5: split each layer's matrices over 8 GPUs"
    >>> print(explain([Setting("zero_optimization.stage", 3, "shard everything", 3),
    ...                Setting("bf16.enabled", True, "16-bit weights", 6)]), end="")
    in the file:
      zero_optimization.stage = 3  # lesson 3: shard everything
      bf16.enabled = true          # lesson 6: 16-bit weights
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from ..i18n import N_, _
from ..sim.hybrid import check_plan

# GPUs with BF16 tensor cores: Ampere (A100, RTX 30xx) and every generation since (Ada, Hopper, Blackwell).
# A V100 or T4 has FP16 only; a GPU not named here gets FP16, which every tensor-core GPU runs.
BF16_GPUS = ("a100", "a10", "a30", "a40", "l4", "l40", "rtx-30", "rtx-40", "h100", "h200", "gh200", "b100", "b200",
             "gb200")
WHERE = {"": N_("in the file"), "env": N_("in the environment"), "launcher": N_("on the launcher's command line"),
         "model": N_("in the training script (the model code)")}


@dataclass(frozen=True)
class Setting:
    name: str
    value: object
    meaning: str
    lesson: int = 0
    where: str = ""


def refuse(what: str, why: str):
    """The one-line ValueError every exporter raises for what its framework cannot say."""
    raise ValueError(f"{what}: {' '.join(why.split())}")  # never a second line, whatever `why` held


def sixteen_bit(gpu) -> str:
    """The 16-bit format of the plan's "mixed" precision on `gpu`: bf16 where it exists (fp32's range, so no
    loss scaling), else fp16 (which needs loss scaling: lesson 6)."""
    return "bf16" if gpu.name.lower().startswith(BF16_GPUS) else "fp16"


def check_kernel(attention: str) -> None:
    """FlashAttention's Triton kernel (llm-foundry's attn_impl='triton') has no switch in any of the three frameworks:
    refused here, once for every export, and by `expressible.best_expressible` before it searches."""
    if attention == "flash-triton":
        refuse("attention='flash-triton'", "Megatron-LM, DeepSpeed and torchtitan attend with FlashAttention-2, TE's "
                                           "or SDPA's kernels, not FlashAttention's Triton kernel (llm-foundry's): "
                                           "use attention='flash'")


def start(model, cluster, global_batch: int, plan) -> None:
    """What every export checks first: the plan itself (`check_plan`, one line naming the knob), then what no
    framework can run whatever its flags: FP8 matmuls on a GPU without FP8 tensor cores; and bf16 optimizer
    states, which none of the three exports can say (Megatron's precision-aware optimizer keeps the master
    weights in fp32 or fp16, DeepSpeed's and torchtitan's optimizers in fp32); and FlashAttention's Triton kernel
    (`check_kernel`)."""
    check_plan(model, plan, cluster.gpus, global_batch)
    check_kernel(plan.attention)
    if plan.precision == "bf16-optimizer":
        refuse("precision='bf16-optimizer'", "bf16 master weights and Adam moments (apex's DistributedFusedAdam "
                                            "as NeMo runs it) have no switch in Megatron-LM, DeepSpeed or "
                                            "torchtitan; use precision='mixed'")
    if plan.precision == "fp8" and not cluster.gpu.peak_flops_fp8:
        refuse("precision='fp8'", f"the {cluster.gpu.name} has no FP8 tensor cores (Transformer Engine's FP8 "
                                  "needs Hopper or newer); use precision='mixed'")


def stage_counts(model, plan) -> list[int]:
    """Transformer layers on each pipeline stage, first to last: the plan's `stage_layers`, else ceil(L/p) on
    every stage with what is missing taken one layer at a time from the ends inward (last, first, …): the
    ends also hold the output layer and the embedding, and no stage exceeds the ceil(L/p) the model assumed."""
    if plan.stage_layers:
        return list(plan.stage_layers)
    p, most = plan.pp, -(-model.layers // plan.pp)
    counts, ends_first = [most] * p, [i for pair in zip(range(p - 1, -1, -1), range(p)) for i in pair]
    for i in list(dict.fromkeys(ends_first))[:p * most - model.layers]:  # each stage loses at most one
        counts[i] -= 1
    return counts


def lesson_tag(lesson: int) -> str:
    return _("lesson {n}").format(n=lesson) if lesson else _("the model")


def comment(setting: Setting) -> str:
    """The comment a setting carries: where the course taught it, and what it does (one line, whatever a
    translation holds: a line break would end a shell comment and make the rest a command)."""
    return " ".join(f"{lesson_tag(setting.lesson)}: {setting.meaning}".split())


def shown(value) -> str:
    """A value as the reader sees it beside its name: JSON's spelling (true, "cpu", 5e8 as 500000000)."""
    return value if isinstance(value, str) else json.dumps(value)


def written(s: Setting) -> str:
    """A setting as its place spells it: `key = value` in a file, `--flag value` (a switch alone) on a command
    line, `NAME=value` in the environment, `name: value` for the training script."""
    if s.where == "launcher":
        return s.name if s.value is True else f"{s.name} {shown(s.value)}"
    return {"": f"{s.name} = {shown(s.value)}", "env": f"{s.name}={shown(s.value)}"}.get(s.where, f"{s.name}: {s.value}")


def explain(settings: list[Setting]) -> str:
    """The settings grouped by where they go, each `written`, then `# lesson n: meaning`."""
    lines = []
    for where, heading in WHERE.items():
        group = [s for s in settings if s.where == where]
        if not group:
            continue
        lines.append(_(heading) + ":")
        words = [written(s) for s in group]
        width = max(map(len, words))
        lines += [f"  {w.ljust(width)}  # {comment(s)}" for w, s in zip(words, group)]
    return "\n".join(lines) + "\n"
