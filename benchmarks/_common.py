"""Small helpers the benchmark scripts share (they run as scripts: `python benchmarks/zero.py`)."""
import os
import statistics
import sys


def count(text: str) -> int:
    """'4M' → 4_000_000, '500K' → 500_000, '123' → 123."""
    scale = {"K": 10**3, "M": 10**6}.get(text[-1:].upper(), 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)


def paired_quartiles(ours, theirs) -> tuple[float, float]:
    """p25 and p75 of ours/theirs over back-to-back samples: how stable the ratio is, not just its median."""
    paired = sorted(o / t for o, t in zip(ours, theirs))
    quart = statistics.quantiles(paired, n=4, method="inclusive") if len(paired) > 1 else paired * 3
    return quart[0], quart[2]


def load_warning() -> float:
    """The 1-min load average, with a warning on stderr above 1.5: timings need a quiet machine."""
    load = os.getloadavg()[0]
    if load > 1.5:
        print(f"warning: 1-min load average {load:.2f} > 1.5: timings will be noisy", file=sys.stderr)
    return load
