"""`simlab plan` and the transformer form of `simlab memory`: the documented keys, exactly, and one-line
errors naming the flag."""
import json

import pytest

from simlab.cli import main

CONFIG = {"tp", "pp", "dp", "chunks", "schedule", "zero", "offload", "microbatch", "recompute", "sequence_parallel",
          "attention", "overlap", "shard", "stage_layers", "bucket", "cp", "cp_comm", "ep", "capacity", "loss"}
BREAKDOWN = {"compute", "tp_comm", "pp_p2p", "cp_comm", "ep_comm", "pp_bubble", "dp_comm", "overlap", "offload",
             "optimizer"}
BYTES = {"params", "grads", "optimizer", "activations", "total"}


def run(capsys, *argv):
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(f"not strict JSON: {c}"))


def test_one_plan(capsys):
    out = run(capsys, "plan", "--model", "megatron-1t", "--gpus", "512", "--global-batch", "512", "--tp", "8",
              "--pp", "64", "--dp", "1", "--recompute", "full", "--attention", "eager", "--overlap", "none")
    assert {"config", "fits", "bytes_per_gpu", "step_seconds", "tokens_per_second", "mfu", "breakdown", "hidden",
            "usable_bytes_per_gpu"} <= set(out)
    assert set(out["config"]) == CONFIG and set(out["bytes_per_gpu"]) == BYTES and out["fits"] is True
    assert out["step_seconds"] == pytest.approx(94.42, rel=0.15)  # Korthikanti et al. 2022, Table 5
    assert set(out["breakdown"]) == BREAKDOWN and set(out["hidden"]) == {"tp_comm", "cp_comm", "dp_comm"}


def test_the_loss_flag_reaches_the_plan_and_the_search(capsys):
    """--loss fp32 (plain PyTorch's cross-entropy) holds 8 more bytes per logit on the GPU with the output layer:
    llama3-8b, 2 sequences of 8192 tokens per micro-batch, no TP: 8 · 16384 · 128256 bytes."""
    one = ["plan", "--model", "llama3-8b", "--gpus", "8", "--gpu", "h100-80gb", "--global-batch", "16",
           "--microbatch", "2", "--tp", "1", "--pp", "1", "--dp", "8", "--zero", "3", "--recompute", "full"]
    fused, fp32 = run(capsys, *one), run(capsys, *one, "--loss", "fp32")
    assert (fused["config"]["loss"], fp32["config"]["loss"]) == ("fused", "fp32")
    assert fp32["bytes_per_gpu"]["total"] - fused["bytes_per_gpu"]["total"] == 8 * 16384 * 128256
    found = run(capsys, "plan", "--model", "llama3-8b", "--gpus", "8", "--gpu", "h100-80gb", "--global-batch", "16",
                "--loss", "fp32")
    assert found["best"]["config"]["loss"] == "fp32"


def test_search(capsys):
    out = run(capsys, "plan", "--model", "gpt3-175b", "--gpus", "256", "--gpus-per-node", "8", "--gpu", "a100-80gb",
              "--inter-node-gbps", "25", "--global-batch", "512", "--tp", "8")
    assert {"best", "candidates", "rejected"} <= set(out) and len(out["candidates"]) == 10
    assert out["best"] == out["candidates"][0] and set(out["best"]["config"]) == CONFIG
    assert isinstance(out["ties"], list) and isinstance(out["notes"], list)
    assert all(c["config"]["tp"] == 8 for c in out["candidates"])  # the fixed choice holds
    assert all(isinstance(n, int) for n in out["rejected"].values())


def test_search_prints_the_explanation(capsys):
    assert main(["plan", "--model", "megatron-1.7b-2021", "--gpus", "8", "--global-batch", "64"]) == 0
    text = capsys.readouterr().out
    assert "best: " in text and "s/step" in text and "MFU" in text
    assert "tie within the model's error" in text and "to decide, " in text


def test_every_model_knob_and_a_custom_machine(capsys, tmp_path):
    """GQA, SwiGLU, untied embeddings, no dropout and the MLP's width from flags equal the preset; a GPU and
    cluster from flags or a JSON file, the flags winning; NICs × Gb/s is the node's network."""
    common = ["--gpus", "16", "--global-batch", "32", "--tp", "2", "--pp", "1", "--dp", "8", "--zero", "3"]
    preset = run(capsys, "plan", "--model", "llama3-8b", *common)
    shape = run(capsys, "plan", "--layers", "32", "--hidden", "4096", "--heads", "32", "--kv-heads", "8", "--gated",
                "--untied", "--no-dropout", "--no-biases", "--positions", "rotary", "--ffn", "14336", "--seq", "8192", "--vocab", "128256", *common)
    assert shape["bytes_per_gpu"] == preset["bytes_per_gpu"] and shape["step_seconds"] == preset["step_seconds"]
    nics = run(capsys, "plan", "--model", "llama3-8b", "--nics-per-node", "8", "--nic-gbps", "200", *common)
    assert nics["step_seconds"] == preset["step_seconds"]  # 8 × 200 = the default 1600 Gb/s
    slow = run(capsys, "plan", "--model", "llama3-8b", "--nics-per-node", "1", "--nic-gbps", "25", *common)
    assert slow["breakdown"]["dp_comm"] > preset["breakdown"]["dp_comm"]
    custom = run(capsys, "plan", "--model", "llama3-8b", "--gpu", "h100-80gb", "--gpu-memory-gib", "94",
                 "--peak-tflops", "835", "--hbm-gbs", "3900", *common)
    assert custom["usable_bytes_per_gpu"] == pytest.approx((94 - 1.75) * 2**30 * 0.95)
    spec = tmp_path / "cluster.json"
    spec.write_text(json.dumps({"gpu_memory_gib": 94, "peak_tflops": 835, "hbm_gbs": 3900, "gpus_per_node": 8}))
    from_file = run(capsys, "plan", "--model", "llama3-8b", "--gpu", "h100-80gb", "--hardware", str(spec), *common)
    assert from_file["step_seconds"] == custom["step_seconds"]
    flags_win = run(capsys, "plan", "--model", "llama3-8b", "--gpu", "h100-80gb", "--hardware", str(spec),
                    "--peak-tflops", "989", *common)
    assert flags_win["step_seconds"] < custom["step_seconds"]


def test_a_plan_with_hsdp_fp8_and_unequal_stages(capsys):
    out = run(capsys, "plan", "--model", "llama3-70b", "--gpu", "h100-80gb", "--gpus", "64", "--global-batch", "128",
              "--tp", "4", "--pp", "4", "--dp", "4", "--zero", "1", "--shard", "2", "--stage-layers", "19,21,21,19",
              "--precision", "fp8", "--overlap", "dp,params,tp", "--sequence-parallel")
    assert out["config"]["shard"] == 2 and out["config"]["stage_layers"] == [19, 21, 21, 19]
    assert out["config"]["overlap"] == "dp,params,tp"
    deepspeed = run(capsys, "plan", "--model", "gpt3-175b", "--gpus", "256", "--global-batch", "256", "--tp", "1",
                    "--pp", "1", "--dp", "256", "--zero", "3", "--recompute", "full", "--bucket", "5e7,5e8")
    assert deepspeed["config"]["bucket"] == [50_000_000, 500_000_000]

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
    (["plan", "--model", "gpt3-175b", "--global-batch", "8", "--overlap", "dp,bogus"], "--overlap='dp,bogus': must be"),
    (["plan", "--model", "gpt3-175b", "--global-batch", "8", "--bucket", "1,2,3"], "--bucket='1,2,3': must be two"),
    (["plan", "--model", "gpt3-175b", "--global-batch", "8", "--loss", "fp16"], "--loss"),
    (["plan", "--model", "gpt3-175b", "--global-batch", "8", "--bucket", "nan,5"], "--bucket='nan,5'"),
    (["plan", "--model", "gpt3-175b", "--global-batch", "64", "--gpus", "64", "--tp", "8", "--pp", "4", "--dp", "2",
      "--stage-layers", "24,24,24"], "--stage-layers=(24, 24, 24): must list --pp=4 stages"),
    (["plan", "--model", "gpt3-175b", "--global-batch", "8", "--tp", "8", "--pp", "1", "--dp", "1",
      "--stage-layers", "a,b"], "--stage-layers='a,b': must be whole numbers"),
    (["plan", "--model", "gpt3-175b", "--global-batch", "8", "--stage-layers", "48,48"], "give it with --tp, --pp"),
    (["plan", "--model", "gpt3-175b", "--global-batch", "8", "--kv-heads", "7"], "--heads=96: must be divisible by"),
    (["plan", "--model", "gpt3-175b", "--global-batch", "8", "--peak-tflops", "-3"], "--peak-tflops=-3.0: must be"),
    (["plan", "--model", "gpt3-175b", "--global-batch", "8", "--nic-gbps", "400"], "give --nics-per-node and --nic-gbps"),
    (["plan", "--model", "gpt3-175b", "--global-batch", "8", "--hardware", "/nonexistent.json"], "--hardware="),
    (["plan", "--model", "gpt3-175b", "--global-batch", "64", "--gpus", "64", "--tp", "8", "--pp", "1", "--dp", "8",
      "--zero", "1", "--shard", "3"], "--dp=8: must be divisible by --shard=3"),
])
def test_bad_input_is_one_line(argv, message, rejected):
    rejected(argv, message)


@pytest.mark.parametrize("flag, value, message", [
    ("--tp", "0", "--tp=0: must be >= 1"), ("--dp", "0", "--dp=0: must be >= 1"),
    ("--microbatch", "0", "--microbatch=0: must be >= 1"), ("--chunks", "0", "--chunks=0: must be >= 1"),
    ("--zero", "5", "--zero=5: must be between 0 and 3"), ("--shard", "-1", "--shard=-1: must be between 0"),
    ("--global-batch", str(10**20), "must be between 1 and"),
])
def test_a_searched_constraint_of_zero_or_out_of_range_is_refused_not_ignored(flag, value, message, rejected):
    argv = ["plan", "--model", "gpt3-175b", "--global-batch", "64", flag, value]
    rejected(argv, message)


def test_a_huge_batch_is_searched_through_its_divisors_not_a_loop_to_it(capsys):
    """Divisors in O(√n), micro-batches up to 32: a batch of 10⁸ sequences needs no 10⁸-step loop."""
    from simlab.sim.advisor import _divisors
    assert all(_divisors(n) == [d for d in range(1, n + 1) if n % d == 0] for n in range(1, 500))
    assert _divisors(10**8)[-3:] == [25_000_000, 50_000_000, 100_000_000]
    out = run(capsys, "plan", "--model", "gpt3-175b", "--gpus", "8", "--global-batch", str(10**8))
    assert out["plans_evaluated"] > 0


def test_run_hybrid_refuses_zero_chunks(rejected):
    rejected(["run", "hybrid", "--dp", "1", "--pp", "2", "--tp", "1", "--schedule", "interleaved", "--chunks", "0"],
             "--chunks=0: must be >= 1")


# ---- lesson 7: context parallelism, experts ------------------------------------------------------------------------

def test_one_plan_with_context_parallelism_and_a_preset_at_another_length(capsys):
    """--seq with --model is the training length; --cp and --cp-comm reach the plan, and the model's numbers are
    the library's own for that plan."""
    from simlab.sim.hardware import cluster
    from simlab.sim.hybrid import Plan
    from simlab.sim.hybrid_time import step
    from simlab.sim.model import PRESETS
    out = run(capsys, "plan", "--model", "llama3-8b", "--seq", "65536", "--gpus", "8", "--gpu", "h100-80gb",
              "--global-batch", "8", "--tp", "2", "--pp", "1", "--dp", "1", "--cp", "4", "--cp-comm", "all-gather-kv",
              "--recompute", "full")
    assert (out["config"]["cp"], out["config"]["cp_comm"]) == (4, "all-gather-kv")
    plan = Plan(tp=2, cp=4, recompute="full", cp_comm="all-gather-kv")
    model = PRESETS["llama3-8b"].with_(seq=65536)
    assert out["step_seconds"] == pytest.approx(step(model, plan, cluster("h100-80gb", gpus=8), 8)["step_seconds"])


def test_a_mixture_of_experts_from_flags_searched_with_ep_fixed(capsys):
    out = run(capsys, "plan", "--layers", "4", "--hidden", "512", "--heads", "8", "--seq", "1024", "--vocab", "1000",
              "--experts", "8", "--top-k", "2", "--expert-ffn", "1024", "--gpus", "8", "--global-batch", "16",
              "--ep", "4", "--capacity", "1.25")
    assert all(c["config"]["ep"] == 4 and c["config"]["capacity"] == 1.25 for c in out["candidates"])
    preset = run(capsys, "plan", "--model", "mixtral-8x7b", "--gpus", "64", "--gpu", "h100-80gb",
                 "--global-batch", "256", "--tp", "1", "--pp", "1", "--dp", "64", "--ep", "8", "--zero", "1")
    assert preset["config"]["ep"] == 8


def test_the_search_explains_cp_in_words(capsys):
    assert main(["plan", "--model", "llama3-8b", "--seq", "131072", "--gpus", "8", "--gpu", "h100-80gb",
                 "--global-batch", "8"]) == 0
    text = capsys.readouterr().out
    assert "\nCP" in text and " cp " in text  # the CP line of the explanation, and a plan's cp in the table


@pytest.mark.parametrize("extra, message", [
    (["--cp", "0"], "--cp=0: must be >= 1"), (["--ep", "0"], "--ep=0: must be >= 1"),
    (["--cp-comm", "star"], "--cp-comm"), (["--capacity", "nan"], "--capacity=nan"),
    (["--capacity", "-1"], "--capacity=-1.0"), (["--capacity", "1.25"], "--capacity=1.25: only a mixture-of-experts"),
    (["--experts", "-1"], "--experts=-1"), (["--top-k", "3"], "--top-k=3"),
    (["--experts", "8", "--top-k", "9"], "--top-k=9"), (["--expert-ffn", "-5"], "--expert-ffn=-5"),
    (["--ep", "2", "--tp", "1", "--pp", "1", "--dp", "8"], "--ep=2: expert parallelism needs a mixture-of-experts"),
    (["--seq", "1000", "--cp", "8", "--tp", "1", "--pp", "1", "--dp", "1"], "--cp=8: the sequence --seq=1000"),
    (["--seq", "100", "--layers", "4"], "give --model or the shape, not both"),
])
def test_bad_lesson_7_flags_are_one_line(extra, message, rejected):
    rejected(["plan", "--model", "gpt3-175b", "--gpus", "8", "--global-batch", "8", *extra], message)
