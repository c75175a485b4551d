"""The check for lesson 5's graded exercise: a row-parallel linear layer and its g operator, run on real
gloo ranks at TP sizes 1, 2 and 4 and compared with one unsplit `nn.Linear`.

The student writes `layer_cls(full, rank, world_size)`: an nn.Module holding a block of the columns of
`full.weight` (nn.Linear stores W as (out, in)) as `.weight` and the whole `.bias`; its forward takes this
rank's slice of X's last dim, (…, in/N), and returns the whole Y (…, out). Checked per TP size: every
rank's output, dX (the ranks' slices side by side), dW (the shards side by side) and db against the
unsplit layer within 1e-5, and the collectives counted by torch's CommDebugMode — exactly one all-reduce
in forward (g) and none in backward (g's backward is the identity).

As in every `simlab.grading` module: one stable line, ✓ or ✗ naming the case; a failure raises AssertionError.
"""
from __future__ import annotations

from .common import fail

TP_SIZES = (1, 2, 4)
IN, OUT, BATCH, SEQ = 8, 6, 2, 3  # in divides by every TP size
TOL = 1e-5  # fp32: the partial products are summed in another order, nothing more
TITLE = "RowParallelLinear"


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


def row_worker(rank: int, world_size: int, layer_cls, seed: int) -> dict:
    """One rank: build the student's layer from the full one, run forward + backward on its slice of X."""
    from torch.distributed.tensor.debug import CommDebugMode
    full, x, grad_out = row_problem(seed)
    layer = layer_cls(full, rank, world_size)
    k = IN // world_size
    xr = x[..., rank * k:(rank + 1) * k].clone().requires_grad_(True)  # (b, s, in/N): this rank's slice
    with CommDebugMode() as fwd:
        out = layer(xr)  # (b, s, out)
    with CommDebugMode() as bwd:
        out.backward(grad_out)
    grads = {n: _grad(layer, n) for n in ("weight", "bias")}
    return {"out": out.detach(), "x.grad": xr.grad, **grads,
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


def _problem(ranks: list[dict], ref: dict, n: int) -> str | None:
    """What is wrong with one TP size's run, or None."""
    import torch
    if any(r[p] is None for r in ranks for p in ("weight", "bias")):
        return "weight or bias has no gradient: keep them as nn.Parameter attributes named weight and bias"
    shape = tuple(ranks[0]["weight"].shape)
    if shape != (OUT, IN // n):
        return f"weight shard is {shape}, expected (out, in/N) = {(OUT, IN // n)}: a block of W's columns"
    worst = max(range(n), key=lambda r: _diff(ranks[r]["out"], ref["out"]))
    if _diff(ranks[worst]["out"], ref["out"]) > TOL:
        return (f"rank {worst}'s output differs from nn.Linear's by {_diff(ranks[worst]['out'], ref['out']):.3g}: "
                "sum the partial outputs (all-reduce) and add the bias once")
    wholes = {"x.grad": torch.cat([r["x.grad"] for r in ranks], dim=-1),
              "weight": torch.cat([r["weight"] for r in ranks], dim=1), "bias": ranks[0]["bias"]}
    for name, what in (("x.grad", "dX"), ("weight", "dW"), ("bias", "db")):
        if _diff(wholes[name], ref[name]) > TOL or (name == "bias" and any(
                _diff(r["bias"], ref["bias"]) > TOL for r in ranks)):
            return f"{what} differs from nn.Linear's: is g's backward the identity (no sum, no scaling)?"
    for phase, want in (("forward", {"all-reduce": 1}), ("backward", {})):
        got = ranks[0]["calls"][phase]
        if n == 1 and phase == "forward" and not got:
            continue  # Megatron skips the all-reduce of a single rank: a sum over one rank is the identity
        if got != want:
            return (f"{phase} ran {got or 'no collectives'}; expected {want or 'none'} — g all-reduces once in "
                    "forward, and its backward is the identity")
    return None


def check_row_parallel_linear(layer_cls, seed: int = 0) -> None:
    """Grade `layer_cls(full: nn.Linear, rank, world_size)` on real ranks at TP sizes 1, 2 and 4."""
    import torch.distributed.tensor.debug  # noqa: F401  import once here; the forked ranks inherit it

    from ..exec.launch import WorkerError, launch
    ref = _reference(seed)
    for n in TP_SIZES:
        case = f"TP size {n}"
        try:
            ranks = launch(row_worker, n, layer_cls, seed, backend="gloo", timeout=60)
        except WorkerError as err:
            if "NotImplementedError" in err.traceback:  # the stub: say so plainly, not as a rank's crash
                raise NotImplementedError("exercise: write your answer here") from None
            fail(TITLE, case, f"rank {err.rank} raised {(err.traceback.strip().splitlines() or [str(err)])[-1]}")
        problem = _problem(ranks, ref, n)
        if problem:
            fail(TITLE, case, problem)
    print(f"{TITLE}: ✓ TP sizes 1, 2, 4 on real processes: output, dX, dW and db equal nn.Linear's "
          "within 1e-5; one all-reduce forward (g), none backward")
