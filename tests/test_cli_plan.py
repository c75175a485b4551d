"""`simlab plan` and the transformer form of `simlab memory`: the documented keys, exactly, and one-line
errors naming the flag."""
import json

import pytest

from simlab.cli import main

CONFIG = {"tp", "pp", "dp", "chunks", "schedule", "zero", "offload", "microbatch", "recompute", "sequence_parallel"}
BYTES = {"params", "grads", "optimizer", "activations", "total"}


def run(capsys, *argv):
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(f"not strict JSON: {c}"))


def test_one_plan(capsys):
    out = run(capsys, "plan", "--model", "megatron-1t", "--gpus", "512", "--global-batch", "512", "--tp", "8",
              "--pp", "64", "--dp", "1", "--recompute", "full")
    assert {"config", "fits", "bytes_per_gpu", "step_seconds", "tokens_per_second", "mfu", "breakdown"} <= set(out)
    assert set(out["config"]) == CONFIG and set(out["bytes_per_gpu"]) == BYTES and out["fits"] is True
    assert out["step_seconds"] == pytest.approx(94.42, rel=0.2)  # Korthikanti et al. 2022, Table 5
    assert set(out["breakdown"]) == {"compute", "tp_comm", "pp_p2p", "pp_bubble", "dp_comm", "offload", "optimizer"}


def test_search(capsys):
    out = run(capsys, "plan", "--model", "gpt3-175b", "--gpus", "256", "--gpus-per-node", "8", "--gpu", "a100-80gb",
              "--inter-node-gbps", "25", "--global-batch", "512", "--tp", "8")
    assert {"best", "candidates", "rejected"} <= set(out) and len(out["candidates"]) == 10
    assert out["best"] == out["candidates"][0] and set(out["best"]["config"]) == CONFIG
    assert all(c["config"]["tp"] == 8 for c in out["candidates"])  # the fixed choice holds
    assert all(isinstance(n, int) for n in out["rejected"].values())


def test_search_prints_the_explanation(capsys):
    assert main(["plan", "--model", "megatron-1.7b-2021", "--gpus", "8", "--global-batch", "64"]) == 0
    text = capsys.readouterr().out
    assert "best: " in text and "s/step" in text and "MFU" in text


def test_memory_for_a_transformer_plan(capsys):
    out = run(capsys, "memory", "--model", "gpt3-175b", "--tp", "8", "--pp", "8", "--schedule", "interleaved",
              "--chunks", "3", "--precision", "mixed-fp32-grads", "--recompute", "selective", "--sequence-parallel",
              "--global-batch", "64")
    assert set(out["bytes_per_gpu"]) == BYTES
    assert 12.35 * 2**30 < out["bytes_per_gpu"]["activations"] < 12.5 * 2**30  # Korthikanti Figure 1 (+ embedding)
    custom = run(capsys, "memory", "--layers", "96", "--hidden", "12288", "--heads", "96", "--seq", "2048",
                 "--vocab", "51200", "--tp", "8", "--pp", "8", "--schedule", "interleaved", "--chunks", "3",
                 "--precision", "mixed-fp32-grads", "--recompute", "selective", "--sequence-parallel",
                 "--global-batch", "64")
    assert custom["bytes_per_gpu"] == out["bytes_per_gpu"]


def test_memory_keeps_the_zero_form(capsys):
    out = run(capsys, "memory", "--params", "7.5e9", "--gpus", "64", "--zero", "1")
    assert out["bytes_per_gpu"]["total"] == 31.40625e9 and "activations" not in out["bytes_per_gpu"]


@pytest.mark.parametrize("argv, message", [
    (["plan", "--model", "gpt3-175b", "--gpus", "56", "--global-batch", "56", "--tp", "7", "--pp", "1", "--dp", "8"],
     "--heads=96: must be divisible by --tp=7"),
    (["plan", "--model", "gpt4", "--global-batch", "8"], "--model='gpt4': must be one of"),
    (["plan", "--model", "gpt3-175b", "--gpus", "64", "--global-batch", "100", "--tp", "8", "--pp", "2", "--dp", "4",
      "--microbatch", "2"], "--global-batch=100: must be divisible by dp × microbatch = 4 × 2"),
    (["plan", "--model", "megatron-22b", "--gpus", "64", "--global-batch", "64", "--tp", "1", "--pp", "64",
      "--dp", "1"], "--pp=64: more stages than --layers=48"),
    (["plan", "--model", "gpt3-175b"], "--global-batch=None: required"),
    (["plan", "--layers", "4", "--global-batch", "8"], "give --model PRESET, or the whole shape"),
    (["plan", "--model", "gpt3-175b", "--global-batch", "8", "--inter-node-gbps", "inf"], "--inter-node-gbps=inf"),
    (["plan", "--model", "gpt3-175b", "--gpus", "12", "--global-batch", "8"], "--gpus=12: must be a multiple of"),
    (["memory", "--model", "gpt3-175b", "--params", "7e9"], "--params"),
    (["memory", "--model", "gpt3-175b", "--tp", "8", "--sequence-parallel", "--offload"], "--offload=True: needs zero"),
])
def test_bad_input_is_one_line(argv, message, rejected):
    rejected(argv, message)
