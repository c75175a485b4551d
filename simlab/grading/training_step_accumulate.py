"""Lesson 5b's gradient-accumulation exercise: the learner writes one optimizer step of data parallel with
gradient accumulation, `fn(model, micro_batches, loss_fn, optimizer)`, and it runs on real gloo ranks.

Graded on variants of (dp ranks, m micro-batches, b samples each) that the lesson never ran, two steps each,
against ONE process that takes one SGD step on the whole global batch of b·m·dp samples (the loss its mean).
What is compared is the update itself — (parameters before − after) / lr, the gradient the step applied — so
it does not matter where the learner zeroes `.grad`. The classic bugs each get their own hint, named by the
concept, never by the value:
- not dividing each micro-batch's loss by m (the update is m× the big batch's);
- zeroing the gradients inside the loop (only the last micro-batch survives);
- never zeroing them (the second step adds the first step's gradient again);
- all-reducing after every micro-batch (the bytes: m× what one all-reduce per step sends, counted by a
  TorchDispatchMode on torch's own c10d ops, however the learner called them);
- summing across ranks without dividing by the world size; stepping the optimizer more or less than once.
An answer that hands the work to simlab's own code (its trainers, its engines) is refused (`first_call`).
"""
from __future__ import annotations

from pathlib import Path

from ..i18n import N_, _
from .common import fail, first_call

VARIANTS = ((1, 4, 2), (2, 3, 2), (2, 2, 3))  # (dp, m, b): none of them the lesson's run
SIZES = (6, 10, 3)  # the MLP: 6 → 10 → 3 (103 parameters), fp32
STEPS, LR, TOL = 2, 0.1, 1e-5
TITLE = N_("gradient accumulation")
SIMLAB = str(Path(__file__).resolve().parent.parent)  # simlab/
GRADING = str(Path(__file__).resolve().parent)


def _simlab_code(code):
    """The name of a simlab function outside simlab.grading (what an answer must not call), else None."""
    path = code.co_filename
    return f"{Path(path).stem}.{code.co_name}" if path.startswith(SIMLAB) and not path.startswith(GRADING) else None


def model(seed: int = 0):
    from ..exec.models import make_mlp
    return make_mlp(list(SIZES), seed=seed)


def global_batch(step: int, dp: int, m: int, b: int, seed: int = 0):
    """Step `step`'s whole batch: X (dp·m·b, in), Y (dp·m·b, out); rank r's micro-batch j is rows
    [(r·m + j)·b, (r·m + j + 1)·b)."""
    from ..exec.models import make_batch
    return make_batch(dp * m * b, SIZES[0], SIZES[-1], seed=seed + 100 * (step + 1))


def micro_batches(step: int, rank: int, dp: int, m: int, b: int, seed: int = 0) -> list:
    x, y = global_batch(step, dp, m, b, seed)
    rows = [slice((rank * m + j) * b, (rank * m + j + 1) * b) for j in range(m)]
    return [(x[r], y[r]) for r in rows]  # m × ((b, in), (b, out))


def _reduced_elements():
    """A TorchDispatchMode that adds up the elements every all-reduce on this rank sums (c10d's in-place op and
    the functional one), whatever Python call reached it."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class AllReduced(TorchDispatchMode):
        elements = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = str(func)
            if "allreduce" in name or "all_reduce" in name:
                tensors = args[0] if isinstance(args[0], (list, tuple)) else [args[0]]
                self.elements += sum(t.numel() for t in tensors)
            return func(*args, **(kwargs or {}))
    return AllReduced()


def accumulate_worker(rank: int, world_size: int, fn, m: int, b: int, seed: int) -> list[dict]:
    """One rank: `STEPS` calls of the learner's step; per step the parameters after it, the elements it
    all-reduced, and the first simlab function it called (None if none)."""
    import torch
    import torch.nn.functional as F

    from ..exec.models import flat_params
    net = model(seed)
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    steps = []
    for step in range(STEPS):
        batches = micro_batches(step, rank, world_size, m, b, seed)
        with _reduced_elements() as counted:
            _, called = first_call(fn, _simlab_code, net, batches, F.mse_loss, opt)
        steps.append({"params": flat_params(net), "reduced": counted.elements, "called": called})
    return steps


def reference(dp: int, m: int, b: int, seed: int = 0) -> list[dict]:
    """One process, one SGD step per global batch on all b·m·dp samples: per step the parameters before, the
    big batch's gradient, and each micro-batch's own gradient (for the hints), all flat (P,)."""
    import torch
    import torch.nn.functional as F

    from ..exec.models import flat_params
    net = model(seed)
    opt = torch.optim.SGD(net.parameters(), lr=LR)

    def grad_of(x, y):
        net.zero_grad(set_to_none=True)
        F.mse_loss(net(x), y).backward()
        return torch.cat([p.grad.reshape(-1) for p in net.parameters()])

    out = []
    for step in range(STEPS):
        per_micro = [[grad_of(*mb) for mb in micro_batches(step, r, dp, m, b, seed)] for r in range(dp)]
        before, whole = flat_params(net), grad_of(*global_batch(step, dp, m, b, seed))
        opt.step()
        out.append({"before": before, "grad": whole, "micro": per_micro})
    return out


def _close(a, b) -> bool:
    return float((a - b).abs().max()) <= TOL


def _diagnose(applied, ref: dict, previous, dp: int, m: int) -> str:
    """Why the applied gradient is not the big batch's: the first classic bug it matches."""
    import torch
    grad, last = ref["grad"], sum(r[-1] for r in ref["micro"]) / dp  # last: each rank's last micro-batch only
    known = [(m > 1, m * grad, N_("your step applied m times the big batch's gradient: each micro-batch's loss is "
                                 "a mean over its b samples, so the m losses must each be divided by m before "
                                 "backward for their sum to be the mean over the whole batch")),
             (dp > 1, dp * grad, N_("all-reduce sums the ranks' gradients: divide by the world size for the mean")),
             (m > 1 and dp > 1, m * dp * grad, N_("your step applied m·dp times the big batch's gradient: divide "
                                                  "each micro-batch's loss by m, and the all-reduced sum by the "
                                                  "world size")),
             (m > 1, last / m, N_("only the last micro-batch's gradient survived: zeroing the gradients inside "
                                  "the loop throws the earlier micro-batches away; zero them once, before the "
                                  "first")),
             (m > 1, last, N_("only the last micro-batch's gradient survived: zeroing the gradients inside the "
                              "loop throws the earlier micro-batches away; zero them once, before the first")),
             (previous is not None, grad + (previous if previous is not None else 0),
              N_("the second step applied the first step's gradient again: .grad accumulates across steps until "
                 "you zero it, so zero it once at the start of each step")),
             (True, torch.zeros_like(grad), N_("the parameters did not move: call optimizer.step() once, after the "
                                               "gradients are combined"))]
    for applies, candidate, hint in known:
        if applies and _close(applied, candidate):
            return _(hint)
    return _("the update differs from one step on the whole batch by up to {diff}: one optimizer step per global "
             "batch, on the mean gradient over all b·m·dp samples").format(
        diff=f"{float((applied - grad).abs().max()):.3g}")


def _problem(ranks: list, refs: list, dp: int, m: int, params: int) -> str | None:
    for step, ref in enumerate(refs):
        done = [r[step] for r in ranks]
        if done[0]["called"]:
            return _("your step calls simlab's own {name}: write the loop, the all-reduce and the step "
                     "yourself").format(name=done[0]["called"])
        reduced = max(r["reduced"] for r in done)
        if reduced > params:
            return _("each rank all-reduced {times:.3g}× its gradients in one step: the sum across ranks is only "
                     "needed once, after the last micro-batch, and all-reducing every micro-batch sends m times "
                     "the bytes").format(times=reduced / params)
        if dp > 1 and min(r["reduced"] for r in done) < params:
            return _("the ranks never combined all their gradients: all-reduce every parameter's gradient once, "
                     "after the last micro-batch")
        for rank, r in enumerate(done):
            applied = (ref["before"] - r["params"]) / LR  # (P,): the gradient the step applied
            if not _close(applied, ref["grad"]):
                previous = refs[step - 1]["grad"] if step else None
                return _("step {step}, rank {rank}: {why}").format(step=step + 1, rank=rank,
                                                                    why=_diagnose(applied, ref, previous, dp, m))
    return None


def check_accumulation(fn) -> None:
    """Grade `fn(model, micro_batches, loss_fn, optimizer)` — one optimizer step with gradient accumulation on
    this rank — on real ranks, against one process stepping on the whole global batch."""
    from ..exec.launch import WorkerError, launch
    title = _(TITLE)
    if not callable(fn):
        fail(title, _("your answer"), _("pass your step function, fn(model, micro_batches, loss_fn, optimizer)"))
    params = sum(p.numel() for p in model().parameters())
    for dp, m, b in VARIANTS:
        case = _("dp={dp}, m={m}, b={b}").format(dp=dp, m=m, b=b)
        try:
            ranks = launch(accumulate_worker, dp, fn, m, b, 0, backend="gloo", timeout=60)
        except WorkerError as err:
            if "NotImplementedError" in err.traceback:  # the stub: say so plainly, not as a rank's crash
                raise NotImplementedError(_("exercise: write your answer here")) from None
            fail(title, case, _("rank {rank} raised {error}").format(
                rank=err.rank, error=(err.traceback.strip().splitlines() or [str(err)])[-1]))
        problem = _problem(ranks, reference(dp, m, b), dp, m, params)
        if problem:
            fail(title, case, problem)
    shown = ", ".join(f"{dp}×{m}×{b}" for dp, m, b in VARIANTS)
    print(_("{title}: ✓ {detail}").format(title=title, detail=_(
        "dp×m×b = {shown} on real processes, {steps} steps each: every rank's update equals one step of one process "
        "on the whole global batch (within {tol}), with one all-reduce of the gradients per step").format(
        shown=shown, steps=STEPS, tol=TOL)))
