"""Lesson 5b's exercises. Predict, then run: the learner writes Korthikanti's count of one layer's activations as
a function, and the memory of a whole step from it; a real layer's forward then measures what torch saved.

- `check_layer_formula(fn)`: `fn(s, b, h, a, attention, recompute)` → bytes one GPT layer keeps (16-bit, dropout,
  no TP), graded EXACTLY against the engine's term table (`sim.training_step_memory.activation_terms`) on shapes
  and knob choices the lesson never printed. A wrong answer gets the concept it missed — flash's missing s²
  scores, what selective or full recomputation keeps, 2 bytes per element, the micro-batch, or the one tensor it
  left out or counted twice (by its description) — never the value. An answer that calls simlab.sim is refused.
- `check_step_prediction(fn)`: `fn(params, layers, s, b, h, a, attention, recompute, bytes_per_param)` → the
  step's two big parts, model states + every layer's activations, against `one_step` (the model lesson 6 uses)
  on presets and knobs the lesson did not print, exactly; and whether each fits its GPU.
- `check_measured(fn, real)`: the prediction for `REAL_LAYER` (a shape the lesson never ran) beside what a real
  forward saved (`parity.training_step.measure_activations(**REAL_LAYER)`, run after the answer is written):
  equal to the formula exactly, and measured = formula + the differences the engine names.
The gradient-accumulation exercise is `grading.training_step_accumulate.check_accumulation`.
"""
from __future__ import annotations

import os
from pathlib import Path

from ..i18n import _
from ..render.training_step import EXPLAINED, matches
from ..sim.model import Transformer
from ..sim.training_step import one_step
from ..sim.training_step_memory import TERMS, activation_terms, state_recipe
from .common import fail, first_call
from .training_step_accumulate import check_accumulation  # noqa: F401 — re-exported: the exercise imports both here

SIMLAB = str(Path(activation_terms.__code__.co_filename).parent.parent) + os.sep  # simlab/: what an answer must not
GRADING = str(Path(__file__).resolve().parent) + os.sep  # call (its model, its measurements), but for the grader
KNOBS = (("eager", "none"), ("eager", "selective"), ("flash", "none"), ("flash", "selective"), ("eager", "full"),
         ("flash", "full"))
SHAPES = ((100, 2, 64, 8), (1000, 5, 120, 6), (24, 3, 48, 4), (512, 1, 256, 16), (4096, 2, 5120, 40))  # s, b, h, a
REAL_LAYER = {"microbatch": 3, "seq": 20, "hidden": 24, "heads": 3, "attention": "eager", "recompute": "none"}
# the step: (preset, gpu, b, attention, recompute, precision), none of them printed by the lesson
STEPS = (("megatron-3.6b-2021", "a100-80gb", 2, "eager", "selective", "mixed"),
         ("megatron-3.6b-2021", "h100-80gb", 4, "flash", "none", "mixed"),
         ("megatron-7.5b-2021", "h200", 2, "eager", "full", "mixed"),
         ("megatron-7.5b-2021", "b200", 2, "eager", "none", "mixed"),
         ("megatron-3.6b-2021", "a100-40gb", 1, "flash", "selective", "mixed-fp32-grads"),
         ("megatron-1.7b-2021", "a100-40gb", 2, "flash", "none", "mixed"))


def _calls_into_sim(fn, *args):
    """`fn(*args)`, and the first simlab function it called outside simlab.grading (None if none): an answer that
    hands the question to the model (or the measurement) it is graded against has not been written."""
    return first_call(fn, lambda code: f"{Path(code.co_filename).stem}.{code.co_name}"
                      if code.co_filename.startswith(SIMLAB) and not code.co_filename.startswith(GRADING) else None,
                      *args)


def gpt_layer(s: int, h: int, a: int) -> Transformer:
    """A GPT layer of this shape (4h MLP, dropout), as the engine's table takes it."""
    return Transformer("exercise", 1, h, a, seq=s, vocab=64)


def truth(s, b, h, a, attention, recompute) -> dict:
    return activation_terms(gpt_layer(s, h, a), b, attention=attention, recompute=recompute)


def _number(title: str, case: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        fail(title, case, _("returned {value}: return a number of bytes").format(value=f"{value!r:.60}"))
    return float(value)


def _hint(said: float, case: tuple) -> str:
    """The concept a wrong layer count missed (never the value)."""
    s, b, h, a, attention, recompute = case
    right = sum(truth(*case).values())
    eager = sum(truth(s, b, h, a, "eager", "none").values())
    selective = sum(truth(s, b, h, a, "eager", "selective").values())
    if recompute == "full":
        return _("full recomputation keeps only each layer's input for the backward, and reruns the whole forward")
    if attention == "flash" and said == eager:
        return _("FlashAttention never writes the s × s scores to memory: no softmax output, no dropout mask of it")
    if attention == "flash" and said == selective:
        return _("FlashAttention still keeps one number per head and token for its backward: the log-sum-exp of "
                 "each row of scores, in fp32")
    if recompute == "selective" and said == eager:
        return _("selective recomputation drops exactly the s² tensors (the softmax's output, its dropout mask "
                 "and the dropped-out probabilities) and recomputes them in the backward")
    if attention == "eager" and recompute == "none" and said == selective:
        return _("eager attention stores the s × s scores: the softmax's output, its dropout mask and the "
                 "dropped-out probabilities, a·s² elements per sequence each")
    if said == 2 * right:
        return _("activations are 16-bit: 2 bytes per element, and a dropout mask 1 byte per element")
    if b > 1 and said * b == right:
        return _("every stored tensor holds the whole micro-batch: each grows with b")
    missing = [n for n, v in truth(*case).items() if v and abs(right - said) == v]
    if len(missing) == 1:
        return _("off by exactly one tensor, {what}: left out, or counted twice?").format(what=_(TERMS[missing[0]]))
    if missing:
        return _("off by exactly one (s, b, h) tensor: which of the layer's saved tensors did you leave out, or count "
                 "twice?")
    return _("not Korthikanti's count: list every tensor the backward needs, its elements and bytes per element")


def check_layer_formula(fn) -> None:
    """Grade `fn(s, b, h, a, attention, recompute)` against the engine's table on shapes the lesson never printed."""
    title = _("a layer's activations")
    cases = [shape + knob for shape in SHAPES for knob in KNOBS]
    for case in cases:
        said, called = _calls_into_sim(fn, *case)
        label = "s={}, b={}, h={}, a={}, {}, recompute {}".format(*case)
        if called:
            fail(title, label, _("it calls simlab's own model ({name}): write the formula yourself").format(name=called))
        said = _number(title, label, said)
        if said != sum(truth(*case).values()):
            fail(title, label, _hint(said, case))
    print(_("{title}: ✓ {detail}").format(title=title, detail=_(
        "{n} shapes and knob choices, exactly Korthikanti's count (eager, flash; none, selective, full)").format(
        n=len(cases))))


def step_parts(step: dict) -> float:
    """What the step's prediction counts: weights, gradients and optimizer state, and every layer's activations."""
    mem = step["memory"]
    return mem["params"] + mem["grads"] + mem["optimizer"] + mem["layer_activations"]


def check_step_prediction(fn, fits) -> None:
    """Grade `fn(params, layers, s, b, h, a, attention, recompute, bytes_per_param)` against `one_step` on `STEPS`,
    and `fits` (one True/False per step of `STEPS`) against whether each whole step fits its GPU."""
    from ..sim.model import PRESETS
    title = _("one step's memory")
    if not isinstance(fits, (list, tuple)) or len(fits) != len(STEPS) or any(not isinstance(f, bool) for f in fits):
        fail(title, "fits", _("fits={value}: give a list of {n} True/False, one per step").format(
            value=f"{fits!r:.60}", n=len(STEPS)))
    for i, (name, gpu, b, attention, recompute, precision) in enumerate(STEPS):
        m = PRESETS[name]
        args = (m.params, m.layers, m.seq, b, m.hidden, m.heads, attention, recompute,
                state_recipe(precision)["total"])
        said, called = _calls_into_sim(fn, *args)
        label = f"{name}, b={b}, {attention}, recompute {recompute}, {precision}"
        if called:
            fail(title, label, _("it calls simlab's own model ({name}): write the formula yourself").format(name=called))
        said = _number(title, label, said)
        step = one_step(m, gpu, b, attention=attention, recompute=recompute, precision=precision)
        right = step_parts(step)
        if said != right:  # which part is wrong: with no parameters the answer is its activations alone
            acts = _calls_into_sim(fn, 0, *args[1:])[0]
            fail(title, label, _("the activations: every one of the L layers keeps its own, for one micro-batch of b "
                                 "sequences") if acts != step["memory"]["layer_activations"] else
                 _("the model states: parameters × bytes per parameter of the recipe"))
        if fits[i] is not step["memory"]["fits"]:
            fail(title, label, _("fits={said}: compare the whole step, activations around the layers included, "
                                 "with what the GPU can give tensors (its usable memory), not its datasheet "
                                 "size").format(said=fits[i]))
    print(_("{title}: ✓ {detail}").format(title=title, detail=_(
        "{n} steps (presets, GPUs, b, attention, recompute, precision): model states and every layer's activations "
        "exactly as lesson 6's model counts them, and which fit their GPU").format(n=len(STEPS))))


def check_measured(fn, real: dict) -> None:
    """Your count for `REAL_LAYER` beside what a real forward saved (`measure_activations(**REAL_LAYER)`)."""
    title = _("prediction vs a real layer")
    r = REAL_LAYER
    case = (r["seq"], r["microbatch"], r["hidden"], r["heads"], r["attention"], r["recompute"])
    said, _called = _calls_into_sim(fn, *case)
    if not isinstance(real, dict) or "rows" not in real or any(
            real.get("config", {}).get(k) != v for k, v in r.items()):
        fail(title, _("real run"), _("pass the result of measure_activations(**REAL_LAYER), run after your answer"))
    said = _number(title, _("your count"), said)
    if said != real["formula_bytes"]:
        fail(title, _("your count"), _hint(said, case))
    if not matches(real):
        fail(title, _("real run"), _("the measurement is not the formula plus its named differences: run it again"))
    extra = real["measured_bytes"] - said
    print(_("{title}: ✓ {detail}").format(title=title, detail=_(
        "you predicted {said} B; the real forward saved {measured} B: your count plus {extra} B the formula leaves "
        "out ({names})").format(
        said=f"{said:,.0f}", measured=f"{real['measured_bytes']:,.0f}", extra=f"{extra:,.0f}",
        names=_(", ").join(_(EXPLAINED[k]) for k, v in real["explained"].items() if v) or _("nothing"))))
