"""Re-run lessons and solutions in place so their stored outputs (what nbval compares) are current.

    python tools/run_notebooks.py [paths…]     # default: notebooks/*.ipynb solutions/*.ipynb

Saved widget state is dropped (it holds a PNG per player and changes every run); the widgets come
back when the cell is run. Then exercises/ is regenerated from solutions/.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import make_exercises  # noqa: E402 — after sys.path gains tools/


def run(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    nb.metadata.pop("widgets", None)
    # the name JupyterLab shows for the installed kernel: a different one marks the notebook modified on open
    nb.metadata["kernelspec"] = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
    nbformat.write(nb, path)
    print(f"ran {path.relative_to(ROOT)}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="Re-run lessons and solutions in place, then regenerate exercises/.")
    parser.add_argument("paths", nargs="*", type=Path, help="notebooks to run (default: every lesson and solution)")
    paths = [p.resolve() for p in parser.parse_args(argv).paths] or sorted((ROOT / "notebooks").glob("*.ipynb")) + \
        sorted((ROOT / "solutions").glob("*.ipynb"))
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        parser.error(f"no such notebook: {', '.join(missing)}")
    for path in paths:
        run(path)
    return make_exercises.main([])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
