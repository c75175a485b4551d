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


# ---------------------------------------------------------------- a trace file on a shared path

def test_a_symlink_as_trace_is_refused_before_any_work_and_its_target_untouched(tmp_path, capsys, no_launch):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (tmp_path / "t.json").symlink_to(victim)
    with pytest.raises(SystemExit) as stop:
        main(["run", "ring-all-reduce", "--trace", str(tmp_path / "t.json")])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1 and "--trace=" in err and "symbolic link" in err, err
    assert victim.read_text() == "precious\n"


@pytest.mark.parametrize("kind", ["fifo", "devnull", "folder"])
def test_a_trace_that_is_not_a_regular_file_is_refused(kind, tmp_path, rejected, no_launch):
    """The atomic write renames over what is there: over /dev/null it would replace the device itself."""
    import os
    path = {"fifo": tmp_path / "pipe", "devnull": os.devnull, "folder": tmp_path}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    rejected(["run", "allreduce", "--trace", str(path)], "--trace=")


def _write_traces(path, events, times):
    from simlab.cli.common import RunOutput, write_trace

    class Trace:
        def to_chrome(self):
            return json.dumps({"traceEvents": [{"ph": "X", "tid": i % 8, "name": "step"} for i in range(events)]})
    out = RunOutput({"run": 1})
    out.trace = Trace()
    for _ in range(times):
        write_trace(out, path)


def _read_traces(path, stop, bad):
    while not stop.is_set():
        try:
            with open(path) as f:
                json.loads(f.read())
        except FileNotFoundError:
            continue
        except ValueError:
            bad.value += 1


def test_concurrent_trace_writes_always_leave_valid_json(tmp_path):
    """Two runs given the same --trace, and a reader (Perfetto, a notebook) opening it meanwhile: every read
    is a whole trace. The old writer (truncate, then write in place) let readers see half-written files."""
    import multiprocessing
    ctx = multiprocessing.get_context("fork")
    path = str(tmp_path / "t.json")
    stop, bad = ctx.Event(), ctx.Value("i", 0)
    reader = ctx.Process(target=_read_traces, args=(path, stop, bad))
    reader.start()
    try:
        for _ in range(4):  # rounds: the old writer left an invalid file in about 1 of 35
            writers = [ctx.Process(target=_write_traces, args=(path, 8_000 + 5_000 * k, 4)) for k in range(2)]
            for w in writers:
                w.start()
            for w in writers:
                w.join()
            assert all(w.exitcode == 0 for w in writers)
            json.loads(open(path).read())
    finally:
        stop.set()
        reader.join()
    assert bad.value == 0
    assert [p.name for p in tmp_path.iterdir()] == ["t.json"]  # no temporary file left behind
