"""simlab.exec.tensor_parallel on real gloo ranks: the MLP and attention blocks compute what the unsplit
blocks compute (outputs, dX and every weight gradient), run exactly the collectives of the simulator's
plan, and agree with torch's own TP (DTensor parallelize_module with ColwiseParallel/RowwiseParallel)."""
import copy

import pytest
import torch
from torch import nn

import simlab.exec.tensor_parallel as T
from simlab.exec.launch import launch
from simlab.exec.models import make_block, make_input
from simlab.parity.tensor_parallel import forward_backward, run_tp, tp_worker
from simlab.sim.collectives import ring_all_gather, ring_all_reduce

TOL = 1e-5  # fp32: the partial sums are added in another order, nothing more
B, S, H = 2, 4, 8  # run_tp's default shapes: X is (2, 4, 8) = 64 floats


@pytest.fixture(scope="module", params=[("mlp", 1), ("mlp", 2), ("mlp", 4), ("attention", 1),
                                        ("attention", 2), ("attention", 4)], ids=lambda p: f"{p[0]}-n{p[1]}")
def run(request):
    block, n = request.param
    return run_tp(n, block)


def test_matches_the_unsplit_block_and_torch_tp(run):
    assert run["max_abs_diff_vs_reference"] <= TOL  # output, dX and all weight grads vs one process
    assert run["max_abs_diff_vs_torch"] <= TOL  # the same against DTensor's parallelize_module


def test_collectives_are_the_plans(run):
    n = run["world_size"]
    assert run["allreduce_calls_forward"] == run["plan_allreduce_calls_forward"] == 1  # g
    assert run["allreduce_calls_backward"] == run["plan_allreduce_calls_backward"] == 1  # f
    assert run["calls_per_rank"] == [{"forward all-reduce": 1, "backward all-reduce": 1}] * n  # nothing else
    closed_form = 2 * 2 * (n - 1) * B * S * H * 4 // n  # two ring all-reduces of X's size, fp32
    assert run["bytes_sent_per_rank"] == run["plan_bytes_sent_per_rank"] == [closed_form] * n


def test_torch_sees_exactly_the_collectives_we_count(run):
    # CommDebugMode counts what reached torch.distributed: a stray or missing call would show here
    assert run["calls_seen_by_torch_per_rank"] == [{"forward allreduce_": 1, "backward allreduce_": 1}] * \
        run["world_size"]


def test_torch_tp_runs_the_same_forward_collective(run):
    calls = run["torch_calls"]
    if run["world_size"] == 1:
        assert calls == {}  # DTensor skips collectives on a one-rank mesh
        return
    assert calls["forward all_reduce"] == 1
    # DTensor's ColwiseParallel on separate wq, wk, wv reduces dX once per projection; a fused QKV once
    assert calls["backward all_reduce"] == (1 if run["block"] == "mlp" else 3)


@pytest.mark.parametrize("numel, n", [(10, 4), (64, 4), (7, 3), (5, 1)])
def test_ring_accounting_is_the_simulators(numel, n):
    for r in range(n):
        for op, plan in (("all-reduce", ring_all_reduce), ("all-gather", ring_all_gather)):
            stats = T.CommStats(rank=r, world_size=n)  # no process group needed to count
            stats.record("forward", op, numel, 1, start=0.0)
            assert stats.bytes_sent == plan(n, numel, 1).bytes_sent_per_rank()[r]


def _linears(rank, world_size):
    """Column (gather_output) and row (input not parallel) layers alone, against nn.Linear and DTensor."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    torch.manual_seed(0)
    full = nn.Linear(6, 8)
    x, dy = torch.randn(3, 6), torch.randn(3, 8)
    ref = forward_backward(full, x, dy)
    col = T.ColumnParallelLinear.from_full(full, gather_output=True)
    row = T.RowParallelLinear.from_full(full, input_is_parallel=False)
    mesh = init_device_mesh("cpu", (world_size,))
    torch_col = parallelize_module(copy.deepcopy(full), mesh, ColwiseParallel(output_layouts=Replicate()))
    torch_row = parallelize_module(copy.deepcopy(full), mesh, RowwiseParallel(input_layouts=Replicate()))
    out = {"ref": ref, "col": forward_backward(col, x, dy), "row": forward_backward(row, x, dy),
           "torch_col": forward_backward(torch_col, x, dy), "torch_row": forward_backward(torch_row, x, dy)}
    out["calls"] = {"col": col.stats.calls, "row": row.stats.calls}
    out["bytes"] = {"col": col.stats.bytes_sent, "row": row.stats.bytes_sent}
    return out


def test_column_and_row_layers_alone():
    n = 2
    ranks = launch(_linears, n, timeout=60)
    for rank, res in enumerate(ranks):
        ref = res["ref"]
        for name in ("col", "row", "torch_col", "torch_row"):
            got = res[name]
            assert (got["out"] - ref["out"]).abs().max() <= TOL and (got["x.grad"] - ref["x.grad"]).abs().max() <= TOL
        rows = slice(rank * 4, rank * 4 + 4)  # column: this rank's output features; row: its input features
        assert torch.allclose(res["col"]["weight"], ref["weight"][rows], atol=TOL)
        assert torch.allclose(res["col"]["bias"], ref["bias"][rows], atol=TOL)
        assert torch.allclose(res["row"]["weight"], ref["weight"][:, rank * 3:rank * 3 + 3], atol=TOL)
        assert torch.allclose(res["row"]["bias"], ref["bias"], atol=TOL)  # added once, after the sum
        for name in ("torch_col", "torch_row"):
            assert all(torch.allclose(res[name][k], ref[k], atol=TOL) for k in ("weight", "bias"))
        # column: all-gather Y (3, 8) forward, all-reduce dX (3, 6) backward; row: the mirror image
        assert res["calls"]["col"] == {("forward", "all-gather"): 1, ("backward", "all-reduce"): 1}
        assert res["calls"]["row"] == {("forward", "all-reduce"): 1, ("backward", "all-gather"): 1}
        assert res["bytes"]["col"] == (3 * 4 + 2 * 3 * 6 // 2) * 4  # (N-1)/N·24 + 2(N-1)/N·18 floats
        assert res["bytes"]["row"] == (2 * 3 * 8 // 2 + 3 * 3) * 4  # 2(N-1)/N·24 + (N-1)/N·18 floats


def _without_f(rank, world_size):
    T.CopyToTP.backward = staticmethod(lambda ctx, grad: (grad, None))  # forked rank only: f forgets to sum
    return tp_worker(rank, world_size, "mlp", B, S, H, 4, 16, 0, False)


def test_dropping_f_breaks_dx_but_not_the_weight_grads():
    ranks = launch(_without_f, 2, timeout=60)
    full = make_block("mlp", H, 4, 16)
    ref = forward_backward(full, *make_input(B, S, H))
    assert all((r["out"] - ref["out"]).abs().max() <= TOL for r in ranks)  # forward never uses f's sum
    assert all((r["x.grad"] - ref["x.grad"]).abs().max() > 100 * TOL for r in ranks)  # each rank: its partial
    total = ranks[0]["x.grad"] + ranks[1]["x.grad"]  # what the missing all-reduce would have made
    assert (total - ref["x.grad"]).abs().max() <= TOL
    shard, dim = ranks[1]["shards"]["fc1.weight"]
    assert dim == 0 and torch.allclose(shard, ref["fc1.weight"][8:], atol=TOL)  # dW needs no f


def _stats(rank, world_size):
    return T.CommStats(rank=rank, world_size=world_size)  # a layout without any process group


@pytest.mark.parametrize("call, message", [
    (lambda: T.ColumnParallelLinear.from_full(nn.Linear(4, 6), stats=_stats(0, 4)), "out_features=6"),
    (lambda: T.RowParallelLinear.from_full(nn.Linear(6, 4), stats=_stats(0, 4)), "in_features=6"),
    (lambda: T.ColumnParallelLinear.from_full(nn.Linear(4, 8), stats=_stats(4, 4)), "rank=4"),
    (lambda: T.ParallelSelfAttention.from_full(make_block("attention", 12, 6, 0), stats=_stats(0, 4)), "heads=6"),
    (lambda: T.ParallelMLP.from_full(make_block("mlp", 8, 1, 6), stats=_stats(0, 4)), "out_features=6"),
])
def test_from_full_bad_input(call, message):
    with pytest.raises(ValueError) as err:
        call()
    assert message in str(err.value)
