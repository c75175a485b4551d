"""Lesson 5b's parity: does gradient accumulation over micro-batches give the update of one big batch — and torch's?

`run_training_step(world_size=2, microbatches=4, microbatch_size=2)` starts dp = `world_size` processes; each
trains the course's small GPT on its b·m sequences of the global batch B = b·m·dp, m micro-batches of b at a time
(`exec.training_step.accumulation_step`: each loss ÷ m, gradients added up in `.grad`, ONE ring all-reduce of the
gradients per optimizer step, every byte recorded), then the same steps reducing after every micro-batch (m× the
bytes, the same update), then torch's `DistributedDataParallel` accumulating under `no_sync()`. All three are held
to ONE process taking each step on all B sequences at once: its losses, its last gradients and its parameters.

The measurements of the lesson (saved activations, recomputation, precision, this machine's roofline and MFU) are
re-exported from `simlab.parity.training_step_measure`.
"""
from __future__ import annotations

import contextlib
import gc

import torch
import torch.distributed as dist
from torch import nn

from .._checks import check_bool, check_int, check_positive
from ..exec.launch import device, launch
from ..exec.models import flat_params, gpt_loss, make_gpt, make_tokens, train_steps
from ..exec.training_step import accumulation_step
from ..sim.collectives import ring_bytes_sent
from ..sim.model import Transformer
from ..trace import Recorder, merge
from . import common
from .common import check_run, max_abs_diff, result
from .hybrid import EPS  # Adam's eps in every run: lesson 6's, for the reason `exec.hybrid.DataParallelAdam` gives
from .training_step_measure import (  # noqa: F401 — re-exported: the lesson's measurements
    fp8_support,
    measure_activations,
    measure_gpt_step,
    measure_loss_scaling,
    measure_machine,
    measure_precision,
    measure_recompute,
)

MAX_STEPS = 16  # Adam amplifies float rounding where v ≈ 0: parity holds to 1e-5 over this many


def _flat_grads(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.detach().reshape(-1) for p in model.parameters()]).cpu()  # (P,)


def _sent(events, step: int = 0) -> int:
    """Bytes this rank's all-reduces sent in optimizer step `step`."""
    return sum(e.nbytes for e in events if e.kind == "comm" and e.step == step)


def train_accumulating(rank: int, world_size: int, cfg: dict) -> dict:
    """Worker: this rank's slice of each step's batch, as m micro-batches of b — ours with one all-reduce per step,
    ours with one per micro-batch, then torch's DDP under no_sync()."""
    b, m, steps, lr, seed = cfg["b"], cfg["m"], cfg["steps"], cfg["lr"], cfg["seed"]
    shape = (cfg["layers"], cfg["hidden"], cfg["heads"], cfg["seq"], cfg["vocab"])
    tokens, targets = make_tokens(b * m * world_size, cfg["seq"], cfg["vocab"], seed)  # (B, s) each
    rows = slice(rank * b * m, (rank + 1) * b * m)
    x, y = tokens[rows].to(device()), targets[rows].to(device())  # (b·m, s)
    micro = list(zip(x.split(b), y.split(b)))  # m × ((b, s), (b, s))
    out = {"backend": dist.get_backend()}
    for name, every in (("ours", False), ("every", True)):
        model = make_gpt(*shape, seed=seed).to(device())
        opt = torch.optim.Adam(model.parameters(), lr=lr, eps=EPS)
        rec = Recorder(rank)
        dist.barrier()
        rec.restart()
        losses = []
        for step in range(steps):
            rec.step = step
            losses.append(accumulation_step(model, opt, micro, gpt_loss, recorder=rec, every_microbatch=every))
        out[name] = {"losses": losses, "params": flat_params(model).cpu(), "grads": _flat_grads(model),
                     "bytes_per_step": _sent(rec.events), "events": rec.events,
                     "allreduces_per_step": sum(e.kind == "comm" and e.step == 0 for e in rec.events)}
    if cfg["compare_torch"]:
        ddp = nn.parallel.DistributedDataParallel(make_gpt(*shape, seed=seed).to(device()))
        opt = torch.optim.Adam(ddp.parameters(), lr=lr, eps=EPS)
        out["torch"] = {"losses": train_steps(ddp, opt, x, y, steps, accumulate=m, loss=gpt_loss),
                        "params": flat_params(ddp.module).cpu(), "grads": _flat_grads(ddp.module)}
        del ddp, opt
        gc.collect()  # teardown trap: no DDP may still hold the group when it is destroyed
    return out


def run_training_step(*, world_size: int = 2, microbatches: int = 4, microbatch_size: int = 2, steps: int = 2,
                      layers: int = 2, hidden: int = 16, heads: int = 2, seq: int = 8, vocab: int = 32,
                      lr: float = 0.01, seed: int = 0, compare_torch: bool = True, backend: str = "auto",
                      timeout: float = 60.0) -> dict:
    """Data parallel with gradient accumulation on real processes, against one process on the whole global batch
    and against torch's DDP with no_sync(). The core keys, then: global_batch, microbatches, microbatch_size,
    params (P), losses / reference_losses / torch_losses (per step), max_abs_grad_diff_vs_reference and
    max_abs_param_diff_vs_reference (the core key is the larger), allreduces_per_step, bytes_per_rank_closed_form
    (one ring all-reduce of P fp32 gradients: 2(N−1)/N·4P, rounded to the ring's chunks),
    bytes_sent_every_microbatch (measured, reducing after every micro-batch) with its closed form (m×), and
    max_abs_diff_every_microbatch (its parameters against the accumulated run's)."""
    backend = check_run(world_size, backend, timeout, seed)
    check_int("microbatches", microbatches, 1, 64)
    check_int("microbatch_size", microbatch_size, 1, 64)
    check_int("steps", steps, 1, MAX_STEPS)
    spec = Transformer("gpt", layers=check_int("layers", layers, 1, 8), hidden=check_int("hidden", hidden, 1, 256),
                       heads=heads, seq=check_int("seq", seq, 1, 256), vocab=check_int("vocab", vocab, 2, 4096),
                       tied=False)
    check_positive("lr", lr)
    check_bool("compare_torch", compare_torch)
    b, m = microbatch_size, microbatches
    global_batch = b * m * world_size
    cfg = {"b": b, "m": m, "steps": steps, "lr": lr, "seed": seed, "layers": layers, "hidden": hidden,
           "heads": heads, "seq": seq, "vocab": vocab, "compare_torch": compare_torch}
    # the reference first: its optimizer imports torch's lazy modules (~2 s) once, here, not in every rank
    batch = make_tokens(global_batch, seq, vocab, seed)
    ref_losses, ref_model = common.reference_model(lambda: make_gpt(layers, hidden, heads, seq, vocab, seed), batch,
                                                   steps, lr, "adam", loss=gpt_loss, eps=EPS)
    ref_params, ref_grads = flat_params(ref_model), _flat_grads(ref_model)
    ranks = launch(train_accumulating, world_size, cfg, backend=backend, timeout=timeout)
    ours = [r["ours"] for r in ranks]
    grad_diff = max(max_abs_diff(r["grads"], ref_grads) for r in ours)
    param_diff = max(max_abs_diff(r["params"], ref_params) for r in ours)
    params = spec.params

    def mean(runs):  # per step, over the ranks
        return [sum(per_step) / world_size for per_step in zip(*(r["losses"] for r in runs))]
    with contextlib.suppress(KeyError):
        torch_runs = [r["torch"] for r in ranks]
    vs_torch = max(max_abs_diff(r["params"], t["params"]) for r, t in zip(ours, torch_runs)) if compare_torch else None
    closed = ring_bytes_sent("all-reduce", world_size, params, itemsize=4)
    return result(world_size=world_size, backend=ranks[0]["backend"], trace=merge(r["events"] for r in ours),
                  bytes_sent_per_rank=[r["bytes_per_step"] for r in ours],
                  max_abs_diff_vs_reference=max(grad_diff, param_diff), max_abs_diff_vs_torch=vs_torch,
                  why_no_torch=None if compare_torch else "compare_torch=False",
                  global_batch=global_batch, microbatches=m, microbatch_size=b, params=params,
                  losses=mean(ours), reference_losses=ref_losses,
                  **({"torch_losses": mean(torch_runs)} if compare_torch else {}),
                  max_abs_grad_diff_vs_reference=grad_diff, max_abs_param_diff_vs_reference=param_diff,
                  allreduces_per_step=ours[0]["allreduces_per_step"], bytes_per_rank_closed_form=closed,
                  bytes_sent_every_microbatch=[r["every"]["bytes_per_step"] for r in ranks],
                  bytes_every_microbatch_closed_form=[m * c for c in closed],
                  allreduces_per_step_every_microbatch=ranks[0]["every"]["allreduces_per_step"],
                  max_abs_diff_every_microbatch=max(max_abs_diff(r["every"]["params"], r["ours"]["params"])
                                                    for r in ranks))
