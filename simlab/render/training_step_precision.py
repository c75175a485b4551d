"""Lesson 5b's text about precision: the number formats (bits, range, the smallest number each can hold), the
recipes' bytes per parameter by what they hold, measured on real tensors beside the recipe, what fp16 does to
small gradients with and without loss scaling, and what this CPU's torch does with FP8. The numbers are the
engine's (`sim.training_step_memory`, `parity.training_step`); this module lays them out.

    >>> print(recipes_text().splitlines()[1])
    fp32              4        4          0                    4         4         16
"""
from __future__ import annotations

from ..i18n import _
from ..sim.training_step_memory import FORMATS, LOSS_SCALING, RECIPES, STATE_PARTS, number_format, state_recipe
from .style import rows_table
from .training_step import LABEL


def formats_text() -> str:
    """Each format's bits and what they give: the largest number, the smallest normal and subnormal one, and the
    gap after 1 (its precision); then why fp16 needs loss scaling and bf16 does not."""
    rows = []
    for name in FORMATS:
        f = number_format(name)
        rows.append({_("format"): name, _("bytes"): f["bytes"], _("exponent bits"): f["exponent_bits"],
                     _("mantissa bits"): f["mantissa_bits"], _("largest"): f"{f['max']:.4g}",
                     _("smallest normal"): f"{f['smallest_normal']:.3g}",
                     _("smallest subnormal"): f"{f['smallest_subnormal']:.3g}", _("gap after 1"): f"{f['epsilon']:.3g}"})
    return "\n".join([rows_table(rows)] + [_("{name}: {why}").format(name=name, why=_(why))
                                          for name, why in LOSS_SCALING.items()])


def recipes_text(measured: dict | None = None) -> str:
    """Bytes per parameter of each recipe by what they hold; with `measured` ({precision: bytes per parameter by
    part, from real tensors}), the real tensors' bytes beside each."""
    rows = []
    for precision in RECIPES:
        recipe = state_recipe(precision)
        row = {_("recipe"): precision} | {_(LABEL[p]): recipe[p] for p in STATE_PARTS} | {_("total"): recipe["total"]}
        if measured is not None:
            real = measured.get(precision)
            row[_("real tensors")] = f"{real['total_per_param']:g}" if real else "—"
        rows.append(row)
    return rows_table(rows)


def recipe_lines() -> str:
    """What each recipe holds, in words."""
    return "\n".join(_(what) for what in RECIPES.values())


def loss_scaling_text(measured: dict) -> str:
    """`measure_loss_scaling`: how many of a model's gradient elements became 0, and the largest relative error,
    in fp32, under fp16 and bf16 autocast, and under fp16 with the loss scaled (`GradScaler`)."""
    names = {"fp32": "fp32", "fp16": "fp16", "fp16_scaled": _("fp16, loss × {scale:g}").format(scale=measured["scale"]),
             "bf16": "bf16"}
    rows = [{_("gradients in"): names[k], _("zero"): f"{measured['zeros'][k]:,} / {measured['grad_elements']:,}",
             _("largest relative error"): f"{measured['max_rel_error'][k]:.1e}"} for k in names]
    head = _("a loss {factor:.3g} × the MSE (small gradients, as in a large model); fp16's smallest number is {tiny:.3g}"
             ).format(factor=measured["loss_factor"], tiny=measured["fp16_smallest_subnormal"])
    return "\n".join([head, rows_table(rows)])


def fp8_text(support: dict) -> str:
    """`fp8_support`: what this CPU's torch does with float8, measured."""
    yes = {True: _("runs"), False: _("refused")}
    lines = [_("float8 dtypes: {dtypes}").format(dtypes=", ".join(support["dtypes"])),
             _("1000 stored in E4M3 reads back as {value:g} (its largest number: it saturates)").format(
                 value=support["e4m3_of_1000"]),
             _("a @ b on float8 tensors: {matmul}; torch._scaled_mm: {scaled}").format(
                 matmul=yes[support["matmul"]], scaled=yes[support["scaled_mm"]]),
             _(support["note"])]
    return "\n".join(lines)
