"""Lesson 1's text tables: a golden file for ring all-reduce (n=3, numel=6), plus checks that do not need it.

Regenerate the golden after an intended change, then READ it before committing:
    SIMLAB_REGEN_GOLDEN=1 .venv/bin/python -m pytest tests/render/test_collectives_text.py -k golden
"""
import dataclasses
import os
import pathlib

import numpy as np
import pytest

from simlab.plan import CollectivePlan, Transfer
from simlab.render.collectives_text import (
    bytes_table,
    contributors,
    format_values,
    phase_name,
    side_by_side_text,
    step_text,
    trace_table,
)
from simlab.sim.collectives import naive_all_reduce, ring_all_gather, ring_all_reduce, tree_broadcast
from simlab.sim.collectives_stepper import simulate
from simlab.trace import Event, Trace

GOLDEN = pathlib.Path(__file__).parents[1] / "golden" / "ring_allreduce_n3.txt"


def as_real(step):
    """What a real run reports: the same values, but no idea whose inputs are in them."""
    return dataclasses.replace(step, sources=tuple((None,) * len(row) for row in step.sources))


def grid_cells(text: str, n: int) -> list[list[str]]:
    """The chunk cells of the rank rows (lines 'r0 ...' right after the column header)."""
    rows = text.splitlines()[2:2 + n]
    return [row.split()[1:1 + n] for row in rows]


def golden_text() -> str:
    plan = ring_all_reduce(world_size=3, numel=6)
    res = simulate(plan)
    parts = [step_text(s, plan) for s in res.steps]
    parts.append(step_text(res.steps[-1], plan, show="values"))
    parts.append(side_by_side_text(res.steps[2], as_real(res.steps[2]), plan, match=True))
    parts.append(trace_table(res.trace, 3))
    parts.append(bytes_table(list(res.steps[-1].bytes_sent), optimum=32))
    return "\n\n".join(parts) + "\n"


def test_golden_ring_allreduce_n3():
    text = golden_text()
    if os.environ.get("SIMLAB_REGEN_GOLDEN"):
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(text, encoding="utf-8")
    assert text == GOLDEN.read_text(encoding="utf-8")


def test_text_is_deterministic():
    assert golden_text() == golden_text()


def test_final_step_every_cell_is_the_full_sum():
    plan = ring_all_reduce(3, 6)
    res = simulate(plan)
    assert grid_cells(step_text(res.steps[-1], plan), 3) == [["Σ0..2"] * 3] * 3
    # values: the sum of the inputs, computed here with numpy, chunk by chunk
    total = np.sum(res.inputs, axis=0)
    want = [f"[{total[2 * c]} {total[2 * c + 1]}]" for c in range(3)]
    lines = step_text(res.steps[-1], plan, show="values").splitlines()[2:5]
    for line in lines:
        assert [f"{a} {b}" for a, b in zip(line.split()[1:7:2], line.split()[2:7:2])] == want


def test_start_and_first_step_by_hand():
    plan = ring_all_reduce(3, 6)
    steps = simulate(plan).steps
    assert grid_cells(step_text(steps[0], plan), 3) == [["0"] * 3, ["1"] * 3, ["2"] * 3]
    # step 0: rank r sends chunk r-1 to r+1, which adds it to its own
    assert grid_cells(step_text(steps[1], plan), 3) == [["0", "0+2", "0"], ["1", "1", "0+1"],
                                                        ["1+2", "2", "2"]]


def test_every_transfer_and_byte_count_appears():
    plan = ring_all_reduce(4, 8)
    for step in simulate(plan).steps[1:]:
        text = step_text(step, plan)
        for t in step.transfers:
            sign = "(+=)" if t.op == "reduce" else "(=)"
            assert f"r{t.src} → r{t.dst} {sign} chunk {t.chunk} ({t.nbytes} B)" in text
        for r, sent in enumerate(step.bytes_sent):
            assert text.splitlines()[2 + r].split()[-4:-2] == [str(sent), "B"]


def test_header_and_phases():
    plan = ring_all_reduce(4, 8)
    steps = simulate(plan).steps
    assert step_text(steps[3], plan).splitlines()[0] == \
        "step 3/6 of ring_all_reduce (n=4, 32 B): reduce-scatter"
    assert [phase_name(s, plan) for s in steps] == ["start"] + ["reduce-scatter"] * 3 + ["all-gather"] * 3
    naive = naive_all_reduce(4, 8)
    assert [phase_name(s, naive) for s in simulate(naive).steps] == ["start", "reduce", "broadcast"]
    gather = ring_all_gather(3, 3)
    assert phase_name(simulate(gather).steps[1], gather) == "all-gather"
    named = dataclasses.replace(plan, meta={"goal": "all_reduce", "phases": ["a"] * 6})
    assert phase_name(steps[2], named) == "a"


def test_contributors_and_values_formatting():
    assert contributors({0, 2}, 4) == "0+2"
    assert contributors(set(range(8)), 8) == "Σ0..7"
    assert contributors({0, 1, 2, 5}, 8) == "0..2+5"
    assert contributors({3}, 8) == "3"
    assert contributors({0}, 1) == "0"
    assert format_values(np.array([1, 2])) == "[1 2]"
    assert format_values(np.arange(10)) == "[0 1 2 …]"
    assert format_values(np.array([3.0, 0.5])) == "[3 0.5]"
    assert format_values(np.array([], dtype=np.int64)) == "[]"


def test_not_held_and_real_steps_without_sources():
    plan = tree_broadcast(4, 2)
    steps = simulate(plan).steps
    assert grid_cells(step_text(steps[0], plan), 1)[0] == ["0"]
    assert "·" in step_text(steps[0], plan)
    # a real step knows values only: the table falls back to values, cell by cell
    real = as_real(steps[-1])
    assert "[" in step_text(real, plan) and "Σ" not in step_text(real, plan)
    with pytest.raises(ValueError, match="show="):
        step_text(steps[0], plan, show="colours")


def test_side_by_side_shows_both_and_the_verdict():
    plan = ring_all_reduce(3, 6)
    steps = simulate(plan).steps
    good = side_by_side_text(steps[2], as_real(steps[2]), plan, match=True)
    bad = side_by_side_text(steps[2], None, plan, match=False)
    assert good.splitlines()[0].endswith("match ✓") and "│  real" in good
    assert bad.splitlines()[0].endswith("match ✗") and "(no such step)" in bad


def test_trace_table_ignores_timing_and_order_and_flags_orphans():
    plan = ring_all_reduce(3, 6)
    trace = simulate(plan).trace
    shifted = Trace(dataclasses.replace(e, start=e.start + 5, end=e.end + 7) for e in reversed(trace))
    assert trace_table(trace, 3) == trace_table(shifted, 3)
    orphan = Trace([Event(0, "send", 0, 1, 2, 8), Event(2, "recv", 0, 1, 0, 8),
                    Event(1, "compute", 1, name="0F0")])
    text = trace_table(orphan, 3)
    assert "r0 → r1 chunk 2 (8 B)  [no matching recv]" in text
    assert "r1 → r2 chunk 0 (8 B)  [recv only]" in text
    assert "r1 compute 0F0" in text


def test_bytes_table():
    text = bytes_table([96, 32, 32, 32], optimum=48)
    assert text.splitlines()[1].split() == ["r0", "96", "B", "2.00x"]
    assert "total  192 B" in text and text.endswith("optimum per rank: 48 B")
    assert "optimum" not in bytes_table([1, 2])


def test_zero_byte_chunks_and_handmade_plans():
    plan = CollectivePlan("handmade", 2, (1, 0), 4, "all",
                          ((Transfer(0, 0, 1, 1, 0, "copy"),),), meta={"goal": "all_gather"})
    text = step_text(simulate(plan).steps[1], plan)
    assert "r0 → r1 (=) chunk 1 (0 B)" in text


def test_a_transfer_line_reads_sender_then_receiver():
    """The rank left of the arrow is the one whose 'sent' grows; the right one's 'recv' grows, and its
    cell gains the sender's sources on (+=). (The old 'r0 += r1' read as if r1 sent to r0.)"""
    import re
    plan = ring_all_reduce(4, 8)
    steps, checked = simulate(plan).steps, 0
    for before, after in zip(steps, steps[1:]):
        for line in step_text(after, plan).splitlines():
            found = re.fullmatch(r"  r(\d+) → r(\d+) \((\+?=)\) chunk (\d+) \((\d+) B\)", line)
            if not found:
                continue
            src, dst, chunk, nbytes = (int(found[i]) for i in (1, 2, 4, 5))
            assert after.bytes_sent[src] - before.bytes_sent[src] == nbytes
            assert after.bytes_received[dst] - before.bytes_received[dst] == nbytes
            if found[3] == "+=":
                assert after.sources[dst][chunk] == before.sources[dst][chunk] | before.sources[src][chunk]
            else:
                assert after.sources[dst][chunk] == before.sources[src][chunk]
            checked += 1
    assert checked == 4 * plan.num_steps  # every transfer line was read, none skipped by the pattern
    assert str(plan.steps[0][0]) == "r0 → r1 (+=) chunk 3 (8 B)"


# ---- lesson 1's sentences against what the lesson prints (and what the simulator computes) --------

LESSON = pathlib.Path(__file__).parents[2] / "notebooks" / "01_collectives.ipynb"


def lesson_cells() -> dict:
    import nbformat
    return {cell.get("id"): cell for cell in nbformat.read(LESSON, as_version=4).cells}


def printed(cell) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")


def test_the_sentence_after_the_first_step_names_the_cell_the_table_shows():
    import re
    cells = lesson_cells()
    claim = re.search(r"`step (\d+)/\d+`.*?rank (\d+)'s chunk (\d+) is `([^`]+)`", cells["a90e9ee7"].source, re.S)
    assert claim, "the sentence moved or changed its form: update this test with it"
    k, rank, chunk, who = int(claim[1]), int(claim[2]), int(claim[3]), claim[4]
    out = printed(cells["09200c13"])
    table = out[out.index(f"step {k}/"):]
    assert grid_cells(table, 4)[rank][chunk] == who  # the printed state says so …
    step = simulate(ring_all_reduce(4, 8)).steps[k]
    assert contributors(step.sources[rank][chunk], 4) == who  # … and so does the simulator
    # "its own input plus what rank 0 sent": the transfer into that cell came from rank 0
    assert [(t.src, t.op) for t in step.transfers if (t.dst, t.chunk) == (rank, chunk)] == [(0, "reduce")]


def test_the_lower_bound_paragraph_states_the_plans_own_numbers():
    import re

    from simlab.sim.cost import optimal_bytes_per_rank
    cells = lesson_cells()
    text = re.sub(r"\s+", " ", cells["47b594c4"].source)
    found = re.search(r"\(\$n = (\d+)\$, \$S = (\d+)\$ B\) both send (\d+) B in all, the ring (\d+) B per rank, "
                      r"the naive root (\d+) B", text)
    assert found, "the sentence moved or changed its form: update this test with it"
    n, size, total, per_rank, root = map(int, found.groups())
    ring, naive = ring_all_reduce(n, size // 4), naive_all_reduce(n, size // 4)
    assert sum(ring.bytes_sent_per_rank()) == sum(naive.bytes_sent_per_rank()) == total == 2 * (n - 1) * size
    assert set(ring.bytes_sent_per_rank()) == {per_rank} == {optimal_bytes_per_rank("all_reduce", n, size)}
    assert max(naive.bytes_sent_per_rank()) == root == (n - 1) * size
    out = printed(cells["303e7241"])  # the tables the sentence points at
    assert out.count(f"total  {total} B") == 2 and f"r0     {root} B" in out
    assert f"optimum per rank: {per_rank} B" in out
    # the bound is stated on bytes *sent*: own contributions plus reduced results, (n−1)/n·S each
    assert "Count the bytes a rank must *send*" in text
    assert "**its own contributions**" in text and "**reduced results**" in text


def test_the_zero_rows_name_both_collectives_and_when():
    rows = {line.split("|")[1].strip(): line for line in lesson_cells()["5070f317"].source.splitlines()
            if line.startswith("| ZeRO")}
    assert set(rows) == {"ZeRO-1", "ZeRO-2", "ZeRO-3"}
    for name, line in rows.items():
        assert "**all-gather** of parameters" in line and "**reduce-scatter**" in line, name
    assert "**all-reduce**" in rows["ZeRO-1"] and "after the step" in rows["ZeRO-2"]
    assert "before each layer's forward and again before its backward" in rows["ZeRO-3"]


def test_the_lesson_ends_with_a_summary_and_the_next_notebook():
    cells = list(lesson_cells().values())
    last = cells[-1].source
    assert last.startswith("## Summary") and 3 <= last.count("\n- ") <= 6
    assert "**Next:** [Lesson 2 — Data parallel: DP vs DDP](02_data_parallel.ipynb)" in last
    assert (LESSON.parent / "02_data_parallel.ipynb").exists()


def test_the_uneven_paragraph_states_what_the_real_run_printed():
    """'chunk 0 leaves ranks 0 and 7 once and every other rank twice' and the bound 7007 B: checked against the
    plan (every chunk but r, then every chunk but r+1) and against the counts the lesson printed."""
    import re
    cells = lesson_cells()
    text = " ".join(cells["l1-uneven-bytes"].source.split())
    n, numel = 8, 1001
    assert "8 processes, 1001 elements (one chunk of 126 elements, seven of 125)" in \
        " ".join(cells["21d3827b"].source.split())
    plan = ring_all_reduce(n, numel)
    assert plan.chunk_sizes == (126,) + (125,) * 7
    sends_of_chunk0 = [sum(1 for step in plan.steps for t in step if t.src == r and t.chunk == 0) for r in range(n)]
    assert sends_of_chunk0 == [1, 2, 2, 2, 2, 2, 2, 1] and "leaves ranks 0 and 7 once and every other rank twice" in text
    bound = 2 * (n - 1) * numel * 4 / n  # 2(n−1)/n·S, S = 4004 B
    assert f"$= {bound:.0f}$ B" in text and bound == 7007
    printed_counts = re.search(r"bytes sent per rank: \[([\d, ]+)\]", printed(cells["39dd52c9"]))[1]
    counts = [int(x) for x in printed_counts.split(",")]
    assert counts == plan.bytes_sent_per_rank() and f"sends {max(counts)} B" in text and max(counts) >= bound
