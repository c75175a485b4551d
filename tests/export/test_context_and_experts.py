"""Lesson 7's knobs in each framework's own terms (`simlab.export.context_and_experts`), held to the frameworks' code.

- Megatron-LM: the emitted script is run by bash and its flags become megatron.core's TransformerConfig (as
  tests/export/test_megatron.py does), which must accept them and hold cp, its exchange, the experts, ep and the
  capacity; megatron.core's RankGenerator lays out the grid of that many GPUs with those sizes: every CP group and
  every EP group has the plan's size, and an EP group never crosses a tensor- or pipeline-parallel boundary (it is
  carved out of the data-parallel ranks).
- torchtitan: the emitted file is loaded by torchtitan's ConfigManager in a child process; ParallelDims validates
  its degrees (cp among them) for the plan's world size and rejects another; loading it set torch's K,V exchange.
- DeepSpeed: what goes in the model code names DeepSpeed's own classes and their real keyword arguments.
Each refusal is one line naming the knob.
"""
import inspect
import json
import subprocess
import sys
import textwrap

import pytest
from megatron.core.parallel_state import RankGenerator

from simlab.export import context_and_experts, deepspeed, megatron, torchtitan
from simlab.sim.hardware import cluster
from simlab.sim.hybrid import Plan
from simlab.sim.model import PRESETS, llama

from .test_megatron import megatron_configs, run_script

LONG = PRESETS["llama3-8b"].with_(name="llama3-8b-32k", seq=32768)
MIXTRAL = PRESETS["mixtral-8x7b"]
H100 = cluster("h100-80gb", gpus=16)


def megatron_config(model, c, batch, plan):
    _connections, _launcher, flags = run_script(megatron.emit(model, c, batch, plan))
    return megatron_configs(flags, c.gpus)


@pytest.mark.parametrize("cp_comm", ["ring", "all-gather-kv", "ulysses"])
def test_megatron_takes_context_parallelism_and_lays_out_its_groups(cp_comm):
    plan = Plan(tp=2, cp=4, dp=2, zero=1, recompute="full", cp_comm=cp_comm)
    got = megatron_config(LONG, H100, 16, plan)
    config = got["config"]
    assert (config.context_parallel_size, got["dp"]) == (4, 2)
    assert config.cp_comm_type == {"ring": "p2p", "all-gather-kv": "all_gather", "ulysses": "a2a"}[cp_comm]
    ranks = RankGenerator(tp=2, ep=1, dp=got["dp"], pp=1, cp=config.context_parallel_size, order="tp-cp-ep-dp-pp")
    groups = ranks.get_ranks("cp")
    assert len(groups) == H100.gpus // 4 and all(len(g) == 4 for g in groups)


def test_megatron_takes_a_mixture_of_experts_with_expert_parallelism_and_capacity():
    c = cluster("h100-80gb", gpus=64)
    plan = Plan(tp=2, pp=2, dp=16, ep=8, zero=1, sequence_parallel=True, capacity=1.25)
    config = megatron_config(MIXTRAL, c, 256, plan)["config"]
    assert (config.num_moe_experts, config.moe_router_topk) == (MIXTRAL.experts, MIXTRAL.top_k)
    assert config.moe_ffn_hidden_size == (MIXTRAL.expert_ffn or MIXTRAL.ffn_width)
    assert (config.expert_model_parallel_size, config.moe_expert_capacity_factor) == (8, 1.25)
    assert config.moe_token_dispatcher_type == "alltoall"
    # Megatron's expert grid: tp × ep × (dp/ep) × pp over the same GPUs; an EP group stays inside one DP group
    dense = RankGenerator(tp=2, ep=1, dp=16, pp=2, cp=1, order="tp-cp-ep-dp-pp")
    experts = RankGenerator(tp=2, ep=8, dp=2, pp=2, cp=1, order="tp-ep-dp-pp")
    dp_of = {r: i for i, g in enumerate(dense.get_ranks("dp")) for r in g}
    for group in experts.get_ranks("ep"):
        assert len(group) == 8 and len({dp_of[r] for r in group}) == 1


def test_megatron_dropless_writes_no_capacity_and_a_dense_plan_no_lesson_7_flag():
    plan = Plan(dp=8, ep=8, zero=1)
    config = megatron_config(MIXTRAL, cluster("h100-80gb", gpus=8), 64, plan)["config"]
    assert config.moe_expert_capacity_factor is None and config.expert_model_parallel_size == 8
    flags = [s.name for s in megatron.settings(PRESETS["llama3-8b"], H100, 64, Plan(tp=2, dp=8))]
    assert not {"--context-parallel-size", "--num-experts", "--expert-model-parallel-size"} & set(flags)


CHILD = textwrap.dedent('''
    import json, sys, types
    KERNELS = "torchtitan.distributed.minimal_async_ep.kernels"  # a Triton module this CPU venv lacks
    stub = types.ModuleType(KERNELS)
    def _missing(name):  # a kernel that raises if ever called (a dense llama3 never calls one)
        if name.startswith("__"):
            raise AttributeError(name)
        def kernel(*args, **kwargs):
            raise RuntimeError(f"{KERNELS}.{name}: a Triton kernel, absent on this machine")
        return kernel
    stub.__getattr__ = _missing
    sys.modules[KERNELS] = stub
    job = json.loads(sys.stdin.read())
    sys.path.insert(0, job["dir"])
    from torch.distributed.tensor.experimental._context_parallel._attention import _cp_options
    from torchtitan.config import ConfigManager
    from torchtitan.distributed.parallel_dims import ParallelDims
    before = _cp_options.rotate_method.name
    cfg = ConfigManager().parse_args(["--module", job["module"], "--config", job["module"]])
    dims = ParallelDims.from_config(cfg.parallelism, job["world"])
    try:
        ParallelDims.from_config(cfg.parallelism, job["world"] * 2 + 1)
        wrong = None
    except Exception as err:
        wrong = type(err).__name__
    print(json.dumps({"cp": dims.cp, "tp": dims.tp, "dp_shard": dims.dp_shard, "dp_replicate": dims.dp_replicate,
                      "before": before, "after": _cp_options.rotate_method.name, "wrong": wrong}))
''')


@pytest.mark.parametrize("cp_comm", ["ring", "all-gather-kv"])
def test_torchtitan_loads_context_parallelism_and_its_exchange(tmp_path, cp_comm):
    model = LONG.with_(name=f"llama3-8b-cp-{cp_comm}")
    plan = Plan(tp=2, cp=4, dp=2, zero=3, recompute="full", cp_comm=cp_comm)
    name = torchtitan.module_name(model)
    (tmp_path / f"{name}.py").write_text(torchtitan.emit(model, H100, 16, plan), encoding="utf-8")
    job = json.dumps({"dir": str(tmp_path), "module": name, "world": H100.gpus})
    out = subprocess.run([sys.executable, "-c", CHILD], input=job, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert (got["cp"], got["tp"], got["dp_shard"], got["dp_replicate"]) == (4, 2, 2, 1) and got["wrong"]
    assert got["before"] == "ALL_GATHER"  # torch's default: the all-gather of K,V
    assert got["after"] == {"ring": "ALL_TO_ALL", "all-gather-kv": "ALL_GATHER"}[cp_comm]


def test_deepspeed_names_its_own_classes_for_ulysses_and_experts():
    from deepspeed.moe.layer import MoE
    from deepspeed.sequence.layer import DistributedAttention
    ulysses = deepspeed.settings(LONG, H100, 16, Plan(cp=8, dp=2, zero=1, cp_comm="ulysses", overlap="dp"))
    attention = [s for s in ulysses if s.name.endswith("DistributedAttention")]
    assert len(attention) == 1 and attention[0].where == "model" and "8" in attention[0].value
    assert "sequence_process_group" in inspect.signature(DistributedAttention).parameters
    moe = [s for s in deepspeed.settings(MIXTRAL, cluster("h100-80gb", gpus=8), 64,
                                         Plan(dp=8, ep=4, zero=2, capacity=1.5, overlap="dp"))
           if s.name.endswith(".MoE")]
    words = dict(kv.split("=") for kv in moe[0].value.split(", "))
    assert set(words) <= set(inspect.signature(MoE).parameters)
    assert words == {"num_experts": "8", "ep_size": "4", "k": "2", "capacity_factor": "1.5", "drop_tokens": "True"}


REFUSED = [  # (framework, model, plan, the knob the one line names)
    (torchtitan, LONG, Plan(cp=8, dp=2, zero=1, cp_comm="ulysses"), "cp_comm='ulysses'"),
    (torchtitan, LONG, Plan(cp=8, dp=2, zero=0), "cp=8"),
    (torchtitan, MIXTRAL, Plan(dp=16, ep=8, zero=1), "model='mixtral-8x7b'"),
    (deepspeed, LONG, Plan(cp=8, dp=2, zero=1, overlap="dp"), "cp_comm='ring'"),
    (deepspeed, MIXTRAL, Plan(dp=16, ep=8, zero=3), "zero=3"),
    (megatron, MIXTRAL.with_(name="mixtral-biases", biases=True), Plan(tp=2, dp=8, ep=8, sequence_parallel=True),
     "model='mixtral-biases'"),
]


@pytest.mark.parametrize("framework, model, plan, knob", REFUSED, ids=lambda x: getattr(x, "__name__", None))
def test_what_a_framework_cannot_say_is_refused_in_one_line(framework, model, plan, knob):
    with pytest.raises(ValueError) as err:
        framework.settings(model, H100, 32, plan)
    assert str(err.value).startswith(knob + ":") and "\n" not in str(err.value)


def test_the_cp_exchange_names_cover_every_variant():
    from simlab.sim.hybrid import CP_COMMS
    assert set(context_and_experts.MEGATRON_CP) == set(CP_COMMS)


def test_a_tiny_moe_is_built_by_megatron_with_the_experts_simlab_counts():
    """The model flags build megatron.core's own config for a small mixture of experts: its expert count and widths
    are what simlab's model holds (the parameter count itself is tests/sim/test_model.py's)."""
    tiny = llama("tiny-moe", layers=2, hidden=256, heads=8, kv_heads=4, ffn=512, vocab=1024, seq=256,
                 source="test").with_(experts=4, top_k=2, expert_ffn=384)
    config = megatron_config(tiny, cluster("h100-80gb", gpus=8), 8, Plan(dp=8, ep=4))["config"]
    assert (config.num_moe_experts, config.moe_router_topk, config.moe_ffn_hidden_size) == (4, 2, 384)
    assert config.ffn_hidden_size == 512
