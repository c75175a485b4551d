"""Lesson 0 (notebooks/00_start_here.ipynb) says only true things about the course: its primer table maps
passages of the primer to lessons that exist; every command it shows parses — simlab's with simlab's own
parser, torchrun's with torchrun's, what pytest grades is a notebook the learner's copy holds, the
environment it activates is the one `make setup` makes; and every number its prose quotes is the number its
cells printed, both held to a closed form (nbval then keeps the printed outputs equal to a fresh run)."""
import ast
import re
import shlex
import sys
from fractions import Fraction
from pathlib import Path

import nbformat
import pytest

from simlab.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import learner_copy  # noqa: E402 — after sys.path gains tools/ (what `make lab` copies into work/)

LESSON = ROOT / "notebooks" / "00_start_here.ipynb"
# the primer lives beside the developers' checkout, not in it (as in tests/sim/test_hybrid_scenarios.py)
PRIMER = ROOT.parent / "shared" / "seed" / "primer-zh.txt"
CJK = re.compile(r"[\u4e00-\u9fff]")


def cells():
    return nbformat.read(LESSON, as_version=4).cells


def find_cell(cell_id: str):
    return next(c for c in cells() if c.get("id") == cell_id)


def printed(cell_id: str) -> str:
    """What a code cell printed when the notebook was last run (its stream outputs)."""
    return "".join(o.get("text", "") for o in find_cell(cell_id).outputs if o.output_type == "stream")


def prose(cell_id: str) -> str:
    """A markdown cell's text with its line breaks undone, so a phrase may span two source lines."""
    return " ".join(find_cell(cell_id).source.split())


def primer_rows() -> list[list[str]]:
    """The rows of the primer → lesson table: [原文, English, lesson, notebook]."""
    cell = next(c for c in cells() if c.get("id") == "l0-primer-map")
    lines = [line for line in cell.source.splitlines() if line.startswith("|")]
    assert lines[0].split("|")[1:-1] == [" primer (原文) ", " in English ", " lesson ", " notebook "]
    return [[part.strip() for part in line.split("|")[1:-1]] for line in lines[2:]]


def shown_commands() -> list[str]:
    """Every command line in the lesson's ```bash blocks and its code cells that call simlab's CLI."""
    out = []
    for cell in cells():
        if cell.cell_type == "markdown":
            for block in re.findall(r"```bash\n(.*?)```", cell.source, flags=re.S):
                out += [line.strip() for line in block.splitlines() if line.strip()]
        else:
            out += [f"python -m simlab {words}" for words in re.findall(r'main\("([^"]+)"\.split\(\)\)', cell.source)]
    return out


def test_every_primer_row_is_verbatim_and_points_at_its_lesson():
    rows = primer_rows()
    assert len(rows) >= 7
    text = PRIMER.read_text(encoding="utf-8") if PRIMER.exists() else None
    for chinese, english, lesson, notebook in rows:
        assert CJK.search(chinese) and re.search("[A-Za-z]", english), (chinese, english)
        if text is not None:  # the primer lives beside the repository, not in it
            assert chinese in text, f"not in the primer: {chinese}"
        path = notebook.strip("`")
        assert (ROOT / path).is_file(), path
        assert Path(path).name.startswith(f"{lesson.zfill(2) if lesson.isdigit() else lesson.zfill(3)}_"), (lesson, path)


def test_every_lesson_is_reached_from_the_primer_table():
    mapped = {row[3].strip("`") for row in primer_rows()}
    lessons = {f"notebooks/{p.name}" for p in (ROOT / "notebooks").glob("*.ipynb")}
    assert lessons <= mapped, sorted(lessons - mapped)


def check_command(line: str) -> None:
    """Raise (SystemExit from argparse, or AssertionError) unless `line` is a real command of this course."""
    words = shlex.split(line.split(" #")[0])
    if words[0] == "torchrun":
        from torch.distributed.run import get_args_parser
        args = get_args_parser().parse_args(words[1:])
        if args.module:  # torchrun … -m simlab <simlab's words>
            assert args.training_script == "simlab", line
            build_parser().parse_args(args.training_script_args)
        else:
            assert args.training_script.endswith(".py"), line  # a user's script: torchrun's own flags only
    elif words[:3] == ["python", "-m", "simlab"]:
        build_parser().parse_args(words[3:])
    elif words[:2] == ["pytest", "--nbval"]:
        notebooks = [w for w in words[2:] if w.endswith(".ipynb")]
        assert notebooks, line
        for word in notebooks:  # work/… is the learner's copy: only what tools/learner_copy.py puts there
            if word.startswith("work/"):
                assert Path(word).relative_to("work") in learner_copy._sources(ROOT), line
            else:
                assert (ROOT / word).is_file(), line
    elif words[0] == "source":  # the environment `make setup` creates: $(VENV)/bin, VENV ?= .venv
        makefile = (ROOT / "Makefile").read_text()
        venv = re.search(r"^VENV\s+\?=\s+(\S+)$", makefile, re.M).group(1)
        assert re.search(r"^BIN\s+:=\s+\$\(VENV\)/bin$", makefile, re.M), "Makefile: BIN is not $(VENV)/bin"
        assert words[1:] == [f"{venv}/bin/activate"], line
    else:
        raise AssertionError(f"not a command the lesson should show: {line}")


def test_the_lesson_shows_commands_of_every_kind():
    lines = shown_commands()
    assert any(line.startswith("torchrun") and " -m simlab run" in line for line in lines)
    assert any("--backend nccl" in line for line in lines) and any("--trace" in line for line in lines)
    assert any(line.startswith("pytest --nbval work/exercises/") for line in lines)  # the learner's copy
    assert lines.index("source .venv/bin/activate") < min(i for i, line in enumerate(lines)
                                                           if line.startswith("python -m simlab"))
    assert any(line.startswith("python -m simlab schedule") for line in lines)  # the one the lesson runs


@pytest.mark.parametrize("line", shown_commands())
def test_each_command_shown_parses(line):
    check_command(line)


@pytest.mark.parametrize("line", ["python -m simlab run ddp --world 4 --gpus 2",  # no such flag
                                  "python -m simlab run fsdp",                     # no such target
                                  "torchrun --procs 4 -m simlab run ddp",          # not a torchrun flag
                                  "torchrun --nproc-per-node 4 -m simlab run ddp --stages 2",
                                  "pytest --nbval exercises/07_moe.ipynb",
                                  "pytest --nbval work/solutions/01_collectives.ipynb",  # never copied
                                  "pytest --nbval",
                                  "source venv/bin/activate",
                                  "simlab-run ddp"])
def test_a_wrong_command_would_be_caught(line, capsys):
    with pytest.raises((SystemExit, AssertionError)):
        check_command(line)


# ---- the numbers the prose quotes: what the cells printed, and each held to a closed form ----------------

def _call_args(source: str, name: str) -> dict[str, float]:
    """The keyword arguments of the call to `name` in a code cell, e.g. stages=4, t_b=2.0, so that the closed
    forms below use the lesson's own inputs: change a cell and the test follows, or fails where the prose
    does not."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == name:
            return {k.arg: float(ast.literal_eval(k.value)) for k in node.keywords}
    raise AssertionError(f"no call to {name} in {source!r}")


def test_the_rank_table_is_each_groups_sum_and_the_prose_reads_it_right():
    table = {}
    for line in printed("l0-ranks").splitlines()[1:]:
        m = re.match(r"(\d)\s+(\d)\s+gloo\s+cpu\s+\[(\d), (\d)\]\s+(\d)\s+(\d+)\s+(\d+)$", line.strip())
        assert m, line
        rank, world, a, b, group_rank, group_sum, world_sum = map(int, m.groups())
        members = [a, b]
        assert members == [r for r in range(4) if r % 2 == rank % 2]  # evens with evens, odds with odds
        assert group_rank == members.index(rank) and group_sum == sum(members)
        assert world == 4 and world_sum == sum(range(world))
        table[rank] = group_rank, group_sum, world_sum
    text = prose("l0-ranks-read")
    pairs = re.findall(r"ranks (\d) and (\d) got \d \+ \d = (\d+)", text)
    assert len(pairs) == 2 and len(table) == 4
    for a, b, total in pairs:
        assert table[int(a)][1] == table[int(b)][1] == int(total)
    assert re.search(rf"everyone got 0 \+ 1 \+ 2 \+ 3 = {table[0][2]} over WORLD", text)
    rank, group_rank = map(int, re.search(r"Rank (\d) is rank (\d) \*of its group\*", text).groups())
    assert table[rank][0] == group_rank


def test_the_1f1b_numbers_printed_and_quoted_are_the_closed_forms():
    args = _call_args(find_cell("l0-gantt").source, "one_f_one_b") | _call_args(find_cell("l0-gantt").source,
                                                                                   "pipeline.simulate")
    p, m, t_f, t_b = int(args["stages"]), int(args["microbatches"]), args["t_f"], args["t_b"]
    makespan = (m + p - 1) * (t_f + t_b)  # uniform stages: m + p − 1 slots of one forward and one backward
    busy = m * (t_f + t_b)
    bubble, ratio = Fraction(int(makespan - busy), int(makespan)), Fraction(p - 1, m)
    # what the cells printed
    assert f"bubble: {float(bubble):.0%} of the ranks' time is idle" in printed("l0-gantt")
    cli = printed("l0-cli")
    assert f"makespan {makespan:g}, bubble fraction {float(bubble):.4f} (idle / total; ratio idle / ideal " \
           f"{float(ratio):.4f}), peak activations per rank {[min(p - r, m) for r in range(p)]}" in cli
    assert f"--stages {p} --microbatches {m} --t-f {t_f:g} --t-b {t_b:g}" in find_cell("l0-cli").source
    # what the prose says about them
    assert f"t_F = {t_f:g}, t_B = {t_b:g}" in prose("l0-gantt-md") and f"p = {p}" in prose("l0-gantt-md")
    read = prose("l0-cli-read")
    assert f"is {makespan:g} = (m + p − 1)(t_F + t_B) = {m + p - 1} × {t_f + t_b:g} time units" in read
    assert f"busy for m(t_F + t_B) = {busy:g} of them and idle for {makespan - busy:g}" in read
    assert f"{makespan - busy:g}/{makespan:g} = {float(bubble):.4f}, the {float(bubble):.0%}".replace("%", " %") \
        in read
    assert f"{makespan - busy:g}/{busy:g} = (p − 1)/m = {float(ratio):.3f}" in read
    assert f"peak activations {[min(p - r, m) for r in range(p)]}" in read and f"runs {p} forwards" in read


def test_the_ring_steps_printed_and_quoted_are_the_closed_forms():
    from simlab.sim.collectives import ring_all_reduce
    from simlab.sim.collectives_stepper import simulate
    args = _call_args(find_cell("l0-ring").source, "ring_all_reduce")
    n, numel = int(args["world_size"]), int(args["numel"])
    steps = 2 * (n - 1)  # n − 1 reduce-scatter steps, then n − 1 all-gather steps
    shown = int(re.search(r"sim\.steps\[(\d)\]", find_cell("l0-ring").source).group(1))
    text = prose("l0-pictures-md")
    assert f"here {numel} numbers — is cut into {n} **chunks**" in text
    assert f"step {shown} of the {steps} steps" in text and f"now holds {shown + 1} ranks' inputs" in text
    # the real run: every state compared, and step n − 1 ends the reduce-scatter
    out = printed("l0-sim-real")
    assert f"steps that match: {steps + 1} of {steps + 1}" in out
    header = rf"step {n - 1}/{steps} of ring_all_reduce \(n={n}, {numel * 4} B\): reduce-scatter +match ✓"
    assert re.search(header, out)
    read = prose("l0-sim-real-md")
    assert f"{steps + 1} states to compare — step 0 (the inputs) and steps 1–{steps}" in read
    assert f"show step {n - 1}, the last of the reduce-scatter phase" in read
    # after step n − 1 each rank has sent n − 1 chunks of numel/n float32, and holds one chunk summed over all
    inputs = simulate(ring_all_reduce(world_size=n, numel=numel)).steps[0].values  # step 0: nothing added yet
    totals = [[int(v) for v in sum(inputs[r][c] for r in range(n))] for c in range(n)]
    sent = (n - 1) * numel // n * 4
    rows = [line for line in out.splitlines() if re.match(r"r\d ", line)]
    assert len(rows) == n
    reduced = []  # per rank: the chunks it holds summed over all n ranks
    for line in rows:
        simulated, real = (re.findall(r"\[([\d ]+)\]", half) for half in line.split("│"))
        assert simulated == real  # both halves of the printed table agree
        chunks = [[int(v) for v in chunk.split()] for chunk in simulated]
        reduced.append([c for c, chunk in enumerate(chunks) if chunk == totals[c]])
        assert line.split("│")[0].split()[-4:] == [str(sent), "B", str(sent), "B"], line
    assert sorted(c for held in reduced for c in held) == list(range(n)), reduced  # one total per rank, each once
    r0_chunk0 = re.search(r"rank 0's chunk 0, `\[(\d+) (\d+)\]`, is the sum of the four ranks' chunk 0", read)
    assert [int(v) for v in r0_chunk0.groups()] == totals[0]
    assert re.findall(r"\[[\d ]+\]", rows[0].split("│")[0])[0] == "[{} {}]".format(*totals[0])


def test_the_first_real_multi_process_result_comes_within_200_words():
    """Issue 23 §5: it came about 700 words in. The first cell that starts processes now follows the title's
    first paragraph, and what it printed is the all-reduce of every rank's number."""
    words, first = 0, None
    for cell in cells():
        if cell.cell_type == "code" and "launch(" in cell.source:
            first = cell
            break
        if cell.cell_type == "markdown":
            words += len(re.findall(r"[A-Za-z0-9']+", cell.source))
    assert first is not None and first.id == "l0-first-run" and words <= 200, words
    rows = [line.split() for line in printed("l0-first-run").splitlines()[1:] if line.strip()]
    world = len(rows)
    assert world == 4 and [int(r[0]) for r in rows] == list(range(world))
    assert all(int(r[1]) == world and int(r[2]) == sum(range(world)) for r in rows)
