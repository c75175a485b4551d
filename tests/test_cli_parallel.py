"""`simlab schedule`, `simlab split`, `simlab run pp|tp`: JSON contents and one-line errors before anything starts."""
import json
import subprocess
import sys

import pytest

from simlab.cli import main


def _json(argv, capsys):
    assert main(argv + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("name, p, m, v, bubble", [
    ("gpipe", 4, 8, 1, 3 / 11), ("1f1b", 4, 8, 1, 3 / 11), ("interleaved", 4, 8, 2, 3 / 19), ("naive", 3, 1, 1, 2 / 3),
])
def test_schedule_json_has_the_lists_and_the_closed_form_bubble(name, p, m, v, bubble, capsys):
    argv = ["schedule", name, "--stages", str(p), "--microbatches", str(m), "--chunks", str(v)]
    t = ["--t-f", str(1 / v), "--t-b", str(2 / v)]  # a chunk is 1/v of a stage
    out = _json(argv + t, capsys)
    assert len(out["ranks"]) == p and sum(len(r) for r in out["ranks"]) == 2 * p * m * v
    assert out["bubble_fraction"] == pytest.approx(bubble)
    assert out["bubble_ratio"] == pytest.approx(bubble / (1 - bubble))  # idle / ideal, the papers' (p-1)/m
    # each rank computes m·v actions of (1 + 2)/v: busy 3m of the makespan, idle the bubble
    assert out["makespan"] == pytest.approx(3 * m / (1 - bubble))
    peaks = {"gpipe": [m] * p, "1f1b": [min(p - r, m) for r in range(p)], "naive": [1] * p,
             "interleaved": [min((v - 1) * p + 2 * (p - r - 1) + 1, m * v) for r in range(p)]}  # Megatron's warm-up + 1
    assert out["peak_activations"] == peaks[name]


def test_schedule_1f1b_json_matches_megatron(capsys):
    out = _json(["schedule", "1f1b", "--stages", "2", "--microbatches", "3"], capsys)
    assert out["ranks"] == [["0F0", "0F1", "0B0", "0F2", "0B1", "0B2"], ["1F0", "1B0", "1F1", "1B1", "1F2", "1B2"]]
    assert out["peak_activations"] == [2, 1] and out["makespan"] == 12.0  # (m + p - 1)(t_f + t_b)


def test_schedule_text_prints_grid_and_gantt(capsys):
    assert main(["schedule", "zero-bubble", "--stages", "2", "--microbatches", "2", "--gantt"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("rank 0: 0F0 0F1 0I0") and "bubble fraction" in out and "I backward-input" in out


def test_split_json_covers_the_weight(capsys):
    out = _json(["split", "column", "--ranks", "4", "--shape", "8x12"], capsys)
    text = json.dumps(out)
    assert "all-gather" in text and out != {}
    assert main(["split", "row", "--ranks", "2", "--shape", "8x12"]) == 0
    assert "all-reduce" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["schedule", "gpipe", "--stages", "0"], "--stages=0: must be >= 1"),
    (["schedule", "gpipe", "--microbatches", "0"], "--microbatches=0: must be >= 1"),
    (["schedule", "interleaved", "--stages", "4", "--microbatches", "3", "--chunks", "2"],
     "--microbatches=3: interleaved needs a multiple of --stages=4"),
    (["schedule", "interleaved", "--chunks", "0"], "--chunks=0"),
    (["schedule", "1f1b", "--chunks", "2"], "--chunks=2: only interleaved"),
    (["schedule", "naive", "--microbatches", "4"], "--microbatches=4: naive"),
    (["schedule", "gpipe", "--t-b", "0"], "--t-b=0.0"),
    (["schedule", "2f2b"], "invalid choice: '2f2b'"),
    (["split", "column", "--shape", "0x12"], "--shape=0x12: dimensions must be >= 1"),
    (["split", "column", "--shape", "8by12"], "--shape='8by12'"),
    (["split", "row", "--ranks", "0"], "--ranks=0"),
    (["run", "pp", "--world-size", "4", "--stages", "2"], "--world-size=4: must equal --stages=2"),
    (["run", "pp", "--world-size", "0"], "--world-size=0"),
    (["run", "pp", "--microbatches", "0"], "microbatches=0"),
    (["run", "pp", "--schedule", "interleaved", "--world-size", "4", "--microbatches", "6", "--chunks", "2"],
     "--microbatches=6"),
    (["run", "pp", "--chunks", "0"], "chunks=0"),
    (["run", "pp", "--microbatches", "6"], "--global-batch=16: must be divisible by --microbatches=6"),
    (["run", "pp", "--microbatches", "4", "--global-batch", "10"], "--global-batch=10: must be divisible"),
    (["run", "tp", "--world-size", "3"], "--ffn=16: must be divisible by --world-size=3"),
    (["run", "tp", "--world-size", "2", "--heads", "3", "--block", "attention"], "--heads=3"),
    (["run", "tp", "--hidden", "0"], "--hidden=0"),
])
def test_bad_arguments_get_one_line_naming_the_parameter(argv, message, rejected):
    rejected(argv, message)


def test_run_pp_json_matches_one_process_and_the_simulator(capsys):
    out = _json(["run", "pp", "--schedule", "1f1b", "--world-size", "4", "--microbatches", "8"], capsys)
    assert out["schedule"] == "1f1b" and out["max_abs_diff_vs_reference"] < 1e-5
    assert 0 < out["measured_bubble_fraction"] < 1 and 0 < out["simulated_bubble_fraction"] < 1
    for which in ("measured", "simulated"):  # both conventions: ratio = fraction / (1 - fraction)
        f = out[f"{which}_bubble_fraction"]
        assert out[f"{which}_bubble_ratio"] == pytest.approx(f / (1 - f))
    assert out["ranks"][3][:2] == ["3F0", "3B0"]  # the last rank alternates from the start


@pytest.mark.parametrize("argv, want", [
    ([], {"microbatches": 8, "global_batch": 16}),
    (["--schedule", "naive"], {"microbatches": 1, "global_batch": 16}),
    (["--microbatches", "6", "--global-batch", "12"], {"microbatches": 6, "global_batch": 12}),
])
def test_run_pp_passes_microbatches_global_batch_and_two_steps(monkeypatch, argv, want, capsys):
    import simlab.parity.pipeline as PP
    seen = {}
    def fake(schedule, **kwargs):
        seen.update(kwargs)
        raise ValueError("stop here")
    monkeypatch.setattr(PP, "run_pipeline", fake)
    with pytest.raises(SystemExit):
        main(["run", "pp", *argv])
    assert {k: seen[k] for k in want} == want and seen["steps"] == 2  # step 2 is timed, not the warm-up


@pytest.mark.parametrize("argv", [["--schedule", "naive"], ["--microbatches", "6", "--global-batch", "12"]])
def test_run_pp_naive_and_any_microbatch_count_run(argv, capsys):
    out = _json(["run", "pp", "--world-size", "2", *argv], capsys)
    assert out["max_abs_diff_vs_reference"] < 1e-5 and out["microbatches"] == (1 if "naive" in argv else 6)


def test_run_tp_json_counts_match_the_plan(capsys):
    out = _json(["run", "tp", "--world-size", "4"], capsys)
    assert out["max_abs_diff_vs_reference"] < 1e-5
    assert out["allreduce_calls_forward"] == out["allreduce_calls_backward"] == 1
    assert out["bytes_sent_per_rank"] == out["plan_bytes_sent_per_rank"]


def test_run_pp_under_torchrun_prints_once():
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                          "-m", "simlab", "run", "pp", "--schedule", "gpipe", "--microbatches", "4", "--json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1 and json.loads(lines[0])["max_abs_diff_vs_reference"] < 1e-5


@pytest.mark.parametrize("argv", [["schedule"], ["split"]])
def test_commands_have_help(argv):
    out = subprocess.run([sys.executable, "-m", "simlab", *argv, "--help"], capture_output=True, text=True, timeout=60)
    assert "usage: simlab" in out.stdout and "--json" in out.stdout
