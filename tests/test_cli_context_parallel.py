"""`simlab cp` (context parallelism simulated) says what the simulator's closed forms say, in text and strict JSON,
and in Chinese under `set_language("zh")`; `simlab run cp` runs a variant on real processes and prints the parity
contract; both refuse bad input in one line naming the flag, before any process starts.

Until the lead registers `simlab.cli.context_parallel` in `simlab.cli.LESSONS`, each test adds it there itself
(`registered`), so the commands go through the real `main`: its one-line errors and flag names."""
import argparse
import json
import multiprocessing

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_cli_properties import _value, check_outcome, stubbed  # noqa: F401 — stubbed: a fixture
from test_cli_properties import run_cli as run_quietly

from simlab import cli, i18n
from simlab.cli import context_parallel
from simlab.parity import CORE_KEYS
from simlab.render.context_parallel import variants_text, work_text
from simlab.sim.context_parallel import imbalance, work_per_rank
from simlab.sim.context_parallel_costs import VARIANTS, compare, costs

pytestmark = pytest.mark.usefixtures("english_afterwards", "registered")


@pytest.fixture
def registered(monkeypatch):
    if context_parallel not in cli.LESSONS:
        monkeypatch.setattr(cli, "LESSONS", cli.LESSONS + (context_parallel,))


def run_cli(argv, capsys):
    try:
        code = cli.main(argv)
    except SystemExit as exit_info:
        code = exit_info.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("flags", [[], ["--world-size", "8", "--seq", "131072", "--heads", "32", "--kv-heads", "8",
                                        "--head-dim", "128", "--variant", "ulysses", "--itemsize", "2"],
                                   ["--world-size", "3", "--seq", "12", "--layout", "contiguous", "--variant",
                                    "all-gather-kv"], ["--world-size", "4", "--heads", "6", "--seq", "64"]])
def test_cp_json_is_the_simulators_closed_forms(flags, capsys):
    code, out, err = run_cli(["cp", "--json"] + flags, capsys)
    assert code == 0 and err == "", err
    got = json.loads(out)
    get = dict(zip(flags[::2], flags[1::2]))
    n, seq, layout = int(get.get("--world-size", 4)), int(get.get("--seq", 16)), get.get("--layout", "zigzag")
    shape = dict(world_size=n, seq=seq, heads=int(get.get("--heads", 4)), head_dim=int(get.get("--head-dim", 2)),
                 kv_heads=int(get["--kv-heads"]) if "--kv-heads" in get else None, itemsize=int(get.get("--itemsize", 4)))
    assert got["work_per_rank"] == list(work_per_rank(n, seq, layout))
    assert got["imbalance"] == pytest.approx(imbalance(work_per_rank(n, seq, layout)))
    chosen = costs(get.get("--variant", "ring"), **shape, layout=layout)
    assert (got["bytes_sent_per_rank"], got["kv_buffer_bytes"]) == (chosen.bytes_sent, chosen.kv_buffer_bytes)
    rows = compare(**shape)
    assert got["variants"] == {v: None if c is None else {**c._asdict(), "bytes_sent": c.bytes_sent}
                               for v, c in rows.items()}
    assert set(got["variants"]) == set(VARIANTS)
    assert ("zigzag" in got["work_per_rank_by_layout"]) == (seq % (2 * n) == 0)


def test_cp_text_is_the_lessons_tables_and_speaks_chinese(capsys):
    code, out, err = run_cli(["cp"], capsys)
    rows = compare(world_size=4, seq=16, heads=4, head_dim=2)
    ring = costs("ring", world_size=4, seq=16, heads=4, head_dim=2)
    assert code == 0 and err == "" and out == "\n".join([work_text(4, 16), variants_text(rows), (
        f"chosen: ring with zigzag layout: {ring.bytes_sent:,} bytes sent per rank, {ring.kv_buffer_bytes:,} bytes "
        "of K,V buffers")]) + "\n"
    i18n.set_language("zh")
    code, zh, _err = run_cli(["cp"], capsys)
    assert code == 0 and "之字形" in zh and "选中" in zh and len(zh.splitlines()) == len(out.splitlines())


@pytest.mark.parametrize("argv, message", [
    (["cp", "--seq", "10"], "--seq=10: must be divisible by 8"),
    (["cp", "--world-size", "0"], "--world-size=0: must be between 1"),
    (["cp", "--heads", "3", "--kv-heads", "2"], "--heads=3: must be divisible by --kv-heads=2"),
    (["cp", "--variant", "ulysses", "--heads", "6"], "--heads=6: must be divisible by --world-size=4"),
    (["cp", "--kv-heads", "0"], "--kv-heads=0"), (["cp", "--itemsize", "0"], "--itemsize=0"),
    (["cp", "--head-dim", "-1"], "--head-dim=-1"), (["cp", "--layout", "striped"], "--layout"),
    (["run", "cp", "--seq", "8192"], "--seq=8192: must be between 1 and 4096"),
    (["run", "cp", "--world-size", "0"], "--world-size=0"), (["run", "cp", "--seq", "12"], "--seq=12"),
    (["run", "cp", "--variant", "ulysses", "--heads", "3"], "--heads=3: must be divisible by --world-size=4"),
    (["run", "cp", "--heads", "32", "--seq", "4096", "--batch", "8", "--head-dim", "1024"],
     "--seq=4096 --heads=32: attention"), (["run", "cp", "--batch", "9"], "--batch=9"),
    (["run", "cp", "--timeout", "nan"], "--timeout=nan")])
def test_bad_input_is_one_line_naming_the_flag_before_any_process(argv, message, capsys, no_launch):
    code, out, err = run_cli(argv, capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and message in err, (code, out, err)
    assert multiprocessing.active_children() == []


def test_run_cp_prints_the_parity_contract(capsys):
    code, out, err = run_cli(["run", "cp", "--world-size", "2", "--seq", "8", "--variant", "all-gather-kv", "--json"],
                             capsys)
    assert code == 0, err
    got = json.loads(out)
    assert set(CORE_KEYS) - {"trace"} <= set(got) and "trace" not in got
    assert got["max_abs_diff_vs_reference"] <= 1e-5 and got["matches_plan"] is True
    price = costs("all-gather-kv", world_size=2, seq=8, heads=2, head_dim=4)
    assert got["bytes_sent_per_rank"] == got["plan_bytes_sent_per_rank"] == [price.bytes_sent] * 2
    assert got["work_per_rank"] == got["plan_work_per_rank"] == list(work_per_rank(2, 8, "zigzag"))
    assert (got["variant"], got["layout"], got["causal"]) == ("all-gather-kv", "zigzag", True)


def my_commands():
    """(argv prefix, parser) of `simlab cp` and `simlab run cp`, from a parser with this module registered."""
    sub, run = argparse.ArgumentParser().add_subparsers(), argparse.ArgumentParser().add_subparsers()
    context_parallel.add_commands(sub, run)
    return [(["cp"], sub.choices["cp"]), (["run", "cp"], run.choices["cp"])]


@st.composite
def my_command_lines(draw):
    prefix, parser = draw(st.sampled_from(my_commands()))
    flags = [a for a in parser._actions if a.option_strings and a.dest != "help"]
    argv = list(prefix)
    for a in draw(st.lists(st.sampled_from(flags), unique_by=lambda a: a.dest, max_size=6)):
        argv += [a.option_strings[-1]] + ([] if a.nargs == 0 else [draw(_value(a))])
    return argv


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(argv=my_command_lines())
def test_no_cp_command_line_gets_a_traceback_or_loose_json(stubbed, argv):  # noqa: F811 — the imported fixture
    assert context_parallel in cli.LESSONS  # the commands are there to be tried, not refused as unknown
    code, out, err = run_quietly(argv)
    assert "invalid choice: 'cp'" not in err
    check_outcome(argv, code, out, err)
