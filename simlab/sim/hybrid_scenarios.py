"""The primer's 适用场景 (when to use which strategy), case by case: its own sentence, the course's English,
and one concrete model on one concrete cluster that the advisor (`simlab.sim.advisor.search`) answers.

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

from .hardware import Cluster, cluster
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
        net = self.cluster_args.get("inter_node_gbps")
        where = f"{self.gpus} × {self.gpu}" + (f", {net:g} Gbit/s per node between nodes" if net else "")
        return f"{self.model.name} ({self.model.params / 1e9:.3g}B parameters) on {where}, batch {self.global_batch}"


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
