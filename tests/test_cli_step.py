"""`simlab step` (one training step on one GPU) says what `simlab plan` says for the plan tp = pp = dp = 1, broken into
parts; `simlab run step` runs gradient accumulation for real; both refuse bad input in one line and print strict
JSON; the text form speaks Chinese under `set_language("zh")`."""
import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_cli_properties import COMMANDS, _value, check_outcome, run_cli, stubbed  # noqa: F401 — stubbed: a fixture

from simlab import i18n
from simlab.parity import CORE_KEYS
from simlab.sim.collectives import ring_bytes_sent
from simlab.sim.training_step import one_step


def _json(argv):
    code, out, err = run_cli(argv + ["--json"])
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("flags", [
    ["--model", "gpt3-175b", "--microbatches", "8", "--attention", "eager", "--precision", "mixed-fp32-grads"],
    ["--model", "llama2-7b", "--gpu", "h100-80gb", "--microbatch", "2", "--recompute", "selective"],
    ["--layers", "4", "--hidden", "256", "--heads", "8", "--seq", "512", "--vocab", "1000", "--recompute", "full",
     "--precision", "fp32", "--peak-tflops", "100"]])
def test_step_is_plan_on_one_gpu(flags):
    out = _json(["step"] + flags)
    get = dict(zip(flags[::2], flags[1::2]))
    b, m = int(get.get("--microbatch", 1)), int(get.get("--microbatches", 1))
    plan_flags = [f for f in flags if f not in ("--microbatches", get.get("--microbatches"))]  # plan: --global-batch
    plan = _json(["plan"] + plan_flags + ["--gpus", "1", "--tp", "1", "--pp", "1", "--dp", "1", "--global-batch",
                                         str(b * m), "--overlap", "none"])
    assert {k: out["memory"][k] for k in plan["bytes_per_gpu"]} == plan["bytes_per_gpu"]
    assert (out["time"]["step_seconds"], out["mfu"], out["memory"]["usable"], out["memory"]["fits"]) == (
        plan["step_seconds"], plan["mfu"], plan["usable_bytes_per_gpu"], plan["fits"])
    if "--model" in get:
        assert out == json.loads(json.dumps(one_step(get["--model"], get.get("--gpu", "a100-80gb"), b, m,
                                                     attention=get.get("--attention", "flash"),
                                                     recompute=get.get("--recompute", "none"),
                                                     precision=get.get("--precision", "mixed"))))


@pytest.mark.parametrize("flags", [["--seq", "1048576"], ["--experts", "8"],
                                   ["--experts", "8", "--attention", "eager", "--recompute", "selective"]])
def test_mfu_and_hfu_are_fractions_of_the_peak(flags):
    """Regression: `--seq 1048576` printed MFU 102.7 % (attention's whole square counted against a causal kernel),
    `--experts 8` HFU 14.6 % under MFU 39.8 % and, with eager selective recomputation, HFU −8.6 % (a mixture's
    attention FLOPs taken as model FLOPs (top_k experts) less all E experts' GEMMs)."""
    out = _json(["step", "--model", "llama2-7b"] + flags)
    assert 0 < out["mfu"] <= out["hfu"] < 1
    assert min(out["flops"].values()) >= 0
    code, text, err = run_cli(["step", "--model", "llama2-7b"] + flags)
    mfu, hfu = (float(x) for x in re.findall(r"[MH]FU (-?[\d.]+)%", text))
    assert code == 0 and 0 < mfu <= hfu < 100
    assert (mfu, hfu) == (pytest.approx(100 * out["mfu"], abs=0.051), pytest.approx(100 * out["hfu"], abs=0.051))


def test_the_text_form_and_its_chinese():
    code, out, err = run_cli(["step", "--model", "gpt3-175b", "--microbatches", "8"])
    assert code == 0 and err == "" and "DOES NOT FIT" in out and "MFU" in out and len(out.splitlines()) == 5
    i18n.set_language("zh")
    try:
        code, zh, _ = run_cli(["step", "--model", "gpt3-175b", "--microbatches", "8"])
    finally:
        i18n.set_language("en")
    assert code == 0 and zh != out and "放不下" in zh and len(zh.splitlines()) == 5


@pytest.mark.parametrize("argv, message", [
    (["step", "--model", "llama2-7b", "--microbatch", "0"], "--microbatch=0: must be between 1"),
    (["step", "--model", "llama2-7b", "--layers", "100"], "give --model or the shape, not both"),
    (["step", "--model", "llama2-7b", "--peak-tflops", "nan"], "--peak-tflops=nan"),
    (["step"], "give --model PRESET, or the whole shape"),
    (["step", "--model", "gpt3-175b", "--gpu-memory-gib", "1e300"], "overflow a float"),
    (["step", "--model", "gpt3-175b", "--microbatches", "4611686018427387904"], "--microbatches=4611686018427387904"),
    (["step", "--model", "llama2-7b", "--seq", "9223372036854775808"], "--seq=9223372036854775808"),  # Hypothesis
    (["run", "step", "--microbatches", "0"], "--microbatches=0"), (["run", "step", "--steps", "17"], "--steps=17"),
    (["run", "step", "--microbatch-size", "x"], "--microbatch-size"), (["run", "step", "--world-size", "0"], "--world-size=0")])
def test_bad_input_is_one_line_naming_the_flag(stubbed, argv, message):  # noqa: F811 — the imported fixture
    code, out, err = run_cli(argv)
    assert code == 2 and err.count("\n") == 1 and message in err and out == "", (code, out, err)


MINE = [(argv, p) for argv, p in COMMANDS if argv in (["step"], ["run", "step"])]


@st.composite
def my_command_lines(draw):
    prefix, parser = draw(st.sampled_from(MINE))
    flags = [a for a in parser._actions if a.option_strings and a.dest != "help"]
    argv = list(prefix) + ([] if prefix[0] == "run" else draw(st.sampled_from(
        [["--model", "llama2-7b"], ["--model", "gpt3-175b"], ["--layers", "2", "--hidden", "64", "--heads", "4"]])))
    for a in draw(st.lists(st.sampled_from(flags), unique_by=lambda a: a.dest, max_size=5)):
        argv += [a.option_strings[-1]] + ([] if a.nargs == 0 else [draw(_value(a))])
    return argv


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(argv=my_command_lines())
def test_no_step_command_line_gets_a_traceback(stubbed, argv):  # noqa: F811 — the imported fixture
    check_outcome(argv, *run_cli(argv))


def test_run_step_for_real():
    out = _json(["run", "step", "--world-size", "2", "--microbatches", "2", "--microbatch-size", "1", "--steps", "1"])
    assert [k for k in out if k in CORE_KEYS] == [k for k in CORE_KEYS if k != "trace"]
    assert out["max_abs_diff_vs_reference"] <= 1e-5 and out["max_abs_diff_vs_torch"] <= 1e-5
    assert out["global_batch"] == 4 and out["allreduces_per_step"] == 1
    closed = ring_bytes_sent("all-reduce", 2, 7744)  # the default small GPT's 7,744 fp32 gradients
    assert out["bytes_sent_per_rank"] == closed and out["bytes_sent_every_microbatch"] == [2 * c for c in closed]
