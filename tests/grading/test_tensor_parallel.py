"""Lesson 5's grader on real ranks: it accepts a right G and layer (Megatron's one-rank shortcut too) and
rejects a forward without the all-reduce, a backward that all-reduces again, a bias added on every rank,
weights that are not parameters, a layer with no G at all (a bare dist.all_reduce that torch's deprecated
autograd fall-through lets through with the right numbers), torch's functional all_reduce, a wrong G the layer
does not use, and delegating to simlab's own RowParallelLinear or ReduceFromTP; the stub's NotImplementedError
comes through as itself."""
import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from simlab.exec.tensor_parallel import CommStats, ReduceFromTP, RowParallelLinear
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


class NoG(Shard):
    """No g operator at all: a bare in-place all-reduce that autograd falls through (the identity backward)."""

    def forward(self, x):
        partial = F.linear(x, self.weight)
        dist.all_reduce(partial)
        return partial + self.bias


class NoGOnACopy(Shard):
    def forward(self, x):
        whole = F.linear(x, self.weight).clone()
        dist.all_reduce(whole)
        return whole + self.bias


class FunctionalAllReduce(Shard):
    """torch's functional all_reduce has a backward, and it sums dY again: N·dW."""

    def forward(self, x):
        from torch.distributed._functional_collectives import all_reduce
        return all_reduce(F.linear(x, self.weight), "sum", dist.group.WORLD) + self.bias


class Delegates(nn.Module):
    """Wraps simlab's own layer: what the exercise imports nothing of, but could."""

    def __init__(self, full, rank, world_size):
        super().__init__()
        self.inner = RowParallelLinear.from_full(full)
        self.weight, self.bias = self.inner.weight, self.inner.bias

    def forward(self, x):
        return self.inner(x)


class SimlabsG(Shard):
    def forward(self, x):
        return ReduceFromTP.apply(F.linear(x, self.weight), CommStats()) + self.bias


class UnusedG(Shard):
    """A right G handed in, but the layer sums under no_grad: autograd never sees the all-reduce at all."""

    def forward(self, x):
        partial = F.linear(x, self.weight)
        with torch.no_grad():
            dist.all_reduce(partial)
        return partial + self.bias


class HalfG(torch.autograd.Function):
    """Forward right; backward divides by N (as if averaging): wrong whenever the gradients differ by rank."""

    @staticmethod
    def forward(ctx, x):
        out = x.clone()
        dist.all_reduce(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        return grad / dist.get_world_size()


class NoSumG(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad


def layer_using(g):
    """The right layer, on the G handed in (a learner's layer calls their own G by name)."""
    class Layer(Shard):
        def forward(self, x):
            return g.apply(F.linear(x, self.weight)) + self.bias
    return Layer


class FBackward(torch.autograd.Function):
    """An f on the input: identity forward, all-reduce of dX backward — wrong for a row-parallel layer's X slice."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        dist.all_reduce(grad)
        return grad


class GAndF(Shard):
    def forward(self, x):
        return G.apply(F.linear(FBackward.apply(x), self.weight)) + self.bias


class StubG(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        raise NotImplementedError("exercise: write your answer here")


@pytest.mark.parametrize("layer", [Correct, SkipsOneRank])
def test_accepts_right_answers(layer, capsys):
    check_row_parallel_linear(layer, G)
    assert capsys.readouterr().out.startswith("RowParallelLinear: ✓ TP sizes 1, 2, 4")


@pytest.mark.parametrize("layer, g, case, reason", [
    (NoAllReduce, G, "TP size 2", "does not go through G"),  # one rank may skip the sum; two may not
    (layer_using(AllReduceBothWays), AllReduceBothWays, "TP size 1",
     "G ran {'all-reduce': 1} in forward and {'all-reduce': 1} in backward"),
    (BackwardAllReduces, G, "TP size 1", "does not go through G"),  # its own Function, not the G handed in
    (GAndF, G, "TP size 1", "backward ran {'all-reduce': 1}"),
    (BiasOnEveryRank, G, "TP size 2", "output differs"),
    (PlainTensors, G, "TP size 1", "has no gradient"),
    (NoG, G, "TP size 1", "deprecated fall-through"),  # issue 23: "a layer with no G operator at all"
    (NoGOnACopy, G, "TP size 1", "deprecated fall-through"),
    (FunctionalAllReduce, G, "TP size 1", "does not go through G"),
    (UnusedG, G, "TP size 1", "does not go through G"),
    (Delegates, G, "TP size 1", "simlab's own ReduceFromTP, RowParallelLinear"),  # issue 23: delegating
    (reference, G, "TP size 1", "simlab's own ReduceFromTP, RowParallelLinear"),
    (SimlabsG, G, "TP size 1", "simlab's own ReduceFromTP"),
    (Correct, ReduceFromTP, "G", "simlab's own ReduceFromTP"),
    (RowParallelLinear, G, "G", "simlab's own RowParallelLinear"),
    (layer_using(HalfG), HalfG, "TP size 2", "G's backward must return each rank's own upstream gradient unchanged"),
    (layer_using(NoSumG), NoSumG, "TP size 2", "G's forward must return the sum"),
    (Correct, None, "G", "pass your g operator"),
    (Correct, Correct, "G", "pass your g operator"),
])
def test_rejects_wrong_layers(layer, g, case, reason, capsys):
    with pytest.raises(AssertionError):
        check_row_parallel_linear(layer, g)
    out = capsys.readouterr().out
    assert out.startswith(f"RowParallelLinear: ✗ {case}: ") and reason in out, out
    assert out.count("\n") == 1  # one line


def test_the_fall_through_gives_g_right_numbers_so_only_the_warning_tells():
    """Why the check looks for torch's warning: without it, NoG's every number is right. Its outputs and gradients
    pass the numeric checks at every TP size (we call the numeric part alone), and torch 2.13 has no 'error' mode
    for the autograd fall-through to make the bare all-reduce fail by itself."""
    from simlab.exec.launch import launch
    from simlab.grading import tensor_parallel as tp
    ref = tp._reference(0)
    for n in tp.TP_SIZES:
        ranks = launch(tp.row_worker, n, NoG, G, 0, backend="gloo", timeout=60)
        assert all(r["fell_through"] for r in ranks) and not ranks[0]["uses_g"]
        numeric = [{**r, "fell_through": False, "uses_g": True} for r in ranks]
        assert tp._problem(numeric, ref, n) is None
    try:
        with pytest.raises(RuntimeError):  # if this ever works, the check can use it instead of the warning
            torch._C._set_autograd_fallback_mode("error")
    finally:
        torch._C._set_autograd_fallback_mode("warn")


@pytest.mark.parametrize("layer, g", [(Stub, G), (Correct, StubG)])
def test_stub_fails_with_not_implemented(layer, g, capsys):
    with pytest.raises(NotImplementedError):
        check_row_parallel_linear(layer, g)
    assert capsys.readouterr().out == ""
