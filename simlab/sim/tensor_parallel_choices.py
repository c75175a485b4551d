"""Which splits of the MLP GeLU(X·A)·B work, and what each one must communicate.

Four choices: A by columns or rows, B by columns or rows. Megatron's (A columns, B rows) is exact
with one all-reduce at the end (the g operator). The others either need more communication in the
forward (all-gathers, or an all-reduce of X·A before GeLU) or, without it, are wrong: GeLU of a
partial sum is not the sum of GeLUs. `sync_rows` lists a choice's forward collectives with the bytes
each rank sends on a ring (`simlab.sim.collectives`); `split_forward` runs a choice rank by rank, with its
collectives or with the tempting shortcut (no sync before GeLU), and `split_error` is the shortcut's error.
`parity.tensor_parallel.run_tp_split` runs the same forward on real processes. Lesson 5's split explorer
(`simlab.render.tensor_parallel_widgets`) shows what this computes.

`tp_or_zero3` sets TP beside ZeRO-3 for one MLP that does not fit on one GPU: memory, activations per sample,
and what each sends per sequence (ZeRO-3 once per micro-batch).

    >>> [r["collective"] for r in sync_rows("column", "row", 4)]
    ['all-reduce']
"""
from __future__ import annotations

import numpy as np

from .._checks import check_choice, check_int
from ..trace import Event, Trace
from .memory import PRECISIONS, comm_volume_per_step, per_gpu_bytes
from .tensor_parallel import KINDS, _check_mlp, gelu, ring_bytes_sent, shard_plan

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


def split_forward(a_split: str, b_split: str, ranks: int, x, a, b, sync: bool = True):
    """Z = GeLU(X·A)·B with A and B split as chosen, rank by rank: (Z, [(where, collective, numel), …]).

    sync=False is the tempting shortcut: A by rows leaves each rank a *partial* sum of U = X·A, and the
    shortcut applies GeLU to it without the reduce-scatter / all-reduce the maths needs. Every other
    collective runs as in `SYNCS` (the same order), so with sync=True the list is SYNCS's forward."""
    check_choice("a_split", a_split, KINDS)
    check_choice("b_split", b_split, KINDS)
    x, a, b = _check_mlp(ranks, x, a, b)
    n, t = ranks, x.shape[0]
    f_blk = shard_plan("column", n, a.shape).cols  # ffn blocks: A's columns, B's rows
    h_blk = shard_plan("row", n, a.shape).rows  # hidden blocks: A's rows, X's and Z's columns
    done = []
    if a_split == "column":
        u = [x @ a[:, f0:f1] for f0, f1 in f_blk]  # (t, ffn/N): whole columns of U
        owns_block = True
    else:
        u = [x[:, h0:h1] @ a[h0:h1, :] for h0, h1 in h_blk]  # (t, ffn): a partial sum of all of U
        owns_block = b_split == "row"  # B by rows needs only its own column block of U
        if sync:
            total = sum(u)
            u = [total[:, f0:f1] for f0, f1 in f_blk] if owns_block else [total] * n
            done.append(("before GeLU", "reduce-scatter" if owns_block else "all-reduce", t * a.shape[1]))
        elif owns_block:  # the shortcut: its own block of its own partial sum
            u = [u_r[:, f0:f1] for u_r, (f0, f1) in zip(u, f_blk)]
    y = [gelu(u_r) for u_r in u]  # GeLU is element-wise: right only on whole (summed) values
    if b_split == "row":
        z = sum(y_r @ b[f0:f1, :] for y_r, (f0, f1) in zip(y, f_blk))  # Σ_r of partial Z (t, h)
        done.append(("g, after B" if a_split == "column" else "after B", "all-reduce", t * b.shape[1]))
    else:
        if owns_block:  # column blocks of Y, but B by columns needs all of Y on every rank
            y = [np.concatenate(y, axis=1)] * n
            done.append(("between A and B", "all-gather", t * a.shape[1]))
        z = np.concatenate([y_r @ b[:, h0:h1] for y_r, (h0, h1) in zip(y, h_blk)], axis=1)  # (t, h)
        done.append(("after B", "all-gather", t * b.shape[1]))
    return z, done


def split_error(a_split: str, b_split: str, ranks: int, x, a, b) -> float:
    """max |split − unsplit| for the choice, with no sync before GeLU (the tempting shortcut)."""
    z, _ = split_forward(a_split, b_split, ranks, x, a, b, sync=False)
    return float(np.abs(z - gelu(np.asarray(x) @ a) @ b).max())


def split_trace(a_split: str, b_split: str, ranks: int, itemsize: int = ITEMSIZE) -> Trace:
    """The simulated forward as a trace (one lane per rank, one model-time unit per collective), for Perfetto."""
    _, done = split_forward(a_split, b_split, ranks, *mlp_inputs())
    return Trace(Event(r, "comm", k, nbytes=ring_bytes_sent(op, ranks, numel, itemsize)[r], name=f"{where}: {op}",
                       start=float(k), end=k + 1.0) for k, (where, op, numel) in enumerate(done) for r in range(ranks))


def tp_or_zero3(hidden: int, seq: int, ranks: int, microbatch: int = 1, itemsize: int = 2) -> dict:
    """One MLP (A (h, 4h), B (4h, h), mixed-precision Adam) on `ranks` GPUs, TP or ZeRO-3, per GPU.

    ZeRO-3 gathers one unit at a time (here: this MLP), so its transient gather is one MLP's 16-bit weights.
    Activations: the (s, 4h) inner tensors U = X·A and GeLU(U) of one sample, which backward needs; TP
    splits them by its size, ZeRO-3 keeps them whole for every sample it holds (at least one per GPU).
    Traffic: TP all-reduces one (s, h) activation in forward (g) and one in backward (f), for every sequence of
    the global batch (each TP GPU works on every sequence). ZeRO-3 all-gathers the weights for the forward and
    again for the backward and reduce-scatters the gradients once per *micro-batch* (lesson 3, `sim.hybrid_time`):
    the gathered weights are freed after each use and the gradient shard is reduced after each backward. A
    micro-batch of `microbatch` sequences on each GPU covers ranks·microbatch sequences of the global batch, so
    ZeRO-3 sends zero3_sent_per_microbatch / (ranks·microbatch) per sequence and breaks even with TP at a
    micro-batch of `break_even_microbatch` sequences. Keeping the gathered weights and whole gradients from one
    micro-batch to the next would make it once per step, at ZeRO-1's memory (`zero3_kept_state`)."""
    check_int("microbatch", microbatch, 1)
    params = 8 * hidden * hidden
    inner = 2 * seq * 4 * hidden * itemsize  # U and GeLU(U), one sample, in the activations' `itemsize`
    weight_bytes = PRECISIONS["mixed"].param  # the gathered copy is of the 16-bit weights, whatever the activations
    tp_sent = 2 * ring_bytes_sent("all-reduce", ranks, seq * hidden, itemsize)[0]
    zero3_sent = comm_volume_per_step(params, 3, ranks)  # AG forward, AG backward, RS: one micro-batch's
    return {"whole": per_gpu_bytes(params, 1, 0, precision="mixed")["total"],
            "tp_state": per_gpu_bytes(params // ranks, 1, 0, precision="mixed")["total"],
            "zero3_state": per_gpu_bytes(params, ranks, 3, precision="mixed")["total"],
            "zero3_kept_state": per_gpu_bytes(params, ranks, 1, precision="mixed")["total"],
            "zero3_gather": params * weight_bytes,
            "tp_activations": inner // ranks, "zero3_activations": inner,
            "tp_sent_per_sample": tp_sent, "zero3_sent_per_microbatch": zero3_sent,
            "zero3_sent_per_sample": zero3_sent / (ranks * microbatch),
            "break_even_microbatch": zero3_sent / (ranks * tp_sent)}
