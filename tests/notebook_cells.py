"""Reading a stored notebook's cells, for the tests that hold lesson text to what its cells print: one reader
instead of one per test file.

    from notebook_cells import cells, printed, source, texts
    cells("notebooks/02_data_parallel.ipynb")["2fcdc483"]   # a cell by its id (paths from the repository root)
"""
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _cell_list(path) -> list:
    return json.loads((ROOT / path).read_text(encoding="utf-8"))["cells"]


def cells(path) -> dict:
    """{cell id: cell} of the notebook at `path` (relative to the repository root)."""
    return {c["id"]: c for c in _cell_list(path)}


def source(cell) -> str:
    return "".join(cell["source"])


def printed(cell, results: bool = False) -> str:
    """What a code cell printed (its streams); `results`: each output's text/plain too (a cell's last value)."""
    return "".join("".join(out.get("text", "")) + ("".join(out.get("data", {}).get("text/plain", ""))
                                                   if results else "") for out in cell.get("outputs", []))


def texts(path, before=None):
    """Markdown, code and printed output of a notebook's cells, in order (up to the cell with id `before`)."""
    for cell in _cell_list(path):
        if cell["id"] == before:
            return
        yield source(cell)
        for out in cell.get("outputs", []):
            yield printed({"outputs": [out]}, results=True)
