"""Lesson 3's first exercise check, `check_zero_memory`: a right answer written from the paper's formulas
passes; each usual slip fails on the case that shows it, with a one-line reason."""
import math

import pytest

from simlab.grading.zero import check_zero_memory


def by_hand(psi, n, stage, shard=lambda psi, n: math.ceil(psi / n)):
    """The paper's P_os / P_os+g / P_os+g+p with 2 + 2 + 12 bytes, each sharded state one padded shard."""
    s = shard(psi, n)
    params, grads, optim = 2 * (s if stage >= 3 else psi), 2 * (s if stage >= 2 else psi), 12 * (s if stage >= 1 else psi)
    return {"params": params, "grads": grads, "optimizer": optim, "total": params + grads + optim}


def verdict(capsys, fn) -> str:
    with pytest.raises(AssertionError):
        check_zero_memory(fn)
    out = capsys.readouterr().out.strip()
    assert out.count("\n") == 0 and out.startswith("ZeRO memory per GPU: ✗")  # one line
    return out


def test_the_papers_formulas_pass(capsys):
    check_zero_memory(by_hand)
    assert capsys.readouterr().out.startswith("ZeRO memory per GPU: ✓ the paper's 120 / 31.4 / 16.6 / 1.9 GB")


@pytest.mark.parametrize("slip, case, reason", [
    # psi/n without rounding up: the paper's 7.5 B / 64 divides, so only an uneven case (10^6 / 3) shows it
    (lambda psi, n, stage: by_hand(psi, n, stage, shard=lambda p, k: p // k), "psi=1000000, n_gpus=3, stage=1",
     "optimizer=3999996 but expected 4000008 (shards round up)"),
    (lambda psi, n, stage: by_hand(psi, n, min(stage + 1, 3)), "the paper's example, stage 0",
     "paper: 120000000000 B"),  # one stage too far
])
def test_slips_fail_on_the_case_that_shows_them(capsys, slip, case, reason):
    out = verdict(capsys, slip)
    assert case in out and reason in out, out


@pytest.mark.parametrize("answer", [lambda *a: 120e9, lambda *a: None, lambda *a: {"total": 120e9}])
def test_an_answer_of_the_wrong_form_is_named_in_one_line(capsys, answer):
    out = verdict(capsys, answer)
    assert "the answer's form" in out and "return a dict with params, grads, optimizer, total" in out


def test_the_stub_comes_through_as_not_implemented():
    def stub(psi, n_gpus, stage):
        raise NotImplementedError("exercise: write your answer here")
    with pytest.raises(NotImplementedError):
        check_zero_memory(stub)


@pytest.mark.parametrize("lazy", [
    lambda psi, n, stage: __import__("simlab.sim.memory", fromlist=["x"]).per_gpu_bytes(psi, n, stage,
                                                                                         precision="mixed"),
    lambda psi, n, stage: {k: v for k, v in __import__("simlab.sim.memory", fromlist=["x"]).per_gpu_bytes(
        psi, n, stage, precision="mixed").items() if k != "cpu"},
    lambda psi, n, stage: by_hand(psi, n, stage, shard=__import__("simlab.sim.memory", fromlist=["x"]).shard_numel),
], ids=["per_gpu_bytes", "per_gpu_bytes-trimmed", "shard_numel"])
def test_an_answer_that_calls_simlabs_own_model_is_refused(capsys, lazy):
    """The exercise imports `per_gpu_bytes` (for section 3): handing the question to it is not an answer, however
    it is wrapped, and neither is any other part of the model the check grades against."""
    out = verdict(capsys, lazy)
    assert "your function: it calls simlab's own model (memory." in out and "write the formulas" in out, out


def test_the_model_itself_is_refused(capsys):
    from simlab.sim.memory import per_gpu_bytes
    assert "it calls simlab's own model (memory.per_gpu_bytes)" in verdict(capsys, per_gpu_bytes)


def test_watching_for_the_model_leaves_no_profiler_behind():
    import sys
    before = sys.getprofile()
    check_zero_memory(by_hand)
    assert sys.getprofile() is before
