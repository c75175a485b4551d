"""From a chosen plan to the frameworks people train with: lesson 6's last step and lesson 4's schedules.

A plan that `simlab.sim.advisor` evaluated or searched (a `Plan`, its `Transformer`, its `Cluster` and the
global batch) becomes the text a framework reads, each setting where the course taught it:

    megatron      Megatron-LM's arguments and a torchrun line for N nodes   (`export.megatron`)
    deepspeed     a ds_config.json                                        (`export.deepspeed`)
    torchtitan    a torchtitan config function (Python)                   (`export.torchtitan`)
    pipeline-csv  the per-rank action lists in torch's pipelining CSV     (`export.pipeline_csv`)

What a framework cannot express is refused in one line naming why (a ValueError), never written wrongly.
Models come in from a Hugging Face config.json (`export.model_config`) or a Megatron argument string
(`export.megatron_args`).

    >>> from simlab.sim.model import PRESETS
    >>> from simlab.sim.hardware import cluster
    >>> from simlab.sim.hybrid import Plan
    >>> text = emit("pipeline-csv", PRESETS["llama3-8b"], cluster(gpus=4), 8, Plan(pp=4, dp=1, microbatch=2))
    >>> text.splitlines()[0].split(",")[:3]
    ['0F0', '0F1', '0F2']
"""
from __future__ import annotations

from .._checks import check_choice

TARGETS = ("megatron", "deepspeed", "torchtitan", "pipeline-csv")  # what `simlab plan --emit` takes


def emit(target: str, model, cluster, global_batch: int, plan) -> str:
    """The file text of `plan` for `target` (one of TARGETS); a one-line ValueError where it cannot say it."""
    from . import deepspeed, megatron, pipeline_csv, torchtitan  # each loads only when asked for

    check_choice("emit", target, TARGETS)
    module = {"megatron": megatron, "deepspeed": deepspeed, "torchtitan": torchtitan,
              "pipeline-csv": pipeline_csv}[target]
    return module.emit(model, cluster, global_batch, plan)
