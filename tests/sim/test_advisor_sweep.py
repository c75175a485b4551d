"""When CP and EP pay (`sim.advisor_sweep`): each row is held to separate searches — the whole space, and the space
with the knob fixed at 1 (or above it) — so a row cannot agree with itself by construction."""
import numpy as np
import pytest

from simlab.sim.advisor import candidates, evaluate, search
from simlab.sim.advisor_sweep import when_cp, when_ep
from simlab.sim.hardware import cluster
from simlab.sim.model import PRESETS, Transformer

H100 = cluster("h100-80gb", gpus=8)
TINY_MOE = Transformer("tiny-moe", 4, 512, 8, seq=1024, vocab=1000, experts=4, top_k=2)


def other_side(model, c, batch, knob, best_size):
    """The best of the plans on the other side of the knob, by a search of that side alone (None if none fits),
    and the least memory any of them needs."""
    values = sorted(set(getattr(candidates(model, c, batch, {}), knob).tolist()))
    sides = [{knob: 1}] if best_size > 1 else [{knob: v} for v in values if v > 1]
    found = [search(model, c, batch, **fixed)["best"] for fixed in sides]
    fitting = [f for f in found if f is not None]
    return min(fitting, key=lambda f: f["step_seconds"]) if fitting else None


@pytest.mark.parametrize("seq", [32768, 131072])
def test_when_cp_is_the_search_with_and_without_cp(seq):
    row = when_cp(PRESETS["llama3-8b"], H100, global_tokens=1 << 20, seqs=[seq])[0]
    model, batch = PRESETS["llama3-8b"].with_(seq=seq), (1 << 20) // seq
    best = search(model, H100, batch)["best"]
    assert (row["seq"], row["global_batch"], row["knob"]) == (seq, batch, "cp")
    assert row["step_seconds"] == pytest.approx(best["step_seconds"]) and row["cp"] == best["config"]["cp"]
    rival = other_side(model, H100, batch, "cp", row["cp"])
    if rival is None:
        assert not row["rival_fits"] and row["ratio"] is None and "does not fit" in row["why"]
    else:
        assert row["rival_seconds"] == pytest.approx(rival["step_seconds"])
        assert row["ratio"] == pytest.approx(rival["step_seconds"] / best["step_seconds"]) and row["ratio"] >= 1
        assert f"{row['ratio']:.2f}×" in row["why"]


def test_a_side_that_does_not_fit_says_how_much_memory_its_least_hungry_plan_needs():
    """One head and two layers, so neither TP nor PP can split a million-token sequence: on 40 GiB GPUs no plan
    without CP fits. The row's reason is the least memory any cp = 1 plan needs, found here from all of them."""
    model = Transformer("one-head", 2, 1024, 1, seq=1 << 20, vocab=1000)
    small = H100.with_(gpu=H100.gpu.with_(memory=40 * 2**30, name="h100-40gib"))
    row = when_cp(model, small, global_batch=8, seqs=[1 << 20])[0]
    k = candidates(model, small, 8, {"cp": 1})
    mem, _time, fits = evaluate(model, small, 8, k, "mixed")
    assert row["cp"] > 1 and not row["rival_fits"] and not fits.any() and row["ratio"] is None
    assert row["rival_gb_per_gpu"] == pytest.approx(mem["total"].min() / 1e9)
    i = np.argmin(mem["total"])
    part = max(("params", "grads", "optimizer", "activations"), key=lambda key: mem[key][i])
    assert row["why"] == (f"cp 1 does not fit: at least {mem['total'][i] / 1e9:.0f} GB per GPU, "
                          f"{mem[part][i] / 1e9:.0f} GB of it {part}")


def test_when_ep_sweeps_the_experts_and_agrees_with_the_search():
    c = cluster(gpus=8)
    rows = when_ep(TINY_MOE, c, 16, experts=[2, 4, 8])
    assert [r["experts"] for r in rows] == [2, 4, 8] and all(r["knob"] == "ep" for r in rows)
    for r in rows:
        model = TINY_MOE.with_(experts=r["experts"])
        best = search(model, c, 16)["best"]
        assert r["step_seconds"] == pytest.approx(best["step_seconds"]) and r["ep"] == best["config"]["ep"]
        assert r["experts"] % r["ep"] == 0
    same = when_ep(lambda e: TINY_MOE.with_(experts=e), c, 16, experts=[4])[0]  # a model factory gives the same row
    assert same["step_seconds"] == rows[1]["step_seconds"] and same["why"] == rows[1]["why"]


def test_the_sweeps_price_the_loss_they_are_given():
    """torchtitan's chunked and plain PyTorch's fp32 loss: each row is `search(loss=...)`'s best, and the fp32 loss
    (12 bytes per logit held) needs more memory than the fused one (4) for the same plan."""
    model = PRESETS["llama3-8b"]
    for loss in ("fp32", "chunked"):
        row = when_cp(model, H100, global_tokens=1 << 20, seqs=[32768], loss=loss)[0]
        best = search(model.with_(seq=32768), H100, 32, loss=loss)["best"]
        assert row["step_seconds"] == pytest.approx(best["step_seconds"]) and row["config"] == best["config"]
        assert row["config"]["loss"] == loss
    fused, fp32 = (search(model, H100, 8, loss=loss, tp=1, pp=1, cp=1, zero=3)["best"] for loss in ("fused", "fp32"))
    assert fp32["bytes_per_gpu"]["total"] > fused["bytes_per_gpu"]["total"]
    moe = when_ep(TINY_MOE, cluster(gpus=8), 16, experts=[4], loss="fp32")[0]
    assert moe["step_seconds"] == pytest.approx(search(TINY_MOE, cluster(gpus=8), 16, loss="fp32")["best"]["step_seconds"])


@pytest.mark.parametrize("call, message", [
    (lambda: when_cp(PRESETS["llama3-8b"], H100, 1 << 20, seqs=[8192], loss="bf16"), "loss='bf16'"),
    (lambda: when_ep(TINY_MOE, H100, 8, experts=[4], loss=None), "loss=None"),
    (lambda: when_cp(PRESETS["llama3-8b"], H100, global_tokens=1 << 20, seqs=[]), "seqs="),
    (lambda: when_cp(PRESETS["llama3-8b"], H100, global_tokens=1 << 20, seqs=[0]), "seqs=0"),
    (lambda: when_cp(PRESETS["llama3-8b"], H100, global_tokens=1000, seqs=[8192]), "global_tokens=1000"),
    (lambda: when_cp(PRESETS["llama3-8b"], H100, global_tokens=3 * 8192, seqs=[16384]), "global_tokens=24576"),
    (lambda: when_cp(PRESETS["llama3-8b"], H100, seqs=[8192]), "global_tokens=None"),
    (lambda: when_cp(PRESETS["llama3-8b"], H100, 1 << 20, seqs=[8192], global_batch=8), "global_tokens="),
    (lambda: when_cp(PRESETS["llama3-8b"], H100, 1 << 20, seqs=[8192], cp_comm="star"), "cp_comm='star'"),
    (lambda: when_ep(PRESETS["llama3-8b"], H100, 8, experts=[4]), "model="),
    (lambda: when_ep(TINY_MOE, H100, 8, experts=[float("nan")]), "experts=nan"),
    (lambda: when_ep(TINY_MOE, H100, 8, experts=[1] * 33), "experts="),
])
def test_bad_sweeps_are_refused_in_one_line(call, message):
    with pytest.raises(ValueError) as err:
        call()
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_rows_are_plain_data():
    import json
    rows = when_cp(PRESETS["llama3-8b"], H100, global_tokens=1 << 20, seqs=[8192, 65536])
    json.dumps(rows, allow_nan=False)  # Messages are strings; numbers are finite
    assert all(np.isfinite(r["step_seconds"]) for r in rows if r["fits"])
