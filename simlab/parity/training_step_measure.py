"""Lesson 5b's measurements, each against the simulator's number: what a real layer keeps for its backward against
Korthikanti's terms, what recomputation saves and costs, the bytes of a real mixed-precision Adam setup against
the recipe, fp16's lost gradients, FP8 on a CPU, this machine's roofline and its MFU. Each returns a plain dict
(numbers, strings, `Message`s) that the render layer prints.

Measured against the formula (`measure_activations`), a torch layer on a CPU differs in exactly three named ways,
each a closed form the function adds up, so that what is left unexplained is 0 bytes:
- "layernorm_stats": each LayerNorm also keeps its rows' mean and 1/std, b·s values each, in the data's dtype;
- "dropout_mask_dtype": torch's CPU dropout keeps its mask in the data's dtype (2 bytes in bf16, 4 in fp32), where
  Megatron's fused kernel and the formula keep 1 byte (the formula's fp32 doubles it to 2);
- "flash_lse_fp32": the log-sum-exp is fp32 whatever the data's dtype, where the formula's fp32 doubles it.
"""
from __future__ import annotations

import torch

from .._checks import check_choice, check_int, check_positive
from ..exec.models import gpt_loss, make_gpt, make_tokens
from ..exec.training_step import DTYPES, RECOMPUTE, forward_backward, layer_input, make_layer
from ..exec.training_step_machine import best_copy_seconds, best_matmul_seconds, best_of, best_step_seconds
from ..exec.training_step_precision import RECIPES, fp8_probe, gradients, state_tensors, storage_bytes
from ..sim.message import Message
from ..sim.model import Transformer
from ..sim.training_step_memory import STATE_PARTS, activation_terms, number_format, state_recipe

# the formula's terms each real operation saves (flash: the kernel keeps its output, which the output projection
# then saves as its input — one storage, counted where first saved)
SITE_TERMS = {"ln1": ("ln1_input",), "qkv": ("qkv_input",), "scores": ("q", "k"), "softmax": ("softmax_output",),
              "softmax_dropout": ("softmax_dropout_mask",), "context": ("softmax_dropout_output", "v"),
              "flash": ("q", "k", "v", "flash_lse", "out_proj_input"), "attention_checkpoint": ("q", "k", "v"),
              "out_proj": ("out_proj_input",), "attention_dropout": ("attention_dropout_mask",), "ln2": ("ln2_input",),
              "fc1": ("fc1_input",), "gelu": ("gelu_input",), "fc2": ("gelu_output",),
              "mlp_dropout": ("mlp_dropout_mask",), "layer_checkpoint": ("ln1_input",)}
WHY = {"layernorm_stats": Message("LayerNorm also keeps each row's mean and 1/std (b·s values each, in the data's "
                                  "dtype)"),
       "dropout_mask_dtype": Message("torch's CPU dropout keeps its mask in the data's dtype, not in 1 byte"),
       "flash_lse_fp32": Message("the log-sum-exp stays fp32; the formula's fp32 doubles it")}


def _config(microbatch, seq, hidden, heads, dtype):
    check_int("microbatch", microbatch, 1, 64)
    check_int("seq", seq, 1, 4096)
    check_choice("dtype", dtype, tuple(DTYPES))
    return Transformer("layer", layers=1, hidden=check_int("hidden", hidden, 1, 4096), heads=heads, seq=seq, vocab=1)


def _expected_difference(site: str, b: int, s: int, model: Transformer, dtype: str) -> tuple:
    """(name, bytes) of the closed-form gap between what `site` really keeps and the formula's terms."""
    itemsize, scale = DTYPES[dtype].itemsize, {"bf16": 1, "fp32": 2}[dtype]  # scale: the formula's fp32 doubling
    if site in ("ln1", "ln2"):
        return "layernorm_stats", 2 * b * s * itemsize
    if site in ("attention_dropout", "mlp_dropout"):
        return "dropout_mask_dtype", b * s * model.hidden * (itemsize - scale)
    if site == "softmax_dropout":
        return "dropout_mask_dtype", b * model.heads * s * s * (itemsize - scale)
    if site == "flash":
        return "flash_lse_fp32", b * model.heads * s * 4 * (1 - scale)
    return None, 0


def measure_activations(*, microbatch: int = 2, seq: int = 16, hidden: int = 32, heads: int = 4,
                        attention: str = "eager", recompute: str = "none", dtype: str = "bf16", dropout: float = 0.1,
                        seed: int = 0) -> dict:
    """One real layer's forward, every tensor it saved counted once per storage (`exec.training_step.SavedTensors`),
    against `sim.training_step_memory.activation_terms` for the same shape: "rows" (per operation: site, terms,
    formula_bytes, measured_bytes, difference, expected — the closed form of the difference —, why), the totals,
    "explained" ({name: bytes}), "unexplained_bytes" (measured − formula − explained: 0 when every byte is
    understood) and "records" (site, bytes, shape, dtype of each saved storage, in the order saved)."""
    model = _config(microbatch, seq, hidden, heads, dtype).with_(dropout=dropout > 0)
    layer = make_layer(hidden, heads, dtype=dtype, seed=seed, dropout=dropout, attention=attention,
                       recompute=recompute)
    x, dy = layer_input(microbatch, seq, hidden, dtype=dtype, seed=seed)
    saved, _ = forward_backward(layer, x, dy, seed)
    formula = activation_terms(model, microbatch, attention=attention, recompute=recompute,
                               precision="fp32" if dtype == "fp32" else "mixed")
    measured = saved.bytes_by_site()
    rows, explained = [], {}
    for site, nbytes in measured.items():
        terms = tuple(t for t in SITE_TERMS[site] if formula[t] or site == "flash")
        want = sum(formula[t] for t in terms)
        name, expected = _expected_difference(site, microbatch, seq, model, dtype)
        if name:
            explained[name] = explained.get(name, 0) + expected
        rows.append({"site": site, "terms": list(terms), "formula_bytes": want, "measured_bytes": nbytes,
                     "difference": nbytes - want, "expected": expected, "why": WHY.get(name)})
    covered = {t for r in rows for t in r["terms"]}
    missing = [t for t, v in formula.items() if v and t not in covered]  # a term nothing saved: a real gap
    total_formula = sum(formula.values())
    return {"config": {"microbatch": microbatch, "seq": seq, "hidden": hidden, "heads": heads, "attention": attention,
                       "recompute": recompute, "dtype": dtype, "dropout": dropout},
            "rows": rows, "formula_bytes": total_formula, "measured_bytes": saved.total, "explained": explained,
            "unexplained_bytes": saved.total - total_formula - sum(explained.values()), "missing_terms": missing,
            "records": [{"site": r[0], "bytes": r[2], "shape": list(r[3]), "dtype": r[4]} for r in saved.records]}


def measure_recompute(*, microbatch: int = 2, seq: int = 64, hidden: int = 64, heads: int = 4,
                      attention: str = "eager", dropout: float = 0.1, dtype: str = "fp32", seed: int = 0,
                      repeats: int = 3) -> dict:
    """The three recomputation modes on one real layer (the same weights, input and dropout draws): per mode the
    saved bytes, the formula's, the best forward + backward seconds (reported, never asserted) and the largest
    gradient difference from no recomputation (0.0: checkpoint replays the same RNG)."""
    model = _config(microbatch, seq, hidden, heads, dtype).with_(dropout=dropout > 0)
    check_int("repeats", repeats, 1, 100)
    modes, reference = {}, None
    for mode in RECOMPUTE:
        layer = make_layer(hidden, heads, dtype=dtype, seed=seed, dropout=dropout, attention=attention, recompute=mode)
        x, dy = layer_input(microbatch, seq, hidden, dtype=dtype, seed=seed)
        saved, grads = forward_backward(layer, x, dy, seed)
        reference = reference or grads
        seconds = best_of(lambda layer=layer, x=x, dy=dy: layer(x).backward(dy), repeats)  # forward + backward
        formula = activation_terms(model, microbatch, attention=attention, recompute=mode,
                                   precision="fp32" if dtype == "fp32" else "mixed")
        modes[mode] = {"saved_bytes": saved.total, "formula_bytes": sum(formula.values()), "seconds": seconds,
                       "max_abs_grad_diff": max(float((grads[k] - reference[k]).abs().max()) for k in grads)}
    return {"config": {"microbatch": microbatch, "seq": seq, "hidden": hidden, "heads": heads, "attention": attention,
                       "dtype": dtype, "dropout": dropout}, "modes": modes}


def measure_precision(precision: str = "mixed") -> dict:
    """A real Adam setup in `precision` (`exec.training_step_precision.state_tensors`): bytes per parameter of
    each part, measured, beside the recipe's (`sim.training_step_memory.state_recipe`); Adam's step counters
    apart (one scalar per tensor). FP8 training has no CPU implementation to measure: refused (`fp8_support`)."""
    if precision == "fp8":
        raise ValueError("precision='fp8': a CPU cannot train in FP8 (no FP8 matrix units, no Transformer Engine); "
                         "fp8_support() shows what it can do")
    check_choice("precision", precision, RECIPES)
    state = state_tensors(precision)
    n = sum(p.numel() for p in state["params"])
    per = {part: storage_bytes(state[part]) / n for part in STATE_PARTS}
    recipe = state_recipe(precision)
    return {"precision": precision, "params": n, "tensors": len(state["params"]), "bytes_per_param": per,
            "recipe": {part: recipe[part] for part in STATE_PARTS}, "total_per_param": sum(per.values()),
            "step_counter_bytes": storage_bytes(state["step"]),
            "matches": all(per[part] == recipe[part] for part in STATE_PARTS)}


def measure_loss_scaling(*, loss_factor: float = 2.0 ** -12, scale: float = 2.0 ** 16, seed: int = 0) -> dict:
    """The same gradients in fp32, fp16 autocast, fp16 with `torch.amp.GradScaler` (`scale`) and bf16 autocast:
    how many of the parameter-gradient elements are exactly 0 in each, and each one's largest error relative to
    fp32's largest gradient. `loss_factor` makes the loss small, as a mean over many tokens does."""
    check_positive("loss_factor", loss_factor)
    check_positive("scale", scale)
    runs = {"fp32": (None, None), "fp16": ("fp16", None), "fp16_scaled": ("fp16", scale), "bf16": ("bf16", None)}
    grads = {name: gradients(dtype, loss_factor, s, seed) for name, (dtype, s) in runs.items()}
    top = float(grads["fp32"].abs().max())
    return {"loss_factor": loss_factor, "scale": scale, "grad_elements": grads["fp32"].numel(),
            "zeros": {name: int((g == 0).sum()) for name, g in grads.items()},
            "max_rel_error": {name: float((g - grads["fp32"]).abs().max()) / top for name, g in grads.items()},
            "fp16_smallest_subnormal": number_format("fp16")["smallest_subnormal"]}


def fp8_support() -> dict:
    """`exec.training_step_precision.fp8_probe`'s measurements, and what they mean."""
    return fp8_probe() | {"note": Message("float8 tensors exist and convert on a CPU, and torch runs FP8 GEMMs there "
                                          "by converting to a wider type: no CPU has FP8 matrix units, so FP8's "
                                          "speed (twice bf16's peak on Hopper) needs an FP8 GPU (Hopper, Ada, "
                                          "Blackwell) and Transformer Engine")}


def measure_machine(*, sizes=(64, 128, 256, 512, 1024), dtype: str = "fp32", copy_mib: int = 64,
                    repeats: int = 5) -> dict:
    """This machine's roofline: the best matmul FLOP/s over square `sizes` (and each size's), the bytes/s of a
    `copy_mib` MiB copy, their ratio (the balance point, FLOP/B), and the torch threads they ran on."""
    sizes = [check_int(f"sizes[{i}]", n, 1, 8192) for i, n in enumerate(sizes)]
    if not sizes:
        raise ValueError("sizes=(): give at least one matrix size")
    check_int("copy_mib", copy_mib, 1, 4096)
    per_size = {n: 2.0 * n ** 3 / best_matmul_seconds(n, dtype, repeats) for n in sizes}
    best = max(per_size, key=per_size.get)
    nbytes = copy_mib << 20
    bandwidth = 2 * nbytes / best_copy_seconds(nbytes, repeats)  # read once, written once
    return {"peak_flops": per_size[best], "best_size": best, "per_size": {str(n): f for n, f in per_size.items()},
            "bandwidth": bandwidth, "balance": per_size[best] / bandwidth, "dtype": dtype,
            "threads": torch.get_num_threads()}


def measure_gpt_step(*, layers: int = 2, hidden: int = 128, heads: int = 4, seq: int = 64, vocab: int = 512,
                     batch: int = 8, peak_flops: float | None = None, repeats: int = 3, seed: int = 0) -> dict:
    """One Adam training step of the course's small GPT (fp32) on this machine: the best of `repeats` seconds, its
    model FLOPs (`sim.model.Transformer.model_flops` of the same shape, untied), and MFU against `peak_flops`
    (default: `measure_machine`'s best matmul FLOP/s, measured now)."""
    spec = Transformer("gpt", layers=check_int("layers", layers, 1, 16), hidden=hidden, heads=heads, seq=seq,
                       vocab=vocab, tied=False)
    check_int("batch", batch, 1, 256)
    if peak_flops is None:
        peak_flops = measure_machine()["peak_flops"]
    check_positive("peak_flops", peak_flops)
    model = make_gpt(layers, hidden, heads, seq, vocab, seed)
    tokens, targets = make_tokens(batch, seq, vocab, seed)
    seconds = best_step_seconds(model, torch.optim.Adam(model.parameters(), lr=1e-3), tokens, targets, gpt_loss,
                                repeats)
    flops = spec.model_flops(batch)
    return {"params": sum(p.numel() for p in model.parameters()), "model_params": spec.params, "tokens": batch * seq,
            "seconds": seconds, "model_flops": flops, "flops_per_second": flops / seconds, "peak_flops": peak_flops,
            "mfu": flops / seconds / peak_flops}
