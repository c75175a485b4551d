"""simlab.sim.network: where a group of the rank grid sits (checked against every rank, enumerated), which link
it crosses and at what bus bandwidth, and NCCL's ring and tree latencies, by hand."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simlab.sim.hardware import cluster
from simlab.sim.network import (
    BASE_LATENCY,
    all_gather,
    all_reduce,
    bus_bandwidth,
    members_per_node,
    reduce_scatter,
    send,
)


def _brute(stride, size, g, gpus):
    """Every group of the grid, rank by rank: (fewest members on a node a group touches, most nodes a group spans)."""
    groups = {}
    for rank in range(gpus):
        block, inner = divmod(rank, stride * size)
        groups.setdefault((block, inner % stride), []).append(rank // g)
    fewest = min(min(np.unique(nodes, return_counts=True)[1]) for nodes in groups.values())
    return fewest, max(len(set(nodes)) for nodes in groups.values())


@settings(max_examples=150, deadline=None)
@given(st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16]), st.sampled_from([1, 2, 3, 4, 6, 8]),
       st.sampled_from([4, 6, 8]), st.integers(1, 6))
def test_members_per_node_is_every_rank_enumerated(stride, size, g, repeats):
    from simlab.sim.network import _spread
    gpus = stride * size * repeats
    if gpus > g and gpus % g:
        return  # not a whole number of nodes: `hardware.Cluster` refuses it
    assert _spread(stride, size, g, gpus) == _brute(stride, size, g, gpus)


def test_where_groups_sit_on_8_gpu_nodes():
    assert members_per_node(1, 8, 8, 64) == 8  # TP 8: a whole node
    assert members_per_node(1, 6, 8, 48) == 2  # TP 6: ranks 6-11 straddle nodes 0 and 1
    assert members_per_node(8, 8, 8, 64) == 1  # DP over TP-8 replicas: one GPU per node
    assert members_per_node(2, 8, 8, 64) == 4  # DP over TP-2: four of the group on each node


def test_bus_bandwidth_per_group():
    a100 = cluster("a100-80gb", gpus=64)  # 8 × 200 Gb/s, 95 %: 23.75 GB/s per GPU's NIC
    nic = 1600 / 8 * 1e9 * 0.95 / 8
    assert float(bus_bandwidth(a100, 1, 8)) == 235e9  # inside a node
    assert float(bus_bandwidth(a100, 1, 16)) == pytest.approx(8 * nic)  # DDP over 2 nodes: the node's 8 NICs
    assert float(bus_bandwidth(a100, 8, 8)) == pytest.approx(nic)  # one GPU per node: one NIC
    assert float(bus_bandwidth(a100, 2, 8)) == pytest.approx(4 * nic)
    h100 = cluster("h100-80gb", gpus=16, inter_node_gbps=3200)
    assert float(bus_bandwidth(h100, 1, 8, all_reduce=True)) == 480e9  # NVLS in a node
    assert float(bus_bandwidth(h100, 1, 8)) == 370e9  # reduce-scatter / all-gather: the ring
    assert float(bus_bandwidth(h100, 1, 16, all_reduce=True)) == 370e9  # capped by NVLink: 8 × 47.5 GB/s


def test_tp_of_6_on_8_gpu_nodes_pays_the_network():
    c = cluster("a100-80gb", gpus=48)
    message = 64e6
    six, eight = float(all_reduce(c, 1, 6, message)), float(all_reduce(cluster("a100-80gb", gpus=64), 1, 8, message))
    assert six > 2 * eight
    assert float(bus_bandwidth(c, 1, 6)) == pytest.approx(2 * 1600 / 8 * 1e9 * 0.95 / 8)


def test_ring_and_tree_latencies_by_hand():
    c = cluster("a100-80gb", gpus=512)
    n, nodes, nic = 64, 64, 1600 / 8 * 1e9 * 0.95 / 8
    ring = BASE_LATENCY + 2 * nodes * 14e-6 + (2 * (n - 1) - 2 * nodes) * 3.4e-6
    tree = BASE_LATENCY + 2 * ((n / nodes - 1) * 3.4e-6 + np.log2(nodes) * 14e-6)
    assert tree < ring
    assert float(all_reduce(c, 8, n, 0)) == pytest.approx(tree)  # NCCL's tuner takes the cheaper
    nbytes = 1e9
    assert float(all_reduce(c, 8, n, nbytes)) == pytest.approx(tree + 2 * (n - 1) / n * nbytes / nic)
    rs = BASE_LATENCY + nodes * 14e-6 + (n - 1 - nodes) * 3.4e-6 + (n - 1) / n * nbytes / nic
    assert float(reduce_scatter(c, 8, n, nbytes)) == pytest.approx(rs) == float(all_gather(c, 8, n, nbytes))
    inside = cluster("a100-80gb", gpus=8)
    assert float(reduce_scatter(inside, 1, 8, nbytes)) == pytest.approx(BASE_LATENCY + 7 * 3.4e-6 + 7 / 8 * nbytes / 235e9)
    assert float(all_reduce(c, 1, 1, nbytes)) == 0.0


def test_pipeline_hand_over_inside_and_across_nodes():
    c = cluster("a100-80gb", gpus=64)
    assert float(send(c, 1, 8, 1e8)) == pytest.approx(3.4e-6 + 1e8 / 235e9)  # 8 stages in one node
    assert float(send(c, 8, 8, 1e8)) == pytest.approx(14e-6 + 1e8 / (1600 / 8 * 1e9 * 0.95 / 8))
    assert float(send(c, 2, 8, 1e8)) > float(send(c, 1, 8, 1e8))  # stages 0-3 and 4-7 sit on different nodes
