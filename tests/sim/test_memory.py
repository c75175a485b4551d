"""ZeRO memory model: the paper's Figure 1 exactly, padding, offload, communication volume, errors."""
import re

import pytest

from simlab.sim.memory import (
    PRECISIONS,
    comm_volume_in_psi,
    comm_volume_per_step,
    padded_numel,
    per_gpu_bytes,
    shard_numel,
)

PSI, ND, GB = 7_500_000_000, 64, 10**9


def test_precisions_contract():
    assert PRECISIONS == {"fp32": (4, 4, 8), "mixed": (2, 2, 12), "mixed-fp32-grads": (2, 4, 12)}
    assert PRECISIONS["mixed"].optimizer == 12  # K in the paper


@pytest.mark.parametrize("stage, total, parts", [
    (0, 120 * GB, (2 * PSI, 2 * PSI, 12 * PSI)),  # baseline: (2 + 2 + K)Ψ
    (1, 31_406_250_000, (2 * PSI, 2 * PSI, 12 * PSI // ND)),  # P_os: 2Ψ + 2Ψ + KΨ/N_d ≈ 31.4 GB
    (2, 16_640_625_000, (2 * PSI, 2 * PSI // ND, 12 * PSI // ND)),  # P_os+g: 2Ψ + (2+K)Ψ/N_d ≈ 16.6 GB
    (3, 1_875_000_000, (2 * PSI // ND, 2 * PSI // ND, 12 * PSI // ND)),  # P_os+g+p ≈ 1.9 GB
])
def test_zero_paper_figure_1(stage, total, parts):
    mem = per_gpu_bytes(PSI, ND, stage, precision="mixed")
    assert (mem["params"], mem["grads"], mem["optimizer"]) == parts
    assert mem["total"] == total and mem["cpu"] == 0
    assert round(mem["total"] / GB, 1) == [120.0, 31.4, 16.6, 1.9][stage]


def test_fp32_closed_form_and_list_of_layers():
    layers = [300, 600, 900]  # all divisible by 3: no padding
    for stage in range(4):
        mem = per_gpu_bytes(layers, 3, stage)
        full, shard = 1800, 600
        assert mem["params"] == (shard if stage == 3 else full) * 4
        assert mem["grads"] == (shard if stage >= 2 else full) * 4
        assert mem["optimizer"] == (shard if stage >= 1 else full) * 8
        assert mem["total"] == mem["params"] + mem["grads"] + mem["optimizer"]
    assert per_gpu_bytes(1800, 3, 2) == per_gpu_bytes([1800], 3, 2)  # an int is one flat layer


def test_shard_and_padded_numel():
    assert [shard_numel(p, 4) for p in (1, 4, 5, 8, 9)] == [1, 1, 2, 2, 3]
    assert [padded_numel(p, 4) for p in (1, 4, 5, 8, 9)] == [4, 4, 8, 8, 12]
    assert shard_numel(10, 1) == padded_numel(10, 1) == 10


def test_padding_is_per_layer():
    # 10 and 7 over 4 GPUs: shards of 3 and 2 (the flat buffers are padded to 12 and 8), not ceil(17/4)=5
    mem = per_gpu_bytes([10, 7], 4, 3, precision="mixed")
    assert (mem["params"], mem["grads"], mem["optimizer"]) == (5 * 2, 5 * 2, 5 * 12)
    assert per_gpu_bytes(17, 4, 3, precision="mixed")["params"] == 5 * 2
    assert per_gpu_bytes([1, 1, 1], 4, 1)["optimizer"] == 3 * 8  # each tiny layer still owns a padded slot
    assert per_gpu_bytes([10, 7], 4, 0)["params"] == 17 * 4  # unsharded states are never padded


@pytest.mark.parametrize("precision", ["fp32", "mixed"])
@pytest.mark.parametrize("stage", [2, 3])
def test_offload(stage, precision):
    p, g, k = PRECISIONS[precision]
    mem = per_gpu_bytes([1000, 999], 8, stage, offload=True, precision=precision)
    shard = 125 + 125
    assert mem["grads"] == 0 and mem["optimizer"] == 0
    assert mem["params"] == (shard if stage == 3 else 1999) * p
    assert mem["total"] == mem["params"]
    assert mem["cpu"] == shard * (12 + 4)  # fp32 master + m + v, and the fp32 grad shard, either precision


def test_activations_add_to_total_only():
    base = per_gpu_bytes(1000, 4, 2)
    more = per_gpu_bytes(1000, 4, 2, activations=123)
    assert more["total"] == base["total"] + 123
    assert {k: more[k] for k in ("params", "grads", "optimizer", "cpu")} == \
        {k: base[k] for k in ("params", "grads", "optimizer", "cpu")}


def test_single_gpu_shards_nothing():
    assert len({per_gpu_bytes([5, 6], 1, s)["total"] for s in range(4)}) == 1


@pytest.mark.parametrize("n", [1, 2, 3, 64])
@pytest.mark.parametrize("precision", ["fp32", "mixed"])
def test_comm_volume_closed_form(n, precision):
    p, g, _ = PRECISIONS[precision]
    psi = 64 * 3 * 5  # divisible by every n here
    for stage in range(4):
        vol = comm_volume_per_step(psi, stage, n, precision)
        # every GPU sends (N-1)/N of each collective's buffer: 2 collectives, or 3 for stage 3
        assert vol * n == (n - 1) * psi * (2 * g if stage < 3 else 2 * p + g)
        assert vol * n == comm_volume_in_psi(stage) * (n - 1) * psi * p  # p == g: Ψ counts elements
    assert [comm_volume_in_psi(s) for s in range(4)] == [2, 2, 2, 3]


def test_comm_volume_uses_padded_layers():
    # 10 and 7 over 4: shards 3 and 2, each GPU sends 3 shards per collective, 2 collectives (fp32)
    assert comm_volume_per_step([10, 7], 1, 4, "fp32") == 3 * 5 * 2 * 4


@pytest.mark.parametrize("kwargs, message", [
    (dict(stage=4), "stage=4: must be between 0 and 3"),
    (dict(stage=-1), "stage=-1"),
    (dict(stage="2"), "stage='2': must be an integer"),
    (dict(world_size=0), "world_size=0"),
    (dict(layer_numels=-5), "layer_numels=-5"),
    (dict(layer_numels=0), "layer_numels=0"),
    (dict(layer_numels=[10, -1]), "layer_numels[1]=-1"),
    (dict(layer_numels=[]), "layer_numels=[]"),
    (dict(layer_numels=7.5e9), "layer_numels=7500000000.0"),
    (dict(precision="bf16"), "precision='bf16': must be one of fp32, mixed"),
    (dict(offload=True, stage=1), "offload=True: needs stage 2 or 3"),
    (dict(offload=True, stage=0), "offload=True"),
    (dict(offload="yes"), "offload='yes'"),
    (dict(activations=-1), "activations=-1"),
])
def test_per_gpu_bytes_errors_name_the_parameter(kwargs, message):
    args = dict(layer_numels=100, world_size=4, stage=2) | kwargs
    with pytest.raises(ValueError, match=re.escape(message)):
        per_gpu_bytes(**args)


def test_comm_volume_errors():
    with pytest.raises(ValueError, match="stage=5"):
        comm_volume_per_step(10, 5, 2)
    with pytest.raises(ValueError, match="stage=5"):
        comm_volume_in_psi(5)
    with pytest.raises(ValueError, match="precision='int8'"):
        comm_volume_per_step(10, 1, 2, "int8")
    with pytest.raises(ValueError, match="world_size=0"):
        comm_volume_per_step(10, 1, 0)


@pytest.mark.parametrize("precision", ["fp32", "mixed", "mixed-fp32-grads"])
@pytest.mark.parametrize("layers, n, b", [(1, 1, 1), (3, 3, 1), (2, 4, 5), (4, 2, 3)])
@pytest.mark.parametrize("stage, offload", [(0, False), (1, False), (2, False), (3, False), (2, True), (3, True)])
def test_peak_is_the_walkthroughs_peak(stage, offload, layers, n, b, precision):
    """The closed form equals the peak found by stepping through a training step event by event."""
    from simlab.sim.memory import peak_per_gpu_bytes
    from simlab.sim.zero import peak_bytes, walkthrough
    stepped = peak_bytes(walkthrough(stage, layers, n, offload, precision, block_numel=b))
    assert stepped == [peak_per_gpu_bytes([n * b] * layers, n, stage, offload, precision)] * n


def test_smallest_world_size_is_the_first_that_fits():
    from simlab.sim.memory import peak_per_gpu_bytes, smallest_world_size
    layers, cap = [875_000_000] * 80, 80 * 10**9  # 70 B parameters, an 80 GB GPU
    for stage, offload, want in [(3, False, 15), (3, True, 2)]:
        n = smallest_world_size(layers, stage, cap, offload)
        assert n == want
        assert peak_per_gpu_bytes(layers, n, stage, offload) <= cap < peak_per_gpu_bytes(layers, n - 1, stage, offload)
    assert [smallest_world_size(layers, s, cap) for s in (0, 1, 2)] == [None] * 3  # full params: 140 GB
    assert smallest_world_size(layers, 2, cap, offload=True) is None
    assert smallest_world_size([10], 0, 160) == 1  # 16 B × 10 fits one GPU of 160 B


@pytest.mark.parametrize("kwargs, message", [(dict(capacity=0), "capacity=0"), (dict(limit=0), "limit=0"),
                                             (dict(stage=5), "stage=5")])
def test_smallest_world_size_refuses_bad_input(kwargs, message):
    from simlab.sim.memory import smallest_world_size
    with pytest.raises(ValueError, match=message):
        smallest_world_size(**({"layer_numels": [10], "stage": 3, "capacity": 100} | kwargs))
