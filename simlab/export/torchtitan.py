"""A plan as torchtitan trains it: a Python config function, the form torchtitan 0.3.0 loads.

torchtitan 0.3.0 has no TOML: a run is a function returning a `Trainer.Config`. ``torchrun … -m torchtitan.train
--module NAME --config FUNCTION`` imports NAME (its own model folder, or any module: `config/manager.py` tries
NAME.config_registry, then NAME) and calls FUNCTION; ``--section.field value`` after them overrides any field.

Teaches where lesson 6's knobs live there. DP and ZeRO are FSDP2, sharding weights, gradients and Adam's state over
`data_parallel_shard_degree` GPUs and freeing the gathered weights after each layer's forward ("always": ZeRO-3)
or after the backward ("never": one gather per step, ZeRO-2). FSDP2 always reduce-scatters gradients, so ZeRO-1
becomes ZeRO-2 (the same bytes moved, less kept); ZeRO-0 is `data_parallel_replicate_degree` (DDP); HSDP is both;
Offload is FSDP's CPU offload; FSDP2 always overlaps, so `overlap` changes only the simulator's timing. PP is a
torch schedule class and each virtual stage's layers written out (rank r holds stages r, r + p, …); with PP,
`local_batch_size` is m·b, one pipeline flush per step, without it b, accumulated m times. Selective recomputation
is torchtitan's op-level policy (keep matmul and attention outputs, recompute every second matmul); gradients are
reduced in fp32 (torchtitan has no other choice); FP8 is torchao's Float8Linear. The model must be torchtitan's
llama3 (SwiGLU, GQA, RoPE, RMSNorm, no biases or dropout): a flavor of its own when no built-in one matches
(`export.torchtitan_flavor`).

    >>> from simlab.sim.model import PRESETS
    >>> from simlab.sim.hardware import cluster
    >>> from simlab.sim.hybrid import Plan
    >>> text = emit(PRESETS["llama3-8b"], cluster("h100-80gb", gpus=16), 64, Plan(tp=2, pp=2, dp=4, zero=3))
    >>> [line.strip() for line in text.splitlines() if "_degree=" in line][:3]
    ['data_parallel_shard_degree=4,', 'data_parallel_replicate_degree=1,', 'tensor_parallel_degree=2,']
"""
from __future__ import annotations

import re

from ..i18n import _
from ..sim.hybrid import LOSS_CHUNKS, chunks_evenly, microbatches
from . import context_and_experts
from .common import Setting, comment, refuse, stage_counts, start
from .torchtitan_flavor import check_llama3, custom_flavor, flavor, hf_assets

VERSION = "0.3.0"
SCHEDULE = {"1f1b": "1F1B", "gpipe": "GPipe", "interleaved": "Interleaved1F1B"}  # torch's get_schedule_class names
AC = {"none": "None", "selective": "SelectiveAC.Config()", "op-sac": "SelectiveAC.Config()", "full": "FullAC.Config()"}
HEAD = """from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss
from torchtitan.components.optimizer import default_adamw
from torchtitan.config import CompileConfig, ParallelismConfig, TrainingConfig
from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC  # noqa: F401 — the file imports both: the plan's recompute picks one
from torchtitan.hf_datasets.text_datasets import HuggingFaceTextDataLoader
from torchtitan.models.common.config_utils import decoder_vocab_size
from torchtitan.models.llama3 import model_registry
from torchtitan.trainer import Trainer
"""
FP8 = "Float8LinearConverter.Config(filter_fqns=['lm_head'], model_compile_enabled=True)"
BODY = """def {name}() -> Trainer.Config:
{notes}    model_spec = model_registry({spec})
    return Trainer.Config(
        model_spec=model_spec,
        loss=ChunkedLossWrapper.Config(
            loss_fn=CrossEntropyLoss.Config(global_vocab_size=decoder_vocab_size(model_spec))),
        # {extra}
        hf_assets_path={assets!r},
        dataloader=HuggingFaceTextDataLoader.Config(dataset="c4"),
        optimizer=default_adamw(lr=3e-4),
{sections}    )
"""


def module_name(model) -> str:
    """The file's module name, which is also its function's: simlab_ + the model's name as an identifier."""
    return "simlab_" + (re.sub(r"\W+", "_", model.name.lower()).strip("_") or "model")


def _refusals(model, cluster, plan) -> None:
    check_llama3(model)
    kv = model.kv_heads or model.heads
    for broken, what, why in (
            (plan.attention == "eager", "attention='eager'", "torchtitan's llama3 attends with FlexAttention, which "
             "stores no s² scores: use attention='flash'"),
            (plan.bucket, f"bucket={plan.bucket}", "FSDP2 gathers and reduces one transformer block at a time; "
             "torchtitan has no bucket size: use bucket=()"),
            (kv % plan.tp, f"tp={plan.tp}", f"torchtitan splits the K/V heads too: kv_heads={kv} must divide by tp"),
            (plan.sequence_parallel and model.seq % plan.tp, "sequence_parallel=True", f"torchtitan needs "
             f"seq={model.seq} divisible by tp={plan.tp}"),
            (model.tied and plan.pp > 1, "tied=True", "torchtitan ties the embedding and the output layer only "
             f"without pipeline parallelism (pp={plan.pp})"),
            (plan.pp == 1 and plan.chunks > 1, f"chunks={plan.chunks}", "torchtitan pipelines only with pp > 1: "
             "use chunks=1"),
            # the file's loss is torchtitan's ChunkedLossWrapper (`hybrid.LOSSES`: "chunked"), which cuts each rank's
            # sequence into LOSS_CHUNKS equal slices; any plan's loss holds at least what it holds, so none is refused
            (not chunks_evenly(model.seq, plan.cp), f"seq={model.seq}", "torchtitan's ChunkedLossWrapper cuts each "
             f"rank's sequence (seq/cp = {model.seq // plan.cp}) into {LOSS_CHUNKS} equal chunks: it must divide by "
             f"{LOSS_CHUNKS}"),
            (plan.precision == "fp8" and not cluster.gpu.peak_flops_fp8, "precision='fp8'", "torchtitan's float8 "
             f"training (torchao) needs FP8 tensor cores (SM89 or newer); the {cluster.gpu.name} has none: use "
             "precision='mixed'")):
        if broken:
            refuse(what, why)


def model_parts(model, plan) -> list[list[str]]:
    """The modules of each virtual stage, stage s = chunk·p + rank (torchtitan's "loop" placement): each rank's
    layers (`stage_counts`) over its chunks, the extra ones first; the embedding first, norm and output last."""
    counts, p, v = stage_counts(model, plan), plan.pp, plan.chunks
    parts, first = [], 0
    for c in range(v):
        for r in range(p):
            here = counts[r] // v + (c < counts[r] % v)
            parts.append([f"layers.{i}" for i in range(first, first + here)])
            first += here
    parts[0].insert(0, "tok_embeddings")
    parts[-1] += ["norm", "lm_head"]
    empty = [s for s, part in enumerate(parts) if not part]
    if empty:
        refuse(f"chunks={v}", f"virtual stage {empty[0]} would hold no layer (layers per rank {counts}): "
                              "torchtitan builds no empty stage; use fewer chunks")
    return parts


def _model(model, plan, global_batch) -> list[Setting]:
    shape = _("{layers} layers, dim {dim}, {heads} heads ({kv} for K and V), FFN {ffn}, vocabulary {vocab}").format(
        layers=model.layers, dim=model.hidden, heads=model.heads, kv=model.kv_heads or model.heads,
        ffn=model.ffn_width, vocab=model.vocab)
    name, m, b = flavor(model), microbatches(plan, global_batch), plan.microbatch
    what = (_("torchtitan's llama3 flavor {flavor}: {shape}") if name else
            _("a llama3 flavor of this model's own: {shape}"))
    s = [Setting("model_spec", name or model.name, what.format(flavor=name, shape=shape)),
         Setting("training.seq_len", model.seq, _("tokens per sequence (s)")),
         Setting("training.local_batch_size", m * b, _("sequences per DP rank per step: {m} micro-batches of {b}, "
                                                       "one pipeline flush").format(m=m, b=b), 4) if plan.pp > 1 else
         Setting("training.local_batch_size", b, _("b sequences per forward; torchtitan accumulates the gradients "
                                                   "of {m} of them").format(m=m), 2),
         Setting("training.global_batch_size", global_batch, _("sequences per step: dp × m × b = {dp} × {m} × "
                                                               "{b}").format(dp=plan.dp, m=m, b=b), 2)]
    if plan.precision == "fp8":
        s.append(Setting("model_spec.converters", "float8", _("FP8 matmuls: torchao's Float8Linear (rowwise "
                                                              "scaling) in every linear layer but the output"), 6))
    return s


def _data_parallel(plan) -> list[Setting]:
    shard = plan.shard_size if plan.zero else 1
    replicas = plan.dp // shard  # torchtitan's mesh: pp, dp_replicate, dp_shard, cp, tp, outermost first
    again = {0: _("nothing is sharded, so nothing is gathered again"),
             1: _("ZeRO-1 becomes ZeRO-2: FSDP2 always shards the gradients: the same traffic, less memory"),
             2: _("ZeRO-2: the weights are gathered once per step and freed after the backward"),
             3: _("ZeRO-3: each layer's weights are gathered for its forward and again for its backward")}[plan.zero]
    return [
        Setting("parallelism.data_parallel_shard_degree", shard, _("ZeRO: weights, gradients and optimizer state "
                "sharded over {n} GPUs (FSDP2)").format(n=shard) if plan.zero else _("1: no sharding (ZeRO-0)"), 3),
        Setting("parallelism.data_parallel_replicate_degree", replicas, _("{n} replicas, gradients all-reduced "
                "across them (DDP, or HSDP's outer group)").format(n=replicas) if replicas > 1 else
                _("1: no replicas beyond the shard group"), 2),
        Setting("parallelism.fsdp_reshard_after_forward", "always" if plan.zero == 3 else "never", again, 3),
        Setting("training.enable_cpu_offload", plan.offload, _("ZeRO-Offload: FSDP's CPU offload keeps the fp32 "
                "weight shards, gradients and Adam's moments on the host, and the optimizer steps there")
                if plan.offload else _("everything stays on the GPU"), 3)]


def _model_parallel(model, plan) -> list[Setting]:
    s = [Setting("parallelism.tensor_parallel_degree", plan.tp, _("t: each layer's matrices split over {t} "
                                                                  "GPUs").format(t=plan.tp), 5),
         Setting("parallelism.enable_sequence_parallel", plan.sequence_parallel,
                 _("the norms' activations split along the sequence over the TP group") if plan.sequence_parallel else
                 _("off: the TP group keeps the norms' activations whole"), 5),
         Setting("parallelism.pipeline_parallel_degree", plan.pp, _("p: the layers cut into {p} pipeline "
                                                                    "stages").format(p=plan.pp) if plan.pp > 1
                 else _("1: no pipeline"), 4)]
    if plan.pp == 1:
        return s
    course = plan.schedule if plan.chunks > 1 or plan.schedule == "gpipe" else "1f1b"  # one chunk per rank: 1F1B
    name, parts = SCHEDULE[course], model_parts(model, plan)
    return s + [
        Setting("parallelism.pipeline_parallel_schedule", name, _("torch's {name}: the course's {schedule}").format(
            name=name, schedule=course), 4),
        Setting("parallelism.pipeline_parallel_microbatch_size", plan.microbatch, _("sequences per micro-batch "
                                                                                    "(b)"), 4),
        Setting("parallelism.module_fqns_per_model_part", parts, _("{n} virtual stages, {v} per rank (rank r holds "
                "stages r, r + p, …); layers per rank: {counts}").format(n=len(parts), v=plan.chunks,
                                                                         counts=stage_counts(model, plan)), 4),
        Setting("training.disable_cuda_graphs", True, _("torchtitan's CUDA graphs cannot capture a pipeline "
                                                        "schedule"), 4)]


def _compute(plan) -> list[Setting]:
    op_level = _("torchtitan's selective AC (op level): keeps the attention outputs and every second "
                 "matmul's output, recomputes the other matmuls and the element-wise work")
    ac = {"none": _("no recomputation: every activation is kept for the backward"),
          "selective": op_level, "op-sac": op_level,
          "full": _("store only each block's input; recompute the block in the backward")}[plan.recompute]
    async_tp = plan.tp > 1 and plan.sequence_parallel and "tp" in plan.overlaps
    compiled = async_tp or plan.precision == "fp8"
    half = plan.precision != "fp32"
    return [Setting("training.mixed_precision_param", "bfloat16" if half else "float32", _(
                "weights gathered and multiplied in bf16; FSDP keeps fp32 shards and reduces gradients in fp32") if half
                else _("no mixed precision: fp32 weights, gradients and matmuls"), 6),
            Setting("activation_checkpoint", plan.recompute, ac, 6),
            Setting("compile.enable", compiled, _("torch.compile each block: async TP and float8 need it") if compiled
                    else _("eager: nothing compiled"), 6)] + [
            Setting("compile.enable_async_tensor_parallel", True, _("hide TP's all-gathers and reduce-scatters behind "
                                                                    "its GEMMs"), 5)] * async_tp


def _launch(cluster, name) -> list[Setting]:
    per, nodes = min(cluster.gpus, cluster.gpus_per_node), cluster.nodes
    rows = [("--nnodes", nodes, _("{nodes} × {per} GPUs: world size {world}, which torchtitan checks equals dp × "
                                  "tp × pp").format(nodes=nodes, per=per, world=nodes * per)),
            ("--nproc-per-node", per, _("one process per GPU"))] + ([
             ("--standalone", True, _("one node: torchrun picks its own rendezvous"))] if nodes == 1 else [
             ("--rdzv-backend", "c10d", _("the nodes meet through torch's own store")),
             ("--rdzv-endpoint", "$MASTER_ADDR:$MASTER_PORT", _("the first node's address and port")),
             ("--rdzv-id", "$JOB_ID", _("the same id on every node"))]) + [
            ("--module", name, _("the module torchtitan imports: this file")),
            ("--config", name, _("the function in it that returns the config"))]
    return [Setting(flag, value, what, 1, "launcher") for flag, value, what in rows]


def settings(model, cluster, global_batch: int, plan) -> list[Setting]:
    """Every setting of the plan: torchrun's and torchtitan's flags, then the config's fields, named as torchtitan's
    command line spells them (--section.field). A one-line ValueError where torchtitan cannot say the plan."""
    _refusals(model, cluster, plan)
    start(model, cluster, global_batch, plan)
    return (_launch(cluster, module_name(model)) + _model(model, plan, global_batch) + _data_parallel(plan)
            + _model_parallel(model, plan) + context_and_experts.torchtitan(model, plan) + _compute(plan))


def command(model, cluster, global_batch: int, plan) -> str:
    """The command to run on every node, from the folder holding the emitted file."""
    words = [s.name if s.value is True else f"{s.name} " + (f'"{s.value}"' if "$" in str(s.value) else str(s.value))
             for s in settings(model, cluster, global_batch, plan) if s.where == "launcher"]  # --module, --config last
    return " ".join(["PYTHONPATH=. torchrun", *words[:-2], "-m torchtitan.train", *words[-2:]])


def _literal(value, pad: str) -> str:
    if not isinstance(value, list):
        return repr(value)
    rows = []  # module_fqns_per_model_part: one virtual stage per line, its run of layers as a range
    for part in value:
        layers = [int(x.split(".")[1]) for x in part if x.startswith("layers.")]
        run = f'*(f"layers.{{i}}" for i in range({layers[0]}, {layers[-1] + 1}))' if layers else ""
        words = [repr(x) for x in part if x == "tok_embeddings"] + [run] * bool(run) + [
            repr(x) for x in part if x in ("norm", "lm_head")]
        rows.append(f"{pad}    [{', '.join(words)}],\n")
    return "[\n" + "".join(rows) + f"{pad}]"


def emit(model, cluster, global_batch: int, plan) -> str:
    """The Python file (save it as `module_name(model)`.py) whose function torchtitan 0.3.0 runs for `plan`."""
    every, name, tuned = settings(model, cluster, global_batch, plan), module_name(model), flavor(model)
    field, m, pad = {s.name: s for s in every}, microbatches(plan, global_batch), " " * 12
    head = [_("torchtitan {version} config for {model} on {gpus} × {gpu}, global batch {batch}: written by "
              "simlab").format(version=VERSION, model=model.name, gpus=cluster.gpus, gpu=cluster.gpu.name,
                               batch=global_batch), "",
            _("plan: tp={tp} × pp={pp} × dp={dp}; each DP replica runs {m} micro-batches of {b} per step; precision "
              "{precision}").format(tp=plan.tp, pp=plan.pp, dp=plan.dp, m=m, b=plan.microbatch,
                                    precision=plan.precision),
            _("save as {file} and run on every node, from its folder:").format(file=name + ".py"),
            "    " + command(model, cluster, global_batch, plan), ""]
    head += [f"  {s.name if s.value is True else f'{s.name} {s.value}'}  # {comment(s)}" for s in every
             if s.where == "launcher"]
    text = '"""' + "\n".join(head) + '\n"""\n' + HEAD
    text += "from torchtitan.components.quantization import Float8LinearConverter\n" * (plan.precision == "fp8")
    rotate = field.get("set_rotate_method")  # torch's CP exchange, chosen in every process before training starts
    text += f"\n{context_and_experts.ROTATE}\n\n# {comment(rotate)}\nset_rotate_method({rotate.value!r})\n" if rotate else ""
    text += "\n\n" + ("" if tuned else custom_flavor(model, name))
    sections = []
    for section, cls in (("training", "TrainingConfig"), ("parallelism", "ParallelismConfig"),
                         ("activation_checkpoint", ""), ("compile", "CompileConfig")):
        rows = "".join(f"{pad}# {comment(s)}\n{pad}{s.name.split('.', 1)[1]}={_literal(s.value, pad)},\n"
                       for s in every if s.name.startswith(section + "."))
        sections.append(f"        {section}={cls}(\n{rows}        ),\n" if cls else
                        f"        # {comment(field[section])}\n        {section}={AC[plan.recompute]},\n")
    return text + BODY.format(
        name=name, spec=repr(tuned or model.name) + f", converters=[{FP8}]" * (plan.precision == "fp8"),
        notes="".join(f"    # {comment(field[k])}\n" for k in ("model_spec", "model_spec.converters") if k in field),
        sections="".join(sections), assets=hf_assets(model),
        extra=_("not part of the plan: the tokenizer (scripts/download_hf_assets.py), the data, the learning rate"))
