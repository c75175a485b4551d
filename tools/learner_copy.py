"""The learner's copy of the course: `work/`, git-ignored, so a learner's edits never meet `git pull`.

`make lab` calls `fill` first: it copies the lessons (notebooks/), the exercises (exercises/) and the
documents they link to into work/, but only the files work/ does not have yet — a file there is the
learner's and is never overwritten. A lesson that changed upstream reaches work/ when the learner
deletes their copy (or runs `make work-reset LESSON=03`, which moves it aside first) and reruns
`make lab`. The answers stay out of work/: they are in solutions/ at the repository root.

A copy is whole or absent, never half there: each file is written to a hidden temporary file beside its
target, then renamed onto it (`os.replace`, atomic within one folder). A copy killed half-way leaves only
that temporary file, which the next `fill` removes; a full disk leaves nothing. A lesson that is no longer a
notebook while its source is (broken by an older copier, an editor or a full disk) is named at start, with
the `make work-reset` that replaces it.

    python tools/learner_copy.py               # fill work/, print what was copied
    python tools/learner_copy.py --reset 03    # move work's copies of lesson 03 aside, copy them afresh
"""
from __future__ import annotations

import argparse
import json
import os
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
PARTIAL = ".partial"  # a copy under way: `.<name>.<pid>.partial`, hidden, beside its target


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
    """Copy into `work` each source file it lacks; return those copied (relative paths). Never overwrites.
    Raises OSError (a full disk, say) with nothing half-written left behind."""
    work = root / WORK if work is None else work
    copied = []
    for relative in _sources(root):
        target = work / relative
        _remove_partials(target)
        if target.exists():
            continue  # the learner's file, whatever it now holds
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            copy_atomically(root / relative, target)
        except OSError as err:  # named after the file it was for, not its hidden temporary file
            raise OSError(err.errno, err.strerror or str(err), str(target)) from None
        copied.append(relative)
    return copied


def copy_atomically(source: Path, target: Path) -> None:
    """`source` to `target` whole or not at all: into a temporary file in the target's folder (same file
    system, so the rename is atomic), flushed to disk, then renamed onto `target`. On any error, Ctrl-C
    included, the temporary file is removed; a kill (SIGKILL, power) leaves only it, never a torn `target`."""
    partial = target.with_name(f".{target.name}.{os.getpid()}{PARTIAL}")
    partial.unlink(missing_ok=True)  # ours by name: one an earlier process with our pid left (a link: only it goes)
    try:
        with open(source, "rb") as src, open(partial, "xb") as dst:  # x: never through a planted file or link
            shutil.copyfileobj(src, dst)
            dst.flush()
            os.fsync(dst.fileno())  # on disk before the rename: a crash then shows the old state or the new
        shutil.copystat(source, partial)
        os.replace(partial, target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def _remove_partials(target: Path) -> None:
    """Remove what killed copies of `target` left (`.<name>.<pid>.partial` whose process is gone)."""
    for partial in target.parent.glob(f".{target.name}.*{PARTIAL}"):
        pid = partial.name[len(target.name) + 2:-len(PARTIAL)]
        if pid.isdigit() and not _alive(int(pid)):
            partial.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: only asks whether it exists
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        return True
    return True


def broken(root: Path = ROOT, work: Path | None = None) -> list[Path]:
    """work's lessons and exercises that are not notebooks (not JSON with "cells") while their source is:
    a copy torn by a kill or a full disk, or a file an editor could not save whole."""
    work = root / WORK if work is None else work
    return [r for r in _sources(root) if r.suffix == ".ipynb" and (work / r).is_file()
            and _is_notebook(root / r) and not _is_notebook(work / r)]


def _is_notebook(path: Path) -> bool:
    try:
        return "cells" in json.loads(path.read_bytes())
    except (OSError, ValueError, TypeError):  # unreadable, not JSON, or JSON but not an object
        return False


def lesson_of(relative: Path) -> str:
    """The LESSON= that `make work-reset` takes for a file: its number ("03"), else its name."""
    number = relative.name.split("_", 1)[0]
    return number if number.isdigit() else relative.stem


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
    moved = {}  # where each learner's copy was → where it is now
    for relative in matches:
        current = work / relative
        if current.exists():
            aside = _aside(current, stamp)
            current.rename(aside)
            moved[current] = aside
    try:
        fill(root, work)
    except BaseException as err:  # a full disk, Ctrl-C: where no fresh copy was made, put the learner's back
        for current, aside in moved.items():
            if not current.exists():
                aside.rename(current)
                moved[current] = current
        if not isinstance(err, OSError):
            raise
        kept = ", ".join(str(p.relative_to(work.parent)) for p in moved.values())
        where = f"your copy is at {kept}" if kept else "you had no copy of it"
        raise OSError(f"lesson {lesson} not copied afresh ({err.strerror}: {err.filename}); {where}") from None
    return [aside.relative_to(work) for aside in moved.values()]


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
            moved = reset(args.reset, ROOT)
        except (ValueError, OSError) as error:
            print(f"make work-reset: {error}", file=sys.stderr)
            return 2
        for path in moved:
            print(f"kept your old copy as {WORK}/{path}")
        print(f"{WORK}/: lesson {args.reset} copied afresh")
        return 0
    for relative in broken(ROOT):  # the learner's file stays as it is: only they can say what to keep
        print(f"{WORK}/{relative} is not a notebook (a copy cut short?); `make work-reset LESSON="
              f"{lesson_of(relative)}` copies it afresh and keeps this one aside", file=sys.stderr)
    try:
        copied = fill(ROOT)
    except OSError as error:
        print(f"make lab: could not copy the course into {WORK}/ ({error.strerror or error}: "
              f"{error.filename}); nothing half-written was left", file=sys.stderr)
        return 1
    if copied:
        print(f"{WORK}/: copied {len(copied)} new file(s) — your copy of the course; answers are in solutions/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
