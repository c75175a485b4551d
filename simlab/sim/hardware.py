"""The machine, described once: GPUs (`simlab.sim.gpus`), how many share a node, the network between nodes,
and the host for Offload; and this computer as `simlab calibrate` measured it.

Teaches where the time of a training step can go. Matrix multiplies run at the rate cuBLAS reaches for their
shape; the element-wise work around them (norms, GeLU, softmax, dropout) is memory-bound and runs at HBM
speed; collectives inside a node ride NVLink (or PCIe), across nodes the network — each GPU's own NIC on a
good cluster (8 × 200 Gb/s InfiniBand on a DGX A100, 8 × 400 Gb/s on a DGX H100), one shared 25 GbE link on a
cheap one. `simlab.sim.network` says which groups cross which link and how NCCL runs over it.

The network reaches 95 % of its line rate: 192 GB/s all-reduce bus bandwidth over a DGX-A100's 8 × 200 Gb/s
(nccl#812), 24 GB/s per HDR NIC (nccl#412), 46–48 GB/s per NDR NIC (nccl-tests#290).

"cpu-this-machine" is this computer, measured by `simlab calibrate --world-size N` (`simlab.exec.hybrid_calibrate`):
N processes at once, each a "GPU" of one process's share of the cores. The measurements live in a JSON file
(`calibration_path()`: $SIMLAB_CALIBRATION, else ~/.cache/simlab/calibration.json), one entry per world size,
kept by `simlab.sim.calibration_cache` (checked on load as on save, written under a lock, atomically);
`calibrated_gpu(N)` builds the GPU from it and `cluster("cpu-this-machine", gpus=N)` uses it (one node) when the
file exists. Small layers on a CPU pay a fixed cost per operation (`GPU.op_overhead`) that big layers on a GPU never
notice.

    >>> c = cluster("a100-80gb", gpus=16)
    >>> c.nodes, c.inter_bandwidth / 1e9, round(c.gpu.matmul_flops / 1e12, 2)
    (2, 23.75, 271.13)
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from .._checks import check_choice, check_int, check_positive
from .calibration_cache import (  # noqa: F401 — re-exported: hardware's names for this machine's calibration
    CALIBRATED,
    MEASURED,
    calibrated_gpu,
    calibration_path,
    load_calibration,
    save_calibration,
)
from .gpus import GB, GPU, GPUS

MAX_GPUS = 1 << 20  # 1,048,576: ten times the largest clusters trained on; the advisor's search stays < 1 s


@dataclass(frozen=True)
class Cluster:
    """`gpus` GPUs, `gpus_per_node` to a node. `inter_node_gbps`: network Gbit/s per node (8 × 200 Gb/s
    InfiniBand = 1600; one 25 GbE link = 25), shared by the node's GPUs, `network_efficiency` reached."""

    gpu: GPU
    gpus: int
    gpus_per_node: int
    inter_node_gbps: float
    inter_alpha: float = 14e-6
    network_efficiency: float = 0.95
    host_memory: float = 1024 * GB  # per node: a DGX A100 has 1 TB (2 TB on some)
    host_adam_rate: float = 1e9  # parameters per second per node that CPU Adam updates (DeepSpeed CPU-Adam order)

    def __post_init__(self):
        check_int("gpus", self.gpus, 1, MAX_GPUS)
        check_int("gpus_per_node", self.gpus_per_node, 1, MAX_GPUS)
        check_positive("inter_node_gbps", self.inter_node_gbps)
        if self.gpus > self.gpus_per_node and self.gpus % self.gpus_per_node:
            raise ValueError(f"gpus={self.gpus}: must be a multiple of gpus_per_node={self.gpus_per_node}")

    @property
    def nodes(self) -> int:
        return -(-self.gpus // self.gpus_per_node)

    @property
    def inter_bandwidth(self) -> float:
        """Bytes/s per direction one GPU gets across nodes when all of a node's GPUs talk at once."""
        return self.inter_node_gbps / 8 * GB * self.network_efficiency / min(self.gpus, self.gpus_per_node)

    def with_(self, **changes) -> "Cluster":
        return replace(self, **changes)


def cluster(gpu: str = "a100-80gb", gpus: int = 8, gpus_per_node: int | None = None,
            inter_node_gbps: float = 1600.0, **fields) -> Cluster:
    """A cluster of `gpus` preset GPUs (default: DGX A100 nodes, 8 GPUs each, on 8 × 200 Gb/s InfiniBand).
    "cpu-this-machine" is one node (`gpus_per_node` defaults to `gpus`), calibrated if `simlab calibrate` ran."""
    check_choice("gpu", gpu, tuple(GPUS))
    chip = GPUS[gpu]
    if gpu == CALIBRATED:
        check_int("gpus", gpus, 1, MAX_GPUS)
        gpus_per_node = gpus if gpus_per_node is None else gpus_per_node
        data = load_calibration()  # read and checked once, here, before any search or run uses it
        chip = calibrated_gpu(gpus, data=data) if data else chip
    gpus_per_node = 8 if gpus_per_node is None else gpus_per_node
    return Cluster(chip, gpus, min(gpus_per_node, gpus), inter_node_gbps, **fields)
