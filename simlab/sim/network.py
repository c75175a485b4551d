"""Collectives on a cluster: which links a group of ranks crosses, and how long NCCL takes on them.

Teaches, for lesson 6's rank grid (TP fastest, then DP, then PP: a group is `size` ranks `stride` apart,
a node holds `gpus_per_node` consecutive ranks):
- **Where a group sits.** A group inside one node rides NVLink (or PCIe). A group that crosses nodes has
  k of its GPUs on the node where it has fewest (`members_per_node`): TP of 8 on 8-GPU nodes stays inside,
  TP of 6 does not (ranks 6–11 straddle two nodes), and a DP group over TP-8 replicas has one GPU per node.
- **How fast it crosses.** NCCL builds a ring (or tree) per channel and sends each channel between nodes
  through its own NIC, the NIC beside the GPU ("rails": NCCL_CROSS_NIC, nccl#1313 and #1933). A group with
  k GPUs on a node therefore crosses on k GPUs' share of the node's network at once: bus bandwidth
  min(NVLink, k × node network / GPUs per node) — the node's whole network when the group holds the node
  (DDP over nodes: 192 GB/s all-reduce bus bandwidth on DGX-A100's 8 × 200 Gb/s, nccl#812), one NIC's share
  when every GPU of the node talks in a group of its own (the DP groups of a TP-8 plan).
- **Latency, NCCL's own model** (src/graph/tuning.cc, Simple protocol, NCCL 2.30): a ring step costs 3.4 µs
  on NVLink, 5.7 on PCIe, 14 over the network, plus 8.4 µs once; a ring all-reduce on n ranks has
  2(n − 1) steps, of which 2 per node cross the network, a reduce-scatter or all-gather n − 1, of which 1 per
  node. An all-reduce may also run as NCCL's tree, 2((n/N − 1) α_intra + log2(N) α_net) for N nodes: the
  cheaper of the two is taken, as NCCL's tuner does. Inside an NVSwitch node an all-reduce uses NVLink SHARP
  (NVLS) where the GPU has it (`GPU.nvls_bandwidth`).

    >>> from simlab.sim.hardware import cluster
    >>> c = cluster("a100-80gb", gpus=64)
    >>> members_per_node(stride=1, size=6, gpus_per_node=8, gpus=48), members_per_node(8, 8, 8, 64)
    (2, 1)
    >>> [round(float(bus_bandwidth(c, stride, size)) / 1e9) for stride, size in ((1, 8), (1, 16), (8, 8))]
    [235, 190, 24]
"""
from __future__ import annotations

from functools import lru_cache
from math import gcd

import numpy as np

BASE_LATENCY = 8.4e-6  # NCCL tuning.cc baseLat, ring and tree, Simple protocol


@lru_cache(maxsize=4096)
def _spread(stride: int, size: int, gpus_per_node: int, gpus: int) -> tuple[int, int]:
    """(fewest of a group's GPUs on any node it touches, most nodes a group spans) for the groups of `size`
    ranks `stride` apart in a world of `gpus` (rank = block·stride·size + j·stride + inner)."""
    block, g = stride * size, gpus_per_node
    if size == 1 or gpus <= g:
        return size, 1
    if block <= g and g % block == 0:  # every group inside one node
        return size, 1
    if stride % g == 0:  # every member on its own node
        return 1, size
    if g % stride == 0 and block % g == 0:  # aligned: g/stride members on each of the nodes it spans
        return g // stride, block // g
    period = min(gpus, block * g // gcd(block, g))  # the layout repeats every lcm(block, g) ranks
    ranks = np.arange(period)
    group = (ranks // block) * stride + ranks % stride
    pairs, counts = np.unique(np.stack([group, ranks // g]), axis=1, return_counts=True)
    return int(counts.min()), int(np.bincount(pairs[0]).max())


def members_per_node(stride: int, size: int, gpus_per_node: int, gpus: int) -> int:
    """k: the fewest GPUs of one group that share a node (`size` if the group stays inside one)."""
    return _spread(int(stride), int(size), int(gpus_per_node), int(gpus))[0]


def _table(c, stride, size):
    """(k, nodes spanned) for arrays of strides and sizes, evaluated once per distinct pair."""
    stride, size = np.broadcast_arrays(np.asarray(stride, dtype=np.int64), np.asarray(size, dtype=np.int64))
    keys, inverse = np.unique((stride * (1 << 21) + size).ravel(), return_inverse=True)  # both ≤ MAX_GPUS = 2**20
    spread = np.array([_spread(int(key >> 21), int(key & ((1 << 21) - 1)), c.gpus_per_node, c.gpus)
                       for key in keys]).reshape(-1, 2)
    return spread[inverse, 0].reshape(stride.shape), spread[inverse, 1].reshape(stride.shape)


def bus_bandwidth(c, stride, size, all_reduce: bool = False):
    """Bytes/s of NCCL's bus bandwidth for the groups: NVLink inside a node (NVLS for an all-reduce where the
    GPU has it), else min(NVLink, k × the node's network per GPU)."""
    k, nodes = _table(c, stride, size)
    intra = c.gpu.nvls_bandwidth if all_reduce and c.gpu.nvls_bandwidth else c.gpu.intra_bandwidth
    across = np.minimum(c.gpu.intra_bandwidth, k * c.inter_bandwidth)
    return np.where(nodes > 1, across, intra)


def _ring_latency(c, size, nodes, steps_per_rank: int):
    """steps_per_rank·(n − 1) ring steps, steps_per_rank per node over the network (none inside one node)."""
    steps = steps_per_rank * (size - 1)
    inter = np.where(nodes > 1, steps_per_rank * nodes, 0)
    return BASE_LATENCY + (steps - inter) * c.gpu.intra_alpha + inter * c.inter_alpha


def all_reduce(c, stride, size, nbytes):
    """Seconds for an all-reduce of `nbytes` per rank over each group: ring or tree, whichever is faster."""
    size = np.asarray(size)
    k, nodes = _table(c, stride, size)
    moved = 2 * (size - 1) / size * nbytes / bus_bandwidth(c, stride, size, all_reduce=True)
    ring = _ring_latency(c, size, nodes, 2)
    tree = BASE_LATENCY + 2 * ((size / nodes - 1) * c.gpu.intra_alpha + np.log2(nodes) * c.inter_alpha)
    return np.where(size > 1, np.minimum(ring, tree) + moved, 0.0)


def reduce_scatter(c, stride, size, nbytes):
    """Seconds for a ring reduce-scatter (or all-gather: the same steps and bytes) of `nbytes` in all."""
    size = np.asarray(size)
    _, nodes = _table(c, stride, size)
    moved = (size - 1) / size * nbytes / bus_bandwidth(c, stride, size)
    return np.where(size > 1, _ring_latency(c, size, nodes, 1) + moved, 0.0)


all_gather = reduce_scatter


def send(c, stride, size, nbytes):
    """Seconds to hand `nbytes` to the next rank of a group (a pipeline neighbour, `stride` places on): one
    NIC's share of the network if the group spans nodes (its slowest hand-over crosses), NVLink otherwise."""
    _, nodes = _table(c, stride, size)
    apart = nodes > 1
    return (np.where(apart, c.inter_alpha, c.gpu.intra_alpha)
            + nbytes / np.where(apart, c.inter_bandwidth, c.gpu.intra_bandwidth))
