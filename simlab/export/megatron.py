"""A plan as Megatron-LM trains it: the arguments of `pretrain_gpt.py` and the torchrun line that starts it on
every node, each flag commented with what it does and the lesson that taught it.

Teaches that lesson 6's knobs are the flags NVIDIA's own scripts pass: tp, pp and the schedule become
--tensor/--pipeline-model-parallel-size and virtual stages; dp is not a flag at all (Megatron derives it,
dp = world size / (tp·cp·pp)); ZeRO-1 is the distributed optimizer, ZeRO-2/3 Megatron-FSDP's sharding strategies,
HSDP several distributed-optimizer instances; overlap, recomputation, precision and the attention kernel each
have their switch; lesson 7's context parallelism and experts are `context_and_experts.megatron`'s. What Megatron
cannot say is refused in one line: ZeRO-Offload (its optimizer offload keeps the gradients on the GPU), the GPipe
schedule, overlaps it only runs together, a model part it has no flag for.

Flag names: NVIDIA/Megatron-LM at tag core_v0.16.1 (55ac708), the release of the megatron-core package the tests
build their configs with. megatron/training/arguments.py writes some flags by hand (--micro-batch-size,
--swiglu, --decoder-first-pipeline-num-layers, --use-distributed-optimizer, …) and generates the rest from
megatron.core's TransformerConfig (argument_utils.py: field `foo_bar` becomes `--foo-bar`, a True-by-default
switch `--no-foo-bar`, unless the field's metadata names it). `validate_args` rules quoted where they shape a flag.

    >>> from simlab.sim.model import PRESETS
    >>> from simlab.sim.hardware import cluster
    >>> from simlab.sim.hybrid import Plan
    >>> text = emit(PRESETS["llama3-8b"], cluster("h100-80gb", gpus=16), 64, Plan(tp=2, pp=2, dp=4))
    >>> [line.split("#")[0].strip() for line in text.splitlines() if "parallel-size" in line]
    ['--tensor-model-parallel-size 2', '--pipeline-model-parallel-size 2']
"""
from __future__ import annotations

import shlex

from ..i18n import _
from ..sim.hybrid import microbatches
from . import context_and_experts
from .common import Setting, comment, refuse, sixteen_bit, stage_counts, start

SCRIPT = "pretrain_gpt.py"
FSDP_STRATEGY = {2: "optim_grads", 3: "optim_grads_params"}  # Megatron-FSDP's --data-parallel-sharding-strategy


def layout(counts: list[int], chunks: int) -> str:
    """Megatron's --pipeline-model-parallel-layout: one "|"-separated virtual stage per (chunk, rank), chunk-major
    as Megatron reads it; `t` a transformer layer (t*5: five), E the embedding (first), L the loss (last). Each
    stage's layers go over its chunks as evenly as can be, the extra ones first."""
    parts = []
    for j in range(chunks):
        for i, n in enumerate(counts):
            here = n // chunks + (j < n % chunks)
            layers = f"t*{here}" if here > 1 else "t" * here
            parts.append(("E" if i == j == 0 else "") + layers + ("L" if (i, j) == (len(counts) - 1, chunks - 1) else ""))
    return "|".join(parts)


def _refusals(model, plan) -> None:
    over = plan.overlaps
    if model.embedding_norm:
        refuse(f"model={model.name!r}", "its layer norm after the token embedding (BLOOM's) has no flag in "
                                        "Megatron-LM's GPT; BigScience trained it with their Megatron-DeepSpeed fork")
    if plan.offload:
        refuse("offload=True", "Megatron's --optimizer-cpu-offload moves the optimizer state and its step to the "
                               "host but keeps the gradients on the GPU, where ZeRO-Offload moves them too: use "
                               "--emit deepspeed, or a plan without offload")
    if plan.schedule == "gpipe" and plan.pp > 1:
        refuse("schedule='gpipe'", "Megatron-LM runs 1F1B (or interleaved 1F1B) whenever pp > 1; it has no "
                                   "all-forwards-then-all-backwards schedule: use schedule='1f1b'")
    if "params" in over and "dp" not in over and plan.zero >= 1:
        refuse(f"overlap={plan.overlap!r}", "Megatron overlaps the parameter all-gather only together with the "
                                            "gradient reduction (validate_args: \"Must use --overlap-param-gather "
                                            "with --overlap-grad-reduce\"): use overlap='dp,params'")
    if "tp" in over and plan.tp > 1 and not plan.sequence_parallel:
        refuse(f"overlap={plan.overlap!r}", "Megatron's --tp-comm-overlap hides sequence parallelism's all-gather "
                                            "and reduce-scatter (\"Tensor parallel communication/GEMM overlap can "
                                            "happen only when sequence parallelism is enabled\"): add "
                                            "sequence_parallel=True or drop 'tp'")
    if plan.bucket and plan.bucket[0] != plan.bucket[1]:
        refuse(f"bucket={plan.bucket}", "Megatron gathers parameters and reduces gradients in the same units "
                                        "(--ddp-bucket-size; Megatron-FSDP's --suggested-communication-unit-size): "
                                        "give both the same size")
    if plan.bucket and "dp" not in over and plan.zero < 2:
        refuse(f"bucket={plan.bucket}", "Megatron cuts gradients into buckets only when it overlaps their "
                                        "reduction (without --overlap-grad-reduce it reduces them all at once): "
                                        "add 'dp' to overlap or drop bucket")
    if plan.recompute == "op-sac":
        refuse("recompute='op-sac'", "torchtitan's op-level policy (every second matmul recomputed) has no Megatron "
                                     "flag: use recompute='selective' or 'full', or --emit torchtitan")


def _model(m) -> list[Setting]:
    s = [Setting("--num-layers", m.layers, _("transformer layers (L)")),
         Setting("--hidden-size", m.hidden, _("hidden size (h)")),
         Setting("--num-attention-heads", m.heads, _("attention heads (a)")),
         Setting("--ffn-hidden-size", m.ffn_width, _("the MLP's inner width (ffn)")),
         Setting("--seq-length", m.seq, _("tokens per sequence (s)")),
         Setting("--max-position-embeddings", m.seq, _("the longest sequence the positions cover"))]
    if m.kv_heads and m.kv_heads != m.heads:
        s += [Setting("--group-query-attention", True, _("grouped-query attention: fewer K/V heads than queries")),
              Setting("--num-query-groups", m.kv_heads, _("K/V heads (each shared by a group of query heads)"))]
    if m.gated:
        s.append(Setting("--swiglu", True, _("a gated MLP: three matrices (Megatron gates with SiLU)")))
    if not m.tied:
        s.append(Setting("--untie-embeddings-and-output-weights", True,
                         _("the output layer has its own weights, not the input embedding's")))
    s.append(Setting("--position-embedding-type", "learned_absolute" if m.learned_positions else "rope",
                     _("a learned position table") if m.learned_positions else
                     _("rotary positions: no parameters")))
    s.append(Setting("--normalization", "LayerNorm" if m.biases else "RMSNorm",
                     _("layer norm with a bias") if m.biases else _("RMSNorm: one weight vector per norm")))
    if not m.biases:
        s.append(Setting("--disable-bias-linear", True, _("no biases in the linear layers")))
    p = 0.1 if m.dropout else 0.0  # 0.1: Megatron's default, GPT-3's; Llama trains without dropout
    s += [Setting("--hidden-dropout", p, _("dropout after attention and the MLP (its masks are stored)")),
          Setting("--attention-dropout", p, _("dropout on the attention probabilities"))]
    return s


def _layout(model, plan) -> list[Setting]:
    s = [Setting("--tensor-model-parallel-size", plan.tp, _("split each layer's matrices over {tp} GPUs "
                                                            "(column- then row-parallel)").format(tp=plan.tp), 5)]
    if plan.sequence_parallel:
        s.append(Setting("--sequence-parallel", True, _("split the norms' and dropouts' activations along the "
                                                        "sequence over the TP group"), 5))
    s.append(Setting("--pipeline-model-parallel-size", plan.pp, _("cut the layers into {pp} stages, one per "
                                                                  "GPU of a pipeline").format(pp=plan.pp), 4))
    if plan.pp == 1:
        return s
    counts, v = stage_counts(model, plan), plan.chunks if plan.schedule == "interleaved" else 1
    middles = set(counts[1:-1])
    if len(set(counts)) == 1 and counts[0] % v == 0:
        pass  # Megatron's default: L/p layers per stage, L/(p·v) per chunk
    elif len(middles) <= 1 and all(n % v == 0 for n in counts):
        s += [Setting("--decoder-first-pipeline-num-layers", counts[0], _("layers on the first stage (it also "
                                                                           "holds the embedding)"), 4),
              Setting("--decoder-last-pipeline-num-layers", counts[-1], _("layers on the last stage (it also holds "
                                                                           "the output layer and the loss)"), 4)]
    else:  # middles that differ, or a stage whose layers do not split evenly into its chunks
        s.append(Setting("--pipeline-model-parallel-layout", layout(counts, v),
                         _("the layers of each stage, first to last {counts}, over {v} chunks each: E the "
                           "embedding, t a layer, L the loss").format(counts=counts, v=v), 4))
        return s  # the layout also sets the virtual stages (its length / pp)
    if v > 1:
        s.append(Setting("--num-virtual-stages-per-pipeline-rank", v, _("interleaved 1F1B: {v} chunks per GPU, "
                                                                          "a bubble {v} times smaller").format(v=v), 4))
    return s


def _data_parallel(plan, global_batch: int) -> list[Setting]:
    m, over = microbatches(plan, global_batch), plan.overlaps
    s = [Setting("--micro-batch-size", plan.microbatch, _("sequences per micro-batch (b)"), 4 if plan.pp > 1 else 2),
         Setting("--global-batch-size", global_batch, _("sequences per step: {m} micro-batches × b × dp={dp} "
                                                        "replicas").format(m=m, dp=plan.dp), 2)]
    if plan.zero == 1:
        s.append(Setting("--use-distributed-optimizer", True, _("ZeRO-1: shard Adam's state and the fp32 master "
                                                                "weights over the DP group"), 3))
    elif plan.zero >= 2:
        what = (_("ZeRO-2: shard the optimizer state and the gradients") if plan.zero == 2 else
                _("ZeRO-3: shard the optimizer state, the gradients and the weights (gathered layer by layer)"))
        s += [Setting("--use-megatron-fsdp", True, _("Megatron-FSDP, Megatron's ZeRO-2/3"), 3),
              Setting("--data-parallel-sharding-strategy", FSDP_STRATEGY[plan.zero], what, 3),
              Setting("--use-distributed-optimizer", True, _("Megatron-FSDP's optimizer (its guide requires it)"), 3),
              Setting("--no-gradient-accumulation-fusion", True, _("Megatron-FSDP keeps no full gradient to fuse "
                                                                   "into (its guide requires it)"), 3),
              Setting("--ckpt-format", "fsdp_dtensor", _("the checkpoint format Megatron-FSDP saves (validate_args "
                                                         "asserts it)"), 3)]
    if plan.shard and plan.shard < plan.dp:
        s.append(Setting("--num-distributed-optimizer-instances", plan.dp // plan.shard,
                         _("HSDP: {k} replicas of the sharded state, each sharded over {shard} GPUs").format(
                             k=plan.dp // plan.shard, shard=plan.shard), 3))
    if "dp" in over:
        s.append(Setting("--overlap-grad-reduce", True, _("reduce each gradient bucket during the backward, as "
                                                          "DDP does"), 2))
    if "params" in over and plan.zero >= 1:
        s.append(Setting("--overlap-param-gather", True, _("all-gather the updated weights under the next forward"),
                         3))
    if plan.bucket:
        fsdp = plan.zero >= 2
        s.append(Setting("--suggested-communication-unit-size" if fsdp else "--ddp-bucket-size", plan.bucket[0],
                         _("parameters per gradient reduction and weight all-gather"), 2))
    if "tp" in over and plan.tp > 1:
        s.append(Setting("--tp-comm-overlap", True, _("hide TP's all-gathers and reduce-scatters behind its GEMMs "
                                                      "(Transformer Engine's userbuffers)"), 5))
    return s


def _compute(cluster, plan) -> list[Setting]:
    s = []
    if plan.recompute == "selective":
        s.append(Setting("--recompute-granularity", "selective", _("recompute attention's scores in the backward "
                                                                   "instead of storing them"), 6))
    elif plan.recompute == "full":
        s += [Setting("--recompute-granularity", "full", _("store only each layer's input; recompute the layer in "
                                                           "the backward"), 6),
              Setting("--recompute-method", "uniform", _("checkpoint every group of --recompute-num-layers "
                                                         "layers"), 6),
              Setting("--recompute-num-layers", 1, _("a group of one: every layer"), 6)]
    half, gpu = sixteen_bit(cluster.gpu), cluster.gpu.name
    if plan.precision in ("mixed", "mixed-fp32-grads") and half == "fp16":
        s.append(Setting("--fp16", True, _("16-bit weights and activations in fp16, as the {gpu} has no bf16; "
                                           "Megatron scales the loss dynamically").format(gpu=gpu), 6))
        if plan.precision == "mixed-fp32-grads":
            s.append(Setting("--accumulate-allreduce-grads-in-fp32", True, _("gradients accumulated and reduced in "
                                                                            "fp32"), 6))
    elif plan.precision != "fp32":
        s.append(Setting("--bf16", True, _("16-bit weights and activations in bf16, which the {gpu} has: fp32's "
                                           "range, no loss scaling").format(gpu=gpu), 6))
        if plan.precision == "mixed":
            s.append(Setting("--grad-reduce-in-bf16", True, _("16-bit gradients, as the plan counts them (Megatron "
                                                              "keeps fp32 ones without this flag)"), 6))
    if plan.precision == "fp8":
        s.append(Setting("--fp8-format", "hybrid", _("FP8 matmuls: e4m3 forward, e5m2 gradients (Transformer "
                                                     "Engine)"), 6))
        if plan.zero >= 1:
            s.append(Setting("--fp8-param-gather", True, _("keep the weights in FP8: ZeRO's all-gather moves one "
                                                           "byte per parameter"), 6))
    s.append(Setting("--attention-backend", "flash" if plan.attention == "flash" else "unfused",
                     _("FlashAttention: the s² scores are never stored") if plan.attention == "flash" else
                     _("unfused attention: the s² scores are stored for the backward"), 6))
    return s


def _launch(cluster, plan) -> list[Setting]:
    per_node, nodes = min(cluster.gpus, cluster.gpus_per_node), cluster.nodes
    s = []
    if plan.tp > 1 and plan.zero < 2:
        s.append(Setting("CUDA_DEVICE_MAX_CONNECTIONS", 1, _("one queue to the GPU, so each TP collective starts "
                                                             "before the GEMM it overlaps (Megatron asserts it)"),
                         5, "env"))
    elif plan.zero >= 2:
        s.append(Setting("CUDA_DEVICE_MAX_CONNECTIONS", None, _("Megatron-FSDP overlaps on several queues "
                                                                "(validate_args asserts it is not 1)"), 3, "env"))
    world = (_("{nodes} nodes × {per} GPUs = world size {world}; Megatron takes dp = world / (tp·pp) = {dp}")
             if plan.cp == 1 else _("{nodes} nodes × {per} GPUs = world size {world}; Megatron takes dp = world / "
                                    "(tp·cp·pp) = {dp}")).format(nodes=nodes, per=per_node, world=nodes * per_node,
                                                                 dp=plan.dp)
    s += [Setting("--nnodes", nodes, world, 1, "launcher"),
          Setting("--nproc-per-node", per_node, _("one process per GPU"), 1, "launcher")]
    if nodes == 1:
        return s + [Setting("--standalone", True, _("one node: torchrun picks its own rendezvous"), 1, "launcher")]
    return s + [Setting("--rdzv-backend", "c10d", _("the nodes meet through torch's own store"), 1, "launcher"),
                Setting("--rdzv-endpoint", "$MASTER_ADDR:$MASTER_PORT", _("the first node's address and port"), 1,
                        "launcher"),
                Setting("--rdzv-id", "$JOB_ID", _("the same id on every node"), 1, "launcher")]


def settings(model, cluster, global_batch: int, plan) -> list[Setting]:
    """Every setting of the plan, in the order the script writes them: the environment, torchrun's flags, then
    pretrain_gpt.py's (parallelism, batch and memory, compute, the model). A one-line ValueError where Megatron
    cannot say the plan."""
    start(model, cluster, global_batch, plan)
    _refusals(model, plan)
    lesson7 = context_and_experts.megatron(model, plan)  # context parallelism and the experts, or a refusal
    return (_launch(cluster, plan) + _layout(model, plan) + lesson7 + _data_parallel(plan, global_batch)
            + _compute(cluster, plan) + _model(model))


def _word(value) -> str:
    text = str(value)
    return f'"{text}"' if "$" in text else shlex.quote(text)  # placeholders expand when the script runs


def _array(name: str, group: list[Setting]) -> list[str]:
    words = [s.name if s.value is True else f"{s.name} {_word(s.value)}" for s in group]
    width = max(map(len, words))
    return [f"{name}=("] + [f"    {w.ljust(width)}  # {comment(s)}" for w, s in zip(words, group)] + [")"]


def emit(model, cluster, global_batch: int, plan) -> str:
    """The bash script that trains `model` with `plan`: run it on every node (after setting MASTER_ADDR,
    MASTER_PORT and JOB_ID), with your data, tokenizer and optimizer flags in EXTRA_ARGS."""
    every = settings(model, cluster, global_batch, plan)
    m = microbatches(plan, global_batch)
    lines = ["#!/usr/bin/env bash",
             "# " + _("Megatron-LM {script} (flags of core_v0.16.1): {model} on {gpus} × {gpu}, global batch "
                      "{batch}").format(script=SCRIPT, model=model.name, gpus=cluster.gpus, gpu=cluster.gpu.name,
                                         batch=global_batch),
             "# " + _("plan: tp={tp} × pp={pp} × dp={dp}; each DP replica runs {m} micro-batches of {b} per step; "
                      "precision {precision}").format(tp=plan.tp, pp=plan.pp, dp=plan.dp, m=m, b=plan.microbatch,
                                                      precision=plan.precision),
             "# " + _("add what the plan does not choose to EXTRA_ARGS: --data-path, --tokenizer-type, "
                      "--tokenizer-model (Megatron pads the vocabulary of {vocab} to a multiple of 128·tp), --lr, "
                      "--train-iters, --save, --load").format(vocab=model.vocab), ""]
    for s in (s for s in every if s.where == "env"):
        act = f"unset {s.name}" if s.value is None else f"export {s.name}={s.value}"
        lines.append(f"{act}  # {comment(s)}")
    lines += _array("TORCHRUN_ARGS", [s for s in every if s.where == "launcher"])
    lines += _array("MEGATRON_ARGS", [s for s in every if s.where == ""])
    lines.append(f'torchrun "${{TORCHRUN_ARGS[@]}}" {SCRIPT} "${{MEGATRON_ARGS[@]}}" ${{EXTRA_ARGS:-}}')
    return "\n".join(lines) + "\n"
