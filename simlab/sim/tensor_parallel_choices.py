"""Which splits of the MLP GeLU(X·A)·B work, and what each one must communicate.

Four choices: A by columns or rows, B by columns or rows. Megatron's (A columns, B rows) is exact
with one all-reduce at the end (the g operator). The others either need more communication in the
forward (all-gathers, or an all-reduce of X·A before GeLU) or, without it, are wrong: GeLU of a
partial sum is not the sum of GeLUs. `sync_rows` lists a choice's forward collectives with the bytes
each rank sends on a ring (`simlab.sim.collectives`); `split_error` computes the shortcut's error.
Lesson 5's split explorer (`simlab.render.tensor_parallel_widgets`) shows what this computes.

    >>> [r["collective"] for r in sync_rows("column", "row", 4)]
    ['all-reduce']
"""
from __future__ import annotations

import numpy as np

from .tensor_parallel import broken_mlp, gelu, megatron_mlp, ring_bytes_sent, split_linear

TOKENS, HIDDEN, FFN, ITEMSIZE = 8, 8, 32, 4  # the explorer's MLP: ffn = 4·hidden, as in GPT

# what each choice must communicate in the forward: (where, collective, tensor, its size in (tokens, ·))
SYNCS = {
    ("column", "row"): [("g, after B", "all-reduce", "partial Z", "hidden")],
    ("column", "column"): [("between A and B", "all-gather", "GeLU(X·A)", "ffn"),
                           ("after B", "all-gather", "Z columns", "hidden")],
    # B by rows needs only this rank's column block of GeLU(X·A): a reduce-scatter of X·A is enough
    ("row", "row"): [("before GeLU", "reduce-scatter", "partial X·A", "ffn"),
                     ("after B", "all-reduce", "partial Z", "hidden")],
    ("row", "column"): [("before GeLU", "all-reduce", "partial X·A", "ffn"),
                        ("after B", "all-gather", "Z columns", "hidden")],
}


def mlp_inputs(seed: int = 0, tokens: int = TOKENS, hidden: int = HIDDEN, ffn: int = FFN):
    """Seeded X (tokens, hidden), A (hidden, ffn), B (ffn, hidden) in float64."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((tokens, hidden)), rng.standard_normal((hidden, ffn)), rng.standard_normal((ffn, hidden))


def sync_rows(a_split: str, b_split: str, ranks: int, tokens: int = TOKENS, hidden: int = HIDDEN,
              ffn: int = FFN, itemsize: int = ITEMSIZE) -> list[dict]:
    """The forward collectives a choice of splits needs, with the bytes each rank sends (ring, simulator)."""
    width = {"hidden": hidden, "ffn": ffn}
    return [{"where": where, "collective": op, "tensor": f"{what} ({tokens}, {width[size]})",
             "bytes/rank": ring_bytes_sent(op, ranks, tokens * width[size], itemsize)[0]}
            for where, op, what, size in SYNCS[a_split, b_split]]


def split_error(a_split: str, b_split: str, ranks: int, x, a, b) -> float:
    """max |split − unsplit| for the choice, with no sync before GeLU (the tempting shortcut)."""
    if a_split == "row":
        return broken_mlp(ranks, x, a, b).error  # GeLU of partial sums: B's split cannot repair it
    if b_split == "row":
        return megatron_mlp(ranks, x, a, b).error
    hidden = split_linear("column", ranks, x, a).result  # all-gathered X·A, then B by columns
    return float(np.abs(split_linear("column", ranks, gelu(hidden), b).result - gelu(x @ a) @ b).max())
