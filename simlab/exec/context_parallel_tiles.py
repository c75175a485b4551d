"""Context parallelism's local arithmetic on torch tensors: attention over tiles, with the online softmax, and
its backward; plus the recorded point-to-point exchanges every variant's transfers go through.

A rank's tokens are chunks of the sequence (`sim.context_parallel.chunks_of`); a (query chunk, key chunk) tile
is computed whole, as its causal triangle, or not at all (`sim.context_parallel.tile`). Skipping tiles is what
makes zig-zag balanced and contiguous blocks not: the work a rank does is the tiles it does not skip.
Shapes follow torch's SDPA: (b, a, t, d) — batch, heads, the t tokens held here, head dim; K and V may have
kv_heads < a heads (GQA): head h reads K,V head h // (a / kv_heads), as `repeat_interleave` lays them out.

Forward keeps, per query chunk, the running max m (b, a, c), sum l (b, a, c) and un-normalised output
O (b, a, c, d) of `sim.context_parallel_online` and merges each tile into them; backward is FlashAttention's:
with P = exp(S − logsumexp) and D = rowsum(dO ∘ O), dV = Pᵀ·dO, dS = P ∘ (dO·Vᵀ − D), dQ = dS·K/√d, dK = dSᵀ·Q/√d.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from .._checks import check_bool, check_choice
from ..sim.context_parallel import LAYOUTS, chunks_of, tile
from ..trace import Recorder


def check_inputs(q, k, v, group, layout: str, causal: bool) -> None:
    """Shapes that fit one another and the layout, before any message is posted (a mismatch on one rank
    would otherwise hang the others)."""
    check_choice("layout", layout, LAYOUTS)
    check_bool("causal", causal)
    same = q.dim() == k.dim() == 4 and k.shape == v.shape and all(k.shape[i] == q.shape[i] for i in (0, 2, 3))
    if not same or q.shape[1] % k.shape[1]:
        raise ValueError(f"q, k, v: shapes {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}; expected "
                         "(b, heads, t, d) and (b, kv_heads, t, d) with heads divisible by kv_heads")
    parts = len(chunks_of(0, dist.get_world_size(group), layout))
    if q.shape[2] % parts:
        raise ValueError(f"q: {q.shape[2]} tokens per rank, must be divisible by {parts} (layout={layout!r})")


def tiles(q_chunks, kv_chunks, causal: bool) -> list[tuple[int, int, str]]:
    """(local query chunk, local key chunk, "full" | "diagonal") of every tile to compute, skips left out."""
    kinds = [(a, b, tile(x, y, causal)) for a, x in enumerate(q_chunks) for b, y in enumerate(kv_chunks)]
    return [t for t in kinds if t[2] != "skip"]


def tile_pairs(kind: str, c: int) -> int:
    """(query, key) pairs a tile of c × c scores: all of them, or the triangle with its diagonal."""
    return c * c if kind == "full" else c * (c + 1) // 2


def expand(x: torch.Tensor, heads: int) -> torch.Tensor:
    """(b, kv_heads, t, d) → (b, heads, t, d): each K,V head repeated for the query heads it serves."""
    return x if x.shape[1] == heads else x.repeat_interleave(heads // x.shape[1], dim=1)


def fold(dx: torch.Tensor, kv_heads: int) -> torch.Tensor:
    """(b, heads, t, d) → (b, kv_heads, t, d): a shared K,V head's gradient sums its query heads' shares."""
    b, a, t, d = dx.shape
    return dx if a == kv_heads else dx.reshape(b, kv_heads, a // kv_heads, t, d).sum(2)


def _part(x: torch.Tensor, index: int, c: int) -> torch.Tensor:
    return x[:, :, index * c:(index + 1) * c]  # chunk `index` of the tokens held: (b, a, c, d)


def _scores(q: torch.Tensor, k: torch.Tensor, kind: str) -> torch.Tensor:
    """q·kᵀ/√d (b, a, c, c); a diagonal tile masks the keys after each query with −inf."""
    s = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
    if kind == "diagonal":
        after = torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).triu(1)
        s = s.masked_fill(after, float("-inf"))
    return s


def new_state(q: torch.Tensor, parts: int) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(m, l, O) per query chunk before any key: m = −inf, l = 0, O = 0."""
    c = q.shape[2] // parts
    return [(torch.full_like(_part(q, i, c)[..., 0], float("-inf")), torch.zeros_like(_part(q, i, c)[..., 0]),
             torch.zeros_like(_part(q, i, c))) for i in range(parts)]


def attend(state, q, k, v, q_chunks, kv_chunks, causal: bool) -> int:
    """Merge every tile of (q's chunks × k,v's chunks) into `state` (updated in place); returns the pairs
    scored. m' = max(m, rowmax S); l' = e^(m−m')·l + Σ e^(S−m'); O' = e^(m−m')·O + e^(S−m')·V. Every row of a
    tile that is not skipped meets at least one key, so m' is finite and no 0·inf appears."""
    c, heads, pairs = q.shape[2] // len(q_chunks), q.shape[1], 0
    k, v = expand(k, heads), expand(v, heads)
    for a, b, kind in tiles(q_chunks, kv_chunks, causal):
        m, l, o = state[a]  # noqa: E741 — the paper's names
        s = _scores(_part(q, a, c), _part(k, b, c), kind)  # (b, a, c, c)
        m_new = torch.maximum(m, s.amax(-1))
        scale, p = torch.exp(m - m_new), torch.exp(s - m_new[..., None])
        state[a] = (m_new, scale * l + p.sum(-1), scale[..., None] * o + p @ _part(v, b, c))
        pairs += tile_pairs(kind, c)
    return pairs


def finish(state) -> tuple[torch.Tensor, torch.Tensor]:
    """Output O / l (b, a, t, d) and logsumexp m + log l (b, a, t), the query chunks back in local order."""
    out = torch.cat([o / total[..., None] for _m, total, o in state], dim=2)
    return out, torch.cat([m + torch.log(total) for m, total, _o in state], dim=2)


def attend_backward(q, k, v, dout, lse, delta, q_chunks, kv_chunks, causal: bool):
    """Gradients of the tiles of (q's chunks × k,v's chunks): (dQ share (b, a, t, d), dK, dV (b, kv_heads, t_kv,
    d), pairs). `lse`, `delta` (b, a, t): the final logsumexp and rowsum(dO ∘ O) of the forward."""
    c, heads, kv_heads = q.shape[2] // len(q_chunks), q.shape[1], k.shape[1]
    k, v = expand(k, heads), expand(v, heads)
    dq, dk, dv, pairs = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v), 0
    for a, b, kind in tiles(q_chunks, kv_chunks, causal):
        qa, kb, vb, doa = _part(q, a, c), _part(k, b, c), _part(v, b, c), _part(dout, a, c)
        p = torch.exp(_scores(qa, kb, kind) - _part(lse[..., None], a, c))  # (b, a, c, c); masked → 0
        ds = p * (doa @ vb.transpose(-1, -2) - _part(delta[..., None], a, c))
        _part(dv, b, c).add_(p.transpose(-1, -2) @ doa)
        _part(dq, a, c).add_(ds @ kb * q.shape[-1] ** -0.5)
        _part(dk, b, c).add_(ds.transpose(-1, -2) @ qa * q.shape[-1] ** -0.5)
        pairs += tile_pairs(kind, c)
    return dq, fold(dk, kv_heads), fold(dv, kv_heads), pairs


def pack(*tensors: torch.Tensor) -> torch.Tensor:
    """One flat buffer of several tensors: what travels in one message."""
    return torch.cat([t.reshape(-1) for t in tensors])


def unpack(flat: torch.Tensor, *like: torch.Tensor) -> list[torch.Tensor]:
    """The tensors `pack` joined, shaped like `like`."""
    out, at = [], 0
    for t in like:
        out.append(flat[at:at + t.numel()].view_as(t))
        at += t.numel()
    return out


class Exchange:
    """One plan step's send and receive on this rank, posted together (non-blocking, so a ring never
    deadlocks) and recorded as one "send" and one "recv" Event each when `wait` returns."""

    def __init__(self, rec: Recorder, group, step: int, name: str, send: torch.Tensor, to: int, send_chunk: int,
                 frm: int, recv_chunk: int, tag: int = 0):
        self.rec, self.step, self.name, self.peers = rec, step, name, (to, frm)
        self.chunks, self.nbytes = (send_chunk, recv_chunk), send.numel() * send.element_size()
        self.sent = send.contiguous()  # held until wait(): the wire reads it until then
        self.received, self.start = torch.empty_like(self.sent), rec.clock()
        self.works = [dist.irecv(self.received, group=group, group_src=frm, tag=tag),
                      dist.isend(self.sent, group=group, group_dst=to, tag=tag)]

    def wait(self) -> torch.Tensor:
        for work in self.works:
            work.wait()
        start, end = self.start - self.rec.origin, self.rec.clock() - self.rec.origin
        for kind, peer, chunk in (("send", self.peers[0], self.chunks[0]), ("recv", self.peers[1], self.chunks[1])):
            self.rec.record(kind, start, end, self.name, step=self.step, peer=peer, chunk=chunk, nbytes=self.nbytes)
        return self.received


def timed_compute(rec: Recorder, work: dict | None, step: int, name: str, fn, *args):
    """`fn(*args)`, which returns the (query, key) pairs it scored (last, if it returns a tuple), timed: a
    "compute" Event at `step` and the pairs in `work[step]`, only if it scored any (a rank whose tiles were
    all skipped idles that step). Returns what `fn` returned."""
    start = rec.now()
    out = fn(*args)
    pairs = out[-1] if isinstance(out, tuple) else out
    if pairs:
        rec.record("compute", start, rec.now(), name, step=step)
        if work is not None:
            work[step] = work.get(step, 0) + pairs
    return out
