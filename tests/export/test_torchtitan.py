"""`simlab.export.torchtitan`: every emitted file loaded by torchtitan 0.3.0's own loader and checked by its own code.

One child process (torchtitan stays out of the test process) writes nothing and reads each emitted module the way
``python -m torchtitan.train --module M --config M`` does (`ConfigManager.parse_args`, tyro included), then hands
the `Trainer.Config` it got to torchtitan: `ParallelDims` validates the degrees for the plan's world size (and
rejects a wrong one), its device mesh is built on torch's "fake" process group (one process stands for all ranks,
as torchtitan's own dry run does) to read the batch mesh, the model config runs `update_from_config` (TP dividing
the heads and K/V heads, the RoPE length) and builds on the meta device to count parameters, the pipeline split
goes through torchtitan's rank-to-stage mapping and `_split_module`, the reshard policy through
`get_fsdp_reshard_after_forward_policy`. The batch arithmetic lives in `Trainer.__init__`, which needs GPUs: the
child checks that torchtitan's source still says what the test computes.

torchtitan 0.3.0 imports a Triton kernel module of expert parallelism (`distributed.minimal_async_ep.kernels`) at
import time, and this CPU venv has no Triton: the child puts an empty module in its place, whose functions raise if
ever called (a dense llama3 never calls them). Nothing else of torchtitan or torch is replaced.
"""
import json
import subprocess
import sys
import textwrap

import pytest

from simlab.export.common import stage_counts
from simlab.export.torchtitan import command, emit, module_name, settings
from simlab.export.torchtitan_flavor import FLAVORS
from simlab.sim.advisor import search
from simlab.sim.hardware import cluster
from simlab.sim.hybrid import Plan, microbatches, stage_split
from simlab.sim.model import PRESETS, llama

TINY = llama("tiny", layers=8, hidden=256, heads=8, kv_heads=4, ffn=688, vocab=1024, seq=512, source="test")
BEST = search(PRESETS["llama3-70b"], cluster("h100-80gb", gpus=64), global_batch=64)["best"]["config"]
LLAMA_1B = llama("llama3-1b", 16, 2048, 32, 8, 8192, 128256, 8192, "test").with_(tied=True)
CASES = {  # id: (model, cluster, global batch, plan)
    "70b-advisor-best": (PRESETS["llama3-70b"], cluster("h100-80gb", gpus=64), 64, Plan(**BEST)),
    "8b-1f1b-zero3-full": (PRESETS["llama3-8b"], cluster("h100-80gb", gpus=16), 64,
                           Plan(tp=2, pp=2, dp=4, zero=3, recompute="full")),
    "gpipe-hsdp-selective": (TINY.with_(name="tiny-gpipe"), cluster("h100-80gb", gpus=16), 32,
                             Plan(tp=2, pp=2, dp=4, zero=2, shard=2, schedule="gpipe", microbatch=2,
                                  recompute="selective")),
    "ddp-accumulate": (TINY.with_(name="tiny-ddp"), cluster("a100-80gb", gpus=8), 32, Plan(dp=8, microbatch=2)),
    "zero3-offload": (TINY.with_(name="tiny-offload"), cluster("a100-80gb", gpus=4), 8,
                      Plan(dp=4, zero=3, offload=True)),
    "tp-async-zero1-fp32": (TINY.with_(name="tiny-tp"), cluster("h100-80gb", gpus=8), 16,
                            Plan(tp=4, dp=2, zero=1, sequence_parallel=True, overlap="dp,params,tp", precision="fp32")),
    "interleaved-uneven": (TINY.with_(name="tiny10", layers=10), cluster("h100-80gb", gpus=4), 8,
                           Plan(pp=4, schedule="interleaved", chunks=2, stage_layers=(2, 3, 3, 2))),
    "1b-tied": (LLAMA_1B, cluster("h100-80gb", gpus=8), 16, Plan(dp=8, zero=3)),
    "8b-fp8": (PRESETS["llama3-8b"].with_(name="llama3-8b-fp8"), cluster("h100-80gb", gpus=8), 16,
               Plan(tp=8, sequence_parallel=True, precision="fp8")),
}
# (case, field, value, what torchtitan says): a plan simlab refuses, made from a loaded config, refused by torchtitan
PROBES = {"70b-advisor-best": ("tensor_parallel_degree", 16, "must divide n_kv_heads"),
          "1b-tied": ("pipeline_parallel_degree", 2, "Weight tying is not supported with Pipeline Parallel")}

CHILD = textwrap.dedent('''
    import dataclasses, inspect, json, re, sys, types
    KERNELS = "torchtitan.distributed.minimal_async_ep.kernels"
    def _missing(name):
        if name.startswith("__"):
            raise AttributeError(name)
        def kernel(*args, **kwargs):
            raise RuntimeError(f"{KERNELS}.{name}: a Triton kernel, absent on this machine")
        return kernel
    stub = types.ModuleType(KERNELS)
    stub.__getattr__ = _missing
    sys.modules[KERNELS] = stub
    job = json.loads(sys.stdin.read())
    sys.path.insert(0, job["dir"])
    import torch
    import torch.distributed as dist
    from torch.distributed.pipelining.schedules import PipelineScheduleSingle, get_schedule_class
    from torch.testing._internal.distributed.fake_pg import FakeStore
    from torchtitan.config import ConfigManager
    from torchtitan.distributed.fsdp import get_fsdp_reshard_after_forward_policy
    from torchtitan.distributed.parallel_dims import ParallelDims
    from torchtitan.distributed.pipeline_parallel import _get_pp_rank_to_stage_indices_mapping, _split_module
    from torchtitan.trainer import Trainer
    flat = re.sub(r"\\s", "", inspect.getsource(Trainer.__init__))
    out = {"formulas": [f in flat for f in (
        "global_batch_size//(config.training.local_batch_size*batch_degree)",
        "config.training.local_batch_size//config.parallelism.pipeline_parallel_microbatch_size")]}
    def load(name, extra=()):
        return ConfigManager().parse_args(["--module", name, "--config", name, *extra])
    for case in job["cases"]:
        r = out[case["id"]] = {}
        try:
            cfg = load(case["module"], case["extra"])
        except Exception as err:
            r["error"] = f"{type(err).__name__}: {err}"
            continue
        p, world = cfg.parallelism, case["world"]
        r["type"] = f"{type(cfg).__module__}.{type(cfg).__qualname__}"
        r["parallelism"] = {f.name: getattr(p, f.name) for f in dataclasses.fields(p)}
        r["training"] = {f.name: getattr(cfg.training, f.name) for f in dataclasses.fields(cfg.training)}
        r["compile"] = {f.name: getattr(cfg.compile, f.name) for f in dataclasses.fields(cfg.compile)}
        r["ac"] = type(cfg.activation_checkpoint).__qualname__ if cfg.activation_checkpoint else None
        r["reshard"] = get_fsdp_reshard_after_forward_policy(p.fsdp_reshard_after_forward,
                                                             p.pipeline_parallel_degree > 1)
        dims = ParallelDims.from_config(p, world)
        r["dims"] = dict(dp_replicate=dims.dp_replicate, dp_shard=dims.dp_shard, tp=dims.tp, pp=dims.pp, cp=dims.cp)
        dist.init_process_group("fake", rank=0, world_size=world, store=FakeStore())
        dims.build_mesh()
        r["batch_degree"] = dims.get_mesh("batch").size() if dims.dp_enabled else 1
        dist.destroy_process_group()
        r["wrong_world"] = []
        for wrong in (world * 2, world + 1):
            try:
                ParallelDims.from_config(p, wrong)
                r["wrong_world"].append(None)
            except AssertionError as err:
                r["wrong_world"].append(str(err))
        mc = cfg.model_spec.model
        mc.update_from_config(config=cfg)
        attention = mc.layers[0].attention
        r["shape"] = dict(layers=len(mc.layers), dim=mc.dim, vocab=mc.vocab_size, heads=attention.n_heads,
                          kv=attention.n_kv_heads or attention.n_heads, ffn=mc.layers[0].feed_forward.w1.out_features,
                          tied=mc.enable_weight_tying, flavor=cfg.model_spec.flavor)
        with torch.device("meta"):
            model = mc.build()
        r["params"] = sum(t.numel() for t in model.parameters())
        if p.pipeline_parallel_degree > 1:
            parts, pp = p.module_fqns_per_model_part, p.pipeline_parallel_degree
            r["parts"] = parts
            r["single_stage"] = issubclass(get_schedule_class(p.pipeline_parallel_schedule), PipelineScheduleSingle)
            r["rank_stages"] = [_get_pp_rank_to_stage_indices_mapping(k, pp, p.pipeline_parallel_schedule, len(parts))
                                for k in range(pp)]
            r["rank_params"] = [sum(t.numel() for s in stages for t in _split_module(model, parts[s]).parameters())
                                for stages in r["rank_stages"]]
        if case["probe"]:
            field, value, _ = case["probe"]
            cfg = load(case["module"])
            setattr(cfg.parallelism, field, value)
            try:
                cfg.model_spec.model.update_from_config(config=cfg)
                r["probe"] = None
            except Exception as err:
                r["probe"] = f"{type(err).__name__}: {err}"
    print("RESULT" + json.dumps(out))
''')


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """{case id: what torchtitan made of the emitted file}, from one child process."""
    folder = tmp_path_factory.mktemp("torchtitan")
    assert len({module_name(model) for model, *_ in CASES.values()}) == len(CASES)  # one module per case
    cases = []
    for case, (model, c, batch, plan) in CASES.items():
        (folder / f"{module_name(model)}.py").write_text(emit(model, c, batch, plan), encoding="utf-8")
        cases.append({"id": case, "module": module_name(model), "world": plan.gpus, "probe": PROBES.get(case),
                      "extra": ["--training.steps", "7"] if case == "ddp-accumulate" else []})
    run = subprocess.run([sys.executable, "-c", CHILD], input=json.dumps({"dir": str(folder), "cases": cases}),
                         capture_output=True, text=True, timeout=600)
    line = [x for x in run.stdout.splitlines() if x.startswith("RESULT")]
    assert run.returncode == 0 and line, run.stderr[-3000:]
    return json.loads(line[0][len("RESULT"):])


def ok(loaded, case):
    assert "error" not in loaded[case], loaded[case]["error"]
    return loaded[case]


LOADABLE = [case for case in CASES if case != "8b-fp8"]


@pytest.mark.parametrize("case", LOADABLE)
def test_torchtitans_own_config_and_parallel_dims_take_the_plans_world_and_reject_another(loaded, case):
    model, c, batch, plan = CASES[case]
    r = ok(loaded, case)
    assert r["type"] == "torchtitan.trainer.Trainer.Config"  # what torchtitan's ConfigManager returned
    dims = r["dims"]  # torchtitan's ParallelDims, validated for world size plan.gpus
    assert (dims["tp"], dims["pp"], dims["cp"]) == (plan.tp, plan.pp, plan.cp)
    assert dims["dp_shard"] * dims["dp_replicate"] == plan.dp == r["batch_degree"]
    assert dims["dp_shard"] == (plan.shard_size if plan.zero else 1)  # ZeRO-0: replicas only (DDP)
    assert all(err and "Invalid parallel dims" in err for err in r["wrong_world"]), r["wrong_world"]


@pytest.mark.parametrize("case", LOADABLE)
def test_batch_arithmetic_gives_the_plans_micro_batches(loaded, case):
    model, c, batch, plan = CASES[case]
    r = ok(loaded, case)
    assert loaded["formulas"] == [True, True]  # torchtitan's Trainer.__init__ still computes what follows
    local, mbs = r["training"]["local_batch_size"], r["parallelism"]["pipeline_parallel_microbatch_size"]
    accumulation = r["training"]["global_batch_size"] // (local * r["batch_degree"])
    pipeline_microbatches = local // mbs if plan.pp > 1 else 1
    assert r["training"]["global_batch_size"] == batch
    assert accumulation * pipeline_microbatches == microbatches(plan, batch)
    assert (mbs if plan.pp > 1 else local) == plan.microbatch
    assert accumulation == (1 if plan.pp > 1 else microbatches(plan, batch))  # PP: one flush per step


@pytest.mark.parametrize("case", LOADABLE)
def test_the_model_torchtitan_builds_is_the_plans(loaded, case):
    model = CASES[case][0]
    r = ok(loaded, case)
    assert r["params"] == model.params  # counted on the meta device; a tied weight once
    assert r["shape"] == dict(layers=model.layers, dim=model.hidden, vocab=model.vocab, heads=model.heads,
                              kv=model.kv_heads or model.heads, ffn=model.ffn_width, tied=model.tied,
                              flavor=r["shape"]["flavor"])


@pytest.mark.parametrize("case", [case for case in LOADABLE if CASES[case][3].pp > 1])
def test_each_pipeline_rank_holds_the_plans_layers(loaded, case):
    model, c, batch, plan = CASES[case]
    r = ok(loaded, case)
    assert r["single_stage"] == (plan.chunks == 1)
    layers = [[int(x.split(".")[1]) for s in stages for x in r["parts"][s] if x.startswith("layers.")]
              for stages in r["rank_stages"]]
    assert sorted(sum(layers, [])) == list(range(model.layers))
    counts = [len(x) for x in layers]
    if plan.stage_layers:
        assert counts == list(plan.stage_layers)
    first, middle, last = stage_split(model, plan)  # what the simulator assumed: no stage holds more
    assert counts[0] <= first and counts[-1] <= last and max(counts[1:-1], default=0) <= middle
    expect = [n * model.layer_params for n in counts]
    expect[0] += model.embedding_params
    expect[-1] += model.output_params
    assert r["rank_params"] == expect


@pytest.mark.parametrize("case", LOADABLE)
def test_zero_recompute_precision_and_compile(loaded, case):
    plan = CASES[case][3]
    r = ok(loaded, case)
    assert r["reshard"] is (plan.zero == 3)  # torchtitan's own reading: reshard after forward = ZeRO-3
    assert r["ac"] == {"none": None, "selective": "SelectiveAC.Config", "full": "FullAC.Config"}[plan.recompute]
    assert r["training"]["enable_cpu_offload"] is plan.offload
    assert r["training"]["mixed_precision_param"] == ("float32" if plan.precision == "fp32" else "bfloat16")
    assert r["parallelism"]["enable_sequence_parallel"] is plan.sequence_parallel
    assert r["compile"]["enable_async_tensor_parallel"] is ("tp" in plan.overlaps and plan.tp > 1)


def test_the_command_line_still_overrides_a_field_and_torchtitan_refuses_what_simlab_refuses(loaded):
    assert ok(loaded, "ddp-accumulate")["training"]["steps"] == 7
    assert all(PROBES[case][2] in ok(loaded, case)["probe"] for case in PROBES)


def test_fp8_is_torchaos_float8_through_torchtitans_converter(loaded):
    result = loaded["8b-fp8"]
    try:
        import torchao  # noqa: F401 — only whether it imports
    except ImportError:  # torchtitan's Float8LinearConverter was built, and asked for torchao
        assert "torchao is not installed" in result["error"]
    else:
        assert ok(loaded, "8b-fp8")["compile"]["enable"] is True
    text = emit(*CASES["8b-fp8"])
    assert "Float8LinearConverter.Config(filter_fqns=['lm_head'], model_compile_enabled=True)" in text


def test_the_flavors_are_torchtitans(loaded):
    """Each named flavor is chosen for its own shape: the 8B and 70B cases above built torchtitan's 8B and 70B
    (shape and parameter count checked there); the 1B case its tied 1B."""
    assert {ok(loaded, case)["shape"]["flavor"] for case in ("70b-advisor-best", "8b-1f1b-zero3-full", "1b-tied")} \
        == {"70B", "8B", "1B"} <= set(FLAVORS)
    assert ok(loaded, "ddp-accumulate")["shape"]["flavor"] == "tiny-ddp"  # a flavor of its own, registered by name


def test_the_file_names_its_function_and_command():
    model, c, batch, plan = CASES["70b-advisor-best"]
    line = command(model, c, batch, plan)
    assert line.endswith("-m torchtitan.train --module simlab_llama3_70b --config simlab_llama3_70b")
    assert "--nnodes 8 --nproc-per-node 8" in line
    text = emit(model, c, batch, plan)
    compile(text, "simlab_llama3_70b.py", "exec")
    assert "\ndef simlab_llama3_70b() -> Trainer.Config:\n" in text
    for s in settings(model, c, batch, plan):
        assert s.meaning and "\n" not in s.meaning and 0 <= s.lesson <= 7


def test_layers_split_as_the_megatron_export_splits_them():
    model, c, batch, plan = CASES["8b-1f1b-zero3-full"]
    parts = next(s.value for s in settings(model, c, batch, plan) if s.name.endswith("module_fqns_per_model_part"))
    assert [sum(x.startswith("layers.") for x in part) for part in parts] == stage_counts(model, plan)


H100, A100 = cluster("h100-80gb", gpus=64), cluster("a100-80gb", gpus=8)
REFUSED = [  # (model, cluster, batch, plan, the start of the one line)
    (PRESETS["gpt3-175b"], H100, 64, Plan(tp=8, pp=8), "model='gpt3-175b': torchtitan's llama3 has a SwiGLU MLP"),
    (PRESETS["llama3-70b"], H100, 64, Plan(tp=16, dp=4), "tp=16: torchtitan splits the K/V heads too: kv_heads=8"),
    (PRESETS["llama3-70b"], H100, 64, Plan(tp=8, dp=8, attention="eager"), "attention='eager':"),
    (PRESETS["llama3-70b"], H100, 64, Plan(tp=8, dp=8, attention="flash-triton"), "attention='flash-triton':"),
    (PRESETS["llama3-70b"], H100, 64, Plan(tp=8, dp=8, zero=3, bucket=(50_000_000, 50_000_000)), "bucket=("),
    (TINY.with_(seq=510), cluster(gpus=4), 8, Plan(tp=4, sequence_parallel=True), "sequence_parallel=True: "
     "torchtitan needs seq=510 divisible by tp=4"),
    (LLAMA_1B, cluster(gpus=8), 16, Plan(pp=2, dp=4), "tied=True: torchtitan ties"),
    (TINY, cluster(gpus=1), 8, Plan(schedule="interleaved", chunks=2), "chunks=2: torchtitan pipelines only"),
    (TINY.with_(layers=10), cluster(gpus=4), 8, Plan(pp=4, schedule="interleaved", chunks=3, stage_layers=(2, 3, 3, 2)),
     "chunks=3: virtual stage 8 would hold no layer"),
    (PRESETS["llama3-8b"], A100, 16, Plan(tp=8, precision="fp8"), "precision='fp8': torchtitan's float8"),
    (PRESETS["llama3-8b"], A100, 16, Plan(tp=4), "tp=4: tp*pp*dp = 4 must use all gpus=8"),  # check_plan's own
    # the file's ChunkedLossWrapper cuts each rank's sequence (seq/cp) into 8 equal chunks
    (PRESETS["llama3-8b"].with_(seq=4100), A100, 16, Plan(dp=8), "seq=4100: torchtitan's ChunkedLossWrapper"),
    (PRESETS["llama3-8b"].with_(seq=8200), A100, 16, Plan(dp=4, cp=2), "seq=8200: torchtitan's ChunkedLossWrapper"),
    (PRESETS["llama3-8b"], A100, 16, Plan(dp=8, precision="bf16-optimizer"), "precision='bf16-optimizer': bf16 master"),
]


def test_torchtitans_chunked_loss_lets_a_plan_fit_that_plain_pytorchs_loss_would_not():
    """torchtitan 0.3's ChunkedLossWrapper (the file's loss) holds the fp32 loss's 12 bytes per logit for an eighth
    of the sequence at a time: torchtitan-8b-8's plan on 80 GB H100s fits with it (and with a fused loss), not with
    the 2024 benchmark's plain fp32 loss; the file is the same whatever loss the plan was made with."""
    from simlab.sim.advisor import fits
    from simlab.sim.hybrid_memory import per_gpu
    model, c = PRESETS["llama3-8b"], cluster("h100-80gb", gpus=8)
    plan = Plan(dp=8, microbatch=2, zero=3, recompute="op-sac", precision="mixed-fp32-grads")
    fit = {loss: bool(fits(per_gpu(model, plan.with_(loss=loss), 16), c)) for loss in ("fused", "fp32", "chunked")}
    assert fit == {"fused": True, "fp32": False, "chunked": True}
    assert emit(model, c, 16, plan) == emit(model, c, 16, plan.with_(loss="fp32")) == emit(
        model, c, 16, plan.with_(loss="chunked"))


@pytest.mark.parametrize("model, c, batch, plan, message", REFUSED, ids=[r[4].split(":")[0] for r in REFUSED])
def test_what_torchtitan_cannot_run_is_refused_in_one_line(model, c, batch, plan, message):
    with pytest.raises(ValueError) as err:
        emit(model, c, batch, plan)
    assert str(err.value).startswith(message) and "\n" not in str(err.value), str(err.value)
