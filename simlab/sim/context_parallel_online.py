"""Ring attention's arithmetic, step by step in numpy: the online softmax that merges each block's partial result.

Softmax needs the maximum and the sum over a query's whole row of scores, but under context parallelism a rank
sees one K,V block at a time. It keeps three running quantities per query row and corrects them as each
block arrives (Milakov & Gimelshein 2018; FlashAttention; ring attention):

    m' = max(m, max_j S_j)                    the largest score so far (keeps exp() from overflowing)
    l' = e^(m − m') · l + Σ_j e^(S_j − m')    the softmax denominator, rescaled to the new maximum
    O' = e^(m − m') · O + Σ_j e^(S_j − m') V_j  the un-normalised output, rescaled the same way

and after the last block, output = O / l and logsumexp = m + log l. Every step of every rank is kept
(`RingRun.steps[i][r]`), so a lesson can print m, l and O with numbers; the final output equals full softmax
attention (`attention`) to float64 rounding, whatever the order in which the blocks came.

    >>> rng = np.random.default_rng(0)
    >>> q, k, v = (rng.standard_normal((8, 2)) for _ in range(3))
    >>> run = ring_attention(q, k, v, world_size=2, layout="zigzag", causal=True)
    >>> run.positions[0], [s.kv_from for s in run.steps[1]]  # step 1: rank 0 holds rank 1's K,V (tokens 2..5)
    (array([0, 1, 6, 7]), [1, 0])
    >>> run.steps[1][0].pairs  # only its late queries 6, 7 see them: 2 × 4 pairs
    8
    >>> bool(np.abs(run.out - attention(q, k, v, causal=True)[0]).max() < 1e-12)
    True
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .._checks import check_bool
from .context_parallel import check_layout, positions


class RankStep(NamedTuple):
    """One rank after one ring step: the K,V block it used (from rank `kv_from`), the (query, key) pairs it
    scored, and its running state per query row in local order: max `m` (..., rows), sum `l` (..., rows) and
    un-normalised output `o` (..., rows, d)."""

    step: int
    rank: int
    kv_from: int
    pairs: int
    m: np.ndarray
    l: np.ndarray  # noqa: E741 — the paper's name for the running sum
    o: np.ndarray


class RingRun(NamedTuple):
    """A whole ring pass: `steps[i][r]` is rank r after step i; `out` (..., s, d) and `lse` (..., s) in global
    token order; `positions[r]` the tokens rank r held."""

    world_size: int
    layout: str
    causal: bool
    steps: list[list[RankStep]]
    out: np.ndarray
    lse: np.ndarray
    positions: list[np.ndarray]


def _check_qkv(q, k, v) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """float64 arrays (s, d) or (heads, s, d); K,V may have fewer heads (GQA): each serves heads/kv_heads."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    if q.ndim not in (2, 3) or k.shape != v.shape or k.ndim != q.ndim or k.shape[-2:] != q.shape[-2:]:
        raise ValueError(f"q, k, v: shapes {q.shape}, {k.shape}, {v.shape}; expected (s, d) or (heads, s, d), "
                         "k and v alike")
    if q.ndim == 3 and q.shape[0] % k.shape[0]:
        raise ValueError(f"heads={q.shape[0]}: must be divisible by kv_heads={k.shape[0]}")
    if not all(np.isfinite(x).all() for x in (q, k, v)):
        raise ValueError("q, k, v: must be finite (no nan or inf)")
    if q.ndim == 3:  # GQA: query head h reads K,V head h // (heads / kv_heads)
        k, v = (np.repeat(x, q.shape[0] // k.shape[0], axis=0) for x in (k, v))
    return q, k, v


def _scores(q, k, q_pos, k_pos, causal: bool) -> np.ndarray:
    """Scaled scores q·kᵀ/√d, −inf where the key comes after the query (causal). (..., rows, keys)"""
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    return np.where(k_pos[None, :] <= q_pos[:, None], s, -np.inf) if causal else s


def attention(q, k, v, causal: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Full softmax attention in one piece, the reference: (output (..., s, d), logsumexp (..., s))."""
    q, k, v = _check_qkv(q, k, v)
    pos = np.arange(q.shape[-2])
    s = _scores(q, k, pos, pos, check_bool("causal", causal))
    m = s.max(axis=-1, keepdims=True)  # every row scores at least its own token: finite
    p = np.exp(s - m)
    return p @ v / p.sum(axis=-1, keepdims=True), (m + np.log(p.sum(axis=-1, keepdims=True)))[..., 0]


def merge_block(m, l, o, s, v):  # noqa: E741 — the paper's names
    """One online-softmax update with a block's scores `s` (..., rows, keys) and values `v` (..., keys, d).
    A row the block masks entirely (all −inf) keeps its state."""
    block_max = s.max(axis=-1)
    m_new = np.maximum(m, block_max)
    seen = np.isfinite(m_new)  # false only while a row has met no key at all
    scale = np.where(seen, np.exp(np.where(seen, m - m_new, 0.0)), 1.0)  # e^(m − m'); −inf − finite → 0
    p = np.exp(s - np.where(seen, m_new, 0.0)[..., None])  # masked scores: e^−inf = 0
    return m_new, scale * l + p.sum(axis=-1), scale[..., None] * o + p @ v


def ring_attention(q, k, v, world_size: int, layout: str = "zigzag", causal: bool = True) -> RingRun:
    """Ring attention simulated in float64: rank r keeps its queries; at step i it holds the K,V of rank
    (r − i) mod N and merges that block into its running (m, l, O)."""
    q, k, v = _check_qkv(q, k, v)
    check_layout(world_size, q.shape[-2], layout)
    check_bool("causal", causal)
    n, seq = world_size, q.shape[-2]
    held = [positions(r, n, seq, layout) for r in range(n)]
    rows = q.shape[:-2] + (seq // n,)
    state = [(np.full(rows, -np.inf), np.zeros(rows), np.zeros(rows + (q.shape[-1],))) for _ in range(n)]
    steps = []
    for i in range(n):
        row = []
        for r in range(n):
            j, qp = (r - i) % n, held[r]
            kp = held[j]
            s = _scores(q[..., qp, :], k[..., kp, :], qp, kp, causal)
            state[r] = merge_block(*state[r], s, v[..., kp, :])
            pairs = int((kp[None, :] <= qp[:, None]).sum()) if causal else qp.size * kp.size
            row.append(RankStep(i, r, j, pairs, *(x.copy() for x in state[r])))
        steps.append(row)
    out, lse = np.empty_like(q), np.empty(q.shape[:-1])
    for r, (m, l, o) in enumerate(state):  # noqa: E741 — l is the online softmax's running sum, as in the papers
        out[..., held[r], :] = o / l[..., None]
        lse[..., held[r]] = m + np.log(l)
    return RingRun(n, layout, causal, steps, out, lse, held)
