"""Lesson 3's graded questions: fitting a 70 B model on 80 GB GPUs, and predicting the bytes a rank sends in a
ZeRO-2 step (against a real run). Right answers pass; each kind of wrong answer fails with its reason."""
import math

import pytest
from notebook_cells import cells  # tests/notebook_cells.py: one reader of stored notebooks

from simlab.grading.zero import HOST_BYTES, LAYERS_70B, check_bytes_prediction, check_fit_70b, fewest_gpus
from simlab.sim.memory import peak_per_gpu_bytes, per_gpu_bytes

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
    check_fit_70b(3, 5, True)
    out = capsys.readouterr().out
    assert out.count("✓") == 2 and "14 GPUs would need 83.2 GB" in out
    assert "224.0 GB of host memory per GPU (of 250.0 GB); 4 GPUs would need 280.0 GB of host memory each" in out


def test_the_host_is_a_dgx_h100s_share():
    """2 TB for 8 GPUs; offload keeps an fp32 gradient shard and fp32 Adam (12 B) per own parameter there."""
    assert HOST_BYTES == 2 * 10**12 // 8 == 250 * 10**9
    psi = sum(LAYERS_70B)
    for n in (2, 4, 5):
        assert per_gpu_bytes(LAYERS_70B, n, 3, True, "mixed")["cpu"] == (4 + 12) * psi // n  # 875 M divides by n
    assert [fewest_gpus(s, o) for s, o in [(0, False), (1, False), (2, False), (2, True), (3, False), (3, True)]] \
        == [None, None, None, None, 15, 5]


@pytest.mark.parametrize("n, host", [(2, "560.0 GB"), (3, "373.3 GB"), (4, "280.0 GB")])
def test_offload_that_overflows_the_host_is_refused(capsys, n, host):
    """The GPU holds only 16-bit parameter shards, so 2 GPUs fit it — but each GPU's share of the host would
    have to keep 560 GB, more than a DGX H100 has for a GPU."""
    assert peak_per_gpu_bytes(LAYERS_70B, n, 3, True) <= 80e9
    out = verdict(capsys, check_fit_70b, 3, n, True)
    assert "fits the GPU" in out and f"offload keeps {host} per GPU in host memory" in out
    assert "more than the 250.0 GB each GPU has of a DGX H100's 2 TB" in out


def test_more_offload_gpus_than_needed_is_not_minimal(capsys):
    assert "not the fewest: 5 GPUs already fit" in verdict(capsys, check_fit_70b, 3, 6, True)


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
    (0, False, "with mixed-precision Adam, stage 0 keeps the full parameters, gradients and optimizer state (1120.0 GB)"),
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
    (RIGHT // 2, "that counts one collective"),
    ((N - 1) * S * 2, "counts elements, not bytes"),
    ((N - 1) * S * 12, "ZeRO-3's 3Ψ"),
    (2 * 41 * 4 * (N - 1) // N, "the padding is missing"),
    (2 * 41 * 4, "(N-1)/N of the buffer"),
    ((N - 1) * WHOLE * 8, "the padding is per layer"),
    (1000, "count it layer by layer"),
    (RIGHT + 8, "count it layer by layer"),
])
def test_each_slip_fails_with_the_concept_it_misses_and_never_the_number(capsys, predicted, reason):
    """Under nbval a failed cell shows its ✗ line: were the measured bytes (or ΣS, or the formula filled in) in
    it, the exercise would grade only that the cell was run twice."""
    out = verdict(capsys, check_bytes_prediction, predicted, fake_run(), SIZES)
    assert "not what rank 1 really sent" in out and reason in out, out
    assert str(RIGHT) not in out.replace(f"predicted {predicted} B", "") and "ΣS = 15" not in out


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


def test_a_run_that_disagrees_with_the_model_is_refused_without_the_models_number(capsys):
    out = verdict(capsys, check_bytes_prediction, RIGHT, fake_run(440), SIZES)
    assert "the real run: is not the one asked about" in out and str(RIGHT) not in out


def test_graded_against_a_real_run(capsys):
    from simlab.parity.zero import run_zero
    real = run_zero(2, world_size=N, steps=1, global_batch=6, sizes=SIZES, compare_torch=False)
    assert real["bytes_sent_per_rank"] == [RIGHT] * N  # measured on the ranks' own events
    check_bytes_prediction(RIGHT, real, SIZES)
    assert "✓" in capsys.readouterr().out
    assert "not what rank 1 really sent" in verdict(capsys, check_bytes_prediction, RIGHT // 2, real, SIZES)


def test_the_exercise_runs_these_sizes_and_the_lesson_never_prints_the_answer():
    """The prediction must be worked out, not copied: neither the lesson's outputs (its real runs are another
    MLP) nor the exercise's own cells before the real run show the number, in English or in Chinese, and the
    exercise asks about the sizes these tests grade."""
    import re
    solution = cells("solutions/03_zero.ipynb")
    assert f"sizes={SIZES}" in "".join(solution["l3-run"]["source"]).replace(" ", "").replace(",", ", ")
    assert f"of sizes {SIZES}" in "".join(solution["l3-predict-md"]["source"])
    for lesson, exercise in [("notebooks/03_zero.ipynb", "solutions/03_zero.ipynb"),
                             ("notebooks/zh/03_zero.ipynb", "solutions/zh/03_zero.ipynb")]:
        ids = list(cells(exercise))
        before = [c for c in list(cells(exercise).values())[:ids.index("l3-run")]]
        shown = list(cells(lesson).values()) + before
        printed = " ".join("".join(o.get("text", "")) for c in shown for o in c.get("outputs", []))
        text = " ".join("".join(c["source"]) for c in shown if c["cell_type"] == "markdown")
        assert printed and str(RIGHT) not in re.findall(r"\d+", printed + " " + text), lesson


def test_the_summary_states_what_the_grader_accepts():
    """The exercise's summary names both answers; its numbers are the grader's, not typed from memory."""
    import re
    text = " ".join("".join(cells("solutions/03_zero.ipynb")["l3-ex-summary"]["source"]).split())
    gpu = re.search(r"only ZeRO-3 fits \((\d+) GPUs\), or ZeRO-3 with offload \((\d+) GPUs, ([\d.]+) GB of host "
                    r"memory each of the (\d+) GB", text)
    assert (int(gpu[1]), int(gpu[2])) == (fewest_gpus(3, False), fewest_gpus(3, True))
    assert float(gpu[3]) * 1e9 == per_gpu_bytes(LAYERS_70B, int(gpu[2]), 3, True, "mixed")["cpu"]
    assert int(gpu[4]) * 10**9 == HOST_BYTES
    assert f"full 16-bit parameters ({2 * sum(LAYERS_70B) / 1e9:.0f} GB)" in text
    assert text.count("With mixed-precision Adam, for a 70 B model") == 1  # issue 23, N8


def test_the_exercise_states_the_host_the_grader_checks():
    """2 TB for 8 GPUs is the 250 GB per GPU the grader allows offload; the solution prints the host bytes."""
    text = " ".join("".join(cells("solutions/03_zero.ipynb")["l3-fit-70b-md"]["source"]).split())
    assert "8 GPUs share 2 TB of host memory: 250 GB of it per GPU" in text and HOST_BYTES == 2 * 10**12 // 8
    printed = "".join("".join(o.get("text", "")) for o in cells("solutions/03_zero.ipynb")["l3-fit-70b"]["outputs"])
    assert "[280.0, 224.0]" in printed  # 4 GPUs overflow the host's 250 GB, 5 fit: the summary's 5 GPUs, 224 GB


@pytest.mark.parametrize("path, cell_id, links", [
    ("notebooks/03_zero.ipynb", "e1698bcf", ["../exercises/03_zero.ipynb", "04_pipeline_parallel.ipynb"]),
    ("notebooks/zh/03_zero.ipynb", "e1698bcf", ["../../exercises/zh/03_zero.ipynb", "04_pipeline_parallel.ipynb"]),
    ("solutions/03_zero.ipynb", "l3-ex-summary", ["../exercises/04_pipeline_parallel.ipynb",
                                                  "../notebooks/04_pipeline_parallel.ipynb"]),
    ("solutions/zh/03_zero.ipynb", "l3-ex-summary", ["../../exercises/zh/04_pipeline_parallel.ipynb",
                                                     "../../notebooks/zh/04_pipeline_parallel.ipynb"]),
    ("exercises/03_zero.ipynb", "l3-ex-summary", ["../exercises/04_pipeline_parallel.ipynb",
                                                  "../notebooks/04_pipeline_parallel.ipynb"]),
])
def test_the_next_step_is_a_link_in_the_learners_language(path, cell_id, links):
    """Issue 23, N15: "Next" is a relative markdown link, not a code-formatted path; the Chinese course links
    the Chinese notebooks."""
    import re
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    text = "".join(cells(path)[cell_id]["source"])
    assert re.findall(r"\]\(([^)]+)\)", text) == links
    assert all((root / path).parent.joinpath(link).resolve().exists() for link in links)
    assert re.search(r"\*\*(Next|下一课|下一个练习)[:：]\*\* \[", text), text


def test_fits_are_said_with_mixed_precision_adam_in_both_languages():
    """Issue 23, N8: "does not fit" holds for mixed-precision Adam's 16 bytes; an 8-bit optimizer changes K."""
    for lesson, solution, words in [("notebooks/03_zero.ipynb", "solutions/03_zero.ipynb", "mixed-precision Adam"),
                                    ("notebooks/zh/03_zero.ipynb", "solutions/zh/03_zero.ipynb", "混合精度 Adam")]:
        memory = "".join(cells(lesson)["6f2830f4"]["source"])
        assert words in memory and "Adam8bit" in memory
        summary = "".join(cells(solution)["l3-ex-summary"]["source"])
        assert words in summary and ("8-bit optimizer" in summary or "8 位优化器" in summary)


def test_the_lesson_asks_for_predictions_before_the_cells_that_answer_them():
    """Issue 23, §5: the walkthrough's peaks and the real ranks' bytes are predicted before they print."""
    lesson = cells("notebooks/03_zero.ipynb")
    ids = list(lesson)
    for prompt, answer in [("l3-peak-predict", "94997e7d"), ("ad2fc8db", "a7f1e862")]:
        assert "**Predict, then run.**" in "".join(lesson[prompt]["source"])
        assert ids.index(answer) == ids.index(prompt) + 1
