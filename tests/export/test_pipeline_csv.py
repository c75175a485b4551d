"""`simlab.export.pipeline_csv`: every schedule of `make_schedule` written as torch's schedule CSV and read back,
each cell read by torch's own `_Action.from_str`, whole files loaded by torch's own `_load_csv` (on torch's
"fake" process group: no processes, no communication), torch's own dumps read by ours, and bad input refused
in one line."""
import os
import re
import tempfile

import pytest
import torch
import torch.distributed as dist
from sampling import sample  # tests/sampling.py: every case under make test-full, a daily sample else
from torch import nn
from torch.distributed.pipelining import schedules as S

from simlab.export.pipeline_csv import emit, from_csv, to_csv
from simlab.plan import Action
from simlab.sim.hardware import cluster
from simlab.sim.hybrid import Plan
from simlab.sim.model import PRESETS
from simlab.sim.pipeline_schedules import SCHEDULES, interleaved, make_schedule, zero_bubble

# the four compute types of torch's schedule IR, by the names torch gives them (schedules.py, `_ComputationType`)
TORCH_TYPE = {"F": S.FORWARD, "B": S.FULL_BACKWARD, "I": S.BACKWARD_INPUT, "W": S.BACKWARD_WEIGHT}


def cases():
    """(name, ranks p, micro-batches m, chunks v) for every schedule on several sizes that make_schedule builds."""
    out = []
    for name in SCHEDULES:
        for p in (1, 2, 3, 4, 5):
            for m in (1, 2, 3, 4, 6, 8):
                for v in (1, 2, 3):
                    try:
                        make_schedule(name, p, m, v)
                    except ValueError:  # naive runs one micro-batch, only interleaved has chunks, …
                        continue
                    out.append((name, p, m, v))
    return out


EDGES = [("naive", 1, 1, 1), ("gpipe", 5, 1, 1), ("1f1b", 4, 2, 1), ("1f1b", 2, 8, 1), ("interleaved", 4, 8, 3),
         ("interleaved", 1, 3, 2), ("zero-bubble", 5, 3, 1), ("zero-bubble", 3, 8, 1)]
CASES = sample(cases(), 40, always=EDGES, name="pipeline-csv")


def on_fake_group(p: int, fn):
    """`fn()` inside a world of p ranks in this one process (torch's test backend): rank 0's view."""
    from torch.testing._internal.distributed.fake_pg import FakeStore
    assert not dist.is_initialized(), "another test left a process group behind"
    dist.init_process_group("fake", rank=0, world_size=p, store=FakeStore())
    try:
        return fn()
    finally:
        dist.destroy_process_group()


def rank0_stages(p: int, v: int):
    from torch.distributed.pipelining import PipelineStage
    return [PipelineStage(nn.Identity(), c * p, p * v, torch.device("cpu")) for c in range(v)]


@pytest.mark.parametrize("name, p, m, v", CASES)
def test_round_trip_and_torch_reads_every_cell_as_we_meant_it(name, p, m, v):
    schedule = make_schedule(name, p, m, v)
    text = to_csv(schedule)
    assert from_csv(text) == schedule
    lines = text.split("\r\n")  # torch's writer: one CRLF-terminated line per rank, nothing else
    assert len(lines) == p + 1 and lines[-1] == ""
    for actions, line in zip(schedule, lines):
        cells = line.split(",")
        assert len(cells) == len(actions)
        for a, cell in zip(actions, cells):
            got = S._Action.from_str(cell)
            assert (got.stage_index, got.computation_type, got.microbatch_index) == (a.stage, TORCH_TYPE[a.op], a.mb)


@pytest.mark.parametrize("name, p, m, v", CASES)
def test_torch_validates_and_lowers_it_with_the_looped_placement(name, p, m, v):
    """torch's checks (every F once per stage and micro-batch, B or I+W), the stage → rank map it infers, and
    its send/recv lowering followed by its own dry run: no rank waits forever."""
    rows = [[S._Action.from_str(c) for c in line.split(",")] for line in to_csv(make_schedule(name, p, m, v)).split()]
    actions = dict(enumerate(rows))
    placement = S._validate_schedule(actions, p, p * v, m)
    assert placement == {s: s % p for s in range(p * v)}  # rank r holds r, r+p, …
    lowered = S._add_send_recv({r: list(a) for r, a in actions.items()}, lambda s: s % p, p * v)
    S._simulate_comms_compute(lowered, lambda s: s % p, p * v)  # raises "Schedule is not progressing" on a hang
    sends = sum(str(a).count("SEND_F") for acts in lowered.values() for a in acts)
    assert sends == (p * v - 1) * m if p > 1 else sends == 0  # each hand-over between ranks, once per micro-batch


@pytest.mark.parametrize("name, p, m, v", [("1f1b", 4, 2, 1), ("interleaved", 2, 4, 2), ("zero-bubble", 3, 4, 1)])
def test_torchs_loader_reads_the_file_and_dumps_it_back_byte_for_byte(name, p, m, v):
    from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime
    text = to_csv(make_schedule(name, p, m, v))

    def load_and_dump():
        runtime = _PipelineScheduleRuntime(rank0_stages(p, v), m)
        with tempfile.TemporaryDirectory() as folder:
            path, back = os.path.join(folder, "in.csv"), os.path.join(folder, "out.csv")
            with open(path, "w", newline="") as f:
                f.write(text)
            runtime._load_csv(path)  # compute_only: validated and lowered, as torchtitan loads it
            runtime._dump_csv(back, format="compute_only")
            with open(back, newline="") as f:
                return runtime, f.read()
    runtime, dumped = on_fake_group(p, load_and_dump)
    assert dumped == text
    lowered = [str(a) for a in runtime.pipeline_order_with_comms[0]]
    assert lowered.count("0REDUCE_GRAD") == 1 and "0SEND_F0" in lowered  # torch added its own actions


@pytest.mark.parametrize("cls, ours", [
    ("ScheduleInterleavedZeroBubble", lambda: zero_bubble(4, 6)),
    ("ScheduleInterleaved1F1B", lambda: interleaved(2, 4, 2)),
])
def test_torchs_own_dump_with_idle_cells_reads_as_our_schedule(cls, ours):
    """torch writes its schedule grid with empty cells for idle time steps; the lists are ours, action for action."""
    from torch.distributed import pipelining
    expected = ours()
    p, v = len(expected), len({a.stage for a in expected[0]})
    m = 1 + max(a.mb for a in expected[0])

    def dump():
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "torch.csv")
            getattr(pipelining, cls)(rank0_stages(p, v), m)._dump_csv(path, format="compute_only")
            with open(path, newline="") as f:
                return f.read()
    text = on_fake_group(p, dump)
    assert ",," in text or text.startswith(",") or "\n," in text  # torch's grid has idle cells
    assert from_csv(text) == expected


def test_emit_writes_the_plans_pipeline():
    """pp=4 ranks, 2 chunks each; m = 32 / (dp 2 × b 2) = 8 micro-batches, counted in the file itself."""
    plan = Plan(pp=4, dp=2, microbatch=2, schedule="interleaved", chunks=2)
    schedule = from_csv(emit(PRESETS["llama3-8b"], cluster(gpus=8), 32, plan))
    assert len(schedule) == 4
    assert {a.stage for acts in schedule for a in acts} == set(range(8))
    for s in range(8):
        assert sorted(a.mb for acts in schedule for a in acts if a.stage == s and a.op == "F") == list(range(8))
    assert schedule == make_schedule("interleaved", 4, 8, 2)


@pytest.mark.parametrize("schedule, message", [
    ("0F0", "schedule: must be a list"),
    ([], "schedule: must be a list"),
    ([["0F0", "0X0"]], "action='0X0'"),
    ([["0F0", "0B0"], ["1B0", "1F0"]], "schedule: rank 1, step 0: 1B0 comes before 1F0"),
    ([["0F0", "0B0"], ["1F0"]], "schedule: missing: 1B0"),
    ([["0F0", "0B0", "1F0", "1B0"], []], "schedule: rank 0, step 2: 1F0 is on the wrong rank"),
    ([["0F0", "0B0", "0B0"]], "schedule: duplicate: 0B0"),
])
def test_to_csv_refuses_what_torch_could_not_run(schedule, message):
    with pytest.raises(ValueError, match="^" + re.escape(message)) as err:
        to_csv(schedule)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("text, message", [
    (b"0F0", "text=bytes: must be the CSV as a str"),
    ("", "text: no rows"),
    ("0F0,0B0\n\n1F0,1B0\n", "text: row 2 (rank 1) is empty"),
    ("0F0,0B0\n1F0,1X0\n", "text: row 2, column 2 (rank 1, step 1): '1X0' is not an action such as '2F0'"),
    ("0F0,0F\n", "text: row 1, column 2 (rank 0, step 1): '0F' is not an action"),
    ("0F0x\n", "text: row 1, column 1 (rank 0, step 0): '0F0x' is not an action"),  # torch would read '0F0'
    ("0F0,0SEND_F0,0B0\n", "text: row 1, column 2 (rank 0, step 1): '0SEND_F0' is not a compute action"),
    ("0F0,0B0,0REDUCE_GRAD\n", "text: row 1, column 3 (rank 0, step 2): '0REDUCE_GRAD' is not a compute action"),
    ("(0F1;1B0)OVERLAP_F_B\n", "text: row 1, column 1 (rank 0, step 0): '(0F1;1B0)OVERLAP_F_B' is not a compute"),
])
def test_from_csv_refuses_malformed_text_naming_row_and_column(text, message):
    with pytest.raises(ValueError, match="^" + re.escape(message)) as err:
        from_csv(text)
    assert "\n" not in str(err.value)


def test_from_csv_reads_spaces_lf_and_idle_cells_as_torch_does():
    assert from_csv(" 0F0 ,,0B0\n1F0, 1B0") == [[Action(0, "F", 0), Action(0, "B", 0)],
                                                 [Action(1, "F", 0), Action(1, "B", 0)]]


@pytest.mark.parametrize("gpus, global_batch, plan, message", [
    (8, 16, Plan(tp=8), "pp=1: one stage, nothing to pipeline"),
    (8, 16, Plan(pp=4), "tp=1: tp*pp*dp = 4 must use all gpus=8"),
    (4, 10, Plan(pp=4, schedule="interleaved", chunks=2), "microbatches=10: must be divisible by pp=4"),
    (4, 8, Plan(pp=4, microbatch=3), "global_batch=8: must be divisible by dp × microbatch = 1 × 3"),
    (4, 8, Plan(pp=4, schedule="zero-bubble"), "schedule='zero-bubble'"),
])
def test_emit_refuses_in_one_line(gpus, global_batch, plan, message):
    with pytest.raises(ValueError, match="^" + re.escape(message)) as err:
        emit(PRESETS["llama3-8b"], cluster(gpus=gpus), global_batch, plan)
    assert "\n" not in str(err.value)
