"""Lesson 5b's precision recipes on real tensors: the bytes a mixed-precision Adam setup really holds per parameter,
what fp16 does to small gradients without loss scaling (and with torch's `GradScaler`), and what a CPU's torch can
and cannot do with FP8.

What it teaches:
- `state_tensors(precision)` builds each recipe the way frameworks do and returns the live tensors by part:
  fp32 (the weights are the master copy; Adam's m and v), "mixed" (bf16 weights and gradients, an fp32 master copy
  the optimizer updates and copies back, Adam's fp32 m and v: the ZeRO paper's 2 + 2 + 12), "mixed-fp32-grads"
  (Megatron's: each bf16 gradient added into an fp32 `main_grad` as soon as it is ready, then freed: 2 + 4 + 12);
- `gradients(dtype, ...)`: the same model's parameter gradients in fp32, under fp16 or bf16 autocast, and under
  fp16 with the loss multiplied by a scale (`torch.amp.GradScaler`) and the gradients divided by it in fp32. The
  per-element gradients of a small loss fall below fp16's 2⁻²⁴ and become 0 inside the backward; bf16 keeps them;
- `fp8_probe()`: float8 dtypes exist on a CPU and `torch._scaled_mm` runs there, but no CPU has FP8 matrix units:
  the measured speed says so. Real FP8 training (Transformer Engine) needs an FP8 GPU (Hopper, Ada, Blackwell).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .._checks import check_choice, check_int, check_positive
from .models import make_batch, make_mlp
from .training_step_machine import best_of

RECIPES = ("fp32", "mixed", "mixed-fp32-grads")  # what a CPU can really hold; FP8 training it cannot
SIZES = (64, 128, 128, 16)  # the lessons' MLP, a little wider: 26,896 parameters
AUTOCAST = {"fp16": torch.float16, "bf16": torch.bfloat16}


def _step(model, x, y) -> None:
    F.mse_loss(model(x.to(next(model.parameters()).dtype)), y.to(next(model.parameters()).dtype)).backward()


def _into(main_grad):
    """A hook that adds a parameter's fresh 16-bit gradient into its fp32 `main_grad` and frees it."""
    def hook(p):
        main_grad.add_(p.grad)
        p.grad = None
    return hook


def state_tensors(precision: str, sizes=SIZES, seed: int = 0) -> dict:
    """After one real Adam step with `precision`'s recipe: {"params", "grads", "master", "adam_m", "adam_v": the
    tensors that persist between steps; "step": Adam's step counters (one scalar per tensor, not per parameter)}."""
    check_choice("precision", precision, RECIPES)
    model = make_mlp(list(sizes), seed)
    x, y = make_batch(8, sizes[0], sizes[-1], seed)
    params = list(model.parameters())
    if precision == "fp32":
        opt = torch.optim.Adam(params, lr=1e-3)
        _step(model, x, y)
        opt.step()
        master, grads = params, [p.grad for p in params]
    else:
        model.to(torch.bfloat16)
        master = [p.detach().float() for p in params]  # the fp32 copy the optimizer updates
        opt = torch.optim.Adam(master, lr=1e-3)
        if precision == "mixed-fp32-grads":  # Megatron: accumulate into fp32 main_grad, free the bf16 gradient
            main = [torch.zeros_like(w) for w in master]
            for p, g in zip(params, main):
                p.register_post_accumulate_grad_hook(_into(g))
        _step(model, x, y)
        for w, p, i in zip(master, params, range(len(params))):
            w.grad = main[i] if precision == "mixed-fp32-grads" else p.grad.float()  # an fp32 view for Adam
        opt.step()
        with torch.no_grad():
            for w, p in zip(master, params):
                p.copy_(w)  # the updated weights, rounded to bf16 for the next forward
                w.grad = None if precision == "mixed" else w.grad  # the fp32 copy of a bf16 gradient was transient
        grads = main if precision == "mixed-fp32-grads" else [p.grad for p in params]
    state = [opt.state[w] for w in master]
    return {"params": params, "grads": grads, "master": [] if precision == "fp32" else master,
            "adam_m": [s["exp_avg"] for s in state], "adam_v": [s["exp_avg_sq"] for s in state],
            "step": [s["step"] for s in state]}


def storage_bytes(tensors) -> int:
    """Bytes of the distinct storages behind `tensors` (a view counts with its base, once)."""
    seen = {}
    for t in tensors:
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    return sum(seen.values())


def gradients(dtype: str | None, loss_factor: float, scale: float | None = None, seed: int = 0,
              sizes=SIZES) -> torch.Tensor:
    """The flat fp32 parameter gradient (P,) of `loss_factor` × MSE on the lessons' MLP: in fp32 (`dtype` None) or
    under `dtype` autocast ("fp16", "bf16"); with `scale`, through `torch.amp.GradScaler` (loss × scale, then the
    gradients unscaled in fp32, as its `unscale_` does before an optimizer step)."""
    check_positive("loss_factor", loss_factor)
    model = make_mlp(list(sizes), seed)
    x, y = make_batch(256, sizes[0], sizes[-1], seed)
    with torch.autocast("cpu", dtype=AUTOCAST[dtype]) if dtype else torch.autocast("cpu", enabled=False):
        loss = F.mse_loss(model(x), y) * loss_factor
    if scale is None:
        loss.backward()
    else:
        scaler = torch.amp.GradScaler("cpu", init_scale=check_positive("scale", scale))
        scaler.scale(loss).backward()
        scaler.unscale_(torch.optim.SGD(model.parameters(), lr=0.0))  # divides every .grad by the scale, in fp32
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def fp8_probe(n: int = 256, repeats: int = 3) -> dict:
    """What float8 does on this CPU, measured: which dtypes exist, the error of a round trip through E4M3, what a
    value beyond its range becomes, whether `a @ b` and `torch._scaled_mm` run on float8 tensors, and the
    latter's time against an fp32 matmul of the same size (a CPU computes FP8 by converting, not natively)."""
    check_int("n", n, 16, 4096)
    check_int("repeats", repeats, 1)
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(n, n, generator=gen), torch.randn(n, n, generator=gen)
    e4m3 = a.to(torch.float8_e4m3fn)
    out = {"dtypes": [str(d) for d in (torch.float8_e4m3fn, torch.float8_e5m2) if d is not None],
           "round_trip_max_rel_error": float(((e4m3.float() - a).abs() / a.abs().clamp_min(2.0 ** -6)).max()),
           "e4m3_of_1000": float(torch.tensor([1000.0]).to(torch.float8_e4m3fn).float())}
    for name, fn in (("matmul", lambda: e4m3 @ b.to(torch.float8_e4m3fn)),
                     ("scaled_mm", lambda: torch._scaled_mm(e4m3, b.to(torch.float8_e4m3fn).t().contiguous().t(),
                                                            scale_a=torch.tensor(1.0), scale_b=torch.tensor(1.0),
                                                            out_dtype=torch.float32))):
        try:
            fn()
            out[name] = True
        except (RuntimeError, NotImplementedError, TypeError) as err:  # what this torch refuses, in its words
            out[name] = False
            out[name + "_error"] = (str(err).strip().splitlines() or [type(err).__name__])[0]
    if out["scaled_mm"]:
        bt = b.to(torch.float8_e4m3fn).t().contiguous().t()
        fp8 = best_of(lambda: torch._scaled_mm(e4m3, bt, scale_a=torch.tensor(1.0), scale_b=torch.tensor(1.0),
                                             out_dtype=torch.float32), repeats)
        fp32 = best_of(lambda: a @ b, repeats)
        out |= {"scaled_mm_seconds": fp8, "fp32_matmul_seconds": fp32, "fp8_speedup": fp32 / fp8}
    return out
