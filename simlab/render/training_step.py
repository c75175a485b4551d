"""Lesson 5b's text, memory first: the tables nbval compares. One layer's activations term by term (Korthikanti's),
the same layer under each attention kernel and recomputation, what a real forward saved beside the formula,
recomputation's memory and time for a whole model, micro-batches and a real accumulation run, and the whole step
on one GPU. Every number is the engine's (`sim.training_step*`, `parity.training_step`); this module only lays
them out (a term's bytes over s·b·h is a column, not a model).

    >>> from simlab.sim.model import PRESETS
    >>> print(modes_text(PRESETS["gpt3-175b"]).splitlines()[1])
    mode                                  × s·b·h  one layer  all 96 layers
"""
from __future__ import annotations

from ..i18n import N_, _
from ..sim.training_step import microbatching, one_step
from ..sim.training_step_memory import TERMS, activation_terms
from .style import rows_table

GB, MB = 1e9, 1e6
MODES = (("eager", "none"), ("eager", "selective"), ("flash", "none"), ("eager", "full"))  # (attention, recompute)
# what each part of `one_step`'s memory and time is called where a learner reads it
LABEL = {"params": N_("weights"), "grads": N_("gradients"), "master": N_("fp32 master weights"),
         "adam_m": N_("Adam's m"), "adam_v": N_("Adam's v"), "layer_activations": N_("activations of the layers"),
         "working": N_("one layer rebuilt (full recompute)"), "embedding": N_("the embedding's output"),
         "logits": N_("final norm's input and fp32 logits"), "total": N_("total"),
         "cuda_context": N_("CUDA context"), "nccl": N_("NCCL's buffers"), "fragmentation": N_("the allocator's fragmentation"),
         "forward": N_("forward"), "backward": N_("backward"), "recompute": N_("recompute"),
         "output_layer": N_("output layer and loss"), "optimizer": N_("optimizer step")}
# what a real forward saves beyond the formula (`measure_activations`' "explained" keys)
EXPLAINED = {"layernorm_stats": N_("LayerNorm's mean and 1/std of each row"),
             "dropout_mask_dtype": N_("dropout masks kept in the data's dtype, not in 1 byte"),
             "flash_lse_fp32": N_("the log-sum-exp kept in fp32")}


def size(nbytes: float) -> str:
    """Bytes as a table shows them: GB (1e9) from a gigabyte on, MB from a megabyte, else bytes."""
    if nbytes >= GB:
        return f"{nbytes / GB:.2f} GB"
    return f"{nbytes / MB:.1f} MB" if nbytes >= MB else f"{nbytes:,.0f} B"


def mode_name(attention: str, recompute: str) -> str:
    return _("{attention} attention, recompute {recompute}").format(attention=attention, recompute=recompute)


def _shape(model, microbatch: int) -> str:
    return _("{model}: s = {s}, b = {b}, h = {h}, a = {a}, 16-bit").format(
        model=model.name, s=model.seq, b=microbatch, h=model.hidden, a=model.heads)


def terms_text(model, microbatch: int = 1, *, attention: str = "eager", recompute: str = "none") -> str:
    """One layer's stored tensors for one micro-batch, term by term: bytes over s·b·h, bytes, what the tensor is."""
    terms = activation_terms(model, microbatch, attention=attention, recompute=recompute)
    sbh = model.seq * microbatch * model.hidden
    rows = [{_("term"): name, _("× s·b·h"): f"{nbytes / sbh:.4g}", _("bytes"): size(nbytes),
             _("what it is"): _(TERMS[name])} for name, nbytes in terms.items() if nbytes]
    total = sum(terms.values())
    return "\n".join([_("{shape}, {mode}").format(shape=_shape(model, microbatch), mode=mode_name(attention, recompute)),
                      rows_table(rows),
                      _("one layer: {total} = s·b·h × {coef}").format(total=size(total), coef=f"{total / sbh:.4g}")])


def modes_text(model, microbatch: int = 1) -> str:
    """The same layer under each attention kernel and recomputation: s·b·h multiples, one layer, all L layers."""
    sbh = model.seq * microbatch * model.hidden
    rows = []
    for attention, recompute in MODES:
        layer = sum(activation_terms(model, microbatch, attention=attention, recompute=recompute).values())
        rows.append({_("mode"): mode_name(attention, recompute), _("× s·b·h"): f"{layer / sbh:.4g}",
                     _("one layer"): size(layer),
                     _("all {n} layers").format(n=model.layers): size(layer * model.layers)})
    return "\n".join([_shape(model, microbatch), rows_table(rows)])


def measured_text(measured: dict) -> str:
    """A real layer's forward (`parity.training_step.measure_activations`): each place that saved tensors, its
    bytes beside the formula's terms there and why they differ, then the totals and every difference, named."""
    rows = [{_("saved by"): r["site"], _("terms"): ", ".join(r["terms"]) or "—",
             _("formula"): f"{r['formula_bytes']:,.0f}", _("measured"): f"{r['measured_bytes']:,.0f}",
             _("why they differ"): _(r["why"]) if r.get("why") and r["difference"] else ""} for r in measured["rows"]]
    c = measured["config"]
    head = _("a real layer: b = {b}, s = {s}, h = {h}, a = {a}, {attention} attention, recompute {recompute}, "
             "{dtype}, dropout {dropout}").format(b=c["microbatch"], s=c["seq"], h=c["hidden"], a=c["heads"],
                                                  attention=c["attention"], recompute=c["recompute"],
                                                  dtype=c["dtype"], dropout=c["dropout"])
    lines = [head, rows_table(rows),
             _("saved for the backward: measured {measured} B, formula {formula} B").format(
                 measured=f"{measured['measured_bytes']:,.0f}", formula=f"{measured['formula_bytes']:,.0f}")]
    for key, nbytes in measured["explained"].items():
        if nbytes:
            lines.append(_("  + {what}: {nbytes} B").format(what=_(EXPLAINED.get(key, key)), nbytes=f"{nbytes:,.0f}"))
    lines.append(_("every term of the formula found, and measured = formula + the differences named: {ok}").format(
        ok="✓" if matches(measured) else "✗"))
    return "\n".join(lines)


def matches(measured: dict) -> bool:
    """Every term of the formula was saved, and nothing beyond the named differences."""
    return measured["unexplained_bytes"] == 0 and not measured["missing_terms"]


def recompute_text(model, gpu: str, microbatch: int, microbatches: int = 1, attention: str = "eager") -> str:
    """none / selective / full for a whole model on one GPU (`one_step`): activations, total, fits, and the time
    each phase takes, MFU and HFU."""
    rows = []
    for recompute in ("none", "selective", "full"):
        s = one_step(model, gpu, microbatch, microbatches, attention=attention, recompute=recompute)
        mem, t = s["memory"], s["time"]
        rows.append({_("recompute"): recompute, _("activations"): size(mem["activations"]), _("total"): size(mem["total"]),
                     _("fits"): _("yes") if mem["fits"] else _("no"), _("forward"): t["forward"],
                     _("backward"): t["backward"], _("recompute time"): t["recompute"], _("step"): t["step_seconds"],
                     "MFU": f"{s['mfu']:.1%}", "HFU": f"{s['hfu']:.1%}"})
    head = _("{model} on one {gpu}: {m} micro-batches of b = {b}, s = {s}, {attention} attention, mixed precision; "
             "usable {usable}").format(model=s["config"]["model"], gpu=s["config"]["gpu"], m=microbatches,
                                       b=microbatch, s=s["config"]["seq"], attention=attention,
                                       usable=size(s["memory"]["usable"]))
    return "\n".join([head, rows_table(rows)])


def recompute_measured_text(measured: dict) -> str:
    """A real layer under none / selective / full (`parity.training_step.measure_recompute`), without timings:
    saved bytes measured and by the formula, and the gradients' largest difference from no recomputation."""
    c = measured["config"]
    head = _("a real layer with torch.utils.checkpoint: b = {b}, s = {s}, h = {h}, a = {a}, {attention} attention, "
             "{dtype}, dropout {dropout}").format(b=c["microbatch"], s=c["seq"], h=c["hidden"], a=c["heads"],
                                                  attention=c["attention"], dtype=c["dtype"], dropout=c["dropout"])
    rows = [{_("recompute"): mode, _("saved, measured"): f"{r['saved_bytes']:,.0f} B",
             _("formula"): f"{r['formula_bytes']:,.0f} B",
             _("gradients vs no recompute"): _("identical") if r["max_abs_grad_diff"] == 0 else
             f"{r['max_abs_grad_diff']:.1e}"} for mode, r in measured["modes"].items()]
    return "\n".join([head, rows_table(rows)])


def recompute_timing_text(measured: dict) -> str:
    """The same runs' forward + backward seconds (measured: they change from run to run)."""
    modes = measured["modes"]
    rows = [{_("recompute"): mode, _("forward + backward"): r["seconds"],
             _("× none"): f"{r['seconds'] / modes['none']['seconds']:.2f}"} for mode, r in modes.items()]
    return rows_table(rows)


def microbatch_text(model, global_batch: int, dp: int, microbatch_sizes, zero: int = 0) -> str:
    """One global batch cut into micro-batches of each size b (`microbatching`): m, activation memory per GPU
    (against taking its samples at once), and the gradient bytes each rank sends per step."""
    rows = []
    for b in microbatch_sizes:
        mb = microbatching(model, global_batch, b, dp=dp, zero=zero)
        rows.append({"b": b, "m": mb["microbatches"], _("activations per GPU"): size(mb["activation_bytes"]),
                     _("all {n} at once").format(n=mb["samples_per_rank"]): size(mb["activation_bytes_whole_batch"]),
                     _("reductions per step"): mb["reductions_per_step"],
                     _("sent per rank per step"): size(mb["bytes_per_rank_per_step"]),
                     _("if reduced every micro-batch"): size(mb["bytes_if_reduced_every_microbatch"])})
    head = _("{model}: global batch B = b·m·dp = {B} sequences on dp = {dp}, ZeRO-{zero}").format(
        model=model.name, B=global_batch, dp=dp, zero=zero)
    return "\n".join([head, rows_table(rows)])


def accumulation_text(run: dict) -> str:
    """The real run (`parity.training_step.run_training_step`): dp processes accumulating m micro-batches against
    one process on the whole batch and against torch's DDP with no_sync, and the bytes of one all-reduce per step."""
    ok = lambda diff: "✓" if diff <= 1e-5 else "✗"  # noqa: E731 — a one-line local helper
    n = run["world_size"]
    losses = ", ".join(f"{x:.4f}" for x in run["losses"])
    reference = ", ".join(f"{x:.4f}" for x in run["reference_losses"])
    return "\n".join([
        _("{n} processes ({backend}) × {m} micro-batches of {b} = a global batch of {B}").format(
            n=n, backend=run["backend"], m=run["microbatches"], b=run["microbatch_size"], B=run["global_batch"]),
        _("loss per step: {losses}   one process, whole batch: {reference}").format(losses=losses, reference=reference),
        _("gradients within 1e-5 of one process on the whole batch: {ok}").format(
            ok=ok(run["max_abs_grad_diff_vs_reference"])),
        _("parameters after the last step within 1e-5 of it: {ok}; of torch's DDP with no_sync: {torch}").format(
            ok=ok(run["max_abs_diff_vs_reference"]), torch=ok(run["max_abs_diff_vs_torch"])),
        _("all-reduces per step: {k}; bytes each rank sent per step: {sent} (closed form: {closed})").format(
            k=run["allreduces_per_step"], sent=_listing(run["bytes_sent_per_rank"]),
            closed=_listing(run["bytes_per_rank_closed_form"])),
        _("all-reducing after every micro-batch instead: {k} all-reduces, {every} per step (closed form: {closed}), "
          "the same update within 1e-5: {ok}").format(
            k=run["allreduces_per_step_every_microbatch"], every=_listing(run["bytes_sent_every_microbatch"]),
            closed=_listing(run["bytes_every_microbatch_closed_form"]), ok=ok(run["max_abs_diff_every_microbatch"]))])


def _listing(per_rank) -> str:
    return ", ".join(f"{n:,}" for n in per_rank)


def step_text(step: dict) -> str:
    """One step on one GPU (`one_step`): where the memory goes against what the GPU can give, and the time."""
    c, mem, t = step["config"], step["memory"], step["time"]
    state = ("params", "grads", "master", "adam_m", "adam_v")
    acts = ("layer_activations", "working", "embedding", "logits")
    reserve = ("cuda_context", "nccl", "fragmentation")
    lines = [_("{model} on one {gpu}: b = {b}, m = {m}, s = {s}, {attention} attention, recompute {recompute}, "
               "{precision}").format(model=c["model"], gpu=c["gpu"], b=c["microbatch"], m=c["microbatches"],
                                     s=c["seq"], attention=c["attention"], recompute=c["recompute"],
                                     precision=c["precision"])]
    rows = [{_("memory"): _(LABEL[part]), _("bytes"): size(mem[part])} for part in state + acts + ("total",)]
    rows += [{_("memory"): _("GPU memory as torch reports it"), _("bytes"): size(mem["capacity"])}]
    rows += [{_("memory"): "  − " + _(LABEL[part]), _("bytes"): size(mem[part])} for part in reserve]
    rows += [{_("memory"): _("usable"), _("bytes"): size(mem["usable"])}]
    lines += [rows_table(rows)]
    lines += [_("fits: {free} free").format(free=size(mem["free"])) if mem["fits"] else
              _("does not fit: {over} over the usable memory").format(over=size(-mem["free"]))]
    phases = ("forward", "backward", "recompute", "output_layer", "optimizer")
    lines += [rows_table([{_("time"): _(LABEL[p]), _("seconds"): t[p]} for p in phases]
                         + [{_("time"): _("step"), _("seconds"): t["step_seconds"]}])]
    lines += [_("MFU {mfu}, HFU {hfu}, {tps} tokens/s").format(mfu=f"{step['mfu']:.1%}", hfu=f"{step['hfu']:.1%}",
                                                                tps=f"{t['tokens_per_second']:,.0f}")]
    return "\n".join(lines)
