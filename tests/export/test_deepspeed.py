"""`simlab.export.deepspeed` against DeepSpeed itself: every emitted ds_config.json is loaded by
`deepspeed.runtime.config.DeepSpeedConfig` — the object `deepspeed.initialize` builds, which resolves the batch
(and asserts train_batch_size = micro-batch × accumulation steps × DP replicas), the ZeRO section, Offload,
precision, AutoTP and the pipeline settings — and what it resolved is held to the plan. The pipeline's layout is
checked with DeepSpeed's own `PipeModelDataParallelTopology`, the launch line with its launcher's parser, and each
refusal quotes a sentence the installed DeepSpeed really contains.

World size: DeepSpeedConfig asks `deepspeed.comm.get_rank()` first and, with no process group, falls back to a
world of 1. We give it what a real run gives it instead: `get_rank` patched to rank 0 (the one call that needs a
process group), and the data-parallel size through its own `mpu` argument — the object Megatron-DeepSpeed passes
and a PipelineModule's grid is (`get_data_parallel_world_size`); DeepSpeedConfig then counts replicas as the
engine does. No DeepSpeed code runs differently for it.
"""
import json
import re
import shlex
from pathlib import Path

import deepspeed
import deepspeed.comm
import pytest
from deepspeed.launcher.runner import parse_args as launcher_args
from deepspeed.runtime.config import DeepSpeedConfig, DeepSpeedConfigError
from deepspeed.runtime.pipe.topology import PipeModelDataParallelTopology

from simlab.export import emit as emit_any
from simlab.export.deepspeed import config, emit, explain, settings
from simlab.sim.advisor import search
from simlab.sim.gpus import GPUS
from simlab.sim.hardware import cluster
from simlab.sim.hybrid import Plan
from simlab.sim.hybrid_scenarios import SCENARIOS
from simlab.sim.model import PRESETS

SOURCE = Path(deepspeed.__file__).parent


class DataParallelUnit:
    """The part of an mpu DeepSpeedConfig reads: how many data-parallel replicas there are."""

    def __init__(self, dp):
        self.dp = dp

    def get_data_parallel_world_size(self):
        return self.dp


@pytest.fixture
def load(monkeypatch):
    """load(text, dp) -> DeepSpeedConfig of the JSON text, on `dp` data-parallel replicas."""
    monkeypatch.setattr(deepspeed.comm, "get_rank", lambda group=None: 0)
    return lambda text, dp: DeepSpeedConfig(json.loads(text), mpu=DataParallelUnit(dp))


def check(load, model, c, batch, plan):
    """Emit, load into DeepSpeed, and hold what it resolved to the plan."""
    text = emit(model, c, batch, plan)
    ds = load(text, plan.dp)
    m = batch // (plan.dp * plan.microbatch)
    assert (ds.train_batch_size, ds.train_micro_batch_size_per_gpu, ds.gradient_accumulation_steps) == (
        batch, plan.microbatch, m)
    assert ds.zero_optimization_stage == plan.zero
    offload = ds.zero_config.offload_optimizer
    assert (offload is not None and getattr(offload.device, "value", offload.device) == "cpu") == plan.offload
    assert ds.zero_config.offload_param is None  # the course's Offload keeps the weights on the GPU
    half = None if plan.precision == "fp32" else "fp16" if c.gpu.name.startswith("v100") else "bf16"
    assert (ds.bfloat16_config.enabled, ds.float16_config.enabled) == (half == "bf16", half == "fp16")
    if half == "fp16":
        assert ds.float16_config.loss_scale == 0  # dynamic loss scaling
    assert ds.grad_accum_dtype == ("fp32" if plan.precision == "mixed-fp32-grads" else None)
    if plan.zero >= 1:
        assert ds.zero_config.overlap_comm == ("dp" in plan.overlaps)
    if plan.zero == 3:
        prefetch = plan.bucket[0] if plan.bucket else 50_000_000  # DeepSpeed's default: 5e7
        assert ds.zero_config.prefetch_bucket_size == (prefetch if "params" in plan.overlaps else 0)
    if plan.bucket:
        assert ds.zero_config.reduce_bucket_size == plan.bucket[1]
    assert ds.tensor_parallel_config.autotp_size == (plan.tp if plan.tp > 1 and plan.pp == 1 else 0)
    checkpoint_every = 1 if plan.recompute == "full" and plan.pp > 1 else 0
    assert ds.pipeline["activation_checkpoint_interval"] == checkpoint_every
    assert ds.pipeline["stages"] == "auto"  # the PipelineModule's num_stages decides, not the file
    if plan.pp > 1:
        grid = PipeModelDataParallelTopology(num_pp=plan.pp, num_mp=plan.tp, num_dp=plan.dp)
        assert grid.world_size() == c.gpus and grid.get_dim("data") == plan.dp
    else:
        assert plan.tp * plan.dp == c.gpus
    return json.loads(text), ds


# ---- lesson 6's scenarios: the advisor's best plan among those DeepSpeed can run --------------------------------

# see the refusals below; cp=1: DeepSpeed's context parallelism is Ulysses in the model code, and among these plans a
# ring CP plan can be the fastest (GPT-3 175B on 1024 GPUs)
DEEPSPEED_CAN = dict(overlap="dp,params", pp=1, sequence_parallel=False, cp=1)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.key for s in SCENARIOS])
def test_the_advisors_best_plan_is_a_deepspeed_config(load, scenario):
    model, c, batch = scenario.model, scenario.cluster(), scenario.global_batch
    plan = Plan(**search(model, c, batch)["best"]["config"])
    try:
        settings(model, c, batch, plan)
    except ValueError as err:  # DeepSpeed cannot run the overall best: one line why, then its best of what it can
        assert "\n" not in str(err)
        result = search(model, c, batch, zero=3, **DEEPSPEED_CAN) if plan.dp > 1 else search(
            model, c, batch, overlap="none", pp=1, sequence_parallel=False, cp=1)
        assert result["best"] is not None, f"nothing DeepSpeed can run fits, after: {err}"
        plan = Plan(**result["best"]["config"])
    check(load, model, c, batch, plan)


def test_the_first_scenarios_best_plans_need_no_refusal(load):
    """One GPU (with and without Offload) and DDP on a node: DeepSpeed runs the advisor's own best as it is."""
    for key in ("1gpu-fits", "1gpu-too-big"):
        s = next(x for x in SCENARIOS if x.key == key)
        plan = Plan(**search(s.model, s.cluster(), s.global_batch)["best"]["config"])
        check(load, s.model, s.cluster(), s.global_batch, plan)


# ---- every knob by hand --------------------------------------------------------------------------------------------

L8, G175 = PRESETS["llama3-8b"], PRESETS["gpt3-175b"]
H16 = cluster("h100-80gb", gpus=16)
V100 = cluster("a100-80gb", gpus=16).with_(gpu=GPUS["a100-80gb"].with_(name="v100-32gb"))  # no bf16: fp16
HAND_BUILT = [
    (L8, H16, 64, Plan(dp=16, overlap="none")),
    (L8, H16, 64, Plan(dp=16, zero=1, overlap="dp", bucket=(100_000_000, 200_000_000))),
    (L8, H16, 64, Plan(dp=16, zero=1, overlap="dp", precision="mixed-fp32-grads")),
    (L8, H16, 64, Plan(dp=16, zero=2, overlap="none", microbatch=2)),
    (L8, H16, 64, Plan(dp=16, zero=2, offload=True, overlap="dp")),
    (L8, H16, 64, Plan(dp=16, zero=3, offload=True, recompute="full")),
    (L8, H16, 64, Plan(dp=16, zero=3, overlap="dp", attention="eager")),
    (L8, H16, 64, Plan(dp=16, zero=3, bucket=(10_000_000, 20_000_000), precision="fp32")),
    (L8, H16, 64, Plan(tp=4, dp=4, zero=1, overlap="dp,tp")),
    (L8, H16, 64, Plan(tp=2, dp=8, zero=3, recompute="full")),
    (L8, H16, 64, Plan(pp=4, dp=4, overlap="none", recompute="full")),
    (L8, H16, 64, Plan(pp=4, dp=4, zero=1, overlap="none", microbatch=4)),
    (G175, cluster("a100-80gb", gpus=64), 64, Plan(tp=8, pp=8, overlap="none", sequence_parallel=True)),
    (G175, V100, 32, Plan(tp=8, pp=2, overlap="none")),
    (L8, cluster("h100-80gb", gpus=1), 8, Plan(zero=2, offload=True, overlap="none")),
]


@pytest.mark.parametrize("model, c, batch, plan", HAND_BUILT, ids=[f"{m.name}-{p.tp}x{p.pp}x{p.dp}-{i}" for i, (
    m, _c, _b, p) in enumerate(HAND_BUILT)])
def test_a_hand_built_plan_is_a_deepspeed_config(load, model, c, batch, plan):
    check(load, model, c, batch, plan)


def test_the_hand_built_plans_turn_every_knob_deepspeed_has():
    plans = [p for *_rest, p in HAND_BUILT]
    assert {p.zero for p in plans} == {0, 1, 2, 3} and {p.offload for p in plans} == {False, True}
    assert {p.precision for p in plans} == {"fp32", "mixed", "mixed-fp32-grads"}
    assert {p.recompute for p in plans} == {"none", "full"} and {p.attention for p in plans} == {"eager", "flash"}
    assert {o for p in plans for o in p.overlaps} == {"dp", "params", "tp"} and any(p.bucket for p in plans)
    assert any(p.tp > 1 and p.pp == 1 for p in plans) and any(p.tp > 1 and p.pp > 1 for p in plans)
    assert any(p.pp > 1 and p.tp == 1 for p in plans) and any(c.gpu.name == "v100-32gb" for _m, c, _b, _p in HAND_BUILT)


def test_autotp_leaves_the_batch_to_deepspeed_which_counts_tp_ranks_without_an_mpu(load, monkeypatch):
    """With AutoTP and no mpu (Hugging Face's way), DeepSpeedConfig counts all tp·dp GPUs as replicas: the file
    gives micro-batch and accumulation steps only, and the batch DeepSpeed derives is tp times the plan's."""
    plan = Plan(tp=4, dp=4, zero=1, overlap="dp")
    text = emit(L8, H16, 64, plan)
    assert "train_batch_size" not in json.loads(text)
    monkeypatch.setattr(deepspeed.comm, "get_world_size", lambda group=None: 16)
    without_mpu = DeepSpeedConfig(json.loads(text), mpu=None)
    assert without_mpu.train_batch_size == 64 * plan.tp and load(text, plan.dp).train_batch_size == 64


def test_the_pipelines_layers_are_balanced_by_deepspeeds_own_partitioner():
    """partition_method='type:…' gives each transformer layer weight 1: DeepSpeed's balanced partition of 126
    layers over 16 stages holds no stage above ceil(126/16) = 8, the most the memory model priced."""
    from deepspeed.runtime.utils import partition_balanced
    parts = partition_balanced(weights=[1] * 126, num_parts=16)
    assert max(b - a for a, b in zip(parts, parts[1:])) == 8
    plan = Plan(pp=16, dp=8, overlap="none")
    model_code = {s.name: s.value for s in settings(PRESETS["llama3-405b"], cluster("h100-80gb", gpus=128), 128, plan)}
    assert "num_stages=16, partition_method='type:" in model_code["PipelineModule"]


# ---- what it cannot say, in one line, quoting DeepSpeed --------------------------------------------------------------

REFUSED = [
    (Plan(pp=4, dp=4, zero=2, overlap="none"), r'^zero=2: .*"ZeRO-2 and ZeRO-3 are incompatible with pipeline '
                                               r'parallelism"', "runtime/pipe/engine.py"),
    (Plan(pp=4, dp=4, schedule="interleaved", chunks=2, overlap="none"), r"^schedule='interleaved': .*TrainSchedule", None),
    (Plan(pp=4, dp=4, schedule="gpipe", overlap="none"), r"^schedule='gpipe': .*1F1B", None),
    (Plan(pp=4, dp=4, zero=1, overlap="dp"), r'^overlap=\'dp\': .*"Pipeline parallelism does not support overlapped '
                                             r'communication, will be disabled."', "runtime/engine.py"),
    (Plan(dp=16, zero=0, overlap="dp"), r"^overlap='dp': .*only under ZeRO", None),
    (Plan(dp=16, zero=1, overlap="dp,params"), r"^overlap='dp,params': .*inside step\(\)", None),
    (Plan(dp=16, zero=3, shard=8), r'^shard=8: .*"MiCS ZeRO-3 sharding has been removed"', "runtime/config.py"),
    (Plan(dp=16, zero=1, overlap="dp", precision="fp8"), r"^precision='fp8': DeepSpeed's config has no FP8", None),
    (Plan(dp=16, zero=1, overlap="dp", precision="bf16-optimizer"), r"^precision='bf16-optimizer': bf16 master", None),
    (Plan(tp=2, dp=8, zero=3, sequence_parallel=True), r"^sequence_parallel=True: AutoTP", None),
    (Plan(dp=16, zero=3, recompute="selective"), r"^recompute='selective': ", None),
    (Plan(dp=16, zero=3, precision="mixed-fp32-grads"), r"^precision='mixed-fp32-grads': .*ZeRO stage 1", None),
    (Plan(dp=16, zero=0, overlap="none", bucket=(10, 10)), r"^bucket=\(10, 10\): .*ZeRO settings", None),
    (Plan(pp=4, dp=4, overlap="none", stage_layers=(7, 9, 9, 7)), r"^stage_layers=\(7, 9, 9, 7\): .*a method", None),
    (Plan(dp=16, zero=3, attention="flash-triton"), r"^attention='flash-triton': .*use attention='flash'", None),
]


@pytest.mark.parametrize("plan, message, source", REFUSED, ids=[r[1][1:30] for r in REFUSED])
def test_what_deepspeed_cannot_say_is_refused_in_one_line(plan, message, source):
    with pytest.raises(ValueError, match=message) as err:
        emit(L8, H16, 64, plan)
    assert "\n" not in str(err.value)
    quoted = re.findall(r'"([^"]+)"', str(err.value))
    if source:  # the sentence we quote is DeepSpeed's own, in the installed version
        assert quoted and all(q in (SOURCE / source).read_text() for q in quoted), quoted


def test_the_removed_mics_key_is_refused_by_deepspeed_itself(load):
    """Why HSDP is refused: the key that once said it makes DeepSpeed 0.19.8 reject the whole file."""
    text = json.loads(emit(L8, H16, 64, Plan(dp=16, zero=3)))
    text["zero_optimization"]["mics_shard_size"] = 8
    with pytest.raises(DeepSpeedConfigError, match="MiCS ZeRO-3 sharding has been removed"):
        load(json.dumps(text), 16)


def test_the_pipeline_engine_runs_one_schedule():
    """The refusal's claim, read from DeepSpeed: PipelineEngine._train_schedule builds TrainSchedule, nothing else."""
    from deepspeed.runtime.pipe import schedule
    from deepspeed.runtime.pipe.engine import PipelineEngine
    built = PipelineEngine._train_schedule(type("Engine", (), {"micro_batches": 4, "num_stages": 2, "stage_id": 0})())
    assert type(built) is schedule.TrainSchedule


# ---- the explanation and the launcher ------------------------------------------------------------------------------

def test_explain_names_every_entry_of_the_file_and_what_lives_outside_it():
    plan = Plan(tp=8, pp=8, dp=1, overlap="none", sequence_parallel=True, recompute="full")
    c = cluster("a100-80gb", gpus=64)
    text, entries = explain(G175, c, 64, plan), config(G175, c, 64, plan)

    def leaves(d, prefix=""):
        return [k for key, v in d.items() for k in (leaves(v, f"{prefix}{key}.") if isinstance(v, dict) else
                                                     [prefix + key])]
    assert all(f"  {name} = " in text for name in leaves(entries))
    assert "PipelineModule: num_stages=8" in text and "PipeModelDataParallelTopology(num_pp=8, num_mp=8, num_dp=1)" in text
    assert "Megatron-DeepSpeed: --tensor-model-parallel-size 8 --sequence-parallel" in text
    assert all(re.search(r"  # (lesson [1-6]|the model): \S", line) for line in text.splitlines()
               if line.startswith("  ") and not line.startswith("  deepspeed "))
    launch = next(line.strip() for line in text.splitlines() if line.strip().startswith("deepspeed "))
    args = launcher_args(shlex.split(launch)[1:])
    assert (args.num_nodes, args.num_gpus, args.hostfile) == (c.nodes, 8, "hostfile")
    assert args.user_script == "train.py" and args.user_args == ["--deepspeed_config", "ds_config.json"]


def test_the_file_is_json_with_the_nesting_deepspeed_reads():
    text = emit(L8, H16, 64, Plan(dp=16, zero=2, offload=True, overlap="dp"))
    assert text == emit_any("deepspeed", L8, H16, 64, Plan(dp=16, zero=2, offload=True, overlap="dp"))
    entries = json.loads(text)
    assert entries["zero_optimization"]["offload_optimizer"] == {"device": "cpu", "pin_memory": True}
    assert text.startswith("{\n  \"train_batch_size\": 64,")  # indent 2, the batch first
