"""`simlab.export.megatron` against Megatron itself: each emitted script is run by bash (with a stand-in
`torchrun` that prints what it was given), torchrun's part is read by torch's own argument parser, and
Megatron's part becomes megatron.core's TransformerConfig, DistributedDataParallelConfig and OptimizerConfig,
whose own validation must accept it. Then megatron.core's helpers redo the world-size arithmetic: the rank
groups (RankGenerator), the micro-batches (ConstantNumMicroBatchesCalculator), the layers each pipeline stage
and chunk builds (get_num_layers_to_build, PipelineParallelLayerLayout), and megatron.core's GPT model built
from the shape flags holds exactly the parameters simlab counts.

megatron-core does not ship Megatron-LM's argument parser (megatron/training/arguments.py), so the flags
travel to the configs the way Megatron-LM @ core_v0.16.1 moves them: the flags that arguments.py generates from
TransformerConfig by argument_utils.py's rule (field `foo_bar` is `--foo-bar`, a True-by-default switch
`--no-foo-bar`, unless the field's metadata names it) are found from the installed dataclass; DDP and optimizer
flags by their field names (training.py copies `args.<field>` into DistributedDataParallelConfig); the few
hand-written flags by the translations of `validate_args` and `core_transformer_config_from_args` (HAND below).
A flag none of these knows fails the test.
"""
import dataclasses
import enum
import os
import subprocess

import pytest
import torch
import torch.nn.functional as F
from megatron.core.distributed import DistributedDataParallelConfig
from megatron.core.num_microbatches_calculator import ConstantNumMicroBatchesCalculator
from megatron.core.optimizer import OptimizerConfig
from megatron.core.parallel_state import RankGenerator
from megatron.core.transformer import TransformerConfig
from megatron.core.transformer.enums import AttnBackend, LayerType
from megatron.core.transformer.transformer_block import get_num_layers_to_build
from torch.distributed.run import get_args_parser

from simlab import i18n
from simlab.export import emit as emit_any
from simlab.export.megatron import emit, settings
from simlab.sim.advisor import search
from simlab.sim.gpus import GPUS
from simlab.sim.hardware import Cluster, cluster
from simlab.sim.hybrid import Plan
from simlab.sim.hybrid_scenarios import SCENARIOS
from simlab.sim.model import PRESETS, Transformer

pytestmark = pytest.mark.usefixtures("english_afterwards")  # one test switches to Chinese

# Megatron-LM core_v0.16.1, megatron/training/arguments.py: flags written by hand, and what validate_args and
# core_transformer_config_from_args (or training.py, for DDP) turn each into
HAND = {"--micro-batch-size", "--global-batch-size", "--seq-length", "--max-position-embeddings", "--swiglu",
        "--untie-embeddings-and-output-weights", "--position-embedding-type", "--group-query-attention",
        "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers",
        "--num-virtual-stages-per-pipeline-rank", "--pipeline-model-parallel-layout", "--grad-reduce-in-bf16",
        "--accumulate-allreduce-grads-in-fp32", "--fp8-param-gather", "--no-gradient-accumulation-fusion",
        "--ckpt-format", "--ddp-bucket-size", "--num-experts"}
FIELDS = {c: {f.name for f in dataclasses.fields(c)} for c in (DistributedDataParallelConfig, OptimizerConfig)}


def generated_flags() -> dict:
    """{flag: (TransformerConfig field, value a bare switch sets)}: argument_utils.py's naming rule, applied to the
    installed dataclass (a bool field is a switch that flips its default)."""
    table = {}
    for f in dataclasses.fields(TransformerConfig):
        dash = f.name.replace("_", "-")
        switch = not f.default if isinstance(f.default, bool) else None
        names = f.metadata.get("argparse_meta", {}).get("arg_names") or (
            [f"--no-{dash}", f"--disable-{dash}"] if f.default is True else [f"--{dash}"])
        table.update({n: (f, switch) for n in names})
    return table


GENERATED = generated_flags()


def run_script(text: str) -> tuple[str, list[str], dict]:
    """Run the script under bash with `torchrun` a shell function that prints its environment and arguments:
    (CUDA_DEVICE_MAX_CONNECTIONS, torchrun's own arguments, {Megatron flag: value, True for a switch})."""
    fake = 'torchrun() { printf "%s\\0" "${CUDA_DEVICE_MAX_CONNECTIONS-unset}" "$@"; }\n'
    env = {"PATH": os.environ["PATH"], "MASTER_ADDR": "node0", "MASTER_PORT": "29500", "JOB_ID": "7",
           "CUDA_DEVICE_MAX_CONNECTIONS": "8"}  # 8: the script must set or unset it itself
    out = subprocess.run(["bash", "-c", fake + text], env=env, capture_output=True, text=True, check=True).stdout
    connections, *argv = out.split("\0")[:-1]
    at = argv.index("pretrain_gpt.py")
    flags, rest = {}, argv[at + 1:]
    while rest:
        name = rest.pop(0)
        assert name.startswith("--") and name not in flags, name
        flags[name] = rest.pop(0) if rest and not rest[0].startswith("--") else True
    return connections, argv[:at], flags


def value(text, default):
    """A flag's text as the type its field holds (argparse's `type`, inferred from the field's default)."""
    if isinstance(default, enum.Enum):
        return type(default)[text]
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def megatron_configs(flags: dict, world: int) -> dict:
    """The flags as Megatron-LM hands them to megatron.core: TransformerConfig, DDP and optimizer configs (each
    validated by its own __post_init__), with the derived data-parallel size and micro-batch count."""
    tc, ddp = {}, {}
    for name, given in flags.items():
        if name in HAND:
            continue
        if name in GENERATED:
            field, switch = GENERATED[name]
            tc[field.name] = switch if switch is not None else value(given, field.default)
        elif name[2:].replace("-", "_") in FIELDS[DistributedDataParallelConfig]:
            ddp[name[2:].replace("-", "_")] = True if given is True else value(given, None)
        else:
            pytest.fail(f"{name}: a flag Megatron-LM core_v0.16.1 does not have")
    tp, pp = tc.get("tensor_model_parallel_size", 1), tc.get("pipeline_model_parallel_size", 1)
    cp = tc.get("context_parallel_size", 1)
    assert world % (tp * cp * pp) == 0
    dp = world // (tp * cp * pp)  # Megatron's initialize: data-parallel size = world / (tp · cp · pp)
    if "--num-experts" in flags:  # arguments.py's own flag; core_transformer_config_from_args renames it
        tc["num_moe_experts"] = int(flags["--num-experts"])
    dtype = torch.bfloat16 if tc.get("bf16") else torch.half if tc.get("fp16") else torch.float32
    first, last = flags.get("--decoder-first-pipeline-num-layers"), flags.get("--decoder-last-pipeline-num-layers")
    tc.update(params_dtype=dtype, pipeline_dtype=dtype, fp8_param="--fp8-param-gather" in flags,
              num_layers_in_first_pipeline_stage=int(first) if first else None,
              num_layers_in_last_pipeline_stage=int(last) if last else None)
    if "--swiglu" in flags:
        tc.update(gated_linear_unit=True, activation_func=F.silu)
    if "--group-query-attention" not in flags:
        tc["num_query_groups"] = None
    v = int(flags.get("--num-virtual-stages-per-pipeline-rank", 1))
    tc["virtual_pipeline_model_parallel_size"] = v if v > 1 else None
    if "--pipeline-model-parallel-layout" in flags:
        tc["pipeline_model_parallel_layout"] = flags["--pipeline-model-parallel-layout"]
    if "--no-gradient-accumulation-fusion" in flags:
        tc["gradient_accumulation_fusion"] = False
    config = TransformerConfig(**tc)
    # validate_args: bf16 accumulates and reduces gradients in fp32 unless --grad-reduce-in-bf16; fp16 only if asked
    ddp["grad_reduce_in_fp32"] = bool(flags.get("--accumulate-allreduce-grads-in-fp32")) or (
        bool(tc.get("bf16")) and "--grad-reduce-in-bf16" not in flags)
    ddp["fp8_param_gather"] = "--fp8-param-gather" in flags
    if "--ddp-bucket-size" in flags:
        ddp["bucket_size"] = int(flags["--ddp-bucket-size"])
    ddp_config = DistributedDataParallelConfig(**ddp)
    optimizer = OptimizerConfig(bf16=bool(tc.get("bf16")), fp16=bool(tc.get("fp16")), params_dtype=dtype,
                                use_distributed_optimizer=ddp_config.use_distributed_optimizer)
    m = ConstantNumMicroBatchesCalculator(int(flags["--global-batch-size"]), int(flags["--micro-batch-size"]), dp,
                                          False, 0).get()
    return {"config": config, "ddp": ddp_config, "optimizer": optimizer, "dp": dp, "microbatches": m}


def stage_layers(config) -> list[list[int]]:
    """Layers each pipeline rank builds, chunk by chunk, as megatron.core computes them."""
    pp, v = config.pipeline_model_parallel_size, config.virtual_pipeline_model_parallel_size or 1
    if config.pipeline_model_parallel_layout is not None:
        return [[chunk.count(LayerType.decoder) for chunk in rank] for rank in config.pipeline_model_parallel_layout.layout]
    return [[get_num_layers_to_build(config, vp_stage=j if v > 1 else None, pp_rank=i) for j in range(v)]
            for i in range(pp)]


def check(model: Transformer, c, global_batch: int, plan: Plan) -> dict:
    """Emit, run, build megatron.core's configs and hold every number to the plan; returns the configs."""
    connections, launcher, flags = run_script(emit(model, c, global_batch, plan))
    torchrun = get_args_parser().parse_args(launcher + ["pretrain_gpt.py"])
    nodes = int(str(torchrun.nnodes).split(":")[-1])
    world = nodes * int(torchrun.nproc_per_node)
    assert (nodes, world) == (c.nodes, c.gpus) and (torchrun.standalone == (c.nodes == 1))
    if c.nodes > 1:
        assert torchrun.rdzv_endpoint == "node0:29500" and torchrun.rdzv_id == "7"
    got = megatron_configs(flags, world)
    config, ddp = got["config"], got["ddp"]
    tp, pp, v = config.tensor_model_parallel_size, config.pipeline_model_parallel_size, plan.chunks
    cp = config.context_parallel_size
    assert (tp, cp, pp, got["dp"]) == (plan.tp, plan.cp, plan.pp, plan.dp)
    ranks = RankGenerator(tp=tp, ep=1, dp=got["dp"], pp=pp, cp=cp, order="tp-cp-ep-dp-pp")
    for kind, size in (("tp", plan.tp), ("cp", plan.cp), ("pp", plan.pp), ("dp", plan.dp)):
        groups = ranks.get_ranks(kind)
        assert len(groups) * size == c.gpus and all(len(g) == size for g in groups)
    assert got["microbatches"] == global_batch // (plan.dp * plan.microbatch)
    interleaved = plan.schedule == "interleaved" and v > 1 and pp > 1
    assert config.virtual_pipeline_model_parallel_size == (v if interleaved else None)
    built = stage_layers(config)
    per_stage = [sum(chunks) for chunks in built]
    assert sum(per_stage) == model.layers and min(per_stage) >= 1
    if plan.stage_layers:
        assert per_stage == list(plan.stage_layers)
    else:  # no stage holds more than the ceil(L/p) the memory model priced
        assert max(per_stage) == -(-model.layers // pp)
    assert all(len(chunks) == (v if interleaved else 1) for chunks in built)
    sharded = {0: (False, "no_shard"), 1: (False, "no_shard"), 2: (True, "optim_grads"), 3: (True, "optim_grads_params")}
    assert (ddp.use_megatron_fsdp, ddp.data_parallel_sharding_strategy) == sharded[plan.zero]
    assert ddp.use_distributed_optimizer == (plan.zero >= 1) == got["optimizer"].use_distributed_optimizer
    instances = ddp.num_distributed_optimizer_instances
    assert plan.dp // instances == (plan.shard or plan.dp)  # Megatron's intra-instance DP size = the shard group
    assert ddp.overlap_grad_reduce == ("dp" in plan.overlaps)
    assert ddp.overlap_param_gather == ("params" in plan.overlaps and plan.zero >= 1)
    assert config.tp_comm_overlap == ("tp" in plan.overlaps and plan.tp > 1)
    assert config.sequence_parallel == plan.sequence_parallel
    assert config.recompute_granularity == (None if plan.recompute == "none" else plan.recompute)
    if plan.recompute == "full":
        assert (config.recompute_method, config.recompute_num_layers) == ("uniform", 1)
    assert config.attention_backend == (AttnBackend.flash if plan.attention == "flash" else AttnBackend.unfused)
    half = None if plan.precision == "fp32" else "fp16" if c.gpu.name.startswith("v100") else "bf16"
    assert (config.bf16, config.fp16) == (half == "bf16", half == "fp16")
    assert config.fp8 == ("hybrid" if plan.precision == "fp8" else None)
    grads_fp32 = plan.precision in ("fp32", "mixed-fp32-grads", "fp8")  # lesson 3's bytes per gradient: 4
    assert ddp.grad_reduce_in_fp32 == (grads_fp32 and half is not None)
    assert connections == ("1" if plan.tp > 1 and plan.zero < 2 else "unset" if plan.zero >= 2 else "8")
    assert (config.num_layers, config.hidden_size, config.num_attention_heads) == (model.layers, model.hidden,
                                                                                   model.heads)
    assert config.num_query_groups == (model.kv_heads or model.heads)
    assert config.ffn_hidden_size == model.ffn_width and config.gated_linear_unit == model.gated
    assert config.add_bias_linear == model.biases and config.normalization == ("LayerNorm" if model.biases else "RMSNorm")
    assert int(flags["--seq-length"]) == model.seq and ("--untie-embeddings-and-output-weights" in flags) != model.tied
    assert (config.hidden_dropout == 0) != model.dropout
    return got


# ---- lesson 6's scenarios and more: the advisor's best plan, exported as is ---------------------------------------

BEST = [(s.key, s.model, s.cluster(), s.global_batch) for s in SCENARIOS] + [
    ("llama3-70b-64-h100", PRESETS["llama3-70b"], cluster("h100-80gb", gpus=64), 128),
    ("llama3-405b-512-h100", PRESETS["llama3-405b"], cluster("h100-80gb", gpus=512), 512),
    ("llama3-8b-16-a100", PRESETS["llama3-8b"], cluster("a100-80gb", gpus=16), 64)]


@pytest.mark.parametrize("precision", ["mixed", "fp8"])
@pytest.mark.parametrize("key, model, c, batch", BEST, ids=[b[0] for b in BEST])
def test_the_advisors_best_plan_is_a_megatron_run(key, model, c, batch, precision):
    if precision == "fp8" and not c.gpu.peak_flops_fp8:
        precision = "mixed-fp32-grads"  # an A100 or 4090 has no FP8: Megatron's own default precision instead
    best = search(model, c, batch, precision=precision)["best"]
    plan = Plan(**best["config"], precision=precision)
    if plan.offload:  # one GPU, too small a model for it: ZeRO-Offload, which Megatron cannot say
        with pytest.raises(ValueError, match=r"^offload=True: .*--emit deepspeed") as err:
            emit(model, c, batch, plan)
        assert "\n" not in str(err.value)
        return
    check(model, c, batch, plan)


# ---- every knob by hand --------------------------------------------------------------------------------------------

L8, L70, G175 = PRESETS["llama3-8b"], PRESETS["llama3-70b"], PRESETS["gpt3-175b"]
H16, A16 = cluster("h100-80gb", gpus=16), cluster("a100-80gb", gpus=16)
V100 = cluster("a100-80gb", gpus=16).with_(gpu=GPUS["a100-80gb"].with_(name="v100-32gb"))  # no bf16: fp16
HAND_BUILT = [
    (L8, H16, 64, Plan(dp=16)),
    (L8, H16, 64, Plan(dp=16, zero=1, overlap="dp,params", bucket=(40_000_000, 40_000_000))),
    (L8, H16, 64, Plan(dp=16, zero=2, shard=8, overlap="dp,params")),
    (L8, H16, 64, Plan(dp=16, zero=3, shard=4, recompute="full", bucket=(5_000_000, 5_000_000))),
    (L8, H16, 64, Plan(tp=2, pp=2, dp=4, zero=1, shard=2, sequence_parallel=True, overlap="dp,params,tp")),
    (L8, H16, 64, Plan(tp=4, pp=2, dp=2, schedule="interleaved", chunks=2, microbatch=2, precision="fp8", zero=1)),
    (L8, H16, 64, Plan(tp=2, pp=4, dp=2, schedule="interleaved", chunks=3, overlap="none")),  # 8 layers / 3 chunks
    (L8, H16, 64, Plan(pp=4, dp=4, stage_layers=(7, 9, 9, 7), recompute="selective", attention="eager")),
    (L8, H16, 64, Plan(pp=4, dp=4, stage_layers=(6, 9, 10, 7), precision="fp32")),  # middles differ: a layout
    (L8, H16, 64, Plan(pp=4, dp=4, schedule="interleaved", chunks=2, stage_layers=(6, 10, 10, 6))),
    (PRESETS["llama3-405b"], cluster("h100-80gb", gpus=128), 128, Plan(tp=8, pp=16, sequence_parallel=True,
                                                                       stage_layers=(7,) + (8,) * 14 + (7,))),
    (PRESETS["bloom-176b"].with_(embedding_norm=False), cluster("a100-80gb", gpus=96), 96, Plan(tp=4, pp=12, dp=2)),
    (G175, A16, 32, Plan(tp=8, pp=2, precision="mixed-fp32-grads", recompute="full")),
    (G175, V100, 32, Plan(tp=8, pp=2, precision="mixed")),
    (G175, V100, 32, Plan(tp=8, pp=2, precision="mixed-fp32-grads")),
    (L70, cluster("h100-80gb", gpus=8), 16, Plan(tp=8, zero=0, sequence_parallel=True, overlap="tp")),
    (L8, cluster("h100-80gb", gpus=1), 8, Plan(microbatch=2, recompute="full")),
    (L8, Cluster(GPUS["h100-80gb"], 4, 8, 1600.0), 8, Plan(dp=4, zero=1)),  # half a node, as Cluster allows
]


@pytest.mark.parametrize("model, c, batch, plan", HAND_BUILT, ids=[f"{m.name}-{p.tp}x{p.pp}x{p.dp}-{i}" for i, (
    m, _c, _b, p) in enumerate(HAND_BUILT)])
def test_a_hand_built_plan_is_a_megatron_run(model, c, batch, plan):
    check(model, c, batch, plan)


def test_the_hand_built_plans_turn_every_knob():
    plans = [p for *_rest, p in HAND_BUILT]
    seen = {knob: {getattr(p, knob) for p in plans} for knob in (
        "zero", "schedule", "recompute", "precision", "attention", "sequence_parallel")}
    assert seen["zero"] == {0, 1, 2, 3} and seen["schedule"] == {"1f1b", "interleaved"}
    assert seen["recompute"] == {"none", "selective", "full"} and seen["attention"] == {"eager", "flash"}
    assert seen["precision"] == {"fp32", "mixed", "mixed-fp32-grads", "fp8"} and seen["sequence_parallel"] == {0, 1}
    assert {o for p in plans for o in p.overlaps} == {"dp", "params", "tp"} and any(not p.overlaps for p in plans)
    assert any(p.shard and p.zero == 1 for p in plans) and any(p.shard and p.zero >= 2 for p in plans)
    assert any(p.bucket for p in plans) and any(p.stage_layers for p in plans)
    assert {c.nodes == 1 for _m, c, _b, _p in HAND_BUILT} == {True, False}
    assert {c.gpu.name for _m, c, _b, _p in HAND_BUILT} >= {"h100-80gb", "a100-80gb", "v100-32gb"}


def test_an_uneven_split_is_megatrons_own_and_no_stage_exceeds_the_ceiling():
    """126 layers on 16 stages (Llama 3 405B) without stage_layers: ceil = 8 on the middles, 7 on the ends."""
    flags = run_script(emit(PRESETS["llama3-405b"], cluster("h100-80gb", gpus=128), 128, Plan(tp=8, pp=16)))[2]
    assert (flags["--decoder-first-pipeline-num-layers"], flags["--decoder-last-pipeline-num-layers"]) == ("7", "7")


# ---- what it cannot say, in one line -------------------------------------------------------------------------------

REFUSED = [
    (L8, H16, 64, Plan(dp=16, zero=2, offload=True), r"^offload=True: .*keeps the gradients on the GPU"),
    (L8, H16, 64, Plan(pp=4, dp=4, schedule="gpipe"), r"^schedule='gpipe': Megatron-LM runs 1F1B"),
    (L8, H16, 64, Plan(dp=16, zero=1, overlap="params"), r"^overlap='params': .*--overlap-grad-reduce"),
    (L8, H16, 64, Plan(tp=2, dp=8, overlap="dp,tp"), r"^overlap='dp,tp': .*sequence parallelism"),
    (L8, A16, 64, Plan(tp=2, dp=8, precision="fp8"), r"^precision='fp8': the a100-80gb has no FP8"),
    (L8, H16, 64, Plan(dp=16, zero=1, precision="bf16-optimizer"), r"^precision='bf16-optimizer': bf16 master"),
    (PRESETS["bloom-176b"], cluster("a100-80gb", gpus=96), 96, Plan(tp=4, pp=12, dp=2),
     r"^model='bloom-176b': its layer norm after the token embedding"),
    (L8, H16, 64, Plan(dp=16, zero=1, bucket=(1000, 2000)), r"^bucket=\(1000, 2000\): .*the same units"),
    (L8, H16, 64, Plan(dp=16, zero=1, overlap="none", bucket=(1000, 1000)), r"^bucket=\(1000, 1000\): .*overlaps"),
    (L8, H16, 64, Plan(tp=2, pp=2, dp=2), r"^tp=2: tp\*pp\*dp = 8 must use all gpus=16"),  # check_plan's own
    (L8, H16, 64, Plan(dp=16, zero=1, attention="flash-triton"), r"^attention='flash-triton': .*use attention='flash'"),
]


@pytest.mark.parametrize("model, c, batch, plan, message", REFUSED, ids=[r[4][1:30] for r in REFUSED])
def test_what_megatron_cannot_say_is_refused_in_one_line(model, c, batch, plan, message):
    with pytest.raises(ValueError, match=message) as err:
        emit(model, c, batch, plan)
    assert "\n" not in str(err.value)


# ---- the text itself -----------------------------------------------------------------------------------------------

def test_every_flag_says_what_it_does_and_which_lesson_taught_it():
    text = emit(L8, H16, 64, Plan(tp=2, pp=2, dp=4, zero=1, sequence_parallel=True))
    flag_lines = [line for line in text.splitlines() if line.startswith("    --")]
    assert len(flag_lines) == len(settings(L8, H16, 64, Plan(tp=2, pp=2, dp=4, zero=1, sequence_parallel=True))) - 1
    assert all("  # lesson " in line or "  # the model: " in line for line in flag_lines)
    assert "--tensor-model-parallel-size 2" in text and "# lesson 5:" in text.split("--tensor-model")[1].split("\n")[0]
    assert emit_any("megatron", L8, H16, 64, Plan(tp=2, pp=2, dp=4)) == emit(L8, H16, 64, Plan(tp=2, pp=2, dp=4))


def test_the_chinese_script_runs_the_same_flags():
    plan = Plan(tp=2, pp=2, dp=4, zero=1, sequence_parallel=True, recompute="full")
    english = run_script(emit(L8, H16, 64, plan))
    i18n.set_language("zh")
    assert run_script(emit(L8, H16, 64, plan)) == english


# ---- the shape flags build megatron.core's GPT with simlab's parameter count ---------------------------------------

SHAPES = [Transformer("llama-like", 2, 64, 8, seq=32, vocab=100, ffn=160, kv_heads=2, gated=True, tied=False,
                      learned_positions=False, biases=False, dropout=False),
          Transformer("gpt-like", 3, 96, 6, seq=48, vocab=128),
          Transformer("mha-untied-rope", 2, 64, 4, seq=16, vocab=80, tied=False, learned_positions=False)]


@pytest.fixture
def one_process_group(tmp_path):
    """A one-process gloo group and megatron.core's model-parallel state (tp = pp = 1), torn down after."""
    import torch.distributed as dist
    from megatron.core import parallel_state
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    parallel_state.initialize_model_parallel(1, 1)
    yield
    parallel_state.destroy_model_parallel()
    dist.destroy_process_group()


@pytest.mark.parametrize("model", SHAPES, ids=[m.name for m in SHAPES])
def test_the_shape_flags_build_a_gpt_with_simlabs_parameter_count(model, one_process_group):
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    flags = run_script(emit(model, cluster("h100-80gb", gpus=1), 4, Plan()))[2]
    config = dataclasses.replace(megatron_configs(flags, 1)["config"], use_cpu_initialization=True)
    spec = get_gpt_layer_local_spec(normalization=config.normalization)
    gpt = GPTModel(config, spec, vocab_size=model.vocab, max_sequence_length=int(flags["--max-position-embeddings"]),
                   position_embedding_type=flags["--position-embedding-type"],
                   share_embeddings_and_output_weights="--untie-embeddings-and-output-weights" not in flags)
    assert sum(p.numel() for p in gpt.parameters()) == model.params
