"""The primer's 适用场景 (when to use which strategy), case by case: its own sentence, the course's English,
and one concrete model on one concrete cluster that the advisor (`simlab.sim.advisor.search`) answers; then the
qualifiers of the guide it condenses (`GUIDE`), each asked of the advisor: NVLink or PCIe inside a node
(`link_comparison`), where the many-node answer flips (`network_sweep`, `flip`), ZeRO-1 as a memory choice
(`zero1_for_memory`), ZeRO with replicas (`hsdp_comparison`) and how much ZeRO-3 gathers at once (`gather_units`).

Lesson 6 walks these seven cases, the capstone grades against them, and tests/sim/test_advisor.py holds the
advisor to each `expect`: the guide is derived, not restated. The models are the lessons' presets
(`simlab.sim.model.PRESETS`) plus two built for the point they make: GPT-2 small (fits anywhere) and a
4-layer model whose single layer (6.1B parameters, 97 GB of mixed-precision state) no 80 GB GPU holds.

    >>> [s.key for s in SCENARIOS]
    ['1gpu-fits', '1gpu-too-big', 'node-fits', 'node-too-big', 'node-layer-too-big', 'nodes-fast', 'nodes-slow']
    >>> SCENARIOS[6].primer
    '当节点间通讯比较慢时：DP+TP+PP+ZeRO-1（ZeRO-1是指只对优化器参数做分片）。'
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .advisor import candidates, evaluate, evaluate_plan, fastest_of, search
from .advisor_explain import MODEL_ERROR
from .gpus import GPUS
from .hardware import Cluster, cluster
from .hybrid import STATE_BYTES, Plan
from .hybrid_memory import zero3_unit
from .message import Message
from .model import PRESETS, Transformer

GPT2 = Transformer("gpt2-124m", 12, 768, 12, seq=1024, vocab=50257)  # 124M parameters
WIDE = Transformer("wide-4-layers", 4, 22528, 128, seq=2048, vocab=51200)  # one layer: 6.1B params, 97 GB


@dataclass(frozen=True)
class Scenario:
    key: str
    where: str  # the primer's heading: 单GPU, 单机多GPU, 多机多GPU
    primer: str  # its sentence, verbatim
    english: str  # the course's own English
    model: Transformer
    gpu: str
    gpus: int
    global_batch: int
    cluster_args: dict = field(default_factory=dict)
    rivals: tuple = ()  # the families the lesson sets beside the winner (`advisor.family` names)

    def cluster(self) -> Cluster:
        return cluster(self.gpu, gpus=self.gpus, **self.cluster_args)

    def title(self) -> str:
        """The question in one line (a Message: the renderer says it in the reader's language)."""
        net = self.cluster_args.get("inter_node_gbps")
        where = f"{self.gpus} × {self.gpu}" if not net else Message(
            "{gpus} × {gpu}, {net:g} Gbit/s per node between nodes", gpus=self.gpus, gpu=self.gpu, net=net)
        return Message("{model} ({billions:.3g}B parameters) on {where}, batch {batch}", model=self.model.name,
                       billions=self.model.params / 1e9, where=where, batch=self.global_batch)


SCENARIOS = (
    Scenario("1gpu-fits", "单GPU", "当模型可以存储在单GPU上：正常训练；",
             "One GPU, and the model fits: train normally.", GPT2, "rtx-4090", 1, 8,
             rivals=("single GPU + Offload",)),
    Scenario("1gpu-too-big", "单GPU", "当模型不能存储在单GPU上：可以使用ZeRO-Offload CPU等方法，让CPU去承载部分参数。",
             "One GPU, and the model does not fit: ZeRO-Offload, so the CPU holds part of the state.",
             PRESETS["llama2-7b"], "a100-80gb", 1, 8, rivals=("single GPU",)),
    Scenario("node-fits", "单机多GPU", "当模型可以存储在单GPU上：DDP（推荐），ZeRO（可能会提效）；",
             "One node, and the model fits on a GPU: DDP (recommended); ZeRO may help.",
             PRESETS["megatron-1.7b-2021"], "a100-80gb", 8, 64, rivals=("DDP", "DP+ZeRO-1", "TP+DP", "PP+DP")),
    Scenario("node-too-big", "单机多GPU", "当模型不能存储在单GPU上：PP，ZeRO，TP。",
             "One node, and the model does not fit on a GPU: PP, ZeRO or TP.",
             PRESETS["megatron-18.4b-2021"], "a100-80gb", 8, 64, rivals=("DDP", "DP+ZeRO-3", "PP+DP+ZeRO-1")),
    Scenario("node-layer-too-big", "单机多GPU", "但最大层无法放在单GPU上时，就只能使用TP、ZeRO。",
             "But when the largest layer does not fit on a GPU, only TP or ZeRO will do.", WIDE, "a100-80gb", 8, 16,
             rivals=("PP+DP", "DP+ZeRO-3", "TP")),
    Scenario("nodes-fast", "多机多GPU", "当节点间通讯比较快时：ZeRO，PP+TP+DP；",
             "Many nodes on a fast network: ZeRO, or PP+TP+DP.", PRESETS["gpt3-175b"], "a100-80gb", 1024, 1536,
             {"inter_node_gbps": 1600}, rivals=("TP+PP+DP+ZeRO-1", "PP+DP+ZeRO-1", "TP+DP")),
    Scenario("nodes-slow", "多机多GPU", "当节点间通讯比较慢时：DP+TP+PP+ZeRO-1（ZeRO-1是指只对优化器参数做分片）。",
             "Many nodes on a slow network: DP+TP+PP+ZeRO-1 (ZeRO-1 shards only the optimizer state).",
             PRESETS["gpt3-175b"], "a100-80gb", 1024, 1536, {"inter_node_gbps": 25},
             rivals=("TP+PP+DP+ZeRO-3", "TP+DP+ZeRO-3", "PP+DP")),
)
BY_KEY = {s.key: s for s in SCENARIOS}


# ---------------------------------------------------------------- the guide the primer condenses, and its qualifiers

GUIDE = ("https://github.com/stas00/ml-engineering/blob/master/training/model-parallelism/README.md"
         "#which-strategy-to-use-when")  # Stas Bekman, Machine Learning Engineering: "Which Strategy To Use When"
GUIDE_HF = "https://huggingface.co/docs/transformers/perf_train_gpu_many"  # the same guide in Transformers' docs
PCIE = GPUS["rtx-4090"]  # its link inside a node: PCIe 4.0 x16, as NCCL reaches it (no NVLink)
# the guide's three answers for a node whose GPUs cannot hold the model, each with DP over the GPUs it leaves
# the primer's answers are 3-D plans: lesson 7's context and expert parallelism are no part of them (the "best" beside
# them is the whole search's, CP and EP included)
THREE_D = lambda k: (k.cp == 1) & (k.ep == 1)  # noqa: E731 — a one-line mask over the candidates
ONE_NODE = {"PP": lambda k: THREE_D(k) & (k.pp > 1) & (k.tp == 1) & (k.zero <= 1) & (k.offload == 0),
            "ZeRO": lambda k: THREE_D(k) & (k.pp == 1) & (k.tp == 1) & (k.zero >= 2) & (k.offload == 0),
            "TP": lambda k: THREE_D(k) & (k.tp > 1) & (k.pp == 1) & (k.zero <= 1) & (k.offload == 0)}
# the primer's two answers for many nodes: ZeRO (fast network) and DP+TP+PP+ZeRO-1 (slow)
MANY_NODES = {"ZeRO-3": lambda k: THREE_D(k) & (k.zero == 3),
              "DP+TP+PP+ZeRO-1": lambda k: THREE_D(k) & (k.tp > 1) & (k.pp > 1) & (k.dp > 1) & (k.zero == 1)}
NETWORK_SWEEP = (25.0, 50.0, 100.0, 200.0, 400.0, 800.0, 1600.0, 3200.0)  # Gbit/s per node: 8 searches
# ZeRO with replicas: section 4.2's 18.4B model (it fits one node sharded) on 4 nodes
HSDP_CASE = Scenario("hsdp", "多机多GPU", "", "", PRESETS["megatron-18.4b-2021"], "a100-80gb", 32, 128)
HSDP_NETWORKS = (100.0, 400.0, 1600.0)
PURE_ZERO3 = lambda k: THREE_D(k) & (k.tp == 1) & (k.pp == 1) & (k.zero == 3) & (k.offload == 0)  # noqa: E731 — a mask, beside the dicts of masks
HSDP = {"ZeRO-3": lambda k: PURE_ZERO3(k) & (k.shard == k.dp),
        "ZeRO-3 (HSDP)": lambda k: PURE_ZERO3(k) & (k.shard < k.dp)}


def over_pcie(c: Cluster) -> Cluster:
    """The same cluster, its GPUs talking over PCIe inside a node instead of NVLink (`PCIE`'s link)."""
    return c.with_(gpu=c.gpu.with_(name=f"{c.gpu.name}-pcie", intra_bandwidth=PCIE.intra_bandwidth,
                                   intra_alpha=PCIE.intra_alpha, nvls_bandwidth=0.0))


def link_comparison(s: Scenario) -> list[dict]:
    """`s` on NVLink (its GPU as it is) and over PCIe: {"link", "intra_bandwidth" (bytes/s), "best", "PP",
    "ZeRO", "TP"} — each answer's fastest plan (`advisor.fastest_of`), with its "ratio" to the best."""
    rows = []
    for link, c in (("NVLink", s.cluster()), ("PCIe", over_pcie(s.cluster()))):
        rows.append({"link": link, "intra_bandwidth": c.gpu.intra_bandwidth,
                     **fastest_of(s.model, c, s.global_batch, ONE_NODE)})
    return rows


def network_sweep(s: Scenario, gbps: tuple = NETWORK_SWEEP) -> list[dict]:
    """`s` with each network between nodes (Gbit/s per node): {"gbps", "best", "ZeRO-3", "DP+TP+PP+ZeRO-1"}."""
    return [{"gbps": g, **fastest_of(s.model, s.cluster().with_(inter_node_gbps=g), s.global_batch, MANY_NODES)}
            for g in gbps]


def flip(rows: list[dict], name: str) -> dict:
    """Where `name`'s fastest plan ties with the best within the model's error ("tie") and where it is the best
    ("wins"): the rows' "gbps" values, in their order."""
    def where(limit):
        return [r["gbps"] for r in rows if r[name] is not None and r[name]["ratio"] <= limit]
    return {"tie": where(1 + MODEL_ERROR), "wins": where(1 + 1e-9)}


def zero1_for_memory(s: Scenario) -> dict:
    """The best plan for `s` (ZeRO-1 on a slow network) and the same plan with plain DP (ZeRO-0): {"zero1",
    "plain"} as `advisor.evaluate_plan` gives them, and "time_ratio" (ZeRO-1's step over plain DP's)."""
    c = s.cluster()
    best = search(s.model, c, s.global_batch)["best"]["config"]
    zero1, plain = (evaluate_plan(s.model, c, s.global_batch, Plan(**{**best, "zero": z})) for z in (best["zero"], 0))
    return {"zero1": zero1, "plain": plain, "time_ratio": zero1["step_seconds"] / plain["step_seconds"]}


def hsdp_comparison(s: Scenario = HSDP_CASE, gbps: tuple = HSDP_NETWORKS) -> list[dict]:
    """ZeRO-3 over the whole DP group against ZeRO-3 inside a node, replicated across nodes (HSDP), no TP or PP:
    {"gbps", "best", "ZeRO-3", "ZeRO-3 (HSDP)"} for each network."""
    return [{"gbps": g, **fastest_of(s.model, s.cluster().with_(inter_node_gbps=g), s.global_batch, HSDP)}
            for g in gbps]


def largest_matrix(model: Transformer) -> int:
    """Parameters of a layer's largest weight tensor: the fused QKV projection or one MLP matrix."""
    return model.largest_matrix


def gather_units(s: Scenario) -> list[dict]:
    """ZeRO-3 alone (DP+ZeRO-3: no TP, no PP, no Offload) for `s`, by how much it gathers at once — lesson 5's
    granularity: a whole layer, the layer's largest weight matrix, or the advisor's count (a layer, at most
    `ZERO3_UNIT` parameters of it: DeepSpeed's stage3_max_live_parameters). Each row: "unit", "params", the fewest
    bytes per GPU of any such plan ("bytes_per_gpu"; `hybrid_memory.model_states` holds the unit's weights and
    gradients, and the next unit's weights when it prefetches) and whether that "fits"."""
    model, c = s.model, s.cluster()
    k = candidates(model, c, s.global_batch, {"tp": 1, "pp": 1, "zero": 3, "offload": False, "cp": 1})
    mem, _time, _fits = evaluate(model, c, s.global_batch, k, "mixed")
    p_b, g_b, _o = STATE_BYTES["mixed"]
    per_param = p_b + g_b + k.overlap_params * p_b
    counted = float(zero3_unit(model, 1))  # what the advisor's memory counts
    rows = []
    for unit, params in (("layer", model.layer_params), ("matrix", largest_matrix(model)), ("advisor", counted)):
        total = np.where(k.shard == k.dp, mem["total"] + (min(params, model.layer_params) - counted) * per_param,
                         np.inf)
        rows.append({"unit": unit, "params": int(params), "bytes_per_gpu": float(total.min()),
                     "fits": bool(total.min() <= c.gpu.usable_memory), "usable": c.gpu.usable_memory})
    return rows
