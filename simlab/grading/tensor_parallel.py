"""The check for lesson 5's graded exercise: the g operator and a row-parallel linear layer built on it, run on
real gloo ranks at TP sizes 1, 2 and 4 and compared with one unsplit `nn.Linear`.

The student writes `G`, a `torch.autograd.Function` (forward: all-reduce; backward: identity), and
`layer_cls(full, rank, world_size)`: an nn.Module holding a block of the columns of `full.weight` (nn.Linear
stores W as (out, in)) as `.weight` and the whole `.bias`; its forward takes this rank's slice of X's last dim,
(…, in/N), and returns the whole Y (…, out). `check_row_parallel_linear(layer_cls, G)` checks, per TP size:
- G on its own: each rank gives a different tensor; forward must return their sum on every rank, and backward
  must hand each rank's own (different) upstream gradient back unchanged — no sum, no scaling.
- that G is the student's: not simlab's `ReduceFromTP`, and no module of simlab's (its `RowParallelLinear`)
  inside the layer; and that the layer's output goes through G (its node is in the autograd graph, n > 1).
- that no all-reduce runs outside an autograd.Function. torch (2.13) registers no autograd kernel for the
  in-place `c10d::allreduce_`: called on a tensor autograd tracks, it falls through, the gradient passes it
  unchanged, and torch warns "an autograd kernel was not registered … This behavior is deprecated". Since g's
  backward *is* the identity, such a layer gets every number right without any G; the warning is how the check
  tells. (torch's functional `all_reduce` has a backward that sums the gradients again: wrong dW, caught.)
- every rank's output, dX (the ranks' slices side by side), dW (the shards side by side) and db against the
  unsplit layer within 1e-5, and the collectives counted by torch's CommDebugMode — exactly one all-reduce in
  forward (g) and none in backward.
The predict-then-run checks of the exercise are in `grading.tensor_parallel_predict`.

As in every `simlab.grading` module: one stable line, ✓ or ✗ naming the case; a failure raises AssertionError.
The lines are marked for translation (`simlab.i18n`; Chinese in locale/zh/LC_MESSAGES/tensor_parallel.po).
"""
from __future__ import annotations

import warnings

from ..i18n import N_, _
from .common import fail, passed

# re-exported: the exercise's predict-then-run checks, where they were imported from before they moved
from .tensor_parallel_predict import MLP_RUN, check_forward_bytes, check_split_choice  # noqa: F401 — re-exported: the exercise and ARCHITECTURE cite them here

TP_SIZES = (1, 2, 4)
IN, OUT, BATCH, SEQ = 8, 6, 2, 3  # in divides by every TP size
TOL = 1e-5  # fp32: the partial products are summed in another order, nothing more
TITLE = "RowParallelLinear"
FALL_THROUGH = "autograd kernel was not registered"  # torch's warning for an op autograd passes through
PHASES = {"forward": N_("forward"), "backward": N_("backward")}


def row_problem(seed: int = 0):
    """The seeded unsplit nn.Linear(IN, OUT), X (BATCH, SEQ, IN) and the upstream gradient dY."""
    import torch
    from torch import nn
    gen = torch.Generator().manual_seed(seed)
    full = nn.Linear(IN, OUT)
    with torch.no_grad():  # our own generator: the global RNG (and the student's) stays untouched
        full.weight.copy_(torch.randn(OUT, IN, generator=gen))
        full.bias.copy_(torch.randn(OUT, generator=gen))
    return full, torch.randn(BATCH, SEQ, IN, generator=gen), torch.randn(BATCH, SEQ, OUT, generator=gen)


def g_inputs(seed: int, rank: int):
    """Rank `rank`'s partial Y and its upstream gradient for G alone: different on every rank."""
    import torch
    gen = torch.Generator().manual_seed(1000 * (seed + 1) + rank)
    return torch.randn(BATCH, SEQ, OUT, generator=gen), torch.randn(BATCH, SEQ, OUT, generator=gen)


def _collectives(mode) -> dict:
    """CommDebugMode's counts as {'all-reduce': n, <other op>: n} (c10d and functional ops alike)."""
    counts = {}
    for op, n in mode.get_comm_counts().items():
        name = str(getattr(op, "__name__", op))
        key = "all-reduce" if "allreduce" in name or "all_reduce" in name else name
        counts[key] = counts.get(key, 0) + n
    return counts


def _grad(layer, name: str):
    from torch import nn
    p = getattr(layer, name, None)  # a plain tensor attribute gets no .grad: report it, don't crash
    return p.grad.detach() if isinstance(p, nn.Parameter) and p.grad is not None else None


def _simlabs(cls) -> bool:
    return any(c.__module__.split(".")[0] == "simlab" for c in getattr(cls, "__mro__", (cls,)))


def _functions(out) -> set:
    """The autograd.Function classes whose nodes lie in out's backward graph."""
    seen, stack, found = set(), [out.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if getattr(node, "_forward_cls", None) is not None:
            found.add(node._forward_cls)
        stack.extend(nxt for nxt, _ in node.next_functions)
    return found


def _run_g(g, rank: int, world_size: int, seed: int) -> dict:
    """G alone: forward the rank's own partial, backward the rank's own upstream gradient."""
    from torch.distributed.tensor.debug import CommDebugMode
    partial, grad = g_inputs(seed, rank)
    total = sum(g_inputs(seed, r)[0] for r in range(world_size))
    x = partial.clone().requires_grad_(True)
    with CommDebugMode() as fwd:
        out = g.apply(x)
    with CommDebugMode() as bwd:
        out.backward(grad)
    return {"forward": _diff(out.detach(), total), "backward": _diff(x.grad, grad) if x.grad is not None else None,
            "calls": {"forward": _collectives(fwd), "backward": _collectives(bwd)}}


def row_worker(rank: int, world_size: int, layer_cls, g, seed: int) -> dict:
    """One rank: G alone, then the student's layer built from the full one, forward + backward on its slice of X."""
    from torch.distributed.tensor.debug import CommDebugMode
    alone = _run_g(g, rank, world_size, seed)
    full, x, grad_out = row_problem(seed)
    layer = layer_cls(full, rank, world_size)
    k = IN // world_size
    xr = x[..., rank * k:(rank + 1) * k].clone().requires_grad_(True)  # (b, s, in/N): this rank's slice
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with CommDebugMode() as fwd:
            out = layer(xr)  # (b, s, out)
        used = _functions(out)
        with CommDebugMode() as bwd:
            out.backward(grad_out)
    grads = {n: _grad(layer, n) for n in ("weight", "bias")}
    return {"out": out.detach(), "x.grad": xr.grad, **grads, "g": alone, "uses_g": g in used,
            "simlab": sorted({c.__name__ for c in used if _simlabs(c)} |
                             {type(m).__name__ for m in layer.modules() if _simlabs(type(m))}),
            "fell_through": any(FALL_THROUGH in str(w.message) for w in caught),
            "calls": {"forward": _collectives(fwd), "backward": _collectives(bwd)}}


def _reference(seed: int) -> dict:
    full, x, grad_out = row_problem(seed)
    x = x.clone().requires_grad_(True)
    out = full(x)
    out.backward(grad_out)
    return {"out": out.detach(), "x.grad": x.grad, "weight": full.weight.grad, "bias": full.bias.grad}


def _diff(a, b) -> float:
    from ..parity.common import max_abs_diff
    return float("inf") if a.shape != b.shape else max_abs_diff(a, b)


def _g_problem(ranks: list[dict], n: int) -> str | None:
    """What is wrong with G on its own at TP size n, or None."""
    if max(r["g"]["forward"] for r in ranks) > TOL:
        return _("G's forward must return the sum of every rank's input, on every rank: all-reduce a copy")
    if any(r["g"]["backward"] is None or r["g"]["backward"] > TOL for r in ranks):
        return _("G's backward must return each rank's own upstream gradient unchanged (the identity): no sum, "
                 "no scaling")
    calls = ranks[0]["g"]["calls"]
    if calls["backward"] or calls["forward"] not in ({"all-reduce": 1},) + (({},) if n == 1 else ()):
        return _("G ran {forward} in forward and {backward} in backward; expected one all-reduce in forward and "
                 "none in backward").format(forward=calls["forward"] or _("no collectives"),
                                            backward=calls["backward"] or _("no collectives"))
    return None


def _problem(ranks: list[dict], ref: dict, n: int) -> str | None:
    """What is wrong with one TP size's run, or None."""
    import torch
    if ranks[0]["simlab"]:
        return _("your layer runs simlab's own {names}: write the layer and its g yourself").format(
            names=", ".join(ranks[0]["simlab"]))
    problem = _g_problem(ranks, n)
    if problem:
        return problem
    if any(r["fell_through"] for r in ranks):
        return _("dist.all_reduce ran on a tensor autograd tracks, outside any autograd.Function: torch passes the "
                 "gradient through it unchanged (a deprecated fall-through, with a warning), so g's backward was "
                 "never written; call your G: G.apply(partial)")
    if not ranks[0]["uses_g"] and (n > 1 or ranks[0]["calls"]["forward"]):  # one rank may skip the sum, and G
        return _("your layer's output does not go through G: sum the partial products with G.apply")
    if any(r[p] is None for r in ranks for p in ("weight", "bias")):
        return _("weight or bias has no gradient: keep them as nn.Parameter attributes named weight and bias")
    shape = tuple(ranks[0]["weight"].shape)
    if shape != (OUT, IN // n):
        return _("weight shard is {shape}, expected (out, in/N) = {want}: a block of W's columns").format(
            shape=shape, want=(OUT, IN // n))
    worst = max(range(n), key=lambda r: _diff(ranks[r]["out"], ref["out"]))
    if _diff(ranks[worst]["out"], ref["out"]) > TOL:
        return _("rank {rank}'s output differs from nn.Linear's by {diff}: sum the partial outputs (all-reduce) "
                 "and add the bias once").format(rank=worst, diff=f"{_diff(ranks[worst]['out'], ref['out']):.3g}")
    wholes = {"x.grad": torch.cat([r["x.grad"] for r in ranks], dim=-1),
              "weight": torch.cat([r["weight"] for r in ranks], dim=1), "bias": ranks[0]["bias"]}
    for name, what in (("x.grad", "dX"), ("weight", "dW"), ("bias", "db")):
        if _diff(wholes[name], ref[name]) > TOL or (name == "bias" and any(
                _diff(r["bias"], ref["bias"]) > TOL for r in ranks)):
            return _("{what} differs from nn.Linear's: is g's backward the identity (no sum, no scaling)?").format(
                what=what)
    for phase, want in (("forward", {"all-reduce": 1}), ("backward", {})):
        got = ranks[0]["calls"][phase]
        if n == 1 and phase == "forward" and not got:
            continue  # Megatron skips the all-reduce of a single rank: a sum over one rank is the identity
        if got != want:
            return _("{phase} ran {got}; expected {want} — g all-reduces once in forward, and its backward is "
                     "the identity").format(phase=_(PHASES[phase]), got=got or _("no collectives"),
                                            want=want or _("none"))
    return None


def _static_problem(layer_cls, g) -> str | None:
    import torch
    if not (isinstance(g, type) and issubclass(g, torch.autograd.Function)):
        return _("G is {got}: pass your g operator, a subclass of torch.autograd.Function").format(got=repr(g))
    if _simlabs(g) or _simlabs(layer_cls):
        return _("that is simlab's own {name}: write the layer and its g yourself").format(
            name=(g if _simlabs(g) else layer_cls).__name__)
    return None


def check_row_parallel_linear(layer_cls, g, seed: int = 0) -> None:
    """Grade `g` (the g operator) and `layer_cls(full: nn.Linear, rank, world_size)` on real ranks at TP sizes
    1, 2 and 4."""
    import torch.distributed.tensor.debug  # noqa: F401 — import once here: every forked rank inherits it

    from ..exec.launch import WorkerError, launch
    problem = _static_problem(layer_cls, g)
    if problem:
        fail(TITLE, "G", problem)
    ref = _reference(seed)
    for n in TP_SIZES:
        case = _("TP size {n}").format(n=n)
        try:
            ranks = launch(row_worker, n, layer_cls, g, seed, backend="gloo", timeout=60)
        except WorkerError as err:
            if "NotImplementedError" in err.traceback:  # the stub: say so plainly, not as a rank's crash
                raise NotImplementedError(_("exercise: write your answer here")) from None
            fail(TITLE, case, _("rank {rank} raised {error}").format(
                rank=err.rank, error=(err.traceback.strip().splitlines() or [str(err)])[-1]))
        problem = _problem(ranks, ref, n)
        if problem:
            fail(TITLE, case, problem)
    passed(TITLE, _("TP sizes 1, 2, 4 on real processes: G sums forward and passes each rank's gradient "
                    "through unchanged; the layer's output, dX, dW and db equal nn.Linear's within 1e-5; "
                    "one all-reduce forward (g), none backward"))
