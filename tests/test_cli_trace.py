"""`simlab run <target> --trace FILE`: every run can hand its real trace to Perfetto."""
import json

import pytest

from simlab.cli import build_parser, main

TARGETS = ["ring-all-reduce", "ring-all-gather", "ring-reduce-scatter", "tree-broadcast", "naive-all-reduce",
           "dp", "ddp", "zero1", "zero2", "zero3", "offload", "pp", "tp", "hybrid"]


def _run_targets():
    sub = next(a for a in build_parser()._actions if a.dest == "command").choices["run"]
    return next(a for a in sub._actions if a.dest == "target").choices


def test_every_run_target_offers_trace():
    choices = _run_targets()
    assert set(TARGETS) <= set(choices)
    for name, parser in choices.items():
        assert any("--trace" in a.option_strings for a in parser._actions), name


@pytest.mark.parametrize("target", TARGETS)
def test_an_unwritable_trace_file_is_refused_before_any_work(target, tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["run", target, "--trace", str(tmp_path / "missing" / "t.json")])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--trace=" in err and "does not exist" in err


@pytest.mark.parametrize("argv", [["run", "ring-all-reduce", "--world-size", "3", "--size", "4096"],
                                  ["run", "pp", "--world-size", "2", "--stages", "2", "--microbatches", "2"]])
def test_the_trace_file_holds_the_runs_events_per_rank(argv, tmp_path, capsys):
    path = tmp_path / "run.json"
    assert main(argv + ["--trace", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["trace_file"] == str(path)
    events = json.loads(path.read_text())["traceEvents"]
    ranks = {e["tid"] for e in events if e.get("ph") == "X"}  # one lane per rank
    assert ranks == set(range(out["world_size"]))
    lanes = {e["tid"]: e["args"]["name"] for e in events if e.get("ph") == "M"}
    assert lanes == {r: f"rank {r}" for r in ranks}
    assert all(e["dur"] >= 0 for e in events if e.get("ph") == "X")
