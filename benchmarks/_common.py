"""Small helpers the benchmark scripts share (they run as scripts: `python benchmarks/zero.py`)."""


def count(text: str) -> int:
    """'4M' → 4_000_000, '500K' → 500_000, '123' → 123."""
    scale = {"K": 10**3, "M": 10**6}.get(text[-1:].upper(), 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)
