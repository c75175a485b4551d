"""simlab.sim.tensor_parallel: column/row splits are exact on integers, the Megatron MLP and head-split
attention equal the unsplit maths, splitting A by rows is wrong by a computable amount, and the per-layer
traffic is the ring closed form 2(N−1)/N·b·s·h·itemsize."""
import math

import numpy as np
import pytest
import torch

from simlab.sim.tensor_parallel import (
    attention_split,
    block_steps,
    broken_mlp,
    bytes_per_rank,
    count_collectives,
    gelu,
    layer_comm,
    megatron_mlp,
    shard_plan,
    split_linear,
)

RANKS = [1, 2, 3, 4, 6]


def ints(*shape, seed=0):
    return np.random.default_rng(seed).integers(-9, 10, size=shape, dtype=np.int64)


def floats(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


@pytest.mark.parametrize("kind", ["column", "row"])
@pytest.mark.parametrize("ranks", RANKS)
def test_shards_tile_the_weight_exactly_once(kind, ranks):
    plan = shard_plan(kind, ranks, (12, 24))
    covered = np.zeros((12, 24), dtype=int)
    for (r0, r1), (c0, c1) in zip(plan.rows, plan.cols):
        covered[r0:r1, c0:c1] += 1
    assert (covered == 1).all()
    shard = (12, 24 // ranks) if kind == "column" else (12 // ranks, 24)
    assert [tuple(i["shard_shape"]) for i in plan.to_dict()["per_rank"]] == [shard] * ranks


def test_shard_plan_text_and_dict():
    col = shard_plan("column", 4, (8, 12))
    assert col.to_dict()["collective"] == "all-gather"
    assert col.to_dict()["per_rank"][1] == {"rank": 1, "rows": [0, 8], "cols": [3, 6], "shard_shape": [8, 3],
                                            "input": "X (b, 8)", "local": "Y[:, 3:6] (b, 3)"}
    lines = col.to_text().splitlines()
    assert lines[0] == ("column-parallel Y = X·W, W (8, 12) on 4 ranks: combine by all-gather "
                        "(concat columns of Y)")
    assert len(lines) == 2 + 4 and lines[-1].split() == ["3", "0:8", "9:12", "(8,", "3)", "X", "(b,", "8)",
                                                         "Y[:,", "9:12]", "(b,", "3)"]
    row = shard_plan("row", 2, (4, 6)).to_dict()
    assert row["collective"] == "all-reduce"
    assert [(i["rows"], i["cols"], i["input"]) for i in row["per_rank"]] == [
        ([0, 2], [0, 6], "X[:, 0:2] (b, 2)"), ([2, 4], [0, 6], "X[:, 2:4] (b, 2)")]


@pytest.mark.parametrize("kind", ["column", "row"])
@pytest.mark.parametrize("ranks", RANKS)
def test_split_linear_is_exact_on_integers(kind, ranks):
    x, w = ints(5, 12, seed=1), ints(12, 24, seed=2)
    res = split_linear(kind, ranks, x, w)
    assert res.result.dtype == np.int64 and np.array_equal(res.result, x @ w) and res.error == 0
    assert len(res.shards) == len(res.inputs) == len(res.partials) == ranks
    for r, (part, inp) in enumerate(zip(res.partials, res.inputs)):
        if kind == "column":  # full X in, a block of Y's columns out
            assert inp.shape == (5, 12) and np.array_equal(part, (x @ w)[:, r * 24 // ranks:(r + 1) * 24 // ranks])
        else:  # X's column block in, a full-size partial out
            assert inp.shape == (5, 12 // ranks) and part.shape == (5, 24)
    if kind == "row" and ranks > 1:
        assert not np.array_equal(res.partials[0], x @ w)  # a single partial is not the answer


def test_gelu_is_torchs_tanh_gelu():
    x = np.linspace(-6, 6, 101)
    theirs = torch.nn.functional.gelu(torch.tensor(x, dtype=torch.float64), approximate="tanh").numpy()
    assert np.abs(gelu(x) - theirs).max() < 1e-15


@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_megatron_mlp_equals_unsplit(ranks):
    x, a, b = floats(6, 8, seed=1), floats(8, 16, seed=2), floats(16, 8, seed=3)
    res = megatron_mlp(ranks, x, a, b)
    assert res.error < 1e-12 and len(res.partials) == ranks
    assert np.abs(res.reference - torch_mlp(x, a, b)).max() < 1e-12  # the reference itself, via torch
    assert count_collectives(res.steps, "forward") == count_collectives(res.steps, "backward") == 1
    assert [s.name for s in res.steps if s.collective == "all-reduce"] == ["g", "f"]
    assert [s.phase for s in res.steps if s.collective == "all-reduce"] == ["forward", "backward"]
    assert bytes_per_rank(res.steps) == [2 * 2 * (ranks - 1) * 6 * 8 * 8 // ranks] * ranks  # 2 all-reduces, fp64


def torch_mlp(x, a, b):
    t = lambda m: torch.tensor(m, dtype=torch.float64)  # noqa: E731 — a local one-liner: float64 tensors
    return (torch.nn.functional.gelu(t(x) @ t(a), approximate="tanh") @ t(b)).numpy()


def test_broken_split_hand_example():
    # X = [1, 1], A = [[1], [1]] split by rows: GeLU(1) + GeLU(1) instead of GeLU(1 + 1)
    res = broken_mlp(2, [[1.0, 1.0]], [[1.0], [1.0]], [[1.0]])

    def g(v):
        return torch.nn.functional.gelu(torch.tensor(v, dtype=torch.float64), approximate="tanh").item()

    assert res.result[0, 0] == pytest.approx(2 * g(1.0), abs=1e-15)
    assert res.reference[0, 0] == pytest.approx(g(2.0), abs=1e-15)
    assert res.error == pytest.approx(abs(g(2.0) - 2 * g(1.0)), abs=1e-15) and res.error > 0.27


@pytest.mark.parametrize("ranks", [2, 4])
def test_broken_split_is_wrong_and_the_right_one_is_not(ranks):
    x, a, b = floats(6, 8, seed=1), floats(8, 16, seed=2), floats(16, 8, seed=3)
    wrong = broken_mlp(ranks, x, a, b)
    assert wrong.error > 0.1 and megatron_mlp(ranks, x, a, b).error < 1e-12
    assert np.abs(wrong.reference - torch_mlp(x, a, b)).max() < 1e-12
    assert broken_mlp(1, x, a, b).error == 0  # one rank has nothing to split


def torch_attention(x, wq, wk, wv, wo, heads):
    t = lambda m: torch.tensor(m, dtype=torch.float64)  # noqa: E731 — a local one-liner: float64 tensors
    b, s, h = x.shape
    q, k, v = ((t(x) @ t(w)).view(b, s, heads, -1).transpose(1, 2) for w in (wq, wk, wv))
    o = torch.nn.functional.scaled_dot_product_attention(q, k, v)  # (b, H, s, d), no mask
    return (o.transpose(1, 2).reshape(b, s, h) @ t(wo)).numpy()


@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_attention_split_by_heads_equals_unsplit(ranks):
    b, s, h, heads = 2, 5, 16, 4
    x, (wq, wk, wv, wo) = floats(b, s, h, seed=1), (floats(h, h, seed=i) for i in range(2, 6))
    res = attention_split(ranks, x, wq, wk, wv, wo, heads)
    assert res.error < 1e-12 and len(res.partials) == ranks
    assert np.abs(res.reference - torch_attention(x, wq, wk, wv, wo, heads)).max() < 1e-12
    assert res.shapes == {"heads": heads // ranks, "wq": (h, h // ranks), "wk": (h, h // ranks),
                          "wv": (h, h // ranks), "wo": (h // ranks, h), "q": (b, heads // ranks, s, h // heads),
                          "scores": (b, heads // ranks, s, s), "partial": (b, s, h)}
    assert [s.collective for s in res.steps if s.collective != "none"] == ["all-reduce", "all-reduce"]


@pytest.mark.parametrize("ranks", [1, 2, 4, 8])
@pytest.mark.parametrize("itemsize", [2, 4])
def test_layer_traffic_closed_form(ranks, itemsize):
    b, s, h = 4, 16, 64
    per_allreduce = 2 * (ranks - 1) * b * s * h * itemsize // ranks  # ring: 2(N-1)/N of the buffer
    steps = layer_comm(ranks, b, s, h, itemsize)
    assert [(st.phase, st.collective) for st in steps] == [("forward", "all-reduce")] * 2 + [("backward", "all-reduce")] * 2
    assert all(st.bytes_sent == (per_allreduce,) * ranks for st in steps)
    sp = layer_comm(ranks, b, s, h, itemsize, sequence_parallel=True)
    assert [st.collective for st in sp] == ["all-gather", "reduce-scatter"] * 4
    assert all(st.bytes_sent == (per_allreduce // 2,) * ranks for st in sp)
    assert bytes_per_rank(sp) == bytes_per_rank(steps) == [4 * per_allreduce] * ranks
    # Korthikanti et al. 2022, Fig. 5: g = all-gather forward / reduce-scatter backward, ḡ the conjugate
    assert [(st.phase, st.name.split()[0], st.collective) for st in sp[:2] + sp[4:6]] == [
        ("forward", "g", "all-gather"), ("forward", "ḡ", "reduce-scatter"),
        ("backward", "ḡ", "all-gather"), ("backward", "g", "reduce-scatter")]


def test_uneven_buffer_total_traffic():
    # 2·3·5 = 30 elements on 4 ranks: chunks differ, but every chunk still travels N-1 times each way
    steps = layer_comm(4, 2, 3, 5, itemsize=2)
    assert sum(bytes_per_rank(steps)) == 4 * 2 * 3 * 30 * 2


def test_block_steps_attention_and_mlp_move_the_same_bytes():
    mlp = block_steps("mlp", 4, 32, 64, inner=256)
    attn = block_steps("attention", 4, 32, 64, heads=8)
    assert bytes_per_rank(mlp) == bytes_per_rank(attn) == [2 * 2 * 3 * 32 * 64 * 4 // 4] * 4
    assert [s.name for s in mlp] == ["f", "local", "local", "g", "g", "local", "local", "f"]


@pytest.mark.parametrize("call, message", [
    (lambda: shard_plan("column", 0, (4, 4)), "ranks=0"),
    (lambda: shard_plan("diagonal", 2, (4, 4)), "kind='diagonal'"),
    (lambda: shard_plan("column", 2, (4, 0)), "shape[1]=0"),
    (lambda: shard_plan("row", 2, (0, 4)), "shape[0]=0"),
    (lambda: shard_plan("row", 2, (4, 4, 4)), "shape=(4, 4, 4)"),
    (lambda: shard_plan("column", 4, (8, 6)), "shape[1]=6: must be divisible by ranks=4"),
    (lambda: shard_plan("row", 4, (6, 8)), "shape[0]=6: must be divisible by ranks=4"),
    (lambda: split_linear("row", 2, ints(3, 5), ints(4, 4)), "x.shape=(3, 5)"),
    (lambda: split_linear("row", 2, ints(0, 4), ints(4, 4)), "x.shape=(0, 4)"),
    (lambda: megatron_mlp(4, floats(2, 4), floats(4, 6), floats(6, 4)), "shape[1]=6"),
    (lambda: megatron_mlp(2, floats(2, 4), floats(4, 6), floats(5, 4)), "b.shape=(5, 4): must be (ffn, out) with ffn = a.shape[1] = 6 rows"),
    (lambda: megatron_mlp(0, floats(2, 4), floats(4, 6), floats(6, 4)), "ranks=0"),
    (lambda: attention_split(4, floats(1, 2, 8), *[floats(8, 8)] * 4, heads=2), "heads=2: must be divisible by ranks=4"),
    (lambda: attention_split(2, floats(1, 2, 6), *[floats(6, 6)] * 4, heads=4), "hidden=6: must be divisible by heads=4"),
    (lambda: attention_split(2, floats(1, 2, 8), *[floats(8, 8)] * 3, floats(8, 4), heads=2), "wo.shape=(8, 4)"),
    (lambda: attention_split(2, floats(1, 0, 8), *[floats(8, 8)] * 4, heads=2), "x.shape=(1, 0, 8)"),
    (lambda: block_steps("mlp", 4, 8, 16, inner=10), "inner=10: must be divisible by ranks=4"),
    (lambda: block_steps("mlp", 4, 8, 16), "inner=None"),
    (lambda: block_steps("attention", 4, 8, 16, heads=6), "heads=6"),
    (lambda: block_steps("conv", 4, 8, 16), "block='conv'"),
    (lambda: layer_comm(0, 1, 1, 1), "ranks=0"),
    (lambda: layer_comm(2, 0, 4, 4), "batch=0"),
    (lambda: layer_comm(2, 1, 0, 4), "seq=0"),
    (lambda: layer_comm(2, 1, 4, 0), "hidden=0"),
    (lambda: layer_comm(4, 1, 6, 4, sequence_parallel=True), "seq=6: must be divisible by ranks=4"),
    (lambda: layer_comm(2, 1, 4, 4, sequence_parallel="yes"), "sequence_parallel='yes'"),
])
def test_bad_input_one_line_error(call, message):
    with pytest.raises(ValueError) as err:
        call()
    assert message in str(err.value) and "\n" not in str(err.value)


def test_closed_form_uses_ring_not_naive():
    # the naive "send everything to a root" would put (N-1)·buffer on the root; the ring spreads 2(N-1)/N
    steps = layer_comm(8, 1, 8, 8, itemsize=4)
    assert max(bytes_per_rank(steps)) == 4 * math.floor(2 * 7 / 8 * 64 * 4)


# ---------------------------------------------------------------- names, split choices, TP or ZeRO-3

def test_mlp_backward_names_the_pre_activation_gradient():
    """(dZ·B_rᵀ)⊙GeLU'(U_r) is the gradient of U_r = X·A_r (GeLU's input), not of Y_r = GeLU(U_r)."""
    steps = block_steps("mlp", 2, tokens=3, hidden=4, inner=8)
    text = " | ".join(s.compute for s in steps)
    assert "U_r = X·A_r, Y_r = GeLU(U_r)" in text and "dU_r = (dZ·B_rᵀ)⊙GeLU'(U_r)" in text
    assert "dX_r = dU_r·A_rᵀ" in text and "dA_r = Xᵀ·dU_r" in text and "dY_r" not in text
    # autograd on one rank's block: the formula is U's gradient and differs from Y's
    x, a, b, dz = (torch.tensor(floats(*shape, seed=k)) for k, shape in enumerate([(3, 4), (4, 4), (4, 4), (3, 4)]))
    u = (x @ a).requires_grad_(True)
    y = torch.nn.functional.gelu(u, approximate="tanh")
    y.retain_grad()
    (y @ b).backward(dz)
    eps = 1e-6  # GeLU' by central differences of the simulator's own gelu, independent of autograd
    slope = torch.tensor((gelu(u.detach().numpy() + eps) - gelu(u.detach().numpy() - eps)) / (2 * eps))
    formula = (dz @ b.T) * slope
    assert torch.allclose(u.grad, formula, atol=1e-6) and not torch.allclose(y.grad, formula, atol=1e-3)
    assert torch.allclose(y.grad, dz @ b.T)


CHOICES = [(a, b) for a in ("column", "row") for b in ("column", "row")]


@pytest.mark.parametrize("a_split, b_split", CHOICES)
@pytest.mark.parametrize("ranks", [1, 2, 4, 8])
def test_split_forward_runs_each_choices_collectives_and_is_exact(a_split, b_split, ranks):
    from simlab.sim.tensor_parallel_choices import SYNCS, mlp_inputs, split_error, split_forward
    x, a, b = mlp_inputs(seed=3)
    z, done = split_forward(a_split, b_split, ranks, x, a, b)
    assert [(where, op) for where, op, _ in done] == [(where, op) for where, op, _, _ in SYNCS[a_split, b_split]]
    assert np.abs(z - gelu(x @ a) @ b).max() < 1e-12
    shortcut = split_error(a_split, b_split, ranks, x, a, b)
    assert (shortcut > 0.1) == (a_split == "row" and ranks > 1)  # only A by rows has a sync to skip


def test_the_shortcut_is_gelu_of_each_ranks_partial_sum():
    """Hand-built on 2 ranks: A by rows, no sum before GeLU, the rest of each choice as planned."""
    from simlab.sim.tensor_parallel_choices import mlp_inputs, split_forward
    x, a, b = mlp_inputs(seed=1)
    u = [x[:, :4] @ a[:4], x[:, 4:] @ a[4:]]  # each rank's partial X·A (t, ffn)
    row_row = gelu(u[0][:, :16]) @ b[:16] + gelu(u[1][:, 16:]) @ b[16:]  # own block of own partial
    row_col = np.concatenate([gelu(u[0]) @ b[:, :4], gelu(u[1]) @ b[:, 4:]], axis=1)
    assert np.allclose(split_forward("row", "row", 2, x, a, b, sync=False)[0], row_row, atol=1e-12)
    assert np.allclose(split_forward("row", "column", 2, x, a, b, sync=False)[0], row_col, atol=1e-12)


def test_split_trace_holds_each_collectives_ring_bytes():
    from simlab.sim.tensor_parallel_choices import TOKENS, split_trace
    trace = split_trace("row", "row", 4)
    assert trace.bytes_sent_per_rank(4) == [0] * 4  # comm events, not sends: bytes are on the events
    per_rank = [sum(e.nbytes for e in trace.for_rank(r)) for r in range(4)]
    # reduce-scatter of (t, 32) then all-reduce of (t, 8), fp32: (N-1)/N·t·32·4 + 2(N-1)/N·t·8·4
    assert per_rank == [3 * TOKENS * 32 * 4 // 4 + 2 * 3 * TOKENS * 8 * 4 // 4] * 4


@pytest.mark.parametrize("hidden, seq, ranks", [(25600, 2048, 8), (12288, 4096, 4)])
def test_tp_or_zero3_closed_forms(hidden, seq, ranks):
    from simlab.sim.tensor_parallel_choices import tp_or_zero3
    got, p = tp_or_zero3(hidden, seq, ranks), 8 * hidden * hidden
    assert got["whole"] == 16 * p and got["tp_state"] == got["zero3_state"] == 16 * p // ranks
    assert got["zero3_gather"] == 2 * p  # one MLP's fp16 weights, not the model's
    fp32_acts = tp_or_zero3(hidden, seq, ranks, itemsize=4)  # fp32 activations: the weights stay 16-bit
    assert fp32_acts["zero3_gather"] == 2 * p and fp32_acts["zero3_activations"] == 2 * got["zero3_activations"]
    assert got["zero3_activations"] == 2 * seq * 4 * hidden * 2 == ranks * got["tp_activations"]
    assert got["tp_sent_per_sample"] == 2 * 2 * (ranks - 1) * seq * hidden * 2 // ranks  # two ring all-reduces
    per_micro = (ranks - 1) * (p // ranks) * (2 + 2 + 2)  # AG, AG (fp16), RS (fp16): once per micro-batch
    assert got["zero3_sent_per_microbatch"] == per_micro
    assert got["zero3_kept_state"] == (2 + 2) * p + 12 * p // ranks  # weights and grads kept whole: ZeRO-1's
    for b in (1, 3, 16):  # a micro-batch of b sequences on each of the ranks GPUs: ranks·b sequences per gather
        assert tp_or_zero3(hidden, seq, ranks, microbatch=b)["zero3_sent_per_sample"] == per_micro / (ranks * b)
    # break-even: (N-1)/N·8h²·6 B per micro-batch of N·b sequences = 8(N-1)/N·s·h B per sequence ⇔ b = 6h/(N·s)
    assert got["break_even_microbatch"] == pytest.approx(6 * hidden / (ranks * seq), rel=1e-12)
    below, above = (tp_or_zero3(hidden, seq, ranks, microbatch=b)["zero3_sent_per_sample"]
                    for b in (math.floor(got["break_even_microbatch"]), math.ceil(got["break_even_microbatch"]) + 1))
    assert below >= got["tp_sent_per_sample"] > above


def test_zero3_gathers_per_micro_batch_as_lesson_6s_model_does():
    """The course's 3-D time model (sim.hybrid_time) sends ZeRO-3's 2 gathers + 1 reduce-scatter per micro-batch:
    m micro-batches cost m times one, which is what tp_or_zero3 charges per micro-batch."""
    import inspect

    from simlab.sim import hybrid_time
    assert "m * (2 * gather + reduce)" in inspect.getsource(hybrid_time)
    with pytest.raises(ValueError, match="microbatch"):
        from simlab.sim.tensor_parallel_choices import tp_or_zero3
        tp_or_zero3(256, 16, 2, microbatch=0)
