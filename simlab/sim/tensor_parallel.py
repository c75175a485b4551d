"""Tensor parallelism on small numpy matrices: who holds which slice of a weight, and which collective
puts the pieces back together (Megatron-LM's convention Y = X·W, W of shape (in, out)).

Teaches:
- column-parallel: rank r holds W[:, cols_r] and needs all of X; its Y columns are concatenated
  (all-gather). row-parallel: rank r holds W[rows_r, :] and needs X's column block; its partial Y's
  are summed (all-reduce). `split_linear` does both with int64, so equality is exact.
- the Megatron MLP GeLU(X·A)·B: A by columns, B by rows, so GeLU runs on local columns and only one
  all-reduce is needed per direction: g (forward) and f (backward, identity in forward).
- why A must not be split by rows: GeLU(XA₁ + XA₂) ≠ GeLU(XA₁) + GeLU(XA₂) (`broken_mlp`; GeLU here is
  the tanh approximation, torch's ``gelu(approximate="tanh")``).
- self-attention splits by heads: Q, K, V column-parallel (whole heads per rank), W_o row-parallel.
- per transformer layer: 2 all-reduces forward + 2 backward, 2(N−1)/N·b·s·h·itemsize bytes each per
  rank (ring); sequence parallelism turns each into reduce-scatter + all-gather, same bytes.

    >>> print(shard_plan("row", 2, (4, 6)).to_text().splitlines()[0])
    row-parallel Y = X·W, W (4, 6) on 2 ranks: combine by all-reduce (sum of partial Y)
    >>> split_linear("column", 2, np.ones((1, 2), np.int64), np.arange(8).reshape(2, 4)).result
    array([[ 4,  6,  8, 10]])
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._checks import check_bool, check_choice, check_divisible, check_int, check_ranks
from .collectives import ring_bytes_sent
from .message import Message

KINDS = ("column", "row")
COMBINE = {"column": Message("all-gather (concat columns of Y)"), "row": Message("all-reduce (sum of partial Y)")}

def _shape(name: str, shape) -> tuple[int, int]:
    if not isinstance(shape, (tuple, list)):
        raise ValueError(f"{name}={shape!r}: must be a pair (rows, cols)")
    if len(tuple(shape)) != 2:  # ints or numpy ints, each >= 1
        raise ValueError(f"{name}={tuple(shape)}: must have 2 dimensions (rows, cols)")
    # numpy ints become ints; a float stays a float and is refused (int() would cut 4.7 to 4)
    dims = [int(d) if isinstance(d, np.integer) else d for d in shape]
    return tuple(check_int(f"{name}[{i}]", d, 1) for i, d in enumerate(dims))


def _array(name: str, value) -> np.ndarray:
    """`value` as an array of finite numbers: text, ragged lists, nan and inf are refused by name."""
    try:
        arr = np.asarray(value)
    except ValueError:  # ragged nested lists
        arr = np.asarray(None)
    if arr.dtype.kind not in "iuf" or not np.isfinite(arr).all():
        raise ValueError(f"{name}: must be an array of finite numbers")
    return arr


@dataclass(frozen=True)
class ShardPlan:
    """Where each rank's slice of W (rows × cols, as `[start, stop)` ranges) lives, and what it needs."""

    kind: str
    ranks: int
    shape: tuple[int, int]  # W: (in, out)
    rows: tuple[tuple[int, int], ...]
    cols: tuple[tuple[int, int], ...]

    def rank_info(self, r: int) -> dict:
        (r0, r1), (c0, c1), col = self.rows[r], self.cols[r], self.kind == "column"
        return {"rank": r, "rows": [r0, r1], "cols": [c0, c1], "shard_shape": [r1 - r0, c1 - c0],
                "input": f"X (b, {r1})" if col else f"X[:, {r0}:{r1}] (b, {r1 - r0})",
                "local": f"Y[:, {c0}:{c1}] (b, {c1 - c0})" if col else Message("partial Y (b, {n})", n=c1)}

    def to_dict(self) -> dict:
        return {"kind": self.kind, "ranks": self.ranks, "shape": list(self.shape),
                "collective": COMBINE[self.kind].split()[0], "per_rank": [self.rank_info(r) for r in range(self.ranks)]}

    def to_text(self) -> str:
        """The layout as a table. A Message: English as a string, and `simlab.i18n._` says its title and header
        in the reader's language (the header is one message, its columns aligned by the translation)."""
        title = (Message("column-parallel Y = X·W, W {shape} on {ranks} ranks: combine by {combine}", shape=self.shape,
                         ranks=self.ranks, combine=COMBINE["column"]) if self.kind == "column" else
                 Message("row-parallel Y = X·W, W {shape} on {ranks} ranks: combine by {combine}", shape=self.shape,
                         ranks=self.ranks, combine=COMBINE["row"]))
        lines = [title, Message("rank  W rows    W cols    shard      input              local")]
        for i in map(self.rank_info, range(self.ranks)):
            cells = (f"{i['rank']:>4}  {'{}:{}'.format(*i['rows']):<9} {'{}:{}'.format(*i['cols']):<9} "
                     f"{str(tuple(i['shard_shape'])):<10} {i['input']:<18} ")
            lines.append(Message.joined([cells, i["local"]]))  # the last column unpadded: it may be said in Chinese
        return Message.lines(lines)


def shard_plan(kind: str, ranks: int, shape) -> ShardPlan:
    """The layout of W (in, out) split by columns or rows over `ranks` ranks."""
    check_choice("kind", kind, KINDS)
    check_ranks("ranks", ranks)
    shape = _shape("shape", shape)
    dim = 1 if kind == "column" else 0  # the dimension that is cut
    step = check_divisible(f"shape[{dim}]", shape[dim], "ranks", ranks) // ranks  # equal shards, as Megatron
    cut = tuple((r * step, (r + 1) * step) for r in range(ranks))
    whole = ((0, shape[1 - dim]),) * ranks
    return ShardPlan(kind, ranks, shape, *((whole, cut) if dim else (cut, whole)))


@dataclass(frozen=True)
class Split:
    """A split computation: per-rank partial results, their sum (the all-reduce), and the unsplit answer."""

    partials: list  # per rank, before the all-reduce
    result: np.ndarray  # after the collective: Σ_r partials[r], or their concatenation (column split)
    reference: np.ndarray  # the same maths in one piece
    steps: list = ()  # the forward/backward plan (`block_steps`), where there is one
    shapes: dict | None = None  # what one rank holds and computes
    plan: ShardPlan | None = None  # split_linear: the layout, each rank's slice of W and of X
    shards: list = ()
    inputs: list = ()

    @property
    def error(self) -> float:
        return float(np.abs(self.result - self.reference).max())


def _check_xw(x, w, w_name: str = "w") -> tuple[np.ndarray, np.ndarray]:
    x, w = _array("x", x), _array(w_name, w)
    _shape(f"{w_name}.shape", w.shape)
    if x.ndim != 2 or x.shape[1] != w.shape[0] or x.shape[0] < 1:
        raise ValueError(f"x.shape={x.shape}: must be (b, {w.shape[0]}) with b >= 1 to multiply "
                         f"{w_name.upper()} {w.shape}")
    return x, w


def split_linear(kind: str, ranks: int, x, w) -> Split:
    """Y = X·W computed in slices on `ranks` ranks and combined; integers stay exact."""
    x, w = _check_xw(x, w)
    plan = shard_plan(kind, ranks, w.shape)
    shards = [w[r0:r1, c0:c1] for (r0, r1), (c0, c1) in zip(plan.rows, plan.cols)]
    inputs = [x if kind == "column" else x[:, r0:r1] for r0, r1 in plan.rows]  # (b, in) | (b, in/N)
    partials = [xi @ wi for xi, wi in zip(inputs, shards)]  # (b, out/N) | (b, out)
    result = np.concatenate(partials, axis=1) if kind == "column" else sum(partials)  # all-gather | all-reduce
    return Split(partials, result, x @ w, plan=plan, shards=shards, inputs=inputs)


def gelu(x):
    """tanh GeLU, as torch's gelu(approximate='tanh'): 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))."""
    x = np.asarray(x, dtype=np.float64)
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


@dataclass(frozen=True)
class TPStep:
    """One step of a TP forward/backward: what every rank computes and the collective (if any) after it."""

    phase: str  # "forward" | "backward"
    name: str  # "f", "g", or the computation's short name
    compute: str
    collective: str  # "none" | "all-reduce" | "reduce-scatter" | "all-gather"
    bytes_sent: tuple[int, ...]  # per rank, ring accounting


def _step(ranks, phase, name, compute, collective="none", numel=1, itemsize=4) -> TPStep:
    sent = ring_bytes_sent(collective, ranks, numel, itemsize) if collective != "none" else [0] * ranks
    return TPStep(phase, name, compute, collective, tuple(sent))


def block_steps(block: str, ranks: int, tokens: int, hidden: int, inner: int | None = None,
                heads: int | None = None, itemsize: int = 4) -> list[TPStep]:
    """Forward + backward of a Megatron "mlp" (inner = ffn width) or "attention" block on X (tokens = b·s, hidden)."""
    check_choice("block", block, ("mlp", "attention"))
    check_ranks("ranks", ranks)
    n, numel = ranks, check_int("tokens", tokens, 1) * check_int("hidden", hidden, 1)
    if block == "mlp":
        ffn = check_divisible("inner", check_int("inner", inner, 1), "ranks", n)
        # U_r = X·A_r is the pre-activation: the chain rule through GeLU gives its gradient dU_r, not dY_r
        work = [f"U_r = X·A_r, Y_r = GeLU(U_r) ({tokens}, {ffn // n})",
                f"Z_r = Y_r·B_r ({tokens}, {hidden}) partial",
                "dU_r = (dZ·B_rᵀ)⊙GeLU'(U_r), dB_r = Y_rᵀ·dZ", "dX_r = dU_r·A_rᵀ (partial), dA_r = Xᵀ·dU_r"]
    else:
        check_divisible("heads", check_int("heads", heads, 1), "ranks", n)
        check_divisible("hidden", hidden, "heads", heads)
        work = [f"Q_r, K_r, V_r = X·W_qkv,r ({tokens}, {hidden // n}): {heads // n} heads",
                f"Z_r = softmax(Q_r·K_rᵀ/√d)·V_r·W_o,r ({tokens}, {hidden}) partial",
                "dO_r = dZ·W_o,rᵀ, dW_o,r; back through softmax to dQ_r, dK_r, dV_r",
                "dX_r = d(QKV)_r·W_qkv,rᵀ (partial), dW_qkv,r"]
    return [_step(n, "forward", "f", "identity: every rank already has X"),
            _step(n, "forward", "local", work[0]), _step(n, "forward", "local", work[1]),
            _step(n, "forward", "g", "Z = Σ_r Z_r", "all-reduce", numel, itemsize),
            _step(n, "backward", "g", "identity: dZ is already whole on every rank"),
            _step(n, "backward", "local", work[2]), _step(n, "backward", "local", work[3]),
            _step(n, "backward", "f", "dX = Σ_r dX_r", "all-reduce", numel, itemsize)]


def count_collectives(steps, phase: str, collective: str = "all-reduce") -> int:
    return sum(1 for s in steps if s.phase == phase and s.collective == collective)


def bytes_per_rank(steps) -> list[int]:
    return [sum(col) for col in zip(*(s.bytes_sent for s in steps))]


def _check_mlp(ranks, x, a, b):
    check_ranks("ranks", ranks)
    x, a = _check_xw(x, a, "a")
    b = _array("b", b)
    if b.ndim != 2 or b.shape[0] != a.shape[1] or 0 in b.shape:
        raise ValueError(f"b.shape={b.shape}: must be (ffn, out) with ffn = a.shape[1] = {a.shape[1]} rows")
    return (np.asarray(m, dtype=np.float64) for m in (x, a, b))


def megatron_mlp(ranks: int, x, a, b) -> Split:
    """GeLU(X·A)·B with A split by columns, B by rows: GeLU stays local, one all-reduce (g) at the end."""
    x, a, b = _check_mlp(ranks, x, a, b)
    check_divisible("a.shape[1]", a.shape[1], "ranks", ranks)  # A's columns (and B's rows) split evenly
    cols = shard_plan("column", ranks, a.shape).cols  # B's rows follow A's columns
    partials = [gelu(x @ a[:, c0:c1]) @ b[c0:c1, :] for c0, c1 in cols]  # (t, f/N) → (t, h) each
    steps = block_steps("mlp", ranks, x.shape[0], x.shape[1], a.shape[1], itemsize=8)
    return Split(partials, sum(partials), gelu(x @ a) @ b, steps)


def broken_mlp(ranks: int, x, a, b) -> Split:
    """A split by rows (so X by columns): each rank applies GeLU to a *partial* sum — wrong maths."""
    x, a, b = _check_mlp(ranks, x, a, b)
    check_divisible("a.shape[0]", a.shape[0], "ranks", ranks)
    rows = shard_plan("row", ranks, a.shape).rows
    partials = [gelu(x[:, r0:r1] @ a[r0:r1, :]) @ b for r0, r1 in rows]  # GeLU(X_r·A_r)·B: (t, h)
    return Split(partials, sum(partials), gelu(x @ a) @ b)  # reference = GeLU(Σ_r X_r·A_r)·B


def _attention(x, wq, wk, wv, wo, heads: int):
    """Softmax attention over `heads` heads: x (b, s, h), weights X·W style; returns (b, s, h_out)."""
    b, s, _ = x.shape
    q, k, v = ((x @ w).reshape(b, s, heads, -1).transpose(0, 2, 1, 3) for w in (wq, wk, wv))  # (b, a, s, h/a)
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1])  # (b, a, s, s)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    o = (p / p.sum(-1, keepdims=True)) @ v  # (b, a, s, h/a)
    return o.transpose(0, 2, 1, 3).reshape(b, s, -1) @ wo  # (b, s, h) — partial when wo is a row block


def attention_split(ranks: int, x, wq, wk, wv, wo, heads: int) -> Split:
    """Self-attention split by heads: rank r owns heads [r·a/N, (r+1)·a/N): their Q/K/V columns and W_o rows."""
    check_ranks("ranks", ranks)
    x, wq, wk, wv, wo = (_array(n, m).astype(np.float64) for n, m in zip(("x", "wq", "wk", "wv", "wo"),
                                                                         (x, wq, wk, wv, wo)))
    if x.ndim != 3 or min(x.shape) < 1:
        raise ValueError(f"x.shape={x.shape}: must be (b, s, h) with no zero dimension")
    b, s, h = x.shape
    bad = [(n, w.shape) for n, w in zip(("wq", "wk", "wv", "wo"), (wq, wk, wv, wo)) if w.shape != (h, h)]
    if bad:
        raise ValueError(f"{bad[0][0]}.shape={bad[0][1]}: must be ({h}, {h}), x's hidden size squared")
    check_divisible("heads", check_int("heads", heads, 1), "ranks", ranks)
    check_divisible("hidden", h, "heads", heads)
    cols = shard_plan("column", ranks, wq.shape).cols  # whole heads: h/N = (a/N)·(h/a) columns
    hr, local = h // ranks, heads // ranks  # per rank: h/N columns = a/N whole heads of h/a
    partials = [_attention(x, wq[:, c:c + hr], wk[:, c:c + hr], wv[:, c:c + hr], wo[c:c + hr, :], local)
                for c, _ in cols]
    shapes = {"heads": local, "wq": (h, hr), "wk": (h, hr), "wv": (h, hr), "wo": (hr, h),
              "q": (b, local, s, h // heads), "scores": (b, local, s, s), "partial": (b, s, h)}
    steps = block_steps("attention", ranks, b * s, h, heads=heads, itemsize=8)
    return Split(partials, sum(partials), _attention(x, wq, wk, wv, wo, heads), steps, shapes)


def layer_comm(ranks: int, batch: int, seq: int, hidden: int, itemsize: int = 2,
               sequence_parallel: bool = False) -> list[TPStep]:
    """The collectives of one transformer layer (attention + MLP), forward then backward, in order. Sequence
    parallel splits the activations between blocks by sequence: each all-reduce becomes reduce-scatter + all-gather."""
    check_ranks("ranks", ranks)
    numel = check_int("batch", batch, 1) * check_int("seq", seq, 1) * check_int("hidden", hidden, 1)
    check_bool("sequence_parallel", sequence_parallel)  # not check_choice: 1 == True would pass
    if sequence_parallel:
        check_divisible("seq", seq, "ranks", ranks)
        fwd = [("all-gather", "g {}"), ("reduce-scatter", "ḡ {}")]  # Korthikanti et al. 2022: g gathers the
        bwd = [("all-gather", "ḡ {} backward"), ("reduce-scatter", "g {} backward")]  # sequence, ḡ scatters it
    else:
        fwd, bwd = [("all-reduce", "g {}")], [("all-reduce", "f {} backward")]
    order = [("forward", fwd, "attention"), ("forward", fwd, "mlp"), ("backward", bwd, "mlp"), ("backward", bwd, "attention")]
    return [_step(ranks, phase, name.format(block), "", op, numel, itemsize) for phase, ops, block in order for op, name in ops]
