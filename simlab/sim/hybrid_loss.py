"""The loss over the vocabulary, per logit: what it holds at its peak and what it moves through HBM.

Teaches why the same cross-entropy costs a framework 1.5, 4, 12 or 16 bytes per logit (`hybrid.LOSSES`):
- **fused** (Megatron's vocab-parallel cross-entropy): the fp32 softmax computed and its gradient made in place,
  4 bytes per logit kept, moved K_ELEMENTWISE times like any element-wise work (`hybrid_layer`);
- **fp32** (plain PyTorch, `cross_entropy(logits.float(), labels)`, torchtitan's train.py @ 9dec370): log_softmax
  keeps its fp32 output, and its backward makes nll's fp32 gradient and its own beside it: 12 bytes per logit
  (the H200 measured 12.00, benchmarks/gpu_check.md). Under TP the logits are split by vocabulary and that loss runs
  as torch's loss_parallel (torch/distributed/tensor/parallel/loss.py): its log_softmax keeps the shifted logits
  beside the result, and its fused nll + log_softmax backward holds the result, a zeroed gradient, exp(result) and
  their sum at once — 16 bytes per logit (tests/exec/test_loss_memory.py measures both with torch's MemTracker);
- **chunked** (torchtitan ≥ 0.3's ChunkedLossWrapper): the output layer and the fp32 loss on LOSS_CHUNKS slices of
  the sequence in turn, each slice's backward before the next one's forward: 12 bytes per logit of one slice (16
  under TP, where its own `_LossParallelCrossEntropy` keeps log_softmax's output and makes the same four tensors).

HBM bytes per logit, forward + backward, counted kernel by kernel: plain fp32 — the cast (read 2, write 4),
log_softmax (three reads, one write: 16), nll's zeroed gradient (4), log_softmax's backward (16), the cast back
(4 + 2); loss_parallel — the cast (2 + 4), amax (4), x − max (4 + 4), exp (4 + 4), its sum (4), shifted − logsumexp
(4 + 4), then zeros (4), exp(result) (4 + 4), their sum (4 + 4 + 4), times the gradient (4 + 4), the cast back
(4 + 2); chunked moves fp32's bytes (loss_parallel's under TP), a slice at a time.

    >>> LOSS_BYTES, LOSS_PARALLEL_BYTES, FP32_HBM_BYTES, LOSS_PARALLEL_HBM_BYTES
    ((4, 12, 12), 16, 48, 76)
"""
from __future__ import annotations

import numpy as np

from .hybrid import LOSS_CHUNKS, LOSSES

FUSED_KEPT = 4  # fp32 bytes per logit the fused loss keeps (its HBM traffic: these times K_ELEMENTWISE)
LOSS_BYTES = (FUSED_KEPT, 12, 12)  # per logit of the logits at once at the peak: fused, fp32, chunked (one slice)
LOSS_PARALLEL_BYTES = 16  # fp32 or chunked under TP: torch's loss_parallel, torchtitan's own vocab-parallel loss
FP32_HBM_BYTES = 6 + 16 + 4 + 16 + 6
LOSS_PARALLEL_HBM_BYTES = (6 + 4 + 8 + 8 + 4 + 8) + (4 + 8 + 12 + 8 + 6)


def _under_tp(k) -> np.ndarray:  # plain PyTorch's loss (whole or chunked) on logits split by vocabulary
    return (np.asarray(k.loss) != LOSSES.index("fused")) & (np.asarray(k.tp) > 1)


def held_per_logit(k) -> np.ndarray:
    """Bytes per logit of a micro-batch the loss holds at its peak, for every plan of `k` (a `Knobs`): chunked holds
    one slice's logits of LOSS_CHUNKS at a time."""
    loss = np.asarray(k.loss, dtype=int)
    at_once = np.where(_under_tp(k), LOSS_PARALLEL_BYTES, np.choose(loss, LOSS_BYTES))
    return np.where(loss == LOSSES.index("chunked"), at_once / LOSS_CHUNKS, at_once)


def moved_per_logit(k, elementwise: float) -> np.ndarray:
    """HBM bytes per logit the loss moves, forward + backward; `elementwise`: HBM bytes per byte an element-wise
    kernel keeps (`hybrid_layer.K_ELEMENTWISE`), which prices the fused loss."""
    by_loss = (FUSED_KEPT * elementwise, FP32_HBM_BYTES, FP32_HBM_BYTES)
    return np.where(_under_tp(k), LOSS_PARALLEL_HBM_BYTES, np.choose(np.asarray(k.loss, dtype=int), by_loss))
