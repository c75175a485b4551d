"""The learner's copy of the course: `work/`, git-ignored, so a learner's edits never meet `git pull`.

`make lab` calls `fill` first: it copies the lessons (notebooks/), the exercises (exercises/) and the
documents they link to into work/, but only the files work/ does not have yet — a file there is the
learner's and is never overwritten. A lesson that changed upstream reaches work/ when the learner
deletes their copy (or runs `make work-reset LESSON=03`, which moves it aside first) and reruns
`make lab`. The answers stay out of work/: they are in solutions/ at the repository root.

    python tools/learner_copy.py               # fill work/, print what was copied
    python tools/learner_copy.py --reset 03    # move work's copies of lesson 03 aside, copy them afresh
"""
from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = "work"
# Folders copied whole, and single files the lessons link to relatively (01 links ../GLOSSARY.md).
FOLDERS = ("notebooks", "exercises")
FILES = ("GLOSSARY.md",)
START_PAGES = ("notebooks/00_start_here.ipynb", "notebooks/01_collectives.ipynb")


def _sources(root: Path) -> list[Path]:
    """Every file to mirror, relative to `root`, in a stable order (checkpoints and caches left out)."""
    found = [Path(name) for name in FILES if (root / name).is_file()]
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*")):
            relative = path.relative_to(root)
            if path.is_file() and not any(part.startswith(".") or part == "__pycache__" for part in relative.parts):
                found.append(relative)
    return found


def fill(root: Path = ROOT, work: Path | None = None) -> list[Path]:
    """Copy into `work` each source file it lacks; return those copied (relative paths). Never overwrites."""
    work = root / WORK if work is None else work
    copied = []
    for relative in _sources(root):
        target = work / relative
        if target.exists():
            continue  # the learner's file, whatever it now holds
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / relative, target)
        copied.append(relative)
    return copied


def reset(lesson: str, root: Path = ROOT, work: Path | None = None, now: float | None = None) -> list[Path]:
    """Move work's copies of one lesson aside (`<name>.before-reset-<time>.ipynb`), then copy them afresh.

    `lesson` is the number ("3", "03") or the start of the name ("03_zero"). Returns the moved-aside
    files. Raises ValueError (one line) when `lesson` is empty or no lesson matches.
    """
    work = root / WORK if work is None else work
    prefix = lesson.zfill(2) if lesson.isdigit() else lesson
    matches = [r for r in _sources(root) if r.suffix == ".ipynb" and r.name.startswith(prefix)]
    names = ", ".join(sorted({r.stem for r in _sources(root) if r.suffix == ".ipynb"}))
    if not lesson:
        raise ValueError(f"which lesson? e.g. LESSON=03; lessons: {names}")
    if not matches:
        raise ValueError(f"no lesson {lesson!r}; lessons: {names}")
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    moved = []
    for relative in matches:
        current = work / relative
        if current.exists():
            aside = _aside(current, stamp)
            current.rename(aside)
            moved.append(aside.relative_to(work))
    fill(root, work)
    return moved


def _aside(current: Path, stamp: str) -> Path:
    """`<name>.before-reset-<stamp>.ipynb`, or `…-<stamp>-2.ipynb` … if taken: rename() would silently
    replace the copy an earlier reset in the same second kept, and with it the learner's answers."""
    aside, k = current.with_name(f"{current.stem}.before-reset-{stamp}{current.suffix}"), 2
    while aside.exists():
        aside, k = current.with_name(f"{current.stem}.before-reset-{stamp}-{k}{current.suffix}"), k + 1
    return aside


def start_page(work: Path) -> Path:
    """The page `make lab` opens, relative to `work`: the start page, or lesson 1 where there is none yet."""
    for page in START_PAGES:
        if (work / page).exists():
            return Path(page)
    return Path(START_PAGES[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Fill work/, the learner's copy of the course.")
    parser.add_argument("--reset", metavar="LESSON", help="move this lesson's copies aside and copy it afresh")
    args = parser.parse_args(argv)
    if args.reset is not None:
        try:
            moved = reset(args.reset)
        except ValueError as error:
            print(f"make work-reset: {error}", file=sys.stderr)
            return 2
        for path in moved:
            print(f"kept your old copy as {WORK}/{path}")
        print(f"{WORK}/: lesson {args.reset} copied afresh")
        return 0
    copied = fill()
    if copied:
        print(f"{WORK}/: copied {len(copied)} new file(s) — your copy of the course; answers are in solutions/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
