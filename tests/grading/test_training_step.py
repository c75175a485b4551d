"""Lesson 5b's graders. Gradient accumulation, on real gloo ranks: the right step passes; each classic bug — no
division by m, gradients zeroed every micro-batch, never zeroed, all-reduced every micro-batch, summed over
ranks without dividing by the world size, no optimizer step — is refused in one line with its own hint and
never the expected value; an answer that runs simlab's own code is refused; the stub's NotImplementedError
comes through as itself. Predict, then run: Korthikanti's count graded exactly on unseen shapes, each wrong count
told the concept it missed and never the value, asking simlab's model or measurement refused, a step's memory
and whether it fits, the count beside a real layer; and no target printed by the lesson beforehand."""
import pytest
import torch
import torch.distributed as dist
from notebook_cells import texts  # tests/notebook_cells.py: one reader of stored notebooks

from simlab.grading.training_step import (
    REAL_LAYER,
    SHAPES,
    STEPS,
    check_layer_formula,
    check_measured,
    check_step_prediction,
    step_parts,
)
from simlab.grading.training_step_accumulate import VARIANTS, check_accumulation, micro_batches, reference
from simlab.sim.model import PRESETS
from simlab.sim.training_step import one_step
from simlab.sim.training_step_memory import activation_terms


def right(model, micro_batches, loss_fn, optimizer):
    """The exercise's answer, written out: zero once, 1/m per micro-batch, one all-reduce, one step."""
    optimizer.zero_grad()
    m = len(micro_batches)
    for x, y in micro_batches:
        (loss_fn(model(x), y) / m).backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()
    optimizer.step()


def flat_buffer(model, micro_batches, loss_fn, optimizer):
    """Also right: one all-reduce of every gradient in one flat buffer, and .grad cleared after the step."""
    m = len(micro_batches)
    for x, y in micro_batches:
        (loss_fn(model(x), y) / m).backward()
    flat = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    dist.all_reduce(flat)
    flat /= dist.get_world_size()
    offset = 0
    for p in model.parameters():
        p.grad.copy_(flat[offset:offset + p.numel()].view_as(p))
        offset += p.numel()
    optimizer.step()
    optimizer.zero_grad()


def no_division(model, micro_batches, loss_fn, optimizer):
    optimizer.zero_grad()
    for x, y in micro_batches:
        loss_fn(model(x), y).backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()
    optimizer.step()


def zero_every_microbatch(model, micro_batches, loss_fn, optimizer):
    m = len(micro_batches)
    for x, y in micro_batches:
        optimizer.zero_grad()
        (loss_fn(model(x), y) / m).backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()
    optimizer.step()


def never_zero(model, micro_batches, loss_fn, optimizer):
    m = len(micro_batches)
    for x, y in micro_batches:
        (loss_fn(model(x), y) / m).backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()
    optimizer.step()


def all_reduce_every_microbatch(model, micro_batches, loss_fn, optimizer):
    optimizer.zero_grad()
    m = len(micro_batches)
    for x, y in micro_batches:
        (loss_fn(model(x), y) / m).backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= dist.get_world_size()
    optimizer.step()


def no_mean_over_ranks(model, micro_batches, loss_fn, optimizer):
    optimizer.zero_grad()
    m = len(micro_batches)
    for x, y in micro_batches:
        (loss_fn(model(x), y) / m).backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
    optimizer.step()


def no_all_reduce(model, micro_batches, loss_fn, optimizer):
    optimizer.zero_grad()
    m = len(micro_batches)
    for x, y in micro_batches:
        (loss_fn(model(x), y) / m).backward()
    optimizer.step()


def no_step(model, micro_batches, loss_fn, optimizer):
    optimizer.zero_grad()
    m = len(micro_batches)
    for x, y in micro_batches:
        (loss_fn(model(x), y) / m).backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()


def delegates(model, micro_batches, loss_fn, optimizer):
    from simlab.exec.models import loss_fn as simlabs_loss
    optimizer.zero_grad()
    m = len(micro_batches)
    for x, y in micro_batches:
        (simlabs_loss(model(x), y) / m).backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()
    optimizer.step()


def test_the_variants_are_not_the_lessons_and_need_m_and_dp():
    assert any(m > 1 and dp == 1 for dp, m, _ in VARIANTS) and any(m > 1 and dp > 1 for dp, m, _ in VARIANTS)


def test_the_reference_is_one_big_batch_and_equals_the_mean_of_the_micro_batches():
    """The grader's ground truth: the whole batch's gradient is the mean of every micro-batch's (each a mean
    over b samples), and the micro-batches tile the global batch rank by rank."""
    dp, m, b = 2, 3, 2
    ref = reference(dp, m, b)
    for step in ref:
        mean = sum(g for rank in step["micro"] for g in rank) / (dp * m)
        assert float((mean - step["grad"]).abs().max()) < 1e-6
    rows = torch.cat([x for r in range(dp) for x, _ in micro_batches(0, r, dp, m, b)])
    assert rows.shape[0] == dp * m * b and len({tuple(row.tolist()) for row in rows}) == dp * m * b


@pytest.mark.parametrize("answer", [right, flat_buffer])
def test_right_answers_pass(answer, capsys):
    check_accumulation(answer)
    out = capsys.readouterr().out
    assert out.startswith("gradient accumulation: ✓ dp×m×b = 1×4×2, 2×3×2, 2×2×3 on real processes")


@pytest.mark.parametrize("answer, hint", [
    (no_division, "each micro-batch's loss is a mean over its b samples"),
    (zero_every_microbatch, "zeroing the gradients inside the loop throws the earlier micro-batches away"),
    (never_zero, "the second step applied the first step's gradient again"),
    (all_reduce_every_microbatch, "all-reducing every micro-batch sends m times the bytes"),
    (no_mean_over_ranks, "divide by the world size for the mean"),
    (no_all_reduce, "the ranks never combined all their gradients"),
    (no_step, "the parameters did not move: call optimizer.step() once"),
    (delegates, "calls simlab's own models.loss_fn"),
])
def test_each_classic_bug_is_refused_with_its_own_hint(answer, hint, capsys):
    with pytest.raises(AssertionError):
        check_accumulation(answer)
    out = capsys.readouterr().out.strip()
    assert out.count("\n") == 0 and out.startswith("gradient accumulation: ✗ dp=") and hint in out, out


def test_the_stub_comes_through_and_a_non_function_is_refused(capsys):
    def stub(model, micro_batches, loss_fn, optimizer):
        raise NotImplementedError("exercise: write your answer here")
    with pytest.raises(NotImplementedError):
        check_accumulation(stub)
    with pytest.raises(AssertionError):
        check_accumulation(None)
    assert "pass your step function" in capsys.readouterr().out


# ---------------------------------------------------------------- predict, then run: a layer, a step, a real layer

def layer(s, b, h, a, attention, recompute):
    """The answer written out: Korthikanti's count, 16-bit, dropout, no TP."""
    sbh = s * b * h
    if recompute == "full":
        return 2 * sbh
    if attention == "flash":
        return 34 * sbh + 4 * a * s * b
    return 34 * sbh + (5 * a * s * s * b if recompute == "none" else 0)


def step(params, layers, s, b, h, a, attention, recompute, bytes_per_param):
    return params * bytes_per_param + layers * layer(s, b, h, a, attention, recompute)


FITS = [one_step(name, gpu, b, attention=at, recompute=rc, precision=pr)["memory"]["fits"]
        for name, gpu, b, at, rc, pr in STEPS]


def refused(capsys, check, *args) -> str:
    with pytest.raises(AssertionError):
        check(*args)
    out = capsys.readouterr().out.strip()
    assert out.count("\n") == 0 and "✗" in out, out
    return out


def test_the_layer_formula_is_graded_exactly_and_the_right_one_passes(capsys):
    check_layer_formula(layer)
    assert capsys.readouterr().out.startswith("a layer's activations: ✓ 30 shapes and knob choices")
    off_by_one = lambda *case: layer(*case) + 1  # noqa: E731 — a one-line wrong answer
    assert "not Korthikanti's count" in refused(capsys, check_layer_formula, off_by_one)


@pytest.mark.parametrize("wrong, hint", [
    (lambda s, b, h, a, at, rc: layer(s, b, h, a, "eager", rc), "FlashAttention never writes the s × s scores"),
    (lambda s, b, h, a, at, rc: 2 * s * b * h if rc == "full" else 34 * s * b * h + (
        5 * a * s * s * b if at == "eager" and rc == "none" else 0), "FlashAttention still keeps one number per head"),
    (lambda s, b, h, a, at, rc: layer(s, b, h, a, at, "none" if rc == "selective" else rc),
     "selective recomputation drops exactly the s² tensors"),
    (lambda s, b, h, a, at, rc: layer(s, b, h, a, at, "selective" if rc == "none" else rc),
     "eager attention stores the s × s scores"),
    (lambda s, b, h, a, at, rc: 2 * layer(s, b, h, a, at, rc), "activations are 16-bit"),
    (lambda s, b, h, a, at, rc: layer(s, 1, h, a, at, rc), "each grows with b"),
    (lambda s, b, h, a, at, rc: layer(s, b, h, a, at, rc) - a * s * s * b, "off by exactly one tensor, the mask of "
                                                                           "the dropout on the attention probabilities"),
    (lambda s, b, h, a, at, rc: layer(s, b, h, a, at, rc) + 2 * s * b * h, "off by exactly one (s, b, h) tensor"),
    (lambda s, b, h, a, at, rc: 4 * s * b * h if rc == "full" else layer(s, b, h, a, at, rc),
     "full recomputation keeps only"),
    (lambda s, b, h, a, at, rc: sum(activation_terms(PRESETS["gpt3-175b"].with_(seq=s, hidden=h, heads=a), b,
                                                     attention=at, recompute=rc).values()), "calls simlab's own model"),
    (lambda *case: "12", "return a number of bytes"),
])
def test_each_wrong_layer_formula_gets_the_concept_it_missed_never_the_value(wrong, hint, capsys):
    out = refused(capsys, check_layer_formula, wrong)
    assert hint in out, out
    right = [f"{sum(activation_terms(PRESETS['gpt3-175b'].with_(seq=s, hidden=h, heads=a), b).values()):,.0f}"
             for s, b, h, a in SHAPES]
    assert not any(value in out or value.replace(",", "") in out for value in right)


def test_asking_the_measurement_is_refused_too(capsys):
    from simlab.parity.training_step import measure_activations

    def measured(s, b, h, a, attention, recompute):
        return measure_activations(microbatch=b, seq=s, hidden=h, heads=a, attention=attention,
                                   recompute=recompute)["formula_bytes"]
    assert "calls simlab's own model (training_step_measure.measure_activations)" in refused(
        capsys, check_layer_formula, measured)


def test_the_step_prediction_passes_with_the_right_fits_and_knows_what_fits():
    assert True in FITS and False in FITS  # both answers occur
    for (name, gpu, b, at, rc, pr), fits in zip(STEPS, FITS):
        m = PRESETS[name]
        s = one_step(name, gpu, b, attention=at, recompute=rc, precision=pr)
        assert step_parts(s) == step(m.params, m.layers, m.seq, b, m.hidden, m.heads, at, rc,
                                     {"mixed": 16, "mixed-fp32-grads": 18}[pr])
        assert fits is (s["memory"]["total"] <= s["memory"]["usable"])


def test_the_step_prediction_grades_states_activations_and_fits(capsys):
    check_step_prediction(step, FITS)
    assert capsys.readouterr().out.startswith(f"one step's memory: ✓ {len(STEPS)} steps")
    one_layer = lambda p, L, *rest: step(p, 1, *rest)  # noqa: E731 — activations of one layer, not L
    assert "every one of the L layers keeps its own" in refused(capsys, check_step_prediction, one_layer, FITS)
    sixteen = lambda p, L, s, b, h, a, at, rc, bpp: step(p, L, s, b, h, a, at, rc, 16)  # noqa: E731 — 16 B, whatever the recipe
    assert "parameters × bytes per parameter" in refused(capsys, check_step_prediction, sixteen, FITS)
    datasheet = [not f for f in FITS]
    assert "usable memory" in refused(capsys, check_step_prediction, step, datasheet)
    assert "give a list of 6 True/False" in refused(capsys, check_step_prediction, step, FITS[:-1])


@pytest.fixture(scope="module")
def real():
    from simlab.parity.training_step import measure_activations
    return measure_activations(**REAL_LAYER)


def test_the_measured_check_sets_the_count_beside_the_real_layer(real, capsys):
    check_measured(layer, real)
    out = capsys.readouterr().out
    said = layer(REAL_LAYER["seq"], REAL_LAYER["microbatch"], REAL_LAYER["hidden"], REAL_LAYER["heads"],
                 REAL_LAYER["attention"], REAL_LAYER["recompute"])
    assert said == real["formula_bytes"] and f"you predicted {said:,} B" in out
    assert f"the real forward saved {real['measured_bytes']:,} B" in out
    assert "✗" in refused(capsys, check_measured, lambda *case: layer(*case) + 2 * REAL_LAYER["hidden"], real)
    other = {**real, "config": {**real["config"], "seq": real["config"]["seq"] + 1}}
    assert "pass the result of measure_activations(**REAL_LAYER)" in refused(capsys, check_measured, layer, other)


def test_no_answer_was_printed_before_the_learner_answers():
    """The exercise's targets appear nowhere in the lesson's text or outputs: the real layer's count, each step's
    two big parts."""
    shown = "\n".join(texts("notebooks/05b_one_training_step.ipynb"))
    r = REAL_LAYER
    count = layer(r["seq"], r["microbatch"], r["hidden"], r["heads"], r["attention"], r["recompute"])
    assert f"{count:,}" not in shown and str(count) not in shown
    for name, gpu, b, at, rc, pr in STEPS:
        total = step_parts(one_step(name, gpu, b, attention=at, recompute=rc, precision=pr))
        assert f"{total / 1e9:.2f} GB" not in shown and f"{total:,.0f}" not in shown
