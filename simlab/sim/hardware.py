"""The machine, described once: a GPU (memory, peak FLOP/s, what fraction of it matmuls reach, HBM bandwidth),
how many share a node, the two tiers of links between them, and the host for Offload.

Teaches: where the time of a training step can go. Matrix multiplies run at `matmul_efficiency` × peak;
the element-wise work around them (norms, GeLU, softmax, dropout) is memory-bound and runs at HBM speed;
collectives inside a node ride NVLink (or PCIe), across nodes the network — ten times slower on a good
cluster, a hundred on a cheap one. Every link is α-β (`simlab.sim.cost`): α seconds per ring step, β per byte.

One set of constants serves every published case the model is checked against (`tests/sim/test_hybrid_time.py`):
- peak dense FP16/BF16: A100 312 TFLOP/s, H100 SXM 989 (NVIDIA datasheets; 1,979 is with sparsity),
  RTX 4090 165.2 with FP32 accumulate (NVIDIA Ada whitepaper, Appendix A);
- matmul efficiency, the fraction of peak a transformer layer's GEMMs reach in training: A100 0.68, fitted
  with `hybrid_time.K_ELEMENTWISE` to the two forward times of one 22B layer that Korthikanti et al. 2022
  publish (Table 4: 7.7 ms, 7.2 ms with sequence parallelism). The best single GEMM reaches more —
  271.2 / 312 = 86.9 % on A100 SXM, 794.5 / 989 = 80.3 % on H100 SXM (stas00/ml-engineering, "Maximum
  Achievable Matmul FLOPS") —; H100 and RTX 4090 get A100's ratio of the two (0.68 / 0.869), an assumption
  until a published H100 training step is added to the tests;
- HBM: A100 80GB 2,039 GB/s, H100 SXM 3,350 GB/s, RTX 4090 1,008 GB/s (datasheets);
- NVLink: A100 300 GB/s per direction, of which NCCL's model caps the ring at 235 (NVIDIA/nccl
  src/graph/tuning.cc, `busBw = min(busBw, 235)` for compute capability 8.0); H100 450 GB/s per direction
  (~83 % measured: 376); PCIe 4.0 x16 ≈ 31 GB/s per direction;
- α per ring step, from NCCL's latency model (tuning.cc, Simple protocol): NVLink 3.4 µs, PCIe 5.7 µs,
  network 14 µs; the ring's base latency (8.4 µs) is folded into these per-step figures;
- network: HDR InfiniBand 200 Gb/s per GPU (8 HCAs per DGX A100 node), 90 % efficient.

"cpu-this-machine" is this computer, measured by `simlab calibrate --world-size N` (`simlab.exec.hybrid_calibrate`):
N processes at once, each a "GPU" of one process's share of the cores. The measurements live in a JSON file
(`calibration_path()`: $SIMLAB_CALIBRATION, else ~/.cache/simlab/calibration.json), one entry per world size;
`calibrated_gpu(N)` builds the GPU from it and `cluster("cpu-this-machine", gpus=N)` uses it (one node) when the
file exists. Small layers on a CPU pay a fixed cost per operation (`GPU.op_overhead`) that big layers on a GPU never
notice.

    >>> c = cluster("a100-80gb", gpus=16)
    >>> c.nodes, c.inter_bandwidth / 1e9, round(c.gpu.matmul_flops / 1e12, 2)
    (2, 22.5, 212.16)
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path

from .._checks import check_choice, check_int, check_positive

GB = 1e9
MAX_GPUS = 1 << 20  # 1,048,576: ten times the largest clusters trained on; the advisor's search stays < 1 s


@dataclass(frozen=True)
class GPU:
    name: str
    memory: float  # bytes
    peak_flops: float  # dense FP16/BF16 tensor-core FLOP/s
    matmul_efficiency: float  # the fraction of peak a transformer layer's GEMMs reach in training
    hbm_bandwidth: float  # bytes/s: the element-wise ops' speed limit
    intra_bandwidth: float  # bytes/s per direction to a GPU of the same node (NVLink, or PCIe)
    intra_alpha: float  # seconds per ring step inside a node
    host_bandwidth: float  # bytes/s per direction host <-> GPU (PCIe): Offload's link
    source: str = ""
    # seconds of fixed cost per operation (Python, dispatch, kernel launch): negligible on a GPU for big layers,
    # dominant for small layers on a CPU; 0 in the datasheet presets, measured by `simlab calibrate`
    op_overhead: float = 0.0

    @property
    def matmul_flops(self) -> float:
        return self.peak_flops * self.matmul_efficiency


GPUS = {
    "a100-80gb": GPU("a100-80gb", 80 * GB, 312e12, 0.68, 2039 * GB, 235 * GB, 3.4e-6, 25 * GB,
                     "NVIDIA A100 datasheet; NCCL tuning.cc (ring bus bandwidth cap 235 GB/s on sm80); "
                     "efficiency fitted to Korthikanti et al. 2022 Table 4"),
    "h100-80gb": GPU("h100-80gb", 80 * GB, 989e12, 0.63, 3350 * GB, 376 * GB, 3.4e-6, 55 * GB,
                     "NVIDIA H100 SXM datasheet (dense); ml-engineering (376 GB/s NVLink measured of 450, "
                     "PCIe 5 55 GB/s); efficiency 0.803 × 0.68/0.869 (A100's layer/GEMM ratio)"),
    "rtx-4090": GPU("rtx-4090", 24 * GB, 165.2e12, 0.63, 1008 * GB, 25 * GB, 5.7e-6, 25 * GB,
                    "NVIDIA Ada whitepaper App. A (165.2 TFLOP/s BF16, FP32 accumulate); no NVLink: GPUs talk "
                    "over PCIe 4.0 x16 (31 GB/s per direction, ~80 % reached); efficiency as H100's"),
    # filled in by `simlab calibrate` on the learner's machine (lesson 6); these are placeholders of the
    # right order for a 2-core laptop CPU with gloo, so the model runs before calibration
    "cpu-this-machine": GPU("cpu-this-machine", 8 * GB, 50e9, 1.0, 10 * GB, 1 * GB, 2e-4, 10 * GB,
                            "placeholder until calibrated on this machine"),
}


@dataclass(frozen=True)
class Cluster:
    """`gpus` GPUs, `gpus_per_node` to a node. `inter_node_gbps`: network Gbit/s per node (8 × 200 Gb/s
    InfiniBand = 1600; one 25 GbE link = 25), shared by the node's GPUs, `network_efficiency` reached."""

    gpu: GPU
    gpus: int
    gpus_per_node: int
    inter_node_gbps: float
    inter_alpha: float = 14e-6
    network_efficiency: float = 0.9
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
               op_overhead=float(m["op_overhead"]))
