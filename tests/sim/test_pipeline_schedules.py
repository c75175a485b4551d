"""Pipeline schedules: the orders of torch.distributed.pipelining and of Megatron-LM, action for action.

Goldens: tests/golden/pipeline_grids.txt holds `format_grid` of a few schedules (what the CLI prints);
the tests below check every golden against torch's own schedule classes and against a line-by-line
transcription of Megatron-LM, so the file is verified independently of the code that wrote it.
Regenerate (then review the diff):  .venv/bin/python tests/sim/test_pipeline_schedules.py
"""
import re
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch import nn

from simlab.plan import Action
from simlab.sim.pipeline_check import validate
from simlab.sim.pipeline_schedules import (
    SCHEDULES,
    format_grid,
    gpipe,
    interleaved,
    make_schedule,
    naive,
    one_f_one_b,
    zero_bubble,
)

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "pipeline_grids.txt"
GRIDS = [("naive", 4, 1, 1), ("gpipe", 3, 4, 1), ("1f1b", 4, 6, 1), ("interleaved", 2, 4, 2),
         ("interleaved", 4, 8, 2), ("zero-bubble", 4, 6, 1)]


def torch_order(cls_name: str, p: int, m: int, v: int = 1) -> list[list[Action]]:
    """torch's own `pipeline_order` for p ranks: real PipelineStages (rank 0's) on a 'fake' process group.

    The fake backend (torch's test backend) gives a world of p ranks in this one process without any
    communication; schedule classes only read the group's size and rank to build every rank's order.
    Idle slots (None) and torch's extra REDUCE_GRAD actions are dropped: we compare compute order.
    """
    from torch.distributed import pipelining
    from torch.testing._internal.distributed.fake_pg import FakeStore
    assert not dist.is_initialized(), "another test left a process group behind"
    dist.init_process_group("fake", rank=0, world_size=p, store=FakeStore())
    try:
        stages = [pipelining.PipelineStage(nn.Identity(), c * p, p * v, torch.device("cpu")) for c in range(v)]
        cls = getattr(pipelining, cls_name)
        single = cls_name in ("ScheduleGPipe", "Schedule1F1B")
        order = cls(stages[0] if single else stages, m).pipeline_order
        return [[Action.parse(str(a)) for a in order[r] if a is not None and re.fullmatch(r"\d+[FBIW]\d+", str(a))]
                for r in range(p)]
    finally:
        dist.destroy_process_group()


def megatron(p: int, m: int, v: int | None) -> list[list[Action]]:
    """Independent transcription of Megatron-LM megatron/core/pipeline_parallel/schedules.py:
    `get_schedule_table`, `get_pp_rank_microbatches` and the warm-up / 1F1B / cool-down loops of
    `forward_backward_pipelining_{with,without}_interleaving`, with microbatch_group_size_per_vp_stage
    = p (its default). A backward pops the oldest input of its chunk (`input_tensors[chunk].pop(0)`).
    v=None is the non-interleaved schedule."""
    chunks, group = v or 1, p
    table = []  # virtual micro-batch id → (microbatch_id, model_chunk_id)
    for lo in range(0, m, group):
        hi = m if lo + group >= m else lo + group
        table += [(mb, c) for c in range(chunks) for mb in range(lo, hi)]
    out = []
    for r in range(p):
        total = m * chunks
        warm = p - r - 1 if v is None else (p - r - 1) * 2 + (chunks - 1) * group
        warm = min(warm, total)
        queues = [[] for _ in range(chunks)]
        ops = []

        def forward(k):
            mb, c = table[k]
            queues[c].append(mb)
            ops.append(Action(c * p + r, "F", mb))

        def backward(k):
            c = chunks - 1 - table[k][1]
            ops.append(Action(c * p + r, "B", queues[c].pop(0)))

        for k in range(warm):
            forward(k)
        for k in range(total - warm):
            forward(k + warm)
            backward(k)
        for k in range(total - warm, total):
            backward(k)
        out.append(ops)
    return out


def parse_grid(text: str) -> list[list[Action]]:
    return [[Action.parse(t) for t in line.split(":", 1)[1].split()] for line in text.strip().splitlines()]


def read_golden() -> dict[tuple, str]:
    sections = re.split(r"^== (.+) ==\n", GOLDEN.read_text(), flags=re.M)[1:]
    out = {}
    for head, body in zip(sections[::2], sections[1::2]):
        name, p, m, v = head.split()
        out[name, int(p[2:]), int(m[2:]), int(v[2:])] = body.strip("\n")
    return out


def write_golden() -> None:
    text = "".join(f"== {n} p={p} m={m} v={v} ==\n{format_grid(make_schedule(n, p, m, v))}\n" for n, p, m, v in GRIDS)
    GOLDEN.write_text(text)


def test_golden_grids_are_what_format_grid_prints():
    golden = read_golden()
    assert sorted(golden) == sorted(GRIDS)
    for key, text in golden.items():
        assert format_grid(make_schedule(*key)) == text, key


@pytest.mark.parametrize("key", GRIDS, ids=lambda k: "-".join(map(str, k)))
def test_golden_grids_match_torch_and_megatron(key):
    name, p, m, v = key
    got = parse_grid(read_golden()[key])
    if name in ("naive", "gpipe"):
        assert got == torch_order("ScheduleGPipe", p, m)
    if name == "1f1b":
        assert got == megatron(p, m, None)
        assert got == torch_1f1b_fixed(p, m)
    if name == "interleaved":
        assert got == megatron(p, m, v) == torch_order("ScheduleInterleaved1F1B", p, m, v)
    if name == "zero-bubble":
        assert got == torch_order("ScheduleInterleavedZeroBubble", p, m)


def torch_1f1b_fixed(p: int, m: int) -> list[list[Action]]:
    """torch's Schedule1F1B.pipeline_order with its last-rank off-by-one undone (see the next test)."""
    order = torch_order("Schedule1F1B", p, m)
    order[-1] = [Action(a.stage, a.op, a.mb - 1) if a.op == "F" else a for a in order[-1]]
    return order


@pytest.mark.parametrize("p,m", [(2, 2), (2, 5), (3, 3), (4, 4), (4, 6), (4, 9), (5, 12)])
def test_1f1b_matches_megatron_and_torch_except_torchs_last_rank(p, m):
    ours = one_f_one_b(p, m)
    assert ours == megatron(p, m, None)
    theirs = torch_order("Schedule1F1B", p, m)
    assert theirs[:-1] == ours[:-1]  # every rank but the last: identical
    # torch 2.13 `Schedule1F1B._get_pipeline_order` (the IR behind `pipeline_order`, not what `step`
    # runs): on the last rank num_forward = p-1-rank = 0, so `forward_mb` keeps its initial 0 and the
    # steady loop's `forward_mb += 1` comes before the first append. Its forwards are therefore
    # F1 … Fm instead of F0 … F(m-1): F0 is missing and micro-batch m does not exist.
    last = p - 1
    assert [a for a in theirs[-1] if a.op == "B"] == [Action(last, "B", j) for j in range(m)]
    assert [a for a in theirs[-1] if a.op == "F"] == [Action(last, "F", j + 1) for j in range(m)]
    assert theirs[-1] == [Action(a.stage, a.op, a.mb + (a.op == "F")) for a in ours[-1]]
    assert validate(theirs) != [] and validate(ours) == []


@pytest.mark.parametrize("p,m", [(1, 3), (2, 1), (3, 5), (4, 2), (4, 8)])
def test_gpipe_matches_torch(p, m):
    assert gpipe(p, m) == torch_order("ScheduleGPipe", p, m)
    assert naive(p) == torch_order("ScheduleGPipe", p, 1)


@pytest.mark.parametrize("p,m,v", [(1, 2, 2), (2, 2, 2), (2, 6, 3), (3, 3, 2), (4, 4, 2), (4, 8, 2),
                                   (4, 8, 3), (4, 16, 4), (3, 9, 1)])
def test_interleaved_matches_megatron_and_torch(p, m, v):
    ours = interleaved(p, m, v)
    assert ours == megatron(p, m, v)
    assert ours == torch_order("ScheduleInterleaved1F1B", p, m, v)


@pytest.mark.parametrize("p,m", [(1, 3), (2, 2), (3, 6), (4, 1), (4, 2), (4, 3), (4, 8), (5, 3), (6, 12)])
def test_zero_bubble_matches_torch_zb_with_one_chunk(p, m):
    assert zero_bubble(p, m) == torch_order("ScheduleInterleavedZeroBubble", p, m)


def test_zero_bubble_rank_r_defers_r_weight_gradients():
    """ZB-H1's rule stated directly: on rank r, W of micro-batch k comes right after I of k+r,
    and the r deferred Ws close the list."""
    p, m = 5, 9
    for r, acts in enumerate(zero_bubble(p, m)):
        text = [str(a) for a in acts]
        for k in range(m - r):
            assert text[text.index(f"{r}I{k + r}") + 1] == f"{r}W{k}"
        assert text[len(text) - r:] == [f"{r}W{j}" for j in range(m - r, m)]


CONFIGS = [(name, p, m, v) for name in SCHEDULES for p in (1, 2, 3, 4, 7) for m in (1, 2, 3, 4, 8, 14)
           for v in ((1, 2, 3) if name == "interleaved" else (1,))
           if (name != "naive" or m == 1) and (name != "interleaved" or m % p == 0)]


@pytest.mark.parametrize("name,p,m,v", CONFIGS)
def test_every_action_exactly_once_on_its_owner(name, p, m, v):
    sched = make_schedule(name, p, m, v)
    assert len(sched) == p
    ops = "FIW" if name == "zero-bubble" else "FB"
    want = Counter((s, op, j) for s in range(p * v) for op in ops for j in range(m))
    assert Counter((a.stage, a.op, a.mb) for acts in sched for a in acts) == want
    assert all(a.stage % p == r for r, acts in enumerate(sched) for a in acts)
    assert validate(sched, p * v, m) == []


@pytest.mark.parametrize("args,message", [
    (("pipedream", 4), "name='pipedream': must be one of naive, gpipe, 1f1b, interleaved, zero-bubble"),
    (("gpipe", 0), "stages=0: must be >= 1"),
    (("gpipe", 4, 0), "microbatches=0: must be >= 1"),
    (("interleaved", 4, 4, 0), "chunks=0: must be >= 1"),
    (("1f1b", 4, 8, 2), "chunks=2: only interleaved has more than one chunk per rank"),
    (("naive", 4, 3), "microbatches=3: naive runs the whole batch (needs 1)"),
    (("interleaved", 4, 3, 2), "microbatches=3: interleaved needs a multiple of stages=4"),
    (("gpipe", 2.0, 4), "stages=2.0: must be an integer"),
])
def test_make_schedule_rejects_bad_input_in_one_line(args, message):
    with pytest.raises(ValueError) as err:
        make_schedule(*args)
    assert str(err.value) == message


def test_format_grid_aligns_columns_and_is_deterministic():
    sched = make_schedule("interleaved", 2, 12, 2)  # names of 3 and 4 characters ("3F11")
    text = format_grid(sched)
    assert text == format_grid(make_schedule("interleaved", 2, 12, 2))
    for r, line in enumerate(text.splitlines()):
        assert line.startswith(f"rank {r}: ")
        assert [line[8 + 5 * c: 12 + 5 * c].strip() for c in range(len(sched[r]))] == [str(a) for a in sched[r]]
    assert parse_grid(text) == sched
    assert format_grid(naive(12)).splitlines()[0] == "rank  0: 0F0  0B0"  # widths follow the longest name


if __name__ == "__main__":  # regenerate the golden grids
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    write_golden()
    print(f"wrote {GOLDEN}")
