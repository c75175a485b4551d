"""Lesson 0 (notebooks/00_start_here.ipynb) says only true things about the course: its primer table maps
passages of the primer to lessons that exist, and every command it shows parses — simlab's with simlab's own
parser, torchrun's with torchrun's, and what pytest grades is a notebook that exists."""
import re
import shlex
from pathlib import Path

import nbformat
import pytest

from simlab.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
LESSON = ROOT / "notebooks" / "00_start_here.ipynb"
# the primer lives beside the developers' checkout, not in it (as in tests/sim/test_hybrid_scenarios.py)
PRIMER = ROOT.parent / "shared" / "seed" / "primer-zh.txt"
CJK = re.compile(r"[\u4e00-\u9fff]")


def cells():
    return nbformat.read(LESSON, as_version=4).cells


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
        assert Path(path).name.startswith(f"{int(lesson):02d}_"), (lesson, path)


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
        assert all((ROOT / w).is_file() for w in words[2:] if w.endswith(".ipynb")), line
    else:
        raise AssertionError(f"not a command the lesson should show: {line}")


def test_the_lesson_shows_commands_of_every_kind():
    lines = shown_commands()
    assert any(line.startswith("torchrun") and " -m simlab run" in line for line in lines)
    assert any("--backend nccl" in line for line in lines) and any("--trace" in line for line in lines)
    assert any(line.startswith("pytest --nbval exercises/") for line in lines)
    assert any(line.startswith("python -m simlab schedule") for line in lines)  # the one the lesson runs


@pytest.mark.parametrize("line", shown_commands())
def test_each_command_shown_parses(line):
    check_command(line)


@pytest.mark.parametrize("line", ["python -m simlab run ddp --world 4 --gpus 2",  # no such flag
                                  "python -m simlab run fsdp",                     # no such target
                                  "torchrun --procs 4 -m simlab run ddp",          # not a torchrun flag
                                  "torchrun --nproc-per-node 4 -m simlab run ddp --stages 2",
                                  "pytest --nbval exercises/07_moe.ipynb",
                                  "simlab-run ddp"])
def test_a_wrong_command_would_be_caught(line, capsys):
    with pytest.raises((SystemExit, AssertionError)):
        check_command(line)
