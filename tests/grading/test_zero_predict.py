"""Lesson 3's graded questions: fitting a 70 B model on 80 GB GPUs, and predicting the bytes a rank sends in a
ZeRO-2 step (against a real run). Right answers pass; each kind of wrong answer fails with its reason."""
import math

import pytest

from simlab.grading.zero import LAYERS_70B, check_bytes_prediction, check_fit_70b
from simlab.sim.memory import peak_per_gpu_bytes

SIZES = (3, 4, 2, 5)  # the exercise's MLP (not the lesson's): layers of 16, 10 and 15 parameters
N = 3
S = sum(math.ceil((a + 1) * b / N) for a, b in zip(SIZES, SIZES[1:]))  # 6 + 4 + 5 = 15
RIGHT = (N - 1) * S * 8  # reduce-scatter of fp32 grads + all-gather of fp32 params: 240 B
WHOLE = math.ceil(41 / N)  # 14: the shard if the 41 parameters were padded as one buffer, not per layer


def fake_run(sent=RIGHT, stage=2):
    return {"bytes_sent_per_rank": [sent] * N, "world_size": N, "stage": stage}


def verdict(capsys, fn, *args):
    with pytest.raises(AssertionError):
        fn(*args)
    out = capsys.readouterr().out.strip()
    assert out.count("\n") == 0 and "✗" in out  # one line
    return out


# ---------------------------------------------------------------- 70 B on 80 GB GPUs

def test_the_smallest_fitting_answers_pass(capsys):
    check_fit_70b(3, 15)
    check_fit_70b(3, 2, True)
    out = capsys.readouterr().out
    assert out.count("✓") == 2 and "14 GPUs would need 83.2 GB" in out and "1 GPU would need" in out


def test_the_model_behind_the_answers():
    """By hand: stage 3 keeps 16 B per own element; the peak adds the rest of one layer's params (2 B) and
    of its full gradient (2 B; the own block of the gradient is in the 16 B already)."""
    layer = 875_000_000
    for n in (14, 15):
        own = -(-layer // n)  # S: each of the 80 layers padded to n·S on its own
        by_hand = 80 * 16 * own + 2 * (n - 1) * own + 2 * (n - 1) * own
        assert peak_per_gpu_bytes(LAYERS_70B, n, 3) == by_hand
    assert peak_per_gpu_bytes(LAYERS_70B, 14, 3) > 80e9 >= peak_per_gpu_bytes(LAYERS_70B, 15, 3)


def test_too_few_gpus_says_how_much_it_needs(capsys):
    out = verdict(capsys, check_fit_70b, 3, 14)
    assert "needs 83.2 GB per GPU" in out and "80.0 GB between steps" in out and "more than 80 GB" in out


def test_more_than_needed_is_not_minimal(capsys):
    out = verdict(capsys, check_fit_70b, 3, 16)
    assert "not the fewest: 15 GPUs already fit" in out


@pytest.mark.parametrize("stage, offload, reason", [
    (0, False, "full parameters, gradients and optimizer state (1120.0 GB)"),
    (1, False, "full 16-bit parameters and gradients (280.0 GB)"),
    (2, False, "full 16-bit parameters (140.0 GB)"),
    (2, True, "stage 2 still keeps the full 16-bit parameters (140.0 GB)"),
])
def test_stages_that_never_fit_say_why(capsys, stage, offload, reason):
    out = verdict(capsys, check_fit_70b, stage, 1024, offload)
    assert "never fits" in out and reason in out


@pytest.mark.parametrize("args, bad", [((4, 8), "stage=4"), (("3", 8), "stage='3'"), ((3, 0), "n_gpus=0"),
                                       ((3, 15.0), "n_gpus=15.0"), ((1, 8, True), "offload=True")])
def test_malformed_answers_are_named(capsys, args, bad):
    assert bad in verdict(capsys, check_fit_70b, *args)


# ---------------------------------------------------------------- predict, then run

def test_the_right_prediction_passes(capsys):
    check_bytes_prediction(RIGHT, fake_run(), SIZES)
    out = capsys.readouterr().out
    assert f"✓ {RIGHT} B measured on the real run" in out and "ΣS = 15" in out


@pytest.mark.parametrize("predicted, reason", [
    (RIGHT // 2, "only the gradients' reduce-scatter"),
    ((N - 1) * S * 2, "counts elements, not bytes"),
    ((N - 1) * S * 12, "ZeRO-3's 3Ψ"),
    (2 * 41 * 4 * (N - 1) // N, "the padding is missing"),
    (2 * 41 * 4, "(N-1)/N of the buffer"),
    ((N - 1) * WHOLE * 8, "the padding is per layer"),
    (1000, "(N-1)·ΣS·8 bytes with ΣS = 15"),
])
def test_each_slip_fails_with_its_reason(capsys, predicted, reason):
    out = verdict(capsys, check_bytes_prediction, predicted, fake_run(), SIZES)
    assert f"the real rank 1 sent {RIGHT} B" in out and reason in out


def test_padding_the_whole_model_instead_of_each_layer(capsys):
    sizes = (3, 1, 2)  # layers of 4 and 4 parameters: per layer 2 + 2 = 4 elements a shard, as one buffer 3
    run = fake_run(sent=(N - 1) * 4 * 8)
    out = verdict(capsys, check_bytes_prediction, (N - 1) * 3 * 8, run, sizes)
    assert "the padding is per layer" in out


def test_no_prediction_yet_is_an_unfinished_exercise():
    with pytest.raises(NotImplementedError, match="commit your prediction"):
        check_bytes_prediction(None, fake_run(), SIZES)


@pytest.mark.parametrize("predicted", ["448", 448j, True])
def test_a_prediction_must_be_a_number(capsys, predicted):
    assert "must be a number of bytes" in verdict(capsys, check_bytes_prediction, predicted, fake_run(), SIZES)


def test_a_run_that_disagrees_with_the_model_is_refused(capsys):
    assert "the real run: sent 440 B" in verdict(capsys, check_bytes_prediction, RIGHT, fake_run(440), SIZES)


def test_graded_against_a_real_run(capsys):
    from simlab.parity.zero import run_zero
    real = run_zero(2, world_size=N, steps=1, global_batch=6, sizes=SIZES, compare_torch=False)
    assert real["bytes_sent_per_rank"] == [RIGHT] * N  # measured on the ranks' own events
    check_bytes_prediction(RIGHT, real, SIZES)
    assert "✓" in capsys.readouterr().out
    assert f"the real rank 1 sent {RIGHT} B" in verdict(capsys, check_bytes_prediction, RIGHT // 2, real, SIZES)


def _cells(path: str) -> dict:
    import json
    from pathlib import Path
    nb = json.loads((Path(__file__).resolve().parents[2] / path).read_text())
    return {c["id"]: c for c in nb["cells"]}


def test_the_exercise_runs_these_sizes_and_the_lesson_never_prints_the_answer():
    """The prediction must be worked out, not copied: the lesson's outputs (its real runs are another MLP)
    never show the number, and the exercise asks about the sizes these tests grade."""
    import re
    solution = _cells("solutions/03_zero.ipynb")
    assert f"sizes={SIZES}" in "".join(solution["l3-run"]["source"]).replace(" ", "").replace(",", ", ")
    assert f"of sizes {SIZES}" in "".join(solution["l3-predict-md"]["source"])
    printed = " ".join("".join(o.get("text", "")) for c in _cells("notebooks/03_zero.ipynb").values()
                       for o in c.get("outputs", []))
    assert printed and str(RIGHT) not in re.findall(r"\d+", printed)
