"""Lesson 5's grader on real ranks: it accepts simlab's own RowParallelLinear (an independent answer) and
rejects a forward without the all-reduce, a backward that all-reduces again, a bias added on every rank,
and weights that are not parameters; the stub's NotImplementedError comes through as itself."""
import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from simlab.exec.tensor_parallel import RowParallelLinear
from simlab.grading.tensor_parallel import check_row_parallel_linear


def reference(full, rank, world_size):
    return RowParallelLinear.from_full(full)  # its rank and size: the process's in WORLD, as the grader's


class Shard(nn.Module):
    """A correct shard layout; subclasses get the forward wrong in one way each."""

    def __init__(self, full, rank, world_size):
        super().__init__()
        k = full.in_features // world_size
        self.weight = nn.Parameter(full.weight[:, rank * k:(rank + 1) * k].detach().clone())  # (out, in/N)
        self.bias = nn.Parameter(full.bias.detach().clone())


class NoAllReduce(Shard):
    def forward(self, x):
        return F.linear(x, self.weight) + self.bias  # a partial sum, never combined


class AllReduceBothWays(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        out = x.clone()
        dist.all_reduce(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        dist.all_reduce(grad)  # wrong: dY is already whole on every rank
        return grad


class G(torch.autograd.Function):
    """The right g: all-reduce forward, identity backward."""

    @staticmethod
    def forward(ctx, x):
        out = x.clone()
        dist.all_reduce(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        return grad


class Correct(Shard):
    def forward(self, x):
        return G.apply(F.linear(x, self.weight)) + self.bias  # (..., out): partials summed, bias once


class SkipsOneRank(Shard):
    """Megatron's shortcut: with one rank the sum is the identity, so no collective at all."""

    def forward(self, x):
        partial = F.linear(x, self.weight)
        return (partial if dist.get_world_size() == 1 else G.apply(partial)) + self.bias


class BackwardAllReduces(Shard):
    def forward(self, x):
        return AllReduceBothWays.apply(F.linear(x, self.weight)) + self.bias


class BiasOnEveryRank(Shard):
    def forward(self, x):
        return G.apply(F.linear(x, self.weight, self.bias))  # every rank's bias is summed in: N·bias


class PlainTensors(Correct):
    def __init__(self, full, rank, world_size):
        super().__init__(full, rank, world_size)
        weight, bias = self.weight.detach(), self.bias.detach()
        del self.weight, self.bias
        self.weight, self.bias = weight.requires_grad_(True), bias.requires_grad_(True)


class Stub(Shard):
    def forward(self, x):
        raise NotImplementedError("exercise: write your answer here")


@pytest.mark.parametrize("layer", [reference, Correct, SkipsOneRank])
def test_accepts_right_answers(layer, capsys):
    check_row_parallel_linear(layer)
    assert capsys.readouterr().out.startswith("RowParallelLinear: ✓ TP sizes 1, 2, 4")


@pytest.mark.parametrize("layer, case, reason", [
    (NoAllReduce, "TP size 2", "output differs"),  # one rank may skip the sum; two may not
    (BackwardAllReduces, "TP size 1", "backward ran {'all-reduce': 1}"),
    (BiasOnEveryRank, "TP size 2", "output differs"),
    (PlainTensors, "TP size 1", "has no gradient"),
])
def test_rejects_wrong_layers(layer, case, reason, capsys):
    with pytest.raises(AssertionError):
        check_row_parallel_linear(layer)
    out = capsys.readouterr().out
    assert out.startswith(f"RowParallelLinear: ✗ {case}: ") and reason in out, out
    assert out.count("\n") == 1  # one line


def test_stub_fails_with_not_implemented(capsys):
    with pytest.raises(NotImplementedError):
        check_row_parallel_linear(Stub)
    assert capsys.readouterr().out == ""
