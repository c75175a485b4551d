"""The check for lesson 5's graded exercise: a row-parallel linear layer and its g operator, run on real
gloo ranks at TP sizes 1, 2 and 4 and compared with one unsplit `nn.Linear`.

The student writes `layer_cls(full, rank, world_size)`: an nn.Module holding a block of the columns of
`full.weight` (nn.Linear stores W as (out, in)) as `.weight` and the whole `.bias`; its forward takes this
rank's slice of X's last dim, (…, in/N), and returns the whole Y (…, out). Checked per TP size: every
rank's output, dX (the ranks' slices side by side), dW (the shards side by side) and db against the
unsplit layer within 1e-5, and the collectives counted by torch's CommDebugMode — exactly one all-reduce
in forward (g) and none in backward (g's backward is the identity).

Two predict-then-run checks graded against a real `run_tp(**MLP_RUN)` (answers committed before it runs):
- `check_split_choice`: the split of A and B for GeLU(X·A)·B and the all-reduces forward and backward per MLP,
  against the simulator's plan (`split_forward`, `block_steps`) and the collectives the real run counted.
- `check_forward_bytes`: the bytes each rank sends in one forward, against the bytes the real run's ranks
  all-reduced (its trace's forward events: the real tensors' sizes, ring-accounted).

As in every `simlab.grading` module: one stable line, ✓ or ✗ naming the case; a failure raises AssertionError.
The lines are marked for translation (`simlab.i18n`; Chinese in locale/zh/LC_MESSAGES/tensor_parallel.po).
A prediction left as None (the exercise's stub) raises NotImplementedError, like an unwritten answer.
"""
from __future__ import annotations

from ..i18n import N_, _
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


def check_row_parallel_linear(layer_cls, seed: int = 0) -> None:
    """Grade `layer_cls(full: nn.Linear, rank, world_size)` on real ranks at TP sizes 1, 2 and 4."""
    import torch.distributed.tensor.debug  # noqa: F401 — import once here: every forked rank inherits it

    from ..exec.launch import WorkerError, launch
    ref = _reference(seed)
    for n in TP_SIZES:
        case = _("TP size {n}").format(n=n)
        try:
            ranks = launch(row_worker, n, layer_cls, seed, backend="gloo", timeout=60)
        except WorkerError as err:
            if "NotImplementedError" in err.traceback:  # the stub: say so plainly, not as a rank's crash
                raise NotImplementedError(_("exercise: write your answer here")) from None
            fail(TITLE, case, _("rank {rank} raised {error}").format(
                rank=err.rank, error=(err.traceback.strip().splitlines() or [str(err)])[-1]))
        problem = _problem(ranks, ref, n)
        if problem:
            fail(TITLE, case, problem)
    print(f"{TITLE}: ✓ " + _("TP sizes 1, 2, 4 on real processes: output, dX, dW and db equal nn.Linear's "
                             "within 1e-5; one all-reduce forward (g), none backward"))


# ---------------------------------------------------------------- predict, then run (the real MLP run)

# run_tp(**MLP_RUN); ffn = 4h. Not the lesson's shapes (8 tokens × hidden 8): its printed bytes must not be the answer
MLP_RUN = {"world_size": 4, "block": "mlp", "batch": 2, "seq": 3, "hidden": 12, "ffn": 48}
ITEMSIZE = 4  # run_tp runs fp32
PHASES = {"forward": N_("forward"), "backward": N_("backward")}


def _unanswered(*answers) -> None:
    if any(answer is None for answer in answers):
        raise NotImplementedError(_("exercise: write your prediction in the cell above"))


def _real_mlp_run(title: str, real) -> None:
    """Fail unless `real` is the result of run_tp(**MLP_RUN), equal to one process."""
    from ..sim.tensor_parallel import block_steps
    m = MLP_RUN
    plan = block_steps("mlp", m["world_size"], m["batch"] * m["seq"], m["hidden"], m["ffn"], itemsize=ITEMSIZE)
    ran = real.get("plan") if isinstance(real, dict) else None  # the plan run_tp ran, as plain dicts
    if ran is None or [{**s, "bytes_sent": tuple(s["bytes_sent"])} for s in ran] != [vars(s) for s in plan]:
        fail(title, _("real run"), _("pass the result of run_tp(**MLP_RUN), run after your prediction"))
    if real["max_abs_diff_vs_reference"] > TOL:
        fail(title, _("real run"), _("the real run differs from one process by {diff}").format(
            diff=f"{real['max_abs_diff_vs_reference']:.3g}"))


def check_split_choice(a_split, b_split, forward, backward, real) -> None:
    """Grade the choice of splits for GeLU(X·A)·B and its all-reduces per MLP (forward, backward)."""
    from ..sim.tensor_parallel import KINDS
    from ..sim.tensor_parallel_choices import mlp_inputs, split_error
    title, n = _("MLP split"), MLP_RUN["world_size"]
    _unanswered(a_split, b_split, forward, backward)
    _real_mlp_run(title, real)
    if a_split not in KINDS or b_split not in KINDS:
        fail(title, _("split"), _("a_split={a}, b_split={b}: each must be 'column' or 'row'").format(
            a=repr(a_split), b=repr(b_split)))
    if a_split == "row":
        err = split_error("row", b_split, n, *mlp_inputs())
        fail(title, _("A by rows"), _("each rank then holds a partial sum of X·A, and GeLU of a partial sum is not "
                                      "the sum of GeLUs (the explorer's MLP on {n} ranks is off by {error}): X·A, 4× "
                                      "the size of Z, would have to be summed before GeLU").format(
            n=n, error=f"{err:.3g}"))
    if b_split == "column":
        fail(title, _("B by columns"), _("exact, but every rank then needs all of GeLU(X·A): an all-gather of the "
                                         "(tokens, 4h) activation between A and B and another of Z; B by rows takes "
                                         "each rank's column block of GeLU(X·A) as it is"))
    for phase, said in (("forward", forward), ("backward", backward)):
        counted, planned = real[f"allreduce_calls_{phase}"], real[f"plan_allreduce_calls_{phase}"]
        if said != counted or said != planned:
            why = {("forward", 0): N_("each rank's Z is a partial sum over its block of ffn: g must add them"),
                   ("forward", 2): N_("f is the identity in forward (X is already whole on every rank): only g "
                                      "all-reduces, once"),
                   ("backward", 0): N_("each rank's dX = dU_r·A_rᵀ covers only its slice of A: f must add them"),
                   ("backward", 2): N_("g's backward is the identity (dZ is already whole on every rank): only f "
                                       "all-reduces, once")}.get((phase, said), N_("one g forward, one f backward"))
            case = _("forward all-reduces") if phase == "forward" else _("backward all-reduces")
            fail(title, case, _("you said {said}; the plan has {planned} and the real run on {n} processes counted "
                                "{counted}: {why}").format(said=repr(said), planned=planned, n=n, counted=counted,
                                                           why=_(why)))
    print(f"{title}: ✓ " + _("A by columns, B by rows: no communication between A and B; {forward} all-reduce "
                             "forward (g) and {backward} backward (f), as the plan and the real run on {n} processes "
                             "counted").format(forward=forward, backward=backward, n=n))


def forward_bytes_sent(real) -> list[int]:
    """Bytes each rank sent in the real run's forward: its trace's forward collectives."""
    sent = [0] * real["world_size"]
    for event in real["trace"]:
        if event.name.startswith("forward"):
            sent[event.rank] += event.nbytes
    return sent


def check_forward_bytes(predicted, real) -> None:
    """Grade the predicted bytes each rank sends in one forward of the TP MLP against the real run's."""
    title, m = _("forward bytes"), MLP_RUN
    _unanswered(predicted)
    _real_mlp_run(title, real)
    n, z = m["world_size"], m["batch"] * m["seq"] * m["hidden"] * ITEMSIZE  # Z (b·s, h) fp32, in bytes
    measured = forward_bytes_sent(real)
    if not isinstance(predicted, int) or isinstance(predicted, bool):
        fail(title, _("prediction"), _("predicted={value}: give a whole number of bytes (an int)").format(
            value=repr(predicted)))
    if predicted != measured[0]:
        inner = m["batch"] * m["seq"] * m["ffn"] * ITEMSIZE
        why = {z: N_("that is Z's own size; on a ring each rank sends (N−1)/N of it in the reduce-scatter and "
                     "again in the all-gather: 2(N−1)/N·Z"),
               measured[0] // ITEMSIZE: N_("that counts elements; the run is fp32, 4 bytes each"),
               2 * z: N_("2·Z is the all-reduce's bound for large N; with N ranks each sends 2(N−1)/N·Z"),
               2 * measured[0]: N_("that counts backward too: f's all-reduce of dX runs in backward, not forward"),
               2 * (n - 1) * inner // n: N_("only Z (b·s, h) crosses the network: GeLU(X·A) (b·s, ffn) stays on "
                                            "its rank")}.get(predicted, N_("the forward's only collective is g's "
                                                                           "all-reduce of Z (b·s, h), fp32"))
        fail(title, _("bytes per rank"), _("you said {said}; the real run's ranks sent {measured} in forward: "
                                           "{why}").format(said=f"{predicted:,}", measured=measured, why=_(why)))
    print(f"{title}: ✓ " + _("{said} B per rank = 2(N−1)/N × Z's {z} B with N = {n}: the real run's ranks sent "
                             "{measured} in forward").format(said=f"{predicted:,}", z=f"{z:,}", n=n,
                                                             measured=measured))
