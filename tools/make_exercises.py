"""Generate exercises/ from solutions/: each answer region becomes a stub that raises.

    python tools/make_exercises.py          # rewrite exercises/*.ipynb
    python tools/make_exercises.py --check  # exit 1 if exercises/ drifted from solutions/

In code cells, the lines from `### BEGIN SOLUTION` to `### END SOLUTION` become
`raise NotImplementedError(...)` at the same indentation; in markdown cells they become a prompt.
Outputs are kept up to the first answer region, so the set-up reads as in the lesson. From the first
answer region on, every code cell loses its outputs in the exercise and gets nbval's
`nbval-ignore-output` tag: what those cells print comes from the learner's answers (a plan's transfers,
a launch order, a ✓ verdict), and the solution's outputs would give them away. So would a ✓ line in
any earlier cell, which is hidden too. Such a cell is graded by running: a stub raises NotImplementedError, and a
check raises AssertionError on a wrong answer (`simlab.grading.common.fail`), so nbval still fails until
the answer is right.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
STUB = 'raise NotImplementedError("exercise: write your answer here")'
# a Chinese notebook (tools/build_zh.py writes metadata.simlab.language = "zh") gets its stub and prompt in Chinese
STUBS = {"en": (STUB, "*Your answer here.*"),
         "zh": ('raise NotImplementedError("练习：请在这里写下你的答案")', "*请在这里写下你的答案。*")}


def strip_solutions(source: str, cell_type: str, language: str = "en") -> str:
    stub, prompt = STUBS[language]
    out, inside = [], False
    for line in source.split("\n"):
        if line.strip() == BEGIN:
            if inside:
                raise ValueError(f"nested {BEGIN!r}")
            inside = True
            indent = re.match(r"\s*", line).group(0)
            out.append(indent + stub if cell_type == "code" else prompt)
        elif line.strip() == END:
            if not inside:
                raise ValueError(f"{END!r} without {BEGIN!r}")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise ValueError(f"{BEGIN!r} without {END!r}")
    return "\n".join(out)


IGNORE_OUTPUT = "nbval-ignore-output"


def _output_text(output) -> str:
    """What an output shows as text: a stream's text, or a result's text/plain."""
    return output.get("text", "") + output.get("data", {}).get("text/plain", "")


def gives_answer_away(cell) -> bool:
    """A cell whose stored output a learner must not see before answering."""
    return cell.cell_type == "code" and (BEGIN in cell.source or any(
        "✓" in _output_text(o) for o in cell.get("outputs", [])))


def make_exercise(solution: Path) -> str:
    nb = nbformat.read(solution, as_version=4)
    language = nb.metadata.get("simlab", {}).get("language", "en")
    answered = False  # from the first answer region on, outputs depend on the learner's answers
    for cell in nb.cells:
        answered = answered or BEGIN in cell.source
        if cell.cell_type == "code" and (answered or gives_answer_away(cell)):
            cell.outputs, cell.execution_count = [], None
            tags = cell.metadata.setdefault("tags", [])
            if IGNORE_OUTPUT not in tags:
                tags.append(IGNORE_OUTPUT)
        if BEGIN in cell.source:
            cell.source = strip_solutions(cell.source, cell.cell_type, language)
    return nbformat.writes(nb) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="fail if exercises/ is out of date")
    args = parser.parse_args(argv)
    drifted = []
    for solution in sorted((ROOT / "solutions").glob("*.ipynb")):
        target, text = ROOT / "exercises" / solution.name, make_exercise(solution)
        if args.check:
            if not target.exists() or target.read_text() != text:
                drifted.append(target.name)
        else:
            target.write_text(text)
    if drifted:
        print(f"exercises out of date: {', '.join(drifted)}; run: python tools/make_exercises.py")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
