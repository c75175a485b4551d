"""The report: a check's row, the markdown table of them, the header above it (the machine, torch, the budget
spent), the legend below, and where the table is written (with the rows as JSON beside it)."""
from __future__ import annotations

import datetime
import json
import os
import platform
from pathlib import Path

import torch

from . import ROOT

FLOOR, GROUP_API = (2, 6), (2, 6)  # pyproject's torch floor: group_src/group_dst arrived in 2.6
COLUMNS = ("check", "run as", "measured", "expected", "result", "ok")
PASS, FAIL, INFO = "✓", "✗", "info"
LEGEND = ("✓ within the stated tolerance; ✗ failed (or crashed / timed out: the reason is in the row); info: "
          "reported with no pass line (the time model's ratio is a measurement, not a test). Memory rows: "
          "bytes the rank's tensors hold after its step (the allocator's requested_bytes) vs the memory model; "
          "peak = their most.")


def row(check, how, measured="", expected="", result="", ok=FAIL) -> dict:
    return dict(zip(COLUMNS, (check, how, measured, expected, result, ok)))


def one_line(err) -> str:
    text = f"{type(err).__name__}: {err}" if isinstance(err, BaseException) else str(err)
    lines = [x.strip() for x in text.strip().splitlines() if x.strip()]
    dup = [x for x in lines if "Duplicate GPU" in x]  # NCCL's reason sits lines below its error code
    line = " ".join((dup or lines or ["?"])[0].split()).replace("|", "/")
    return line if len(line) <= 180 else line[:177] + "…"


def table(rows: list) -> str:
    cells = [list(COLUMNS)] + [[str(r.get(k, "")).replace("|", "/") for k in COLUMNS] for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(COLUMNS))]
    lines = ["| " + " | ".join(v.ljust(w) for v, w in zip(c, widths)) + " |" for c in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def mb(nbytes) -> str:
    return "n/a" if nbytes is None else f"{nbytes / 1e6:,.2f} MB"


def header(env: dict, mode: str, gpus: int, budget: float, spent: float) -> list:
    what = {"cpu": "CPU dry run (tiny sizes; every tensor a rank can reach stands in for CUDA's bytes)",
            "one-gpu": "one GPU: ranks share cuda:0 (gloo) or run alone (NCCL)",
            "gpu-per-rank": f"one GPU per rank: NCCL on {min(gpus, 4)} ranks"}[mode]
    gpu = (f"{env.get('name', '?')} ({env.get('memory', 0) / 2**30:.1f} GiB, {env.get('capability', '?')}), "
           f"{gpus} GPU(s)" if mode != "cpu" else "cpu")
    machine = (f"machine: {gpu}; torch {env.get('torch', torch.__version__)}, CUDA {env.get('cuda') or 'none'}, "
               f"NCCL {env.get('nccl', 'n/a')}, Python {env.get('python', platform.python_version())}; "
               f"{spent:.0f} s of a {budget:.0f} s budget")
    lines = [f"gpu-check {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}: {what}", machine]
    version = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2] if x.isdigit())
    if version < FLOOR:
        lines.append(f"torch {torch.__version__} is below the floor {'.'.join(map(str, FLOOR))} (pyproject)")
    if version < GROUP_API:
        lines.append(f"torch {torch.__version__}: the engines pass group_src/group_dst to torch.distributed "
                     f"(torch ≥ {'.'.join(map(str, GROUP_API))}); parity rows fail on that here")
    return lines


def output_path(arg: str | None, mode: str) -> Path | None:
    if arg:
        return Path(arg)
    if os.environ.get("OUT"):
        return Path(os.environ["OUT"]) / ("gpu_check.md" if mode != "cpu" else "gpu_check_cpu.md")
    return None if mode == "cpu" else ROOT / "benchmarks" / "gpu_check.md"


def write(path: Path, text: str, lines: list, mode: str, env: dict, rows: list) -> None:
    """The table, and the same rows as JSON beside it for whoever reads them by machine."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n", encoding="utf-8")
    path.with_suffix(".json").write_text(json.dumps({"header": lines, "mode": mode, "env": env, "rows": rows},
                                                    indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"\ngpu-check: table written to {path} (rows as JSON: {path.with_suffix('.json').name})")
