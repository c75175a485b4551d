"""Lesson 5's predict-then-run checks, against one real run_tp(**MLP_RUN): the right answers pass, each kind
of wrong answer fails with a hint naming the idea it missed and never the value (issue 23), the real run's counts
and bytes (not only the plan's) decide, the split asked is one the lesson does not print (nn.Linear's storage)
and the all-reduce is asked *why*, and an unanswered prediction comes through as NotImplementedError."""
import copy

import pytest

from simlab.grading.tensor_parallel_predict import (
    MLP_RUN,
    REASON_HINTS,
    REASONS,
    check_forward_bytes,
    check_split_choice,
    forward_bytes_sent,
    shard_dims,
)
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
    check_split_choice(0, 1, "b", real)
    check_forward_bytes(RIGHT, real)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("MLP split: ✓ fc1.weight cut along dim 0") and "real run on 4 processes" in out[0]
    assert out[1].startswith(f"forward bytes: ✓ {RIGHT:,} B per rank")


def test_the_dims_are_the_executors_layout():
    """fc1 (A by columns) keeps a block of nn.Linear's rows, fc2 (B by rows) of its columns: the layout the real
    run cuts (ParallelMLP.shards), checked here on real shards of the seeded block."""
    import torch

    from simlab.exec.models import make_block
    from simlab.exec.tensor_parallel import CommStats, ParallelMLP
    assert shard_dims() == {"fc1": 0, "fc2": 1}
    full, n = make_block("mlp", MLP_RUN["hidden"], 1, MLP_RUN["ffn"]), MLP_RUN["world_size"]
    for name, dim in shard_dims().items():
        parts = [ParallelMLP.from_full(full, stats=CommStats(rank=r, world_size=n)).shards()[f"{name}.weight"][0]
                 for r in range(n)]
        assert torch.equal(torch.cat(parts, dim=dim), getattr(full, name).weight)


@pytest.mark.parametrize("answer, case, reason", [
    ((1, 1, "b"), "fc1", "which of its dims indexes A's columns?"),
    ((0, 0, "b"), "fc2", "which dim is ffn?"),
    ((1, 0, "b"), "fc1", "nn.Linear stores A transposed"),
    ((2, 1, "b"), "fc1", "give 0 or 1"),
    ((0, True, "b"), "fc2", "give 0 or 1"),
    ((0, 1, "e"), "reason", "give one of the letters a, b, c, d"),
    ((0, 1, "B"), "reason", "give one of the letters"),
    ((0, 1, "a"), "reason", "nothing about it is partial"),
    ((0, 1, "c"), "reason", "never summed across TP ranks"),
    ((0, 1, "d"), "reason", "f's forward is the identity"),
])
def test_wrong_split_answers_fail_with_a_hint(real, answer, case, reason, capsys):
    with pytest.raises(AssertionError):
        check_split_choice(*answer, real)
    out = capsys.readouterr().out
    assert out.startswith(f"MLP split: ✗ {case}: ") and reason in out, out


def test_split_hints_never_name_the_answer(real, capsys):
    """A first wrong answer gets the idea, not the dim or the letter to copy."""
    for answer in [(1, 1, "b"), (0, 0, "b")] + [(0, 1, letter) for letter in REASON_HINTS]:
        with pytest.raises(AssertionError):
            check_split_choice(*answer, real)
        out = capsys.readouterr().out
        assert "dim 0" not in out and "dim 1" not in out and "(b)" not in out and "'b'" not in out, out
    assert set(REASON_HINTS) == set(REASONS) - {"b"}


def test_the_exercise_asks_the_choices_the_grader_grades():
    import json
    from pathlib import Path
    solution = json.loads((Path(__file__).resolve().parents[2] / "solutions" / "05_tensor_parallel.ipynb").read_text())
    question = "".join(next(c for c in solution["cells"] if c["id"] == "l5-predict-intro")["source"])
    assert [f"- ({letter})" in question for letter in REASONS] == [True] * len(REASONS)
    assert "(b) f all-reduces $dX$" in question  # the right statement is the one the grader takes
    assert "`fc1 = nn.Linear(12, 48)`" in question and "`fc2 = nn.Linear(48, 12)`" in question


def test_the_real_runs_counts_decide(real, capsys):
    """A run that (hypothetically) all-reduced twice in backward fails the right answer: the check reads the run."""
    odd = copy.copy(real) | {"allreduce_calls_backward": 2}
    with pytest.raises(AssertionError):
        check_split_choice(0, 1, "b", odd)
    assert "the real run's collectives are not the plan's" in capsys.readouterr().out


@pytest.mark.parametrize("predicted, reason", [
    (z_bytes(), "that is Z's own size"),
    (RIGHT + 4, "the forward's only collective is g's all-reduce"),
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
    said = out.replace(f"said {predicted:,}" if isinstance(predicted, int) else f"={predicted!r}", "")
    assert str(RIGHT) not in said.replace(",", ""), out  # a hint, never the value (issue 23)


def test_the_measured_bytes_decide(real, capsys):
    """Bytes the real run's trace says it sent, not a copy of the closed form: halve them and the right answer fails."""
    trace = type(real["trace"])(e.__class__(**{**vars(e), "nbytes": e.nbytes // 2}) for e in real["trace"])
    with pytest.raises(AssertionError):
        check_forward_bytes(RIGHT, real | {"trace": trace})
    assert "not what the real run's ranks sent" in capsys.readouterr().out
    check_forward_bytes(RIGHT // 2, real | {"trace": trace})


@pytest.mark.parametrize("other", [None, {}, "run", lambda: run_tp(2, "mlp", compare_torch=False)])
def test_not_the_lessons_run_is_refused(real, other, capsys):
    other = other() if callable(other) else other
    for check in (lambda r: check_forward_bytes(RIGHT, r), lambda r: check_split_choice(0, 1, "b", r)):
        with pytest.raises(AssertionError):
            check(other)
        assert "pass the result of run_tp(**MLP_RUN)" in capsys.readouterr().out


def test_unanswered_predictions_are_not_implemented(real):
    with pytest.raises(NotImplementedError):
        check_forward_bytes(None, real)
    with pytest.raises(NotImplementedError):
        check_split_choice(0, None, "b", real)
    with pytest.raises(NotImplementedError):
        check_split_choice(0, 1, None, real)


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


def test_the_lesson_never_states_the_split_in_nn_linears_storage():
    """Lesson 5 states Megatron's split in its own (in, out) convention; the exercise asks for nn.Linear's (out, in)
    dims, which neither the lesson's text nor its outputs give (lesson 5's summary states the former: issue 23)."""
    import json
    from pathlib import Path
    nb = json.loads((Path(__file__).resolve().parents[2] / "notebooks" / "05_tensor_parallel.ipynb").read_text())
    everything = json.dumps([(c["source"], c.get("outputs", [])) for c in nb["cells"]], ensure_ascii=False)
    assert "fc1" not in everything and "fc2" not in everything and ".weight" not in everything
