"""Lesson 5b's memory of one training step, named: what each stored activation of a transformer layer is, what
each byte of model state per parameter holds, and the number formats behind the precision recipes.

Teaches (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models", §4.1):
- a layer keeps, for its backward, every tensor an operation needs to compute its gradient: the norms' inputs,
  each GEMM's input, Q, K and V, the softmax's output, GeLU's input, and a byte per element for each dropout mask.
  For GPT in 16 bits that is sbh(34 + 5as/h) bytes per layer and micro-batch (`activation_terms`, whose sum is
  lesson 6's `hybrid_memory.layer_activation_bytes`: the two share one table, `hybrid_memory.activation_terms`);
- model states per parameter (`state_recipe`): fp32 training keeps 4 + 4 bytes of weight and gradient and
  Adam's two fp32 moments (8); mixed precision keeps 16-bit weights and gradients plus an fp32 master copy and
  the moments, 2 + 2 + 12 = 16 B (the ZeRO paper); Megatron accumulates gradients in fp32, 2 + 4 + 12 = 18 B;
  FP8 keeps each weight in FP8 twice (itself and its transpose) — the sums are lesson 3's and 6's `STATE_BYTES`;
- why fp16 needs loss scaling and bf16 does not (`number_format`, `LOSS_SCALING`): the exponent's bits set the
  smallest number a format holds; fp16's 5 give 2⁻²⁴ ≈ 6e-8, under which small gradients become 0.

    >>> from simlab.sim.model import PRESETS
    >>> terms = activation_terms(PRESETS["gpt3-175b"], attention="eager")
    >>> sbh = 2048 * 1 * 12288
    >>> sum(terms.values()) == sbh * (34 + 5 * 96 * 2048 / 12288), terms["gelu_input"] == 8 * sbh
    (True, True)
    >>> state_recipe("mixed")
    {'params': 2, 'grads': 2, 'master': 4, 'adam_m': 4, 'adam_v': 4, 'total': 16}
"""
from __future__ import annotations

from .._checks import check_choice
from .hybrid import ACTIVATION_BYTES, LAYER_RECOMPUTE, PRECISIONS, STATE_BYTES, Plan, check_plan
from .hybrid_memory import activation_terms as _terms
from .hybrid_memory import knobs
from .message import Message
from .model import Transformer, preset

# what each stored tensor is, in the order one layer's forward saves them (the keys of
# `hybrid_memory.activation_terms`); "s·b·h" counts elements of one (s, b, h) tensor
TERMS = {
    "ln1_input": Message("the layer's input, kept by the first LayerNorm (2 bytes per element)"),
    "qkv_input": Message("the first LayerNorm's output, the input of the Q, K, V projection"),
    "q": Message("Q, an input of QKᵀ"),
    "k": Message("K, the other input of QKᵀ (kv_heads/heads of Q's size with grouped-query attention)"),
    "v": Message("V, an input of the attention over V"),
    "softmax_output": Message("the softmax's output, a·s² per sequence (eager attention only)"),
    "softmax_dropout_mask": Message("the mask of the dropout on the attention probabilities, 1 byte each"),
    "softmax_dropout_output": Message("the dropped-out probabilities, the other input of the attention over V"),
    "flash_lse": Message("FlashAttention's log-sum-exp of each row, 4 bytes per head and token (no s² tensor)"),
    "out_proj_input": Message("the attention's output, the input of the output projection"),
    "attention_dropout_mask": Message("the mask of the dropout after the attention block, 1 byte each"),
    "ln2_input": Message("the second LayerNorm's input (the residual stream after attention)"),
    "fc1_input": Message("the second LayerNorm's output, the input of the MLP's first GEMM"),
    "gelu_input": Message("the first GEMM's output, GeLU's input (4h wide; gated: the gate's and up's outputs)"),
    "gelu_output": Message("GeLU's output, the input of the MLP's second GEMM"),
    "mlp_dropout_mask": Message("the mask of the dropout after the MLP, 1 byte each"),
}
# Korthikanti's three groups: the attention block (11sbh + 5as²b for GPT), the MLP (19sbh), the norms' inputs (4sbh)
BLOCK = {name: "norms" if name in ("ln1_input", "ln2_input") else "attention" if i < 11 else "mlp"
         for i, name in enumerate(TERMS)}

STATE_PARTS = ("params", "grads", "master", "adam_m", "adam_v")
ADAM_MOMENT_BYTES = 4  # Adam's m and v, fp32 in every recipe lesson 5b draws
MOMENT_BYTES = {"bf16-optimizer": 2}  # lesson 6's recipe with bf16 moments (and master copy): `hybrid.STATE_BYTES`
RECIPES = {
    "fp32": Message("fp32: weights (the master copy themselves), gradients, Adam's m and v, 4 bytes each"),
    "mixed": Message("bf16 or fp16 mixed precision: 16-bit weights and gradients, fp32 master weights, m and v"),
    "mixed-fp32-grads": Message("Megatron's mixed precision: 16-bit weights, gradients accumulated in fp32"),
    "fp8": Message("FP8 GEMMs (Transformer Engine): each weight in FP8 and its transpose, fp32 gradients and "
                   "optimizer"),
}
LOSS_SCALING = {
    "fp32": Message("fp32 needs no loss scaling: 8 exponent bits reach 2⁻¹⁴⁹"),
    "bf16": Message("bf16 needs no loss scaling: it keeps fp32's 8 exponent bits (smallest normal 2⁻¹²⁶), "
                    "trading mantissa bits (7) for range"),
    "fp16": Message("fp16 needs loss scaling: its 5 exponent bits stop at 2⁻²⁴ ≈ 6e-8, and smaller gradients "
                    "round to 0; multiplying the loss by S (e.g. 2¹⁶) lifts them into range, and the optimizer "
                    "divides the fp32 gradients by S again"),
    "fp8": Message("FP8 needs a scale per tensor: E4M3 (forward) reaches only 448 and E5M2 (gradients) 57344, so "
                   "each GEMM input is scaled into range from its recent maximum (Transformer Engine's delayed "
                   "scaling)"),
}
# (exponent bits, mantissa bits, has infinities): IEEE 754 formats and OCP's FP8 (E4M3 "fn": no infinities, its top
# exponent holds finite numbers, only S.1111.111 is NaN)
FORMATS = {"fp32": (8, 23, True), "bf16": (8, 7, True), "fp16": (5, 10, True), "fp8-e4m3": (4, 3, False),
           "fp8-e5m2": (5, 2, True)}


def check_model(model) -> Transformer:
    """A `Transformer`, or the preset a name names; anything else refused in one line."""
    if isinstance(model, str):
        return preset(model)
    if not isinstance(model, Transformer):
        raise ValueError(f"model={model!r}: must be a preset name or a simlab.sim.model.Transformer")
    return model


def activation_terms(model: Transformer, microbatch: int = 1, *, attention: str = "eager", recompute: str = "none",
                     tp: int = 1, sequence_parallel: bool = False, precision: str = "mixed") -> dict:
    """{term: bytes} one layer keeps for one micro-batch of `microbatch` sequences on one TP rank of `tp`, in the
    order of `TERMS`; 0 where a knob removes the tensor. In `precision`'s activation bytes: fp32 doubles every
    term (masks too: the model's simplification), FP8 saves the four GEMMs' inputs in one byte."""
    model = check_model(model)
    check_choice("recompute", recompute, LAYER_RECOMPUTE)  # lesson 5b's layer: no op-level policy
    plan = Plan(tp=tp, microbatch=microbatch, sequence_parallel=sequence_parallel, recompute=recompute,
                attention=attention, precision=precision)
    check_plan(model, plan, gpus=tp, global_batch=microbatch)  # one line naming what cannot be
    scale = ACTIVATION_BYTES[precision] / 2  # the table counts 16-bit values
    terms = _terms(model, knobs(plan, model), fp8=precision == "fp8")
    return {name: float(value) * scale for name, value in terms.items()}


def state_recipe(precision: str) -> dict:
    """Bytes per parameter of each kind of model state: params, grads, master (the fp32 copy the optimizer
    updates; none in fp32 training, where the weights are it), adam_m, adam_v, and their total — lesson 3's and
    lesson 6's `STATE_BYTES`, the optimizer's share split into master + Adam's two fp32 moments."""
    check_choice("precision", precision, PRECISIONS)
    param, grad, optimizer = STATE_BYTES[precision]
    moment = MOMENT_BYTES.get(precision, ADAM_MOMENT_BYTES)
    parts = dict(zip(STATE_PARTS, (param, grad, optimizer - 2 * moment, moment, moment)))
    return parts | {"total": sum(parts.values())}


def number_format(name: str) -> dict:
    """A floating-point format from its bits: exponent_bits, mantissa_bits, bytes, max, smallest_normal,
    smallest_subnormal, epsilon (the gap after 1). Bias 2^(e−1) − 1; the largest exponent is reserved for inf
    and NaN, except in FP8 E4M3, where only the all-ones pattern is NaN."""
    check_choice("name", name, tuple(FORMATS))
    e, m, infinities = FORMATS[name]
    bias = 2 ** (e - 1) - 1
    top = (2 - 2.0 ** -m) * 2.0 ** bias if infinities else (2 - 2.0 ** (1 - m)) * 2.0 ** (bias + 1)
    normal = 2.0 ** (1 - bias)
    return {"exponent_bits": e, "mantissa_bits": m, "bytes": (1 + e + m) // 8, "max": top, "smallest_normal": normal,
            "smallest_subnormal": normal * 2.0 ** -m, "epsilon": 2.0 ** -m}
