"""simlab.exec.zero_shards: the (N, S) rows layout equals `padded_flat` (below) exactly, in every corner, and both
collectives (our ring on gloo, torch's elsewhere) give every rank the same answer."""
import itertools

import pytest
import torch
import torch.distributed as dist

from simlab.exec.launch import launch
from simlab.exec.zero_shards import from_rows, into_rows, own_block, shard_size
from simlab.parity.zero import run_zero

# N ranks x three tensors of 0..5 elements: rows ending exactly on a row boundary, a bias-only row,
# a layer smaller than N, N = 1, empty tensors


def padded_flat(tensors, padded: int) -> torch.Tensor:
    """The layout's definition: the tensors flattened end to end, then zeros up to `padded` (N·S) elements."""
    flat = torch.cat([t.reshape(-1) for t in tensors])  # (P,)
    return torch.nn.functional.pad(flat, (0, padded - flat.numel()))  # (N·S,)


CASES = [(n, sizes) for n in (1, 2, 3, 4, 6) for sizes in itertools.product(range(6), (0, 1, 4), (1, 3))]


@pytest.mark.parametrize("n, sizes", CASES)
def test_rows_are_padded_flat_and_invert(n, sizes):
    tensors = [torch.arange(k, dtype=torch.float32) + 10 * i + 1 for i, k in enumerate(sizes)]
    s = max(shard_size(sum(sizes), n), 1)
    bucket = torch.full((n, s + 2), -7.0)  # a column block of a larger bucket, like stage 1's
    rows = bucket[:, 1:1 + s]
    into_rows(rows, tensors)
    flat = padded_flat(tensors, n * s)
    assert torch.equal(rows.reshape(-1), flat)
    assert (bucket[:, 0] == -7).all() and (bucket[:, -1] == -7).all()  # nothing written outside the block
    assert all(torch.equal(own_block(tensors, r, s), flat[r * s:(r + 1) * s]) for r in range(n))
    back = [torch.zeros_like(t) for t in tensors]
    from_rows(rows, back)
    assert all(torch.equal(a, b) for a, b in zip(back, tensors))


def test_from_rows_refuses_a_non_contiguous_target():
    with pytest.raises(ValueError, match="not contiguous"):
        from_rows(torch.ones(2, 6), [torch.zeros(3, 4).t()])


def _both_paths(rank, world_size):
    import simlab.exec.zero_shards as sh
    out = {}
    for backend in ("gloo", "nccl"):  # "nccl": torch's collectives (here still running on gloo)
        sh.dist.get_backend = lambda group=None, b=backend: b
        rows = torch.arange(15.0).view(3, 5) * (rank + 1)  # (N, S): this rank's full grads
        mean = sh.reduce_scatter_mean(rows).clone()
        rows.fill_(-1)[rank] = mean
        out[backend] = (mean.tolist(), sh.all_gather(rows).tolist())
    return out


def test_ring_and_torch_paths_agree():
    ranks = launch(_both_paths, 3)
    for rank, out in enumerate(ranks):
        assert out["gloo"] == out["nccl"]
        assert out["gloo"][0] == [2.0 * x for x in range(5 * rank, 5 * rank + 5)]  # mean of 1x, 2x, 3x
    assert ranks[0]["gloo"][1] == [[2.0 * x for x in range(5 * r, 5 * r + 5)] for r in range(3)]
    assert dist.is_initialized() is False  # nothing leaked into the test process


@pytest.mark.parametrize("stage", [1, 2, 3])
@pytest.mark.parametrize("n, sizes", [(1, (5, 7, 3)), (4, (1, 1, 2))])  # one rank; layers smaller than N
def test_zero_corners_train_like_one_process(stage, n, sizes):
    res = run_zero(stage, n, steps=3, global_batch=8, sizes=sizes)
    assert res["max_abs_diff_vs_reference"] <= 1e-5 and res["max_abs_diff_vs_torch"] <= 1e-5


def test_stage_one_offload_is_refused_by_the_optimizer_itself():
    from simlab.exec.models import make_mlp
    from simlab.exec.zero import ZeroAdam
    with pytest.raises(ValueError, match="offload=True: needs stage 2 or 3"):
        ZeroAdam(make_mlp([3, 2]), 1, offload=True)  # refused before it asks for any process group
