"""Lesson 5b's executor: what a real layer saves for its backward against Korthikanti's terms (every byte either a
formula term or a named, closed-form difference), recomputation that leaves the gradients unchanged, the bytes of
real mixed-precision Adam states against the recipes, fp16's underflow and GradScaler's rescue, FP8 on a CPU."""
import pytest
import torch

from simlab.exec.training_step import SavedTensors, TransformerLayer, forward_backward, layer_input, make_layer
from simlab.exec.training_step_machine import best_copy_seconds, best_matmul_seconds
from simlab.exec.training_step_precision import fp8_probe, gradients, state_tensors, storage_bytes
from simlab.parity.training_step_measure import measure_activations
from simlab.sim.training_step_memory import STATE_PARTS, number_format, state_recipe

SHAPES = [(2, 16, 32, 4), (1, 8, 24, 2), (3, 12, 48, 6), (2, 33, 16, 1)]  # (b, s, h, a)


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.mark.parametrize("b, s, h, a", SHAPES)
@pytest.mark.parametrize("attention", ["eager", "flash"])
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_every_saved_byte_is_a_formula_term_or_a_named_difference(b, s, h, a, attention, dtype):
    """Measured == formula + LayerNorm's statistics + CPU dropout's wide masks (+ fp32's lse), to the byte; every
    other operation saves exactly its terms. Stated tolerance: measured exceeds the formula by at most
    4·b·s·itemsize (the norms) + the masks' extra bytes — nothing else."""
    for recompute in ("none", "selective", "full"):
        for dropout in (0.1, 0.0):
            r = measure_activations(microbatch=b, seq=s, hidden=h, heads=a, attention=attention, recompute=recompute,
                                    dtype=dtype, dropout=dropout)
            assert r["unexplained_bytes"] == 0 and r["missing_terms"] == [], (recompute, dropout, r["rows"])
            for row in r["rows"]:
                assert row["difference"] == row["expected"], row
                assert (row["why"] is None) == (row["expected"] == 0 and row["site"] not in (
                    "ln1", "ln2", "attention_dropout", "mlp_dropout", "softmax_dropout", "flash")), row
            itemsize = 2 if dtype == "bf16" else 4
            assert r["explained"].get("layernorm_stats", 0) == (0 if recompute == "full" else 4 * b * s * itemsize)


def test_the_differences_are_what_torch_really_stores():
    """The named differences checked against the tensors themselves: bf16 masks, bf16 statistics, fp32 lse."""
    r = measure_activations(microbatch=2, seq=16, hidden=32, heads=4, dtype="bf16")
    by_site = {}
    for rec in r["records"]:
        by_site.setdefault(rec["site"], []).append(rec)
    assert [x["dtype"] for x in by_site["mlp_dropout"]] == ["torch.bfloat16"]  # the mask, 2 bytes an element
    assert sorted(x["shape"] for x in by_site["ln1"]) == [[2, 16, 1], [2, 16, 1], [2, 16, 32]]  # mean, rstd, input
    flash = measure_activations(microbatch=2, seq=16, hidden=32, heads=4, dtype="bf16", attention="flash")
    lse = [x for x in flash["records"] if x["site"] == "flash" and x["dtype"] == "torch.float32"]
    assert [x["shape"] for x in lse] == [[2, 4, 16]]  # FlashAttention's kernel ran: a row's log-sum-exp, no s²


def test_saved_tensors_counts_a_storage_once_and_no_parameter():
    layer = TransformerLayer(8, 2, dropout=0.0)
    x = torch.randn(1, 4, 8, requires_grad=True)
    with SavedTensors(layer) as saved:
        layer.site = "twice"
        y = x * x  # mul saves x twice (self and other): one storage
        layer.site = "weight"
        z = y @ layer.fc1.weight.t()  # saves y and the weight; the weight is a parameter
    assert saved.bytes_by_site() == {"twice": 4 * 4 * 8, "weight": 4 * 4 * 8} and saved.total == 256
    assert z.shape == (1, 4, 32)


@pytest.mark.parametrize("attention", ["eager", "flash"])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_recomputation_leaves_every_gradient_unchanged(attention, dtype):
    """Same seed, dropout p = 0.1: checkpoint replays the RNG, so the masks, and the gradients, are identical."""
    grads, saved = {}, {}
    for mode in ("none", "selective", "full"):
        layer = make_layer(32, 4, dtype=dtype, attention=attention, recompute=mode, dropout=0.1)
        x, dy = layer_input(2, 16, 32, dtype=dtype)
        saved[mode], grads[mode] = forward_backward(layer, x, dy, seed=3)
    for mode in ("selective", "full"):
        assert all(torch.equal(grads[mode][k], grads["none"][k]) for k in grads["none"]), mode
    assert saved["full"].total < saved["selective"].total <= saved["none"].total
    assert (saved["selective"].total < saved["none"].total) == (attention == "eager")  # flash: nothing to drop
    other = make_layer(32, 4, dtype=dtype, attention=attention, dropout=0.1)
    _, moved = forward_backward(other, *layer_input(2, 16, 32, dtype=dtype), seed=4)  # other masks: other grads
    assert not torch.equal(moved["input"], grads["none"]["input"])


@pytest.mark.parametrize("precision", ["fp32", "mixed", "mixed-fp32-grads"])
def test_real_adam_states_hold_the_recipes_bytes(precision):
    state = state_tensors(precision)
    n = sum(p.numel() for p in state["params"])
    recipe = state_recipe(precision)
    assert {part: storage_bytes(state[part]) for part in STATE_PARTS} == {part: recipe[part] * n for part in STATE_PARTS}
    assert storage_bytes(state["step"]) == 4 * len(state["params"])  # one fp32 scalar per tensor, not per parameter
    if precision == "mixed":  # the fp32 copy of each bf16 gradient was freed after the step
        assert all(w.grad is None for w in state["master"]) and state["grads"][0].dtype == torch.bfloat16
    if precision == "mixed-fp32-grads":
        assert all(p.grad is None for p in state["params"]) and state["grads"][0].dtype == torch.float32


def test_fp16_loses_small_gradients_the_scaler_keeps_them_and_bf16_never_loses_them():
    factor = 2.0 ** -12
    fp32 = gradients(None, factor)
    fp16, scaled, bf16 = gradients("fp16", factor), gradients("fp16", factor, scale=2.0 ** 16), gradients("bf16", factor)
    assert int((fp32 == 0).sum()) == 0
    assert int((fp16 == 0).sum()) > 0.1 * fp16.numel()  # lost inside the backward, below 2⁻²⁴
    assert int((scaled == 0).sum()) == 0 and int((bf16 == 0).sum()) == 0
    top = fp32.abs().max()
    assert (scaled - fp32).abs().max() / top < 1e-2 < (fp16 - fp32).abs().max() / top


@pytest.mark.parametrize("name, dtype", [("fp32", torch.float32), ("bf16", torch.bfloat16), ("fp16", torch.float16),
                                         ("fp8-e4m3", torch.float8_e4m3fn), ("fp8-e5m2", torch.float8_e5m2)])
def test_the_number_formats_are_torchs(name, dtype):
    f, t = number_format(name), torch.finfo(dtype)
    assert (f["max"], f["smallest_normal"], f["epsilon"], f["bytes"]) == (t.max, t.smallest_normal, t.eps, t.bits // 8)
    assert torch.tensor(f["smallest_subnormal"], dtype=dtype).item() == f["smallest_subnormal"]
    assert torch.tensor(f["smallest_subnormal"] / 4, dtype=dtype).item() == 0.0  # below it: nothing


def test_fp8_on_a_cpu_is_what_we_say():
    probe = fp8_probe(n=32, repeats=1)
    assert probe["dtypes"] == ["torch.float8_e4m3fn", "torch.float8_e5m2"]
    assert probe["round_trip_max_rel_error"] <= 2.0 ** -4  # half a unit in the last of 3 mantissa bits
    assert probe["e4m3_of_1000"] == number_format("fp8-e4m3")["max"]  # torch saturates at 448
    assert isinstance(probe["scaled_mm"], bool) and (probe["scaled_mm"] or "scaled_mm_error" in probe)


def test_the_machine_timers_return_seconds():
    assert 0 < best_matmul_seconds(32, repeats=1) < 10 and 0 < best_copy_seconds(1 << 20, repeats=1) < 10


@pytest.mark.parametrize("kwargs, message", [(dict(hidden=30, heads=4), "hidden=30"), (dict(dropout=1.0), "dropout=1.0"),
                                             (dict(attention="sdpa"), "attention='sdpa'"),
                                             (dict(recompute="half"), "recompute='half'"),
                                             (dict(dtype="fp16"), "dtype='fp16'")])
def test_bad_layers_are_refused_in_one_line(kwargs, message):
    args = dict(hidden=32, heads=4) | kwargs
    with pytest.raises(ValueError, match=message):
        make_layer(args.pop("hidden"), args.pop("heads"), **args)
