"""A plan as DeepSpeed takes it: the ds_config.json its engine reads (`emit`), and beside it (`explain`) each
setting's meaning, lesson, and what the file cannot hold: the model code and the launcher line.

Teaches where DeepSpeed draws its lines. A ds_config describes the data-parallel side of a run — the batch
(train_batch_size = micro-batch × accumulation steps × DP replicas, which DeepSpeed checks), the ZeRO stage, its
Offload, overlap and buckets, the precision, activation checkpointing — while pipeline and tensor parallelism
live in the model code: a `PipelineModule(num_stages=…)` (whose engine runs 1F1B only, refuses ZeRO-2/3 and does
not overlap the gradient reduction), Megatron-DeepSpeed's tensor-parallel layers, or, without a pipeline, AutoTP
(`tensor_parallel.autotp_size`), which shards a Hugging Face model's linears itself. What DeepSpeed cannot say is
refused in one line: FP8, HSDP (MiCS is gone), the interleaved schedule, Megatron's selective recomputation, and
overlaps it does not run.

Sources: the installed deepspeed 0.19.8 — runtime/config.py (the batch arithmetic, removed keys),
runtime/zero/config.py (zero_optimization's fields), runtime/pipe/engine.py (lines 76-77: "ZeRO-2 and ZeRO-3 are
incompatible with pipeline parallelism"; `_train_schedule` is always `TrainSchedule`), runtime/engine.py
("Pipeline parallelism does not support overlapped communication, will be disabled."; stage 0 all-reduces after
the backward; BF16 with fp32 gradient accumulation only at stage 1), runtime/tensor_parallel/config.py (AutoTP).

    >>> import json
    >>> from simlab.sim.model import PRESETS
    >>> from simlab.sim.hardware import cluster
    >>> from simlab.sim.hybrid import Plan
    >>> c = json.loads(emit(PRESETS["llama3-8b"], cluster("h100-80gb", gpus=8), 64, Plan(dp=8, zero=3)))
    >>> c["train_batch_size"], c["gradient_accumulation_steps"], c["zero_optimization"]["stage"], c["bf16"]
    (64, 8, 3, {'enabled': True})
"""
from __future__ import annotations

import json

from ..i18n import _
from ..sim.hybrid import microbatches
from . import context_and_experts
from .common import Setting, refuse, sixteen_bit, start
from .common import explain as explain_settings


def _refusals(cluster, plan) -> None:
    over, pp = plan.overlaps, plan.pp
    if plan.precision == "fp8":
        refuse("precision='fp8'", "DeepSpeed's config has no FP8 training switch (FP8 matmuls come from "
                                  "Transformer Engine layers in the model code): use --emit megatron")
    if plan.shard and plan.shard < plan.dp:
        refuse(f"shard={plan.shard}", "DeepSpeed 0.19.8 removed MiCS, its HSDP (\"MiCS ZeRO-3 sharding has been "
                                      "removed\"); ZeRO++'s zero_hpz_partition_size only keeps a second copy of the "
                                      "weights per node and still shards the state over the whole DP group")
    if pp > 1 and plan.zero >= 2:
        refuse(f"zero={plan.zero}", "DeepSpeed's pipeline engine asserts \"ZeRO-2 and ZeRO-3 are incompatible with "
                                    "pipeline parallelism\" (runtime/pipe/engine.py): use zero 0 or 1 with pp > 1")
    if pp > 1 and (plan.schedule == "gpipe" or plan.chunks > 1):
        refuse(f"schedule={plan.schedule!r}", "DeepSpeed's PipelineEngine always runs its TrainSchedule, 1F1B with "
                                              "one stage per GPU (DualPipeV, its other engine, is a V-shaped "
                                              "two-stage schedule, not lesson 4's interleaving): use "
                                              "schedule='1f1b'")
    if plan.sequence_parallel and pp == 1:
        refuse("sequence_parallel=True", "AutoTP, DeepSpeed's tensor parallelism without a pipeline, has no "
                                         "sequence parallelism: use --emit megatron")
    if plan.recompute == "op-sac":
        refuse("recompute='op-sac'", "torchtitan's op-level policy (every second matmul recomputed) has no DeepSpeed "
                                     "setting: use recompute='full' or --emit torchtitan")
    if plan.recompute == "selective":
        refuse("recompute='selective'", "DeepSpeed checkpoints the functions the model code wraps; it has no "
                                        "setting for Megatron's attention-only recomputation: use recompute='full' "
                                        "or --emit megatron")
    if plan.precision == "mixed-fp32-grads" and (sixteen_bit(cluster.gpu) != "bf16" or plan.zero != 1):
        refuse("precision='mixed-fp32-grads'", "DeepSpeed accumulates 16-bit gradients in fp32 "
                                               "(data_types.grad_accum_dtype) only with BF16 at ZeRO stage 1, its "
                                               "BF16_Optimizer: use precision='mixed' or zero=1")
    if plan.dp > 1 and "dp" in over and pp > 1:
        refuse(f"overlap={plan.overlap!r}", "DeepSpeed's pipeline engine reduces gradients after the last backward "
                                            "(\"Pipeline parallelism does not support overlapped communication, will "
                                            "be disabled.\"): drop 'dp' from overlap")
    if plan.dp > 1 and "dp" in over and plan.zero == 0:
        refuse(f"overlap={plan.overlap!r}", "DeepSpeed overlaps the gradient reduction with the backward only under "
                                            "ZeRO (zero_optimization.overlap_comm); at stage 0 it all-reduces after "
                                            "the backward: use zero >= 1 or drop 'dp' from overlap")
    if plan.dp > 1 and "params" in over and plan.zero in (1, 2):
        refuse(f"overlap={plan.overlap!r}", "DeepSpeed's ZeRO-1/2 all-gathers the updated weights inside step(), "
                                            "with nothing to hide it behind; only ZeRO-3 prefetches "
                                            "(stage3_prefetch_bucket_size): drop 'params' from overlap")
    if plan.bucket and plan.zero == 0:
        refuse(f"bucket={plan.bucket}", "DeepSpeed's bucket sizes are ZeRO settings; at stage 0 it all-reduces in "
                                        "fixed 5e8-element buffers: drop bucket or use zero >= 1")
    if pp > 1 and plan.stage_layers and len(set(plan.stage_layers)) > 1:
        refuse(f"stage_layers={plan.stage_layers}", "DeepSpeed's PipelineModule splits the layers by a method "
                                                    "(uniform, parameters, type:<regex>), not by a list of counts: "
                                                    "drop stage_layers")


def _batch(plan, global_batch: int) -> list[Setting]:
    m = microbatches(plan, global_batch)
    autotp = plan.tp > 1 and plan.pp == 1
    s = [] if autotp else [Setting("train_batch_size", global_batch, _("sequences per step = micro-batch × "
                                                                       "accumulation steps × {dp} DP replicas "
                                                                       "(DeepSpeed checks it)").format(dp=plan.dp), 2)]
    pipe = plan.pp > 1
    s += [Setting("train_micro_batch_size_per_gpu", plan.microbatch, _("sequences per micro-batch (b)"),
                  4 if pipe else 2),
          Setting("gradient_accumulation_steps", m,
                  _("micro-batches each pipeline runs per step (m)") if pipe else
                  _("micro-batches each GPU adds up before the gradient reduction"), 4 if pipe else 2)]
    if autotp:  # no mpu: DeepSpeedConfig would count every GPU, TP ranks too, as a DP replica
        s[-1] = Setting(s[-1].name, m, s[-1].meaning + " " + _("(train_batch_size left out: without an mpu "
                                                               "DeepSpeed counts the TP ranks as replicas too)"), 2)
    return s


def _zero(plan) -> list[Setting]:
    over, z, key = plan.overlaps, plan.zero, "zero_optimization."
    what = {0: _("no ZeRO: every GPU keeps all of the state (plain data parallelism)"),
            1: _("ZeRO-1: shard Adam's state and the fp32 master weights over the DP group"),
            2: _("ZeRO-2: shard the optimizer state and the gradients"),
            3: _("ZeRO-3: shard the weights too, gathered layer by layer")}[z]
    s = [Setting(key + "stage", z, what, 3)]
    if z == 0:
        return s
    s.append(Setting(key + "overlap_comm", "dp" in over, _("reduce gradient buckets during the backward") if "dp"
                     in over else _("reduce the gradients after the backward"), 2))
    if z >= 2:
        s.append(Setting(key + "contiguous_gradients", True, _("copy each reduced gradient into one flat buffer "
                                                               "(no fragmentation)"), 3))
    if plan.offload:
        s += [Setting(key + "offload_optimizer.device", "cpu", _("ZeRO-Offload: gradients, Adam's state and its "
                                                                 "step on the host (CPU Adam)"), 3),
              Setting(key + "offload_optimizer.pin_memory", True, _("page-locked host memory: full-speed "
                                                                    "copies over PCIe"), 3)]
    if plan.bucket:
        s.append(Setting(key + "reduce_bucket_size", plan.bucket[1], _("parameters per gradient reduction"), 2))
        if z < 3:
            s.append(Setting(key + "allgather_bucket_size", plan.bucket[0], _("parameters per all-gather of the "
                                                                              "updated weights"), 3))
    if z == 3 and "params" not in over:
        s.append(Setting(key + "stage3_prefetch_bucket_size", 0, _("no prefetch: gather each layer's weights only "
                                                                   "when it runs"), 3))
    elif z == 3 and plan.bucket:
        s.append(Setting(key + "stage3_prefetch_bucket_size", plan.bucket[0], _("parameters gathered ahead of the "
                                                                                "layers that need them"), 3))
    return s


def _compute(model, cluster, plan) -> list[Setting]:
    s, half = [], sixteen_bit(cluster.gpu)
    if plan.precision != "fp32" and half == "bf16":
        s.append(Setting("bf16.enabled", True, _("16-bit weights and activations in bf16, which the {gpu} has: "
                                                 "fp32's range, no loss scaling").format(gpu=cluster.gpu.name), 6))
    elif plan.precision != "fp32":
        s += [Setting("fp16.enabled", True, _("16-bit weights and activations in fp16, as the {gpu} has no "
                                              "bf16").format(gpu=cluster.gpu.name), 6),
              Setting("fp16.loss_scale", 0, _("0: dynamic loss scaling, so small fp16 gradients do not underflow"),
                      6)]
    if plan.precision == "mixed-fp32-grads":
        s.append(Setting("data_types.grad_accum_dtype", "fp32", _("accumulate the gradients in fp32"), 6))
    if plan.tp > 1 and plan.pp == 1:
        s.append(Setting("tensor_parallel.autotp_size", plan.tp, _("AutoTP: split the model's linear layers over "
                                                                   "{tp} GPUs (column- then row-parallel)").format(
                                                                       tp=plan.tp), 5))
        if "tp" in plan.overlaps:
            s.append(Setting("tensor_parallel.tp_overlap_comm", True, _("overlap TP's all-reduce with compute"), 5))
    if plan.recompute == "full":
        if plan.pp > 1:
            s.append(Setting("pipeline.activation_checkpoint_interval", 1, _("the PipelineModule checkpoints every "
                                                                             "layer: recomputed in the backward"), 6))
        s.append(Setting("activation_checkpointing.partition_activations", False,
                         _("keep each checkpointed input whole (true would split it over the TP group, which the "
                           "plan does not count)"), 6))
    return s


def _outside(model, cluster, plan) -> list[Setting]:
    """What the file cannot hold: the training script's choices and the launcher's flags."""
    s = []
    if plan.pp > 1:
        topology = f"PipeModelDataParallelTopology(num_pp={plan.pp}, num_mp={plan.tp}, num_dp={plan.dp})"
        s.append(Setting("PipelineModule", f"num_stages={plan.pp}, partition_method='type:<your layer class>'"
                         + (f", topology={topology}" if plan.tp > 1 else ""),
                         _("{pp} pipeline stages, the transformer layers balanced over them (ceil(L/p) = {most} at "
                           "most)").format(pp=plan.pp, most=-(-model.layers // plan.pp)), 4, "model"))
    if plan.tp > 1 and plan.pp > 1:
        s.append(Setting("Megatron-DeepSpeed", f"--tensor-model-parallel-size {plan.tp}"
                         + (" --sequence-parallel" if plan.sequence_parallel else ""),
                         _("tensor parallelism beside a pipeline lives in the layers themselves (AutoTP has no "
                           "pipeline): Megatron-DeepSpeed's model"), 5, "model"))
    if plan.recompute == "full" and plan.pp == 1:
        s.append(Setting("deepspeed.checkpointing.checkpoint", "checkpoint(layer, *inputs) around every layer",
                         _("or the model's gradient_checkpointing_enable(): the config only sets how DeepSpeed "
                           "checkpoints, the model code chooses what"), 6, "model"))
    if plan.offload:
        s.append(Setting("optimizer", "deepspeed.ops.adam.DeepSpeedCPUAdam",
                         _("the host runs Adam: its vectorised CPU Adam"), 3, "model"))
    if plan.pp == 1:  # a Hugging Face model (AutoTP's kind); a PipelineModule's layers pick their own kernel
        s.append(Setting("attn_implementation", "flash_attention_2" if plan.attention == "flash" else "eager",
                         _("Hugging Face's attention kernel: FlashAttention never stores the s² scores") if
                         plan.attention == "flash" else _("Hugging Face's eager attention stores the s² scores"), 6,
                         "model"))
    per_node = min(cluster.gpus, cluster.gpus_per_node)
    s += [Setting("--num_nodes", cluster.nodes, _("{nodes} nodes × {per} GPUs = {world} processes").format(
                      nodes=cluster.nodes, per=per_node, world=cluster.gpus), 1, "launcher"),
          Setting("--num_gpus", per_node, _("one process per GPU"), 1, "launcher")]
    if cluster.nodes > 1:
        s.append(Setting("--hostfile", "hostfile", _("the nodes, one 'host slots=N' line each"), 1, "launcher"))
    return s


def settings(model, cluster, global_batch: int, plan) -> list[Setting]:
    """Every setting: the file's (dotted names: `zero_optimization.stage`), then the model code's and the
    launcher's. A one-line ValueError where DeepSpeed cannot say the plan."""
    start(model, cluster, global_batch, plan)
    _refusals(cluster, plan)
    lesson7 = context_and_experts.deepspeed(model, plan)  # the model code's part, or a refusal
    return _batch(plan, global_batch) + _zero(plan) + _compute(model, cluster, plan) + lesson7 + _outside(
        model, cluster, plan)


def config(model, cluster, global_batch: int, plan) -> dict:
    """The ds_config as a dict: the file's settings, their dotted names nested."""
    out: dict = {}
    for s in settings(model, cluster, global_batch, plan):
        if s.where == "":
            *path, last = s.name.split(".")
            node = out
            for key in path:
                node = node.setdefault(key, {})
            node[last] = s.value
    return out


def emit(model, cluster, global_batch: int, plan) -> str:
    """The ds_config.json text (JSON holds no comments: `explain` says what each entry means)."""
    return json.dumps(config(model, cluster, global_batch, plan), indent=2) + "\n"


def launch_line(cluster) -> str:
    """The deepspeed launcher's command line for the cluster (train.py: your training script)."""
    hostfile = " --hostfile hostfile" if cluster.nodes > 1 else ""
    return (f"deepspeed --num_nodes {cluster.nodes} --num_gpus {min(cluster.gpus, cluster.gpus_per_node)}{hostfile} "
            "train.py --deepspeed_config ds_config.json")


def explain(model, cluster, global_batch: int, plan) -> str:
    """What each setting means and where the course taught it, then the model code's part and the launch line."""
    return explain_settings(settings(model, cluster, global_batch, plan)) + _("run:") + "\n  " + launch_line(
        cluster) + "\n"
