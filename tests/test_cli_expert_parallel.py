"""`simlab ep` (a mixture of experts on an expert-parallel group, simulated) says what the simulator computes: every
rank's load and drops, the send matrix, and bytes that follow from S by the rule written out here (and the closed
form when routing is balanced); `simlab run ep` runs the layer for real, within fp32 rounding of one process, with
the bytes the plan says. Both refuse bad input in one line naming the flag, before any work, print strict JSON, and
the text form speaks Chinese under set_language("zh").

The lead registers `simlab.cli.expert_parallel` in `simlab.cli.LESSONS`; until then `registered` adds it here."""
import argparse
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_cli_properties import _value, check_outcome, run_cli, stubbed  # noqa: F401 — stubbed: a fixture

from simlab import cli, i18n
from simlab.cli import expert_parallel
from simlab.parity import CORE_KEYS
from simlab.render.expert_parallel import ep_routings
from simlab.sim.expert_parallel_dispatch import balanced_bytes, dispatch_plan


@pytest.fixture(autouse=True)
def registered(monkeypatch):
    if expert_parallel not in cli.LESSONS:
        monkeypatch.setattr(cli, "LESSONS", cli.LESSONS + (expert_parallel,))


def _json(argv):
    code, out, err = run_cli(argv + ["--json"])
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("flags", [[], ["--skew", "2", "--capacity", "1.25", "--ep", "8", "--experts", "16"],
                                   ["--capacity", "0", "--ep", "1", "--top-k", "1"],
                                   ["--tokens", "100", "--experts", "4", "--ep", "2", "--hidden", "64", "--seed", "3"]])
def test_ep_is_the_simulators_routing_and_plan(flags):
    out = _json(["ep"] + flags)
    get = {k: v for k, v in zip(flags[::2], flags[1::2])}
    t, e, k, n = (int(get.get(f, d)) for f, d in (("--tokens", 16), ("--experts", 8), ("--top-k", 2), ("--ep", 4)))
    h, cf = int(get.get("--hidden", 8)), float(get.get("--capacity", 1.0))
    routings = ep_routings(t, e, k, cf, n, int(get.get("--seed", 0)), float(get.get("--skew", 0)))
    plan = dispatch_plan(routings, h, 4)
    assert out["send_counts"] == plan.send_counts.tolist()
    assert out["load_per_rank"] == [r.load.tolist() for r in routings]
    assert out["capacity_per_rank"] == (None if cf == 0 else routings[0].capacity)
    # the bytes, from S by the rule: dispatch sends row i off the diagonal, combine column i, h fp32 values a row
    s = np.array(out["send_counts"])
    off = s - np.diag(np.diag(s))
    assert out["dispatch_bytes_per_rank"] == (off.sum(axis=1) * h * 4).tolist()
    assert out["combine_bytes_per_rank"] == (off.sum(axis=0) * h * 4).tolist()
    counts = (n - 1) * (e // n) * 8  # E/N int64 counts to each of the N − 1 peers
    assert out["bytes_sent_per_rank"] == [counts + 2 * (d + c) for d, c in zip(out["dispatch_bytes_per_rank"],
                                                                              out["combine_bytes_per_rank"])]
    assert sum(out["load"]) == t * k * n - out["dropped"] and out["rows_computed_per_rank"] == s.sum(axis=0).tolist()
    assert out["imbalance"] == max(out["load"]) * e / sum(out["load"])
    if cf == 0:
        assert out["dropped"] == 0 and out["tokens_dropped"] == 0


def test_balanced_routing_would_send_the_closed_form():
    out = _json(["ep", "--tokens", "16", "--top-k", "2", "--ep", "4", "--hidden", "8"])
    assert out["balanced_dispatch_bytes_per_rank"] == balanced_bytes(16, 2, 4, 8) == 16 * 2 * 3 // 4 * 8 * 4
    assert _json(["ep", "--tokens", "3", "--top-k", "1", "--ep", "2"])["balanced_dispatch_bytes_per_rank"] is None


def test_the_text_form_and_its_chinese():
    code, out, err = run_cli(["ep", "--skew", "1"])
    assert code == 0 and err == "" and "send matrix S on 4 ranks" in out and "imbalance max/mean load" in out
    i18n.set_language("zh")
    try:
        code, zh, _ = run_cli(["ep", "--skew", "1"])
    finally:
        i18n.set_language("en")
    assert code == 0 and zh != out and "发送矩阵" in zh and len(zh.splitlines()) == len(out.splitlines())


@pytest.mark.parametrize("argv, message", [
    (["ep", "--experts", "6", "--ep", "4"], "--experts=6: must be divisible by --ep=4"),
    (["ep", "--top-k", "9"], "--top-k=9"), (["ep", "--capacity", "nan"], "--capacity=nan"),
    (["ep", "--capacity", "-1"], "--capacity=-1.0"), (["ep", "--skew", "inf"], "--skew=inf"),
    (["ep", "--tokens", "0"], "--tokens=0"), (["ep", "--tokens", "5000", "--ep", "8"], "--tokens=5000"),
    (["ep", "--ep", "100"], "--ep=100"), (["ep", "--seed", "-1"], "--seed=-1"), (["ep", "--hidden", "0"], "--hidden=0"),
    (["run", "ep", "--capacity", "inf"], "--capacity=inf"), (["run", "ep", "--top-k", "5"], "--top-k=5"),
    (["run", "ep", "--world-size", "3", "--dp", "2"], "--world-size=3: must be divisible by --dp=2"),
    (["run", "ep", "--world-size", "2", "--experts", "3"], "--experts=3"),
    (["run", "ep", "--tokens", "1000000000"], "--tokens=1000000000"), (["run", "ep", "--ffn", "0"], "--ffn=0")])
def test_bad_input_is_one_line_naming_the_flag(stubbed, argv, message):  # noqa: F811 — the imported fixture
    code, out, err = run_cli(argv)
    assert code == 2 and err.count("\n") == 1 and message in err and out == "", (code, out, err)


def my_parsers() -> list[tuple[list[str], argparse.ArgumentParser]]:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    run = next(a for a in sub.choices["run"]._actions if isinstance(a, argparse._SubParsersAction))
    return [(["ep"], sub.choices["ep"]), (["run", "ep"], run.choices["ep"])]


@st.composite
def my_command_lines(draw):
    prefix, parser = draw(st.sampled_from(my_parsers()))
    flags = [a for a in parser._actions if a.option_strings and a.dest != "help"]
    argv = list(prefix)
    for a in draw(st.lists(st.sampled_from(flags), unique_by=lambda a: a.dest, max_size=5)):
        argv += [a.option_strings[-1]] + ([] if a.nargs == 0 else [draw(_value(a))])
    return argv


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(argv=my_command_lines())
def test_no_ep_command_line_gets_a_traceback(stubbed, argv):  # noqa: F811 — the imported fixture
    check_outcome(argv, *run_cli(argv))


def test_run_ep_for_real():
    out = _json(["run", "ep", "--world-size", "4", "--dp", "2", "--experts", "4", "--capacity", "1"])
    assert [k for k in out if k in CORE_KEYS] == [k for k in CORE_KEYS if k != "trace"]
    assert out["max_abs_diff_vs_reference"] <= 1e-5 and out["max_abs_diff_vs_torch"] <= 1e-5
    assert out["bytes_sent_per_rank"] == out["plan_bytes_sent_per_rank"] and (out["ep"], out["dp"]) == (2, 2)
    assert out["send_counts"] == out["plan_send_counts"] and out["routing_matches_simulator"]
    assert out["trace_matches_plan"] and out["capacity"] == 4  # ceil(1 · 8 tokens · top-2 / 4 experts)
