"""Lesson 5's predict-then-run checks, against one real run_tp(**MLP_RUN): the right answers pass, each kind
of wrong answer fails with its reason, the real run's counts (not only the plan's) decide, and an unanswered
prediction comes through as NotImplementedError, like a stub."""
import copy

import pytest

from simlab.grading.tensor_parallel import MLP_RUN, check_forward_bytes, check_split_choice, forward_bytes_sent
from simlab.parity.tensor_parallel import run_tp


@pytest.fixture(scope="module")
def real():
    return run_tp(**MLP_RUN)


def z_bytes():
    return MLP_RUN["batch"] * MLP_RUN["seq"] * MLP_RUN["hidden"] * 4  # Z (b·s, h) fp32


N = MLP_RUN["world_size"]
RIGHT = 2 * (N - 1) * z_bytes() // N  # a ring all-reduce of Z: (N-1)/N of it in the reduce-scatter, again in the all-gather


def test_real_forward_bytes_are_the_ring_closed_form(real):
    n = MLP_RUN["world_size"]
    assert forward_bytes_sent(real) == [2 * (n - 1) * z_bytes() // n] * n


def test_right_answers_pass(real, capsys):
    check_split_choice("column", "row", 1, 1, real)
    check_forward_bytes(RIGHT, real)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("MLP split: ✓") and "real run on 4 processes" in out[0]
    assert out[1].startswith(f"forward bytes: ✓ {RIGHT:,} B per rank")


@pytest.mark.parametrize("answer, reason", [
    (("row", "row", 1, 1), "GeLU of a partial sum"),
    (("row", "column", 2, 1), "GeLU of a partial sum"),
    (("column", "column", 1, 1), "an all-gather of the (tokens, 4h) activation"),
    (("column", "row", 2, 1), "f is the identity in forward"),
    (("column", "row", 0, 1), "g must add them"),
    (("column", "row", 1, 0), "f must add them"),
    (("column", "row", 1, 2), "g's backward is the identity"),
    (("column", "row", 1, 3), "one g forward, one f backward"),
    (("diag", "row", 1, 1), "each must be 'column' or 'row'"),
])
def test_wrong_split_answers_fail_with_their_reason(real, answer, reason, capsys):
    with pytest.raises(AssertionError):
        check_split_choice(*answer, real)
    out = capsys.readouterr().out
    assert out.startswith("MLP split: ✗") and reason in out, out


def test_the_real_runs_counts_decide(real, capsys):
    """A run that (hypothetically) all-reduced twice in forward fails the plan's answer: the check reads the run."""
    odd = copy.copy(real) | {"allreduce_calls_forward": 2}
    with pytest.raises(AssertionError):
        check_split_choice("column", "row", 1, 1, odd)
    assert "the real run on 4 processes counted 2" in capsys.readouterr().out


@pytest.mark.parametrize("predicted, reason", [
    (z_bytes(), "that is Z's own size"),
    (2 * z_bytes(), "2·Z is the all-reduce's bound"),
    (2 * RIGHT, "that counts backward too"),
    (RIGHT // 4, "that counts elements"),
    (RIGHT * MLP_RUN["ffn"] // MLP_RUN["hidden"], "GeLU(X·A) (b·s, ffn) stays on its rank"),
    (1000, "the forward's only collective is g's all-reduce"),
    (float(RIGHT), "give a whole number of bytes"),
    (True, "give a whole number of bytes"),
])
def test_wrong_byte_predictions_fail_with_their_reason(real, predicted, reason, capsys):
    with pytest.raises(AssertionError):
        check_forward_bytes(predicted, real)
    out = capsys.readouterr().out
    assert out.startswith("forward bytes: ✗") and reason in out, out


def test_the_measured_bytes_decide(real, capsys):
    """Bytes the real run's trace says it sent, not a copy of the closed form: halve them and the right answer fails."""
    trace = type(real["trace"])(e.__class__(**{**vars(e), "nbytes": e.nbytes // 2}) for e in real["trace"])
    with pytest.raises(AssertionError):
        check_forward_bytes(RIGHT, real | {"trace": trace})
    assert f"ranks sent {[RIGHT // 2] * N}" in capsys.readouterr().out


@pytest.mark.parametrize("other", [None, {}, "run", lambda: run_tp(2, "mlp", compare_torch=False)])
def test_not_the_lessons_run_is_refused(real, other, capsys):
    other = other() if callable(other) else other
    for check in (lambda r: check_forward_bytes(RIGHT, r), lambda r: check_split_choice("column", "row", 1, 1, r)):
        with pytest.raises(AssertionError):
            check(other)
        assert "pass the result of run_tp(**MLP_RUN)" in capsys.readouterr().out


def test_unanswered_predictions_are_not_implemented(real):
    with pytest.raises(NotImplementedError):
        check_forward_bytes(None, real)
    with pytest.raises(NotImplementedError):
        check_split_choice("column", None, 1, 1, real)


def test_the_lesson_never_prints_the_answer():
    """The run is not the lesson's MLP: none of lesson 5's printed numbers is the forward bytes to predict."""
    import json
    import re
    from pathlib import Path
    nb = json.loads((Path(__file__).resolve().parents[2] / "notebooks" / "05_tensor_parallel.ipynb").read_text())
    printed = " ".join("".join(o.get("text", "")) for c in nb["cells"] for o in c.get("outputs", []))
    assert printed and str(RIGHT) not in re.findall(r"\d+", printed.replace(",", ""))
    solution = json.loads((Path(__file__).resolve().parents[2] / "solutions" / "05_tensor_parallel.ipynb").read_text())
    question = "".join(next(c for c in solution["cells"] if c["id"] == "l5-predict-intro")["source"])
    b, s, h, f = (MLP_RUN[k] for k in ("batch", "seq", "hidden", "ffn"))
    assert f"batch {b} × sequence {s} tokens × hidden {h}, $A$ ({h}, {f})" in question  # the text asks about this run
