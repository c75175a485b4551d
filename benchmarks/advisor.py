"""How fast is the advisor? Every plan for a 1T-parameter model on 3072 GPUs, enumerated, evaluated and
ranked. Target: ≤ 2 s on the 2-core CI-class machine.

    .venv/bin/python benchmarks/advisor.py            # median of 5 searches
    .venv/bin/python benchmarks/advisor.py --json
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from _common import load_warning  # benchmarks/ is on sys.path when run as a script

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
from simlab.sim import advisor  # noqa: E402 — after sys.path gains the checkout
from simlab.sim.advisor import family, search  # noqa: E402 — after sys.path gains the checkout
from simlab.sim.hardware import cluster  # noqa: E402 — after sys.path gains the checkout
from simlab.sim.model import PRESETS  # noqa: E402 — after sys.path gains the checkout

TARGET = 2.0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    model, c = PRESETS["megatron-1t"], cluster(gpus=3072)
    seconds, result = [], None
    for _ in range(args.repeats):
        advisor._EVALUATED.clear()  # each repeat a cold question: the advisor keeps the last few answers
        start = time.perf_counter()
        result = search(model, c, global_batch=3072)
        seconds.append(time.perf_counter() - start)
    row = {"model": model.name, "gpus": c.gpus, "plans": result["plans"], "median_s": statistics.median(seconds),
           "best": family(result["best"]["config"]), "best_step_s": result["best"]["step_seconds"],
           "target_s": TARGET}
    if args.json:
        print(json.dumps(row))
        return 0
    load = load_warning()  # warns on stderr above 1.5
    print(f"advisor: {row['plans']:,} plans for {model.name} on {c.gpus} GPUs, enumerated + evaluated + ranked "
          f"in {row['median_s']:.2f} s (median of {args.repeats}), target ≤ {TARGET:g} s "
          f"{'✓' if row['median_s'] <= TARGET else '✗'}; best: {row['best']}, {row['best_step_s']:.1f} s/step "
          f"(load {load:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
