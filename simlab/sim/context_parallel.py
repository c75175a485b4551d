"""Context parallelism: the sequence split over N ranks, and attention's keys and values passed around a ring.

What it teaches. Attention needs every query to meet every key. With the sequence cut into N blocks, rank r
keeps its query block and its own K,V block; the K,V blocks then travel around the ring, one hop per step, so
after N − 1 transfers every rank has met every block (ring attention, Liu et al. 2023; Megatron-LM's
`--context-parallel-size`). Each step's partial softmax merges into the running one with the online-softmax
rescaling (running max m, running sum l, output O: `sim.context_parallel_online`). Backward sends K,V around
again and, behind them, the dK,dV each block has gathered so far, which end at their owner after N hops.

Under a causal mask a query only meets keys at or before it. With contiguous blocks rank r needs blocks 0..r
only: it scores r + 1 of N block pairs while rank N − 1 scores N, so early ranks idle. Zig-zag (striped)
assignment cuts the sequence into 2N chunks and gives rank r chunks r and 2N − 1 − r: one early, one late, and
every rank the same work (Llama 3 §3.3.2; torch's `_HeadTailLoadBalancer`). The plans here are the package's
`Transfer`s and `CollectivePlan`s, one plan step per ring step (`step` of every Event), compute included.

    >>> positions(1, world_size=2, seq=8, layout="zigzag")  # chunks 1 and 2 of 4
    array([2, 3, 4, 5])
    >>> work_per_rank(4, 8, "contiguous"), work_per_rank(4, 8, "zigzag")  # (query, key) pairs scored
    ((3, 7, 11, 15), (9, 9, 9, 9))
    >>> plan = ring_attention_plan(4, block_numel=6)
    >>> [str(t) for t in plan.steps[0] if t.src == 3], plan.bytes_sent_per_rank()[0]
    (['r3 → r0 (=) chunk 3 (24 B)'], 240)

Alternatives and their bytes and memory, side by side with the ring: `sim.context_parallel_costs`.
"""
from __future__ import annotations

import numpy as np

from .._checks import check_bool, check_choice, check_int, check_ranks
from ..plan import CollectivePlan, Transfer
from ..trace import Event, Trace

LAYOUTS = ("zigzag", "contiguous")  # zig-zag first: what Llama 3, torch and Megatron use under a causal mask


# ---- which tokens each rank holds ------------------------------------------------------------------

def check_layout(world_size: int, seq: int, layout: str) -> None:
    """One line naming what is wrong: N ranks, a sequence that splits into its chunks, a known layout."""
    check_ranks("world_size", world_size)
    check_choice("layout", layout, LAYOUTS)
    check_int("seq", seq, 1)
    parts = num_chunks(world_size, layout)
    if seq % parts:
        raise ValueError(f"seq={seq}: must be divisible by {parts} (layout={layout!r} cuts it into "
                         f"{'2 x world_size' if layout == 'zigzag' else 'world_size'} equal chunks)")


def num_chunks(world_size: int, layout: str) -> int:
    """Chunks the sequence is cut into: N blocks (contiguous), or 2N chunks, two per rank (zig-zag)."""
    return 2 * world_size if layout == "zigzag" else world_size


def chunks_of(rank: int, world_size: int, layout: str) -> tuple[int, ...]:
    """The chunks rank `rank` holds, in the order it holds them: (r,) or (r, 2N − 1 − r)."""
    return (rank, 2 * world_size - 1 - rank) if layout == "zigzag" else (rank,)


def positions(rank: int, world_size: int, seq: int, layout: str = "zigzag") -> np.ndarray:
    """The token positions rank `rank` holds, in its local order: its chunks one after the other. (s/N,)"""
    check_layout(world_size, seq, layout)
    check_int("rank", rank, 0, world_size - 1)
    c = seq // num_chunks(world_size, layout)
    return np.concatenate([np.arange(k * c, (k + 1) * c) for k in chunks_of(rank, world_size, layout)])


def tile(q_chunk: int, kv_chunk: int, causal: bool) -> str:
    """What a rank computes for one (query chunk, key chunk) tile: "full", "diagonal" (the causal triangle of
    a chunk with itself) or "skip" (every key is after every query). Chunks are contiguous ranges, so the
    chunk numbers alone decide it — the tile is never half masked in any other way."""
    if not causal or kv_chunk < q_chunk:
        return "full"
    return "diagonal" if kv_chunk == q_chunk else "skip"


# ---- the work: (query, key) pairs scored, per rank and ring step -------------------------------------

def step_work(world_size: int, seq: int, layout: str = "zigzag", causal: bool = True) -> np.ndarray:
    """(N, N) ints: [r, i] = the (query, key) pairs rank r scores at ring step i, when it holds the K,V block
    of rank (r − i) mod N. Counted from the mask itself (key position ≤ query position), so it is the
    simulation the closed forms in `work_per_rank` are checked against; the tiles an engine computes
    (`tile`) score exactly these pairs."""
    check_layout(world_size, seq, layout)
    check_bool("causal", causal)
    held = [positions(r, world_size, seq, layout) for r in range(world_size)]
    work = np.zeros((world_size, world_size), dtype=np.int64)
    for r in range(world_size):
        for i in range(world_size):
            q, k = held[r], held[(r - i) % world_size]
            work[r, i] = int((k[None, :] <= q[:, None]).sum()) if causal else q.size * k.size
    return work


def work_per_rank(world_size: int, seq: int, layout: str = "zigzag", causal: bool = True) -> tuple[int, ...]:
    """Closed form of each rank's (query, key) pairs over the whole forward.

    Not causal: every rank s/N queries × s keys. Causal, contiguous (block B = s/N): rank r scores r full
    blocks and its own triangle, r·B² + B(B+1)/2. Causal, zig-zag (chunk c = s/2N): chunk r meets r full
    chunks and its triangle, chunk 2N−1−r meets 2N−1−r and its triangle: (2N−1)·c² + c(c+1), the same on
    every rank.
    """
    check_layout(world_size, seq, layout)
    n = world_size
    if not check_bool("causal", causal):
        return (seq * seq // world_size,) * world_size
    if layout == "contiguous":
        b = seq // n
        return tuple(r * b * b + b * (b + 1) // 2 for r in range(n))
    c = seq // (2 * n)
    return ((2 * n - 1) * c * c + c * (c + 1),) * n


def busy_steps(world_size: int, seq: int, layout: str = "zigzag", causal: bool = True) -> tuple[int, ...]:
    """Ring steps in which each rank scores anything: r + 1 of N with contiguous blocks under a causal mask
    (the block pairs it needs: K,V from ranks 0..r), N with zig-zag or without a mask."""
    return tuple(int(n) for n in (step_work(world_size, seq, layout, causal) > 0).sum(axis=1))


def imbalance(work) -> float:
    """Busiest rank / average rank: 1.0 is perfectly balanced; the step waits for the busiest. Contiguous
    causal blocks tend to 2 − 1/N as blocks grow (the last rank does nearly twice the mean)."""
    work = np.asarray(work, dtype=float)
    return float(work.max() / work.mean()) if work.size and work.mean() > 0 else 1.0


# ---- the ring's transfers as a plan --------------------------------------------------------------------

def kv_chunk(block: int) -> int:
    """Plan chunk of the K,V block first held by rank `block`."""
    return block


def dkv_chunk(block: int, world_size: int) -> int:
    """Plan chunk of the dK,dV gathered for K,V block `block` (chunks N..2N−1)."""
    return world_size + block


def ring_attention_plan(world_size: int, block_numel: int, itemsize: int = 4, backward: bool = True
                        ) -> CollectivePlan:
    """Ring attention's transfers, one plan step per ring step (2N steps with the backward, N without).

    Forward, step i (0..N−1): rank r computes with K,V block (r − i) mod N while, for i < N − 1, it sends
    that block on to rank r + 1 (so step N − 1 computes only). Backward, step N + i: the same K,V pass
    again (i < N − 1), and after computing, rank r sends on the dK,dV gathered so far for block (r − i) mod N:
    rank r + 1 adds its share next step ("reduce"). The N-th hop brings each block's dK,dV home, so the
    backward sends N − 1 K,V blocks and N dK,dV blocks per rank (none at all on one rank).
    `block_numel`: elements of one rank's K and V together (2·b·s/N·kv_heads·head_dim), dK,dV the same.
    The layout does not change the plan: zig-zag only changes which tiles of a block are computed.
    """
    n = check_ranks("world_size", world_size)
    check_int("block_numel", block_numel, 1)
    check_int("itemsize", itemsize, 1)
    check_bool("backward", backward)
    nbytes, steps = block_numel * itemsize, []
    for i in range(n):  # forward
        steps.append(tuple(Transfer(i, r, (r + 1) % n, kv_chunk((r - i) % n), nbytes)
                           for r in range(n) if i < n - 1))
    for i in range(n if backward else 0):
        kv = [Transfer(n + i, r, (r + 1) % n, kv_chunk((r - i) % n), nbytes) for r in range(n) if i < n - 1]
        dkv = [Transfer(n + i, r, (r + 1) % n, dkv_chunk((r - i) % n, n), nbytes, "reduce") for r in range(n)
               if n > 1]
        steps.append(tuple(kv + dkv))
    sizes = (block_numel,) * (2 * n if backward else n)
    return CollectivePlan("ring_attention", n, sizes, itemsize, "own", tuple(steps),
                          meta={"variant": "ring", "chunk_names": kv_chunk_names(n),
                                "compute_steps": _ring_compute_steps(n)})


def kv_chunk_names(world_size: int) -> dict[str, tuple[int, int]]:
    """What travels as which chunks: K,V blocks 0..N−1, their dK,dV N..2N−1."""
    return {"kv": (0, world_size), "dkv": (world_size, 2 * world_size)}


def _ring_compute_steps(n: int) -> dict[int, str]:
    """Plan step → what is computed there (on ranks whose tiles are not all skipped)."""
    return {i: "attention" for i in range(n)} | {n + i: "attention backward" for i in range(n)}


def compute_events(plan: CollectivePlan, work: np.ndarray) -> list[tuple[int, int, str]]:
    """(rank, step, name) of every compute a plan's run records: for a ring, rank r computes at step i (and
    N + i) only where `work[r, i]` > 0; an all-gather or Ulysses run computes once each way on every rank."""
    n, out = plan.world_size, []
    for step, name in sorted(plan.meta["compute_steps"].items()):
        for r in range(n):
            ring_step = step % n
            if plan.meta["variant"] != "ring" or work[r, ring_step] > 0:
                out.append((r, step, name))
    return out


def transfer_name(plan: CollectivePlan, chunk: int) -> str:
    """How a transfer's Event is named: what travels ("kv", "dkv", "qkv", "out" …), from the plan's meta."""
    for name, (lo, hi) in plan.meta["chunk_names"].items():
        if lo <= chunk < hi:
            return name
    raise ValueError(f"chunk={chunk}: not a chunk of plan {plan.name!r}")


def plan_trace(plan: CollectivePlan, work: np.ndarray) -> Trace:
    """The Events a real run of `plan` records, in model time (step k spans [k, k + 1)): a "send" and a "recv"
    per transfer, named by what travels, and a "compute" per `compute_events`. A real run's
    `trace.signature()` equals this one's: the same transfers and computes at the same steps."""
    out = Trace()
    for t in plan.transfers():
        name = transfer_name(plan, t.chunk)
        out.append(Event(t.src, "send", t.step, t.dst, t.chunk, t.nbytes, name, t.step, t.step + 1))
        out.append(Event(t.dst, "recv", t.step, t.src, t.chunk, t.nbytes, name, t.step, t.step + 1))
    for rank, step, name in compute_events(plan, work):
        out.append(Event(rank, "compute", step, name=name, start=step, end=step + 1))
    return out
