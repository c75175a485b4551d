"""Property-based: no command line a user can type gets a traceback, a hang, non-strict JSON or a silently
ignored flag.

Hypothesis builds command lines from the parser itself — every subcommand, every `run` target, any subset of
their flags with values from the edges (0, negatives, huge, NaN, ±inf, 1e400, junk text) and the middle. Each
one runs in-process and must end in exactly one of:
  - exit 0 and its output: strict JSON (`json.loads` refusing NaN/Infinity) under --json;
  - exit 2 and one line on stderr naming a flag the user typed (or argparse's own one-line usage error);
  - for `run` and `calibrate`: reaching the point where processes would start, or the one-process reference
    would train, with every flag checked — both are stubbed here to stop the test with `Started`, so a
    bad value that is only caught later (after the work) shows up as `Started` for an input the checks
    should have refused, and `test_known_bad_inputs_never_start_work` pins those.
Nothing else: no other exit code, no exception escaping `main`, no second line.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sampling import FULL  # 1500 command lines under make test-full, 400 (new ones each run) else

from simlab.cli import build_parser, main
from simlab.sim.model import PRESETS


class Started(BaseException):
    """Raised where real work would begin (a BaseException, so `main`'s `except Exception` lets it by)."""


def _commands():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out = []
    for name, p in sub.choices.items():
        if name == "run":
            run = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
            out += [(["run", target], q) for target, q in run.choices.items()]
        else:
            out.append(([name], p))
    return out


COMMANDS = _commands()
EDGE_INTS = ["0", "-1", "1", "2", "3", "4", "8", "1000000000", "4611686018427387904", "1.5", "x", ""]
EDGE_FLOATS = ["nan", "inf", "-inf", "1e400", "-0.0", "0", "1e-300", "-1", "0.5", "3", "1e9", "x"]
TEXT_VALUES = {"--backend": ["auto", "gloo", "nccl", "threads", "mpi", ""],
               "--model": sorted(PRESETS)[:3] + ["nope", ""],
               "--shape": ["8x12", "4x4", "0x3", "3x0", "axb", "8", "1x1000000000000", "-2x4"],
               # a file is written only where it harms nothing: the test leaves no file behind
               "--trace": ["", "/nonexistent-folder/t.json", "/tmp", os.devnull]}


def _value(action) -> st.SearchStrategy:
    if action.choices:
        return st.one_of(st.sampled_from(sorted(map(str, action.choices))), st.sampled_from(["", "nope"]))
    if action.type is int:
        return st.one_of(st.sampled_from(EDGE_INTS), st.integers(-5, 70).map(str), st.integers().map(str))
    if action.type is float:
        return st.one_of(st.sampled_from(EDGE_FLOATS), st.floats(allow_nan=True, allow_infinity=True).map(repr))
    return st.sampled_from(TEXT_VALUES.get(action.option_strings[-1], ["", "x"]))


@st.composite
def command_lines(draw) -> list[str]:
    prefix, parser = draw(st.sampled_from(COMMANDS))
    argv = list(prefix)
    actions = [a for a in parser._actions if not isinstance(a, argparse._HelpAction)]
    for a in (a for a in actions if not a.option_strings):
        argv.append(draw(_value(a)))
    flags = [a for a in actions if a.option_strings]
    for a in draw(st.lists(st.sampled_from(flags), unique_by=lambda a: a.dest, max_size=6)):
        argv += [a.option_strings[-1]] + ([] if a.nargs == 0 else [draw(_value(a))])
    return argv


@pytest.fixture
def stubbed(monkeypatch):
    """Where real work would start, raise `Started`: process launch (fork, spawn or torchrun) and the
    one-process reference trainers that some runs do before launching."""
    import importlib
    import pkgutil

    import simlab.exec.launch as L
    import simlab.parity
    import simlab.parity.data_parallel as D

    def start(*a, **k):
        raise Started
    monkeypatch.setattr(D, "_train", start)  # DP trains threads in this very process: no launch to stop
    monkeypatch.setattr(L, "_pick_start_method", start)
    monkeypatch.setattr(L, "_run_under_torchrun", start)
    # import every parity module before patching any: one imported while the stub is in place would copy the
    # stub into its own namespace and keep it for the tests that follow
    modules = [importlib.import_module(f"simlab.parity.{m.name}") for m in pkgutil.iter_modules(simlab.parity.__path__)]
    for module in modules:
        if hasattr(module, "reference_model"):  # parity.common's, or a module's copy of the name
            monkeypatch.setattr(module, "reference_model", start)
    monkeypatch.delenv("WORLD_SIZE", raising=False)


def run_cli(argv: list[str]) -> tuple[int | str, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exit_:
            code = exit_.code
        except Started:
            code = "started"
    return code, out.getvalue(), err.getvalue()


def _strict(text: str):
    def refuse(constant):
        raise ValueError(f"non-strict JSON constant {constant}")
    return json.loads(text, parse_constant=refuse)


def check_outcome(argv, code, out, err) -> None:
    assert "Traceback" not in out + err, (argv, err)
    if code == 0:
        if "--json" in argv and out.strip():
            _strict(out)
        assert err == "" or err.count("\n") == 1 and "warning" in err, (argv, err)  # e.g. oversubscription
    elif code == 2:
        assert err.count("\n") == 1 and out == "", (argv, out, err)
        assert "error:" in err, (argv, err)
    else:
        assert code == "started" and argv[0] in ("run", "calibrate"), (argv, code, out, err)


@settings(max_examples=1500 if FULL else 400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(argv=command_lines())
def test_no_command_line_gets_a_traceback_a_hang_or_loose_json(stubbed, argv):
    check_outcome(argv, *run_cli(argv))


@pytest.mark.parametrize("argv, flag", [
    (["collective", "ring-all-reduce", "--alpha", "nan"], "--alpha"),
    (["collective", "ring-all-reduce", "--bandwidth", "inf"], "--bandwidth"),
    (["collective", "ring-all-reduce", "--bandwidth", "1e400", "--json"], "--bandwidth"),
    (["memory", "--params", "inf"], "--params"),
    (["schedule", "1f1b", "--t-f", "nan"], "--t-f"), (["schedule", "1f1b", "--t-b", "inf"], "--t-b"),
    (["schedule", "1f1b", "--stages", "4000", "--microbatches", "4000"], "--stages"),
    (["plan", "--model", "gpt3-175b", "--inter-node-gbps", "inf"], "--inter-node-gbps"),
    (["plan", "--model", "gpt3-175b", "--gpus", "4611686018427387904", "--global-batch", "64"], "--gpus"),
    (["run", "hybrid", "--dp", "2", "--microbatches", "1000000000000"], "--microbatches"),
    (["run", "ddp", "--global-batch", "1000000000000"], "--global-batch"),
    (["run", "pp", "--global-batch", "1000000000"], "--global-batch"),  # found by the property test in CI
    (["run", "dp", "--steps", "4611686018427387904"], "--steps"), (["run", "zero3", "--steps", "100000"], "--steps"),
    (["run", "hybrid", "--dp", "2", "--steps", "100000"], "--steps"),
    (["run", "tp", "--world-size", "1000"], "--world-size"),
    (["run", "ddp", "--timeout", "0"], "--timeout"), (["run", "ddp", "--timeout", "nan"], "--timeout"),
    (["run", "ddp", "--timeout", "inf"], "--timeout"), (["run", "ddp", "--seed", "-1"], "--seed"),
    (["run", "allreduce", "--seed", "-1"], "--seed"), (["run", "ddp", "--bucket-cap-mb", "inf"], "--bucket-cap-mb"),
    (["run", "tp", "--block", "attention", "--hidden", "100000"], "--hidden"),
    (["run", "tp", "--hidden", "100000", "--ffn", "100000"], "--hidden"),
    (["run", "ring-all-reduce", "--size", "100000000000"], "--size"),
    (["run", "hybrid", "--dp", "2", "--hidden", "100000", "--heads", "2"], "--hidden"),
    (["run", "dp", "--backend", "nccl"], "--backend"), (["run", "zero1", "--backend", "mpi"], "--backend"),
    (["calibrate", "--timeout", "-1"], "--timeout"), (["calibrate", "--repeats", "0"], "--repeats"),
    (["calibrate", "--world-size", "100000"], "--world-size"),  # passed every check, behind a stubbed launcher
])
def test_known_bad_inputs_never_start_work(stubbed, argv, flag):
    code, out, err = run_cli(argv)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, (argv, code, out, err)
    assert flag in err, (argv, err)


def test_json_is_strict_everywhere_it_is_offered():
    """Every subcommand that offers --json prints something `json.loads` accepts without NaN/Infinity, for
    its defaults (the property test covers the rest)."""
    for prefix, parser in COMMANDS:
        if prefix[0] in ("run", "calibrate") or not any(a.option_strings == ["--json"] for a in parser._actions):
            continue
        positional = [sorted(map(str, a.choices))[0] for a in parser._actions if not a.option_strings and a.choices]
        needs = {"plan": ["--model", "megatron-1.7b-2021", "--global-batch", "64"],
                 "step": ["--model", "megatron-1.7b-2021"]}.get(prefix[0], [])
        code, out, err = run_cli(prefix + positional + needs + ["--json"])
        assert code == 0, (prefix, err)
        assert isinstance(_strict(out), dict)


@pytest.mark.parametrize("argv", [["run", "allreduce"], ["calibrate"], ["run", "hybrid", "--dp", "2"]])
def test_a_bad_world_size_from_torchrun_names_the_variable(stubbed, monkeypatch, argv):
    monkeypatch.setenv("WORLD_SIZE", "abc")
    code, out, err = run_cli(argv)
    assert code == 2 and err.count("\n") == 1 and "WORLD_SIZE='abc' (environment)" in err, err


@pytest.mark.parametrize("argv", [["run", "dp", "--timeout", "5"], ["run", "allreduce", "--microbatches", "3"],
                                  ["run", "zero1", "--bucket-cap-mb", "4"], ["run", "tp", "--schedule", "1f1b"]])
def test_a_flag_that_does_not_apply_is_refused_not_ignored(stubbed, argv):
    code, out, err = run_cli(argv)
    assert code == 2 and err.count("\n") == 1 and f"unrecognized arguments: {' '.join(argv[2:])}" in err, err


def test_a_bad_rendezvous_address_names_the_variable(monkeypatch):
    monkeypatch.setenv("SIMLAB_MASTER_ADDR", "999.1.1.1")
    code, out, err = run_cli(["run", "allreduce", "--world-size", "2"])
    assert code == 2 and err.count("\n") == 1 and "SIMLAB_MASTER_ADDR='999.1.1.1': cannot listen there" in err, err
