"""`simlab plan … --emit TARGET [--out FILE]` and the two ways a model comes in (`--model-config`,
`--from-megatron-args`): the file is exactly what `simlab.export` writes for the plan the command chose, stdout
holds the file alone when there is no --out, and every refusal is one line naming the flag."""
import json

import pytest

from simlab.cli import main
from simlab.export import emit
from simlab.export.expressible import best_expressible
from simlab.export.model_config import from_hf_config
from simlab.sim.hardware import cluster
from simlab.sim.hybrid import Plan
from simlab.sim.model import PRESETS

LLAMA3_8B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
             "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
             "intermediate_size": 14336, "vocab_size": 128256, "max_position_embeddings": 131072,
             "tie_word_embeddings": False, "hidden_act": "silu", "rms_norm_eps": 1e-5}
ONE_PLAN = ["--tp", "2", "--pp", "2", "--dp", "2", "--microbatch", "1"]


def test_one_plan_goes_to_stdout_alone(capsys):
    argv = ["plan", "--model", "llama3-8b", "--gpus", "8", "--gpu", "h100-80gb", "--global-batch", "16", *ONE_PLAN]
    assert main([*argv, "--emit", "megatron"]) == 0
    out, err = capsys.readouterr()
    plan = Plan(tp=2, pp=2, dp=2)
    assert out == emit("megatron", PRESETS["llama3-8b"], cluster("h100-80gb", gpus=8), 16, plan)
    assert "tp 2 pp 2 dp 2" in err and "s per step" in err  # what was exported, on stderr


def test_a_search_exports_the_best_plan_the_framework_can_run(capsys, tmp_path):
    """DeepSpeed refuses the advisor's best here (its ZeRO-1/2 gathers inside step()); the file holds the
    fastest plan it accepts, and stderr says why and at what cost."""
    model, c = PRESETS["llama3-8b"], cluster("h100-80gb", gpus=8)
    target = tmp_path / "ds_config.json"
    argv = ["plan", "--model", "llama3-8b", "--gpus", "8", "--gpu", "h100-80gb", "--global-batch", "32",
            "--emit", "deepspeed", "--out", str(target)]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    found = best_expressible("deepspeed", model, c, 32)
    assert found["overall_refused"] and found["slower"] >= 1
    assert target.read_text() == emit("deepspeed", model, c, 32, found["plan"])
    assert json.loads(target.read_text())["train_batch_size"] == 32
    assert f"wrote {target} (deepspeed)" in out and "in the file:" in out  # the meanings beside the JSON
    assert "deepspeed cannot run the best plan" in err and f"{found['slower']:.2f}×" in err


def test_json_carries_the_export(capsys):
    argv = ["plan", "--model", "llama3-8b", "--gpus", "8", "--global-batch", "16", *ONE_PLAN, "--emit",
            "pipeline-csv", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["export"]["target"] == "pipeline-csv" and out["export"]["file"] is None
    assert out["export"]["text"].splitlines() == emit("pipeline-csv", PRESETS["llama3-8b"], cluster(gpus=8), 16,
                                                      Plan(tp=2, pp=2, dp=2)).splitlines()


def test_model_config_with_a_training_length(capsys, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA3_8B))
    argv = ["plan", "--model-config", str(path), "--seq", "8192", "--gpus", "8", "--global-batch", "16", *ONE_PLAN,
            "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["config"]["tp"] == 2
    model = from_hf_config(path, seq=8192)
    assert model.params == PRESETS["llama3-8b"].params  # Llama-3-8B's published shape is the preset's


def test_megatron_arguments(capsys):
    text = ("--num-layers 96 --hidden-size 12288 --num-attention-heads 96 --seq-length 2048 "
            "--max-position-embeddings 2048 --vocab-size 50257 --tensor-model-parallel-size 8")
    argv = ["memory", "--from-megatron-args", text, "--tp", "8", "--pp", "8", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["params"] == pytest.approx(PRESETS["gpt3-175b"].params, rel=1e-3)


@pytest.mark.parametrize("argv, message", [
    (["plan", "--model", "llama3-8b", "--global-batch", "8", "--out", "x.sh"], "--out='x.sh': give --emit with it"),
    (["plan", "--model", "llama3-8b", "--global-batch", "8", "--emit", "nemo"], "--emit"),
    (["plan", "--model", "llama3-8b", "--model-config", "c.json", "--global-batch", "8"], "give one of --model"),
    (["plan", "--model-config", "/nonexistent/config.json", "--global-batch", "8"], "cannot be read"),
    (["plan", "--from-megatron-args", "--num-layers 2 --bogus 3", "--global-batch", "8"], "--bogus"),
    (["plan", "--from-megatron-args", "--num-layers 2", "--seq", "8", "--global-batch", "8"], "--seq-length inside"),
    (["plan", "--model", "llama3-8b", "--gpus", "8", "--global-batch", "16", *ONE_PLAN, "--attention", "eager",
      "--emit", "torchtitan"], "eager"),
    (["plan", "--model", "llama3-8b", "--gpus", "8", "--global-batch", "16", "--tp", "1", "--pp", "1", "--dp", "8",
      "--emit", "pipeline-csv"], "pp"),
])
def test_refusals_are_one_line(argv, message, rejected):
    rejected(argv, message)


def test_an_unwritable_out_is_refused_before_the_search(rejected, tmp_path):
    rejected(["plan", "--model", "llama3-8b", "--global-batch", "8", "--emit", "megatron", "--out",
              str(tmp_path / "missing" / "dir" / "x.sh")], "--out=")


def test_the_search_for_a_framework_keeps_the_bucket_given():
    """--bucket is the framework's setting: the search for DeepSpeed's fastest plan runs with it, and the file
    is the one written for that plan."""
    model, c = PRESETS["llama3-8b"], cluster("h100-80gb", gpus=8)
    found = best_expressible("deepspeed", model, c, 32, bucket=(50_000_000, 500_000_000), zero=3)
    assert found["best"]["config"]["bucket"] == [50_000_000, 500_000_000]
    assert found["text"] == emit("deepspeed", model, c, 32, found["plan"])
    assert json.loads(found["text"])["zero_optimization"]["stage3_prefetch_bucket_size"] == 50_000_000


def test_lesson_7_knobs_reach_the_exported_file_and_a_framework_that_cannot_say_them_refuses(capsys, rejected):
    """--cp, --cp-comm, --ep and --capacity reach Megatron's flags as `simlab.export` writes them; torchtitan has
    no Ulysses and refuses in one line naming the knob."""
    argv = ["plan", "--model", "llama3-8b", "--seq", "32768", "--gpus", "8", "--gpu", "h100-80gb", "--global-batch",
            "8", "--tp", "2", "--pp", "1", "--dp", "1", "--cp", "4", "--cp-comm", "ulysses", "--zero", "1"]
    assert main([*argv, "--emit", "megatron"]) == 0
    out, _err = capsys.readouterr()
    plan = Plan(tp=2, cp=4, zero=1, cp_comm="ulysses")
    model = PRESETS["llama3-8b"].with_(seq=32768)
    assert out == emit("megatron", model, cluster("h100-80gb", gpus=8), 8, plan) and "--cp-comm-type a2a" in out
    rejected([*argv, "--emit", "torchtitan"], "--cp-comm='ulysses': torch's context parallelism")
    moe = ["plan", "--model", "mixtral-8x7b", "--gpus", "64", "--gpu", "h100-80gb", "--global-batch", "256",
           "--tp", "1", "--pp", "2", "--dp", "32", "--ep", "8", "--zero", "1", "--capacity", "1.25", "--emit", "megatron"]
    assert main(moe) == 0
    out, _err = capsys.readouterr()
    assert "--expert-model-parallel-size 8" in out and "--moe-expert-capacity-factor 1.25" in out
