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
(`calibration_path()`: $SIMLAB_CALIBRATION, else ~/.cache/simlab/calibration.json), one entry per world size;
`calibrated_gpu(N)` builds the GPU from it and `cluster("cpu-this-machine", gpus=N)` uses it (one node) when the
file exists. Small layers on a CPU pay a fixed cost per operation (`GPU.op_overhead`) that big layers on a GPU never
notice.

    >>> c = cluster("a100-80gb", gpus=16)
    >>> c.nodes, c.inter_bandwidth / 1e9, round(c.gpu.matmul_flops / 1e12, 2)
    (2, 23.75, 271.13)
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path

from .._checks import check_choice, check_int, check_positive
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
        chip = calibrated_gpu(gpus) if load_calibration() else chip
    gpus_per_node = 8 if gpus_per_node is None else gpus_per_node
    return Cluster(chip, gpus, min(gpus_per_node, gpus), inter_node_gbps, **fields)


# ---------------------------------------------------------------- this machine, as `simlab calibrate` measured it

CALIBRATED = "cpu-this-machine"
MEASURED = ("matmul_flops", "elementwise_bandwidth", "op_overhead", "ring_alpha", "ring_bandwidth")  # what we read


def calibration_path() -> Path:
    """$SIMLAB_CALIBRATION if set, else ~/.cache/simlab/calibration.json."""
    env = os.environ.get("SIMLAB_CALIBRATION")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "simlab" / "calibration.json"


def load_calibration(path=None) -> dict:
    """{world size (str): measured fields} from the file; {} when there is none."""
    path = Path(path) if path is not None else calibration_path()
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ValueError(f"calibration={str(path)!r}: unreadable ({err}); run `simlab calibrate` again") from None
    if not isinstance(data, dict) or not all(k.isdigit() and isinstance(v, dict) for k, v in data.items()):
        raise ValueError(f"calibration={str(path)!r}: not a {{world size: fields}} object; "
                         f"run `simlab calibrate` again")
    return data


def save_calibration(world_size: int, fields: dict, path=None) -> Path:
    """Merge `fields` (at least `MEASURED`, positive numbers; `ring_alpha` may be 0; `device_memory`, bytes,
    under NCCL) into the file under str(world_size), creating its directory; returns the path."""
    check_int("world_size", world_size, 1)
    for key in MEASURED:
        value = fields.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf") or (
                value == 0 and key != "ring_alpha"):
            raise ValueError(f"{key}={value!r}: must be a positive finite number (a field of the calibration)")
    path = Path(path) if path is not None else calibration_path()
    data = load_calibration(path)
    data[str(world_size)] = dict(fields)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True, allow_nan=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)  # readers see the old file or the new one, never half of one
    return path


def calibrated_gpu(world_size: int, path=None) -> GPU:
    """This machine as one of `world_size` processes: the measurement for that world size, or the nearest
    measured one (a larger on a tie: more sharing, more cautious), as `.source` says.

        >>> import tempfile
        >>> p = Path(tempfile.mkdtemp(), "calibration.json")
        >>> _ = save_calibration(4, {"matmul_flops": 4e10, "elementwise_bandwidth": 6e9, "op_overhead": 6e-6,
        ...                          "ring_alpha": 1e-3, "ring_bandwidth": 1e9}, path=p)
        >>> g = calibrated_gpu(2, path=p)
        >>> g.matmul_flops, g.intra_alpha, g.op_overhead, g.source.split(";")[0]
        (40000000000.0, 0.001, 6e-06, 'measured with 4 processes, the nearest to 2')
    """
    check_int("world_size", world_size, 1)
    path = Path(path) if path is not None else calibration_path()
    data = load_calibration(path)
    if not data:
        raise ValueError(f"world_size={world_size}: this machine is not calibrated (no {path}); "
                         f"run `simlab calibrate --world-size {world_size}` first")
    near = min((int(k) for k in data), key=lambda n: (abs(n - world_size), -n))
    m = data[str(near)]
    missing = [key for key in MEASURED if key not in m]
    if missing:
        raise ValueError(f"calibration={str(path)!r}: world size {near} lacks {', '.join(missing)}; "
                         f"run `simlab calibrate --world-size {near}` again")
    how = (f"measured with {near} processes" + ("" if near == world_size else f", the nearest to {world_size}")
           + f"; {m.get('backend', '?')}, {m.get('date', '?')}, {path}")
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")  # a CPU "GPU": its share of the RAM
    memory = float(m.get("device_memory") or ram / world_size)  # under NCCL: the GPU's own memory
    return GPU(CALIBRATED, memory, float(m["matmul_flops"]), 1.0, float(m["elementwise_bandwidth"]),
               float(m["ring_bandwidth"]), float(m["ring_alpha"]), float(m["elementwise_bandwidth"]), how,
               op_overhead=float(m["op_overhead"]), gemm_latency=0.0, roofline=False)
