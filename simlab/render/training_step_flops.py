"""Lesson 5b's text about time: a step's FLOPs (6·N·tokens, the dense GEMMs, attention, what recomputation adds),
MFU and HFU, the roofline of a layer's GEMMs on a GPU and on this machine, and this machine's measured numbers.
The numbers are the engine's (`sim.training_step_flops`, `parity.training_step.measure_machine` and
`measure_gpt_step`); this module lays them out.

    >>> from simlab.sim.model import PRESETS
    >>> print(flops_text(PRESETS["gpt3-175b"], 1536).splitlines()[0])
    gpt3-175b, one step on 1536 sequences of 2048 tokens (3,145,728 tokens)
"""
from __future__ import annotations

from ..i18n import N_, _
from ..sim.training_step_flops import step_flops
from .style import rows_table

PART = {"six_n": N_("6·N·tokens (the rule of thumb, N = all parameters)"),
        "dense": N_("the dense GEMMs: 6 per weight per token, output layer included"),
        "attention": N_("attention's QKᵀ and AV: 6·L·s·h per token (causal)"),
        "model_flops": N_("model FLOPs = dense + attention (what MFU counts)")}

BOUND = {"memory": N_("memory-bound"), "compute": N_("compute-bound")}


def flops(value: float) -> str:
    """FLOPs as 1.23e18 (a table's column of very different sizes stays comparable)."""
    return f"{value:.3e}"


def flops_text(model, samples: int) -> str:
    """One step's FLOPs by part, then what each recomputation and attention kernel makes the hardware do."""
    f = step_flops(model, samples)
    lines = [_("{model}, one step on {n} sequences of {s} tokens ({tokens} tokens)").format(
        model=model.name, n=samples, s=model.seq, tokens=f"{f['tokens']:,}")]
    lines.append(rows_table([{_("FLOPs"): _(PART[k]), _("value"): flops(f[k]),
                              _("÷ model FLOPs"): f"{f[k] / f['model_flops']:.3f}"} for k in PART]))
    rows = []
    for attention, recompute in (("eager", "none"), ("eager", "selective"), ("flash", "none"), ("eager", "full")):
        g = step_flops(model, samples, recompute=recompute, attention=attention)
        rows.append({_("attention"): attention, _("recompute"): recompute, _("recomputed"): flops(g["recompute_flops"]),
                     _("hardware FLOPs (HFU counts)"): flops(g["hardware_flops"]),
                     _("÷ model FLOPs"): f"{g['hardware_flops'] / g['model_flops']:.3f}"})
    lines.append(rows_table(rows))
    return "\n".join(lines)


def roofline_text(rows: list, gpu_name: str) -> str:
    """A layer's GEMMs on one machine's roofline (`layer_roofline` rows)."""
    out = [{_("GEMM"): r["name"], "m×n×k": f"{r['m']:.0f}×{r['n']:.0f}×{r['k']:.0f}" + (
        f" ×{r['batch']}" if r["batch"] > 1 else ""), _("FLOP/B"): f"{r['intensity']:.1f}",
        _("bound"): _(BOUND[r["bound"]]), _("attainable"): f"{r['attainable_flops'] / 1e12:.3g} TFLOP/s"} for r in rows]
    balance = rows[0]["balance"]
    return "\n".join([_("{gpu}: balance point {balance} FLOP/B (peak FLOP/s ÷ memory bytes/s)").format(
        gpu=gpu_name, balance=f"{balance:.1f}"), rows_table(out)])


def machine_text(machine: dict) -> str:
    """This machine measured (`measure_machine`): its best matmul FLOP/s, its copy bandwidth, their balance."""
    return _("this machine ({threads} threads): best {dtype} matmul {flops} GFLOP/s (n = {n}), memory {bw} GB/s: "
             "balance point {balance} FLOP/B").format(threads=machine["threads"], dtype=machine["dtype"],
                                                      flops=f"{machine['peak_flops'] / 1e9:.1f}", n=machine["best_size"],
                                                      bw=f"{machine['bandwidth'] / 1e9:.1f}",
                                                      balance=f"{machine['balance']:.1f}")


def mfu_text(step: dict) -> str:
    """A tiny GPT's real step on this machine (`measure_gpt_step`): time, model FLOPs, MFU against the measured
    peak."""
    return _("a tiny GPT ({params} parameters, {tokens} tokens per step): {ms} ms per step, {flops} model FLOPs: "
             "MFU {mfu} of this machine's best matmul rate").format(
        params=f"{step['params']:,}", tokens=f"{step['tokens']:,}", ms=f"{step['seconds'] * 1e3:.1f}",
        flops=flops(step["model_flops"]), mfu=f"{step['mfu']:.1%}")
