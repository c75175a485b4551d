"""How fast the course's widgets answer in a real browser: key press or click → new picture on screen.

    python benchmarks/browser.py [--reps 15] [--every-knob] [lesson.ipynb …]   # default: every lesson

For every widget of every lesson (discovered after Run All, as in browser_tests/) it measures the median of
  (a) a player step: a click on the player's ▶ (frames swapped in the browser; for an ipywidgets Play, a
      key press on its slider, redrawn by the kernel) — target 100 ms;
  (b) an explorer change that re-simulates: a key press on a knob's slider, a new option in a dropdown, a
      click on a toggle or a checkbox, then the kernel simulates and sends the new scene (or picture) and the
      browser draws it — target 250 ms median, 500 ms p90.
The clock runs inside the page (performance.now()): from the first keydown/mousedown/input/change event to
the frame after the new picture is on screen — a MutationObserver sees a chart's new SVG go into the DOM
(render/chart.py: explorers are drawn in the browser), an <img>'s new src (then waits for it to decode) or
the reveal veil move — so Python-side waits never count. Knobs alternate forward/back so they stay in range, and each
repetition starts with the kernel idle and the widget settled. Needs what `make test-browser` needs.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from _common import load_warning  # noqa: E402 — after sys.path gains benchmarks/

from browser_tests.lab import chromium, lessons, new_page, running_lab  # noqa: E402 — after sys.path gains benchmarks/
from browser_tests.notebook import Notebook  # noqa: E402 — after sys.path gains benchmarks/

TARGET_MS = {"player step": 100.0, "explorer change": 250.0}  # medians; an explorer's p90 must stay ≤ P90_MS
P90_MS = 500.0
TIMEOUT_MS = 20_000  # a repetition with no new picture by then counts as missing, not as 20 s


def measure(nb: Notebook, widget: dict, control: dict, reps: int) -> list:
    """Latencies (ms) of `reps` changes of `control`, alternating forward and back; None: no new picture."""
    out = []
    for rep in range(reps):
        nb.settle(widget["id"])
        nb.page.evaluate("([w, t]) => window.simlab.arm(w, t)", [widget["id"], TIMEOUT_MS])
        nb.act(control, back=bool(rep % 2))
        out.append(nb.page.evaluate("() => window.simlab.latency"))
    return out


def pick(controls: list[dict], every_knob: bool) -> list[tuple[str, dict]]:
    """The controls to time: a player's ▶ button (else the slider of a Play), then the first knob (or all)."""
    usable = [c for c in controls if not c["disabled"]]
    steps = ([c for c in usable if c["kind"] == "step"] or
             [c for c in usable if c["kind"] == "slider" and c["player"]])[:1]
    knobs = [c for c in usable if c["kind"] in ("slider", "dropdown", "toggle", "checkbox") and not c["player"]]
    return [("player step", c) for c in steps] + [("explorer change", c) for c in knobs[:None if every_knob else 1]]


def bench_lesson(lab, browser, lesson: str, reps: int, every_knob: bool) -> list[dict]:
    nb = Notebook(lab=lab, page=new_page(browser), path=f"notebooks/{lesson}")
    rows = []
    try:
        nb.open()
        nb.run_all(timeout_s=300)
        for widget in nb.check_rendering():
            for what, control in pick(nb.js("controls(arg)", widget["id"]), every_knob):
                times = measure(nb, widget, control, reps)
                got = [t for t in times if t is not None]
                median = statistics.median(got) if got else None
                rows.append({"lesson": lesson.split("_")[0], "widget": widget["text"][:28], "what": what,
                             "control": f"{control['kind']} {control['label'][:18]!r}", "n": len(got),
                             "missing": len(times) - len(got), "median": median,
                             "p90": statistics.quantiles(got, n=10)[-1] if len(got) > 1 else median,
                             "target": TARGET_MS[what]})
                print(_line(rows[-1]), flush=True)
        if nb.problems:
            print(f"  ({lesson}: {len(nb.problems)} problem(s) besides timing; run browser_tests for them)")
    finally:
        nb.close()
    return rows


HEADER = f"{'lesson':<6} {'widget':<28} {'measures':<15} {'control':<28} {'n':>3} {'median':>8} {'p90':>8} " \
         f"{'target':>7}"


def _ok(row: dict) -> bool:
    p90_ok = row["what"] != "explorer change" or (row["p90"] is not None and row["p90"] <= P90_MS)
    return row["median"] is not None and row["median"] <= row["target"] and p90_ok and not row["missing"]


def _line(row: dict) -> str:
    fmt = lambda ms: "—" if ms is None else f"{ms:.0f} ms"  # noqa: E731 — a local formatter
    ok = _ok(row)
    missing = f"  ({row['missing']} without a new picture)" if row["missing"] else ""
    return (f"{row['lesson']:<6} {row['widget']:<28} {row['what']:<15} {row['control']:<28} {row['n']:>3} "
            f"{fmt(row['median']):>8} {fmt(row['p90']):>8} {row['target']:>4.0f} ms {'✓' if ok else '✗'}{missing}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lessons", nargs="*", help="notebook names in notebooks/ (default: all)")
    parser.add_argument("--reps", type=int, default=15, help="changes per control (default 15)")
    parser.add_argument("--every-knob", action="store_true", help="time every knob, not only the first")
    args = parser.parse_args(argv)
    if args.reps < 1:
        parser.error("--reps: need at least 1")
    args.lessons = [Path(name).name for name in args.lessons]  # notebooks/01_….ipynb or 01_….ipynb
    unknown = sorted(set(args.lessons) - set(lessons()))
    if unknown:
        parser.error(f"no such lesson in notebooks/: {', '.join(unknown)}")
    load_warning()
    start, rows = time.monotonic(), []
    print(HEADER)
    with running_lab() as lab, chromium() as browser:
        for lesson in args.lessons or lessons():
            rows += bench_lesson(lab, browser, lesson, args.reps, args.every_knob)
    print(f"\n{len(rows)} controls timed in {time.monotonic() - start:.0f} s; "
          f"{sum(not _ok(r) for r in rows)} over target or with missing pictures")
    return 0


if __name__ == "__main__":
    sys.exit(main())
