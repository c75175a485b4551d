"""ZeRO walkthrough: the primer's narrative, end states, memory against the closed form, traffic."""
import re

import pytest

from simlab.sim.memory import PRECISIONS, comm_volume_in_psi, comm_volume_per_step, per_gpu_bytes
from simlab.sim.zero import holdings_text, memory_curve, peak_bytes, to_trace, walkthrough

CASES = [(s, False) for s in range(4)] + [(2, True), (3, True)]  # (stage, offload)
SCENES = [(1, 1), (3, 3), (2, 4), (4, 2), (3, 1)]  # (layers, world_size)


def comm_bytes(steps) -> list[int]:
    """Bytes each GPU sent to other GPUs over the whole walkthrough (host transfers not included)."""
    return [sum(st.bytes_sent[g] for st in steps) for g in range(len(steps[0].bytes_sent))]


def blocks(layers, n, owner=None):
    return {f"{chr(ord('a') + layer)}{g}" for layer in range(layers) for g in range(n) if owner in (None, g)}


def test_stage3_la_forward_gathers_a1_a2_then_frees_them():
    steps = walkthrough(3)
    assert [s.name for s in steps[:4]] == ["start", "all-gather La", "forward La", "free La"]
    gather, fwd, free = steps[1:4]
    assert gather.description == "La forward: GPU0 gathers a1 from GPU1 and a2 from GPU2"
    assert gather.received[0] == {"a1", "a2"}
    assert gather.received == ({"a1", "a2"}, {"a0", "a2"}, {"a0", "a1"})
    assert steps[0].holdings[0]["params"] == {"a0", "b0", "c0"}
    assert gather.holdings[0]["params"] == fwd.holdings[0]["params"] == {"a0", "a1", "a2", "b0", "c0"}
    assert free.holdings[0]["params"] == {"a0", "b0", "c0"}
    assert "frees the params of a1, a2" in free.description


def test_stage3_full_order():
    names = [s.name for s in walkthrough(3, layers=2, world_size=2)]
    assert names == ["start",
                     "all-gather La", "forward La", "free La", "all-gather Lb", "forward Lb", "free Lb",
                     "all-gather Lb", "backward Lb", "free Lb", "reduce-scatter Lb",
                     "all-gather La", "backward La", "free La", "reduce-scatter La", "step"]


@pytest.mark.parametrize("stage, expected", [
    (0, ["start", "forward La", "forward Lb", "backward Lb", "all-reduce Lb", "backward La",
         "all-reduce La", "step"]),
    (1, ["start", "forward La", "forward Lb", "backward Lb", "backward La", "reduce-scatter Lb La", "step",
         "all-gather La Lb"]),  # one bucket each way, as the executor does
    (2, ["start", "forward La", "forward Lb", "backward Lb", "reduce-scatter Lb", "backward La",
         "reduce-scatter La", "step", "all-gather La", "all-gather Lb"]),
])
def test_stage_order(stage, expected):
    assert [s.name for s in walkthrough(stage, layers=2, world_size=2)] == expected


def test_offload_order_and_cpu_holdings():
    steps = walkthrough(2, layers=1, world_size=2, offload=True)
    assert [s.name for s in steps] == ["start", "forward La", "backward La", "reduce-scatter La",
                                       "to-cpu La", "step", "to-gpu", "all-gather La"]
    assert steps[2].holdings[0]["grads"] == {"a0", "a1"}  # backward: the full gradient, for a moment
    assert steps[4].holdings[0]["grads"] == set() and steps[3].holdings[0]["grads"] == {"a0"}
    assert all(s.cpu[1] == {"grads": {"a1"}, "optim": {"a1"}} for s in steps)
    assert steps[5].kind == "cpu" and steps[6].received == ({"a0"}, {"a1"})


@pytest.mark.parametrize("layers, n", SCENES)
@pytest.mark.parametrize("stage, offload", CASES)
def test_end_state(stage, offload, layers, n):
    steps = walkthrough(stage, layers, n, offload)
    for g, h in enumerate(steps[-1].holdings):
        own, full = blocks(layers, n, g), blocks(layers, n)
        assert h["params"] == (own if stage == 3 else full)  # stages 0-2: full params everywhere
        assert h["grads"] == (set() if offload else own if stage >= 2 else full)
        assert h["optim"] == (set() if offload else own if stage >= 1 else full)
        host = own if offload else set()
        assert steps[-1].cpu[g] == {"grads": host, "optim": host}
    for s in steps:  # the optimizer state never moves: each GPU only ever updates its shard
        assert [h["optim"] for h in s.holdings] == [h["optim"] for h in steps[0].holdings]
        if stage <= 1:  # stages 0 and 1 keep full parameters and gradients all along
            assert all(h["params"] == h["grads"] == blocks(layers, n) for h in s.holdings)
    assert steps[0].holdings == steps[-1].holdings  # the step ends where it began: a steady state


@pytest.mark.parametrize("precision", ["fp32", "mixed"])
@pytest.mark.parametrize("layers, n", SCENES)
@pytest.mark.parametrize("stage, offload", CASES)
def test_memory_matches_closed_form(stage, offload, layers, n, precision):
    b = 5
    p, g, _ = PRECISIONS[precision]
    steps = walkthrough(stage, layers, n, offload, precision, block_numel=b)
    mem = per_gpu_bytes([n * b] * layers, n, stage, offload, precision)
    curve = memory_curve(steps)
    assert len(curve) == n and all(len(c) == len(steps) for c in curve)
    assert all(c[0] == c[-1] == mem["total"] for c in curve)
    assert all(s.cpu_bytes == (mem["cpu"],) * n for s in steps)
    # the transient: one layer's gathered params (stage 3) and its full gradient (stages 2, 3)
    grads_kept = 0 if offload else 1  # blocks of the layer's gradient already in the steady state
    transient = ((n - grads_kept) * b * g if stage >= 2 else 0) + ((n - 1) * b * p if stage == 3 else 0)
    assert peak_bytes(steps) == [mem["total"] + transient] * n


@pytest.mark.parametrize("precision", ["fp32", "mixed"])
@pytest.mark.parametrize("n", [2, 3, 8])
def test_peak_memory_falls_with_each_stage(n, precision):
    peaks = [peak_bytes(walkthrough(s, 3, n, precision=precision))[0] for s in range(4)]
    assert peaks[0] > peaks[1] > peaks[2] > peaks[3]
    assert peak_bytes(walkthrough(2, 3, n, True, precision))[0] < peaks[2]


@pytest.mark.parametrize("precision", ["fp32", "mixed", "mixed-fp32-grads"])
@pytest.mark.parametrize("layers, n", SCENES)
@pytest.mark.parametrize("stage, offload", CASES)
def test_comm_volume_is_2psi_or_3psi(stage, offload, layers, n, precision):
    """Ring accounting: each collective makes every GPU send (N-1)/N of its buffer."""
    b = 7
    steps = walkthrough(stage, layers, n, offload, precision, block_numel=b)
    psi, p = n * b * layers, PRECISIONS[precision].param
    sent = comm_bytes(steps)
    assert sent == [comm_volume_per_step([n * b] * layers, stage, n, precision)] * n
    if precision != "mixed-fp32-grads":  # one byte size for everything: volumes in units of Ψ
        assert sent[0] * n == comm_volume_in_psi(stage) * (n - 1) * psi * p  # 2Ψ, or 3Ψ for stage 3
    else:  # gradients travel in 4 bytes, parameters in 2: stages 1-2 send (N-1)/N·Ψ of each
        assert sent[0] * n == (n - 1) * psi * {0: 8, 1: 6, 2: 6, 3: 8}[stage]
    ops = [s.op for s in steps if s.kind == "comm" and s.op not in ("to-cpu", "to-gpu")]
    assert len(ops) == (2 if stage == 1 else layers * (1 if stage == 0 else 3 if stage == 3 else 2))  # 1: buckets


def test_collectives_receive_what_they_should():
    for s in walkthrough(2, world_size=4):
        if s.op == "reduce-scatter":  # each GPU gets the others' partial sums of its own block
            assert s.received == tuple({f"{s.layer[1]}{g}"} for g in range(4))
        if s.op == "all-gather":
            assert s.received[3] == {f"{s.layer[1]}{g}" for g in range(3)}
        if s.kind == "compute":
            assert s.received == (set(),) * 4 and s.bytes_sent == (0,) * 4


def test_trace_lanes_kinds_and_names():
    n, steps = 3, walkthrough(3)
    trace = to_trace(steps)
    assert {e.kind for e in trace} == {"compute", "comm"} and {e.rank for e in trace} == {0, 1, 2}
    names = [e.name for e in trace.for_rank(0)]
    assert names[:3] == ["all-gather La", "forward La", "free La"] and names[-1] == "step"
    assert "reduce-scatter Lc" in names
    assert [e.step for e in trace.for_rank(0)] == list(range(1, len(steps)))
    assert sum(e.nbytes for e in trace.for_rank(0)) == comm_bytes(steps)[0]
    off = to_trace(walkthrough(2, offload=True))
    assert {e.kind for e in off} == {"compute", "comm", "cpu"}
    cpu = [e for e in off if e.kind == "cpu"]
    assert sorted(e.rank for e in cpu) == [n, n + 1, n + 2] and {e.name for e in cpu} == {"step"}
    down = [e for e in off if e.name == "to-cpu La"]
    assert [(e.rank, e.peer, e.nbytes) for e in down] == [(g, n + g, 2) for g in range(n)]  # fp16 a_g
    up = [e for e in off if e.name == "to-gpu"]
    assert [(e.rank, e.peer, e.nbytes) for e in up] == [(n + g, g, 6) for g in range(n)]  # a_g, b_g, c_g
    assert all(e.end == e.start + 1 for e in off)


def test_holdings_text_is_a_stable_table():
    text = holdings_text(walkthrough(3)[1])
    assert text == "\n".join([
        "step 1: all-gather La (comm)",
        "La forward: GPU0 gathers a1 from GPU1 and a2 from GPU2",
        "      params          grads     optim     bytes",
        "GPU0  a0 a1 a2 b0 c0  a0 b0 c0  a0 b0 c0  52",
        "GPU1  a0 a1 a2 b1 c1  a1 b1 c1  a1 b1 c1  52",
        "GPU2  a0 a1 a2 b2 c2  a2 b2 c2  a2 b2 c2  52"])
    off = holdings_text(walkthrough(2, offload=True)[0])
    assert "CPU1  -" in off and off.splitlines()[-1].split() == ["CPU2", "-", "a2", "b2", "c2", "a2", "b2",
                                                                 "c2", "48"]
    twelve = holdings_text(walkthrough(0, layers=1, world_size=12)[0])
    assert twelve.count("a9 a10 a11") == 36  # blocks sort by number: 12 GPUs × params, grads, optim


@pytest.mark.parametrize("kwargs, message", [
    (dict(stage=4), "stage=4: must be between 0 and 3"),
    (dict(stage=None), "stage=None: must be an integer"),
    (dict(layers=0), "layers=0"),
    (dict(layers=27), "layers=27: must be between 1 and 26"),
    (dict(world_size=0), "world_size=0"),
    (dict(world_size=65), "world_size=65"),
    (dict(offload=True, stage=1), "offload=True: needs stage 2 or 3"),
    (dict(precision="fp8"), "precision='fp8'"),
    (dict(block_numel=0), "block_numel=0"),
])
def test_walkthrough_errors_name_the_parameter(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        walkthrough(**(dict(stage=2) | kwargs))


def test_a_lone_gpu_moves_nothing():
    for stage, offload in CASES:
        steps = walkthrough(stage, world_size=1, offload=offload)
        assert comm_bytes(steps) == [0]
        assert all(s.received == (set(),) for s in steps if s.op != "to-gpu")
        assert peak_bytes(steps) == [per_gpu_bytes([1] * 3, 1, stage, offload, "mixed")["total"]
                                     + (1 if offload else 0) * 2]  # offload: one layer's grads transit
