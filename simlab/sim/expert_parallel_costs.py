"""A mixture-of-experts layer's price in lesson 6's model: the bytes it keeps, the GEMMs it runs and the
all-to-alls it sends, on one rank of a plan with expert parallelism (`Plan.ep`) — vectorised over `Knobs`.

Teaches, for T = b·s/cp tokens of a micro-batch on one rank (all of them: with TP, Megatron all-gathers the
sequence-parallel shards before the router dispatches, so every TP rank routes the same T tokens):
- **rows**: each token goes to top_k experts, so T·k rows enter the experts of the EP group; under a capacity
  factor cf every expert is padded to its capacity, T·k·cf rows (`expert_parallel.capacity`); dropless
  (capacity 0) the busiest rank sets the pace, and we take the rows as balanced (factor 1.0): Megatron-Bridge's
  MoE benchmarks "force-balance the token distribution among experts" (docs/performance-summary.md @ 97ad8cc),
  and an auxiliary load-balancing loss keeps real routing close to it (`expert_parallel.Routing.imbalance`
  measures a skewed one);
- **memory** per layer and micro-batch: the router's probabilities in fp32 (4·E bytes per token, on T/t tokens
  with sequence parallelism), the dispatched rows (the experts' first GEMM input), the experts' intermediates
  (as the dense MLP's, at width ffn_e/t: expert matrices split over TP, Megatron's default), and the experts'
  outputs, kept for the weighted sum's backward (the router's gradient); one layer at a time also holds the
  all-to-all's send and receive buffers, rows·h each;
- **compute**: the router GEMM (T × h → E) and each rank's E/ep experts as one grouped GEMM of
  T·k·cf·ep/E rows per expert (`gpus.gemm_seconds(batch=E/ep)`);
- **traffic**: 4 all-to-alls per layer (dispatch and combine forward, their mirror backward), each sending
  rows·(ep − 1)/ep·h values per EP group member — `expert_parallel_dispatch.balanced_bytes` for a balanced
  routing, what the real run's `DispatchPlan` counts; with TP each of the t ranks sends a 1/t of them (its
  sequence-parallel tokens) and TP's MLP collectives carry the rows (`tp_extra`); exposed (Megatron overlaps them only with its batch-level
  "overlap_moe_expert_parallel_comm", not modelled). An all-to-all inside a node rides NVLink; across nodes
  each GPU sends its off-node share through its own NIC.

    >>> from simlab.sim.model import PRESETS
    >>> from simlab.sim.hybrid import Plan
    >>> from simlab.sim.hybrid_memory import knobs
    >>> m = PRESETS["mixtral-8x7b"]
    >>> k = knobs(Plan(dp=8, ep=8), m)
    >>> float(rows_per_token(m, k)), int(a2a_bytes(m, k, 2)) == 4096 * 2 * 7 // 8 * 4096 * 2
    (2.0, True)
"""
from __future__ import annotations

import numpy as np

from .hybrid import rank_tokens as tokens  # T: tokens of one micro-batch on one rank
from .network import BASE_LATENCY, _table, reduce_scatter

LOAD_FACTOR = 1.0  # dropless rows over the balanced share: force-balanced, as Megatron-Bridge's benchmarks run
ROUTER_BYTES = 4  # the router's softmax probabilities are kept in fp32


def rows_per_token(model, k) -> np.ndarray:
    """Rows entering the experts per token: top_k, × the capacity factor when padded to capacity."""
    return model.top_k * np.where(np.asarray(k.capacity) > 0, k.capacity, LOAD_FACTOR)


def activation_bytes(model, k, fp8: bool = False) -> np.ndarray:
    """Bytes one MoE layer keeps for its backward on one rank, one micro-batch, beyond the layer's input to
    the MLP: router probabilities, dispatched rows, the experts' intermediates and outputs (16-bit)."""
    t, h, w = tokens(model, k), model.hidden, model.expert_width
    rows = rows_per_token(model, k) * t
    gemm_in = 1 if fp8 else 2
    router = ROUTER_BYTES * model.experts * t * np.where(k.sp, 1 / k.tp, 1)
    inner = (4 if model.gated else 2) * w / k.tp + gemm_in * w / k.tp  # gate and up outputs; the down GEMM's input
    return router + rows * (gemm_in * h + inner + 2 * h)


def buffer_bytes(model, k, a_b: int) -> np.ndarray:
    """The all-to-all's send and receive buffers of the layer at work (one layer at a time)."""
    return np.where(k.ep > 1, 2 * rows_per_token(model, k) * tokens(model, k) * model.hidden * a_b, 0)


def gemms(model, k) -> list[tuple]:
    """The forward GEMMs of one MoE MLP on one rank, (M, N, K, batch): the router, then each local expert's
    up (gate and up, gated) and down projection on its rows, E/ep experts batched."""
    t, h, w = tokens(model, k), model.hidden, model.expert_width
    local = model.experts / k.ep
    per_expert = rows_per_token(model, k) * t / model.experts * k.ep  # rows each expert receives
    router_tokens = t * np.where(k.sp, 1 / k.tp, 1)
    up = w * (2 if model.gated else 1) / k.tp
    return [(router_tokens, model.experts, h, 1), (per_expert, up, h, local), (per_expert, h, w / k.tp, local)]


def a2a_bytes(model, k, a_b: int) -> np.ndarray:
    """Bytes one rank sends in one all-to-all (dispatch, or combine): rows·(ep − 1)/ep·h values."""
    return rows_per_token(model, k) * tokens(model, k) * (k.ep - 1) / k.ep * model.hidden * a_b


def all_to_all(c, stride, size, nbytes) -> np.ndarray:
    """Seconds of an all-to-all in which each rank sends `nbytes` in all, (size − 1)/size of its buffer, to the
    others: inside a node over NVLink; across nodes the off-node share over the GPU's own NIC, in parallel."""
    size = np.asarray(size)
    k, nodes = _table(c, stride, size)
    off_node = np.where(nodes > 1, (size - k) / np.maximum(size - 1, 1), 0)  # share of the peers elsewhere
    intra = nbytes * (1 - off_node) / c.gpu.intra_bandwidth
    inter = nbytes * off_node / c.inter_bandwidth
    alpha = np.where(nodes > 1, c.inter_alpha, c.gpu.intra_alpha)
    return np.where(size > 1, BASE_LATENCY + alpha + np.maximum(intra, inter), 0.0)


def tp_extra(model, k, c, a_b: int) -> np.ndarray:
    """With TP (and the sequence parallelism Megatron requires beside EP) the MLP's all-gather and reduce-scatter
    carry the rows·T dispatched rows instead of T tokens: the extra (rows − 1)·T rows' bandwidth, one direction."""
    extra = (rows_per_token(model, k) - 1) * tokens(model, k) * model.hidden * a_b
    moved = reduce_scatter(c, 1, k.tp, extra) - reduce_scatter(c, 1, k.tp, 0 * extra)
    return np.where(k.tp > 1, 2 * moved, 0.0)


def layer_a2a(model, k, c, a_b: int) -> np.ndarray:
    """Seconds of one MoE layer's expert-parallel traffic in one direction: dispatch + combine on the EP group (in
    Megatron's expert grid, tp-ep-dp, its ranks are tp apart; each TP rank sends its T/t sequence-parallel tokens'
    rows) and `tp_extra`."""
    a2a = 2 * all_to_all(c, k.tp, k.ep, a2a_bytes(model, k, a_b) / k.tp)
    return np.where(k.ep > 1, a2a, 0.0) + tp_extra(model, k, c, a_b)
