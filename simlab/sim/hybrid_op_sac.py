"""torchtitan's op-level selective activation checkpointing (`recompute="op-sac"`): what one layer keeps and what
its backward recomputes, op by op.

Teaches the policy as torchtitan wrote it (torchtitan/models/llama3/parallelize_llama.py @ 820504e, lines 218-280;
the same rule at b5bcd76 in torchtitan/distributed/activation_checkpoint.py, lines 240-272): each transformer block
is wrapped in a non-reentrant checkpoint whose policy MUST_SAVEs the outputs of the ops in `_save_list` — aten.mm,
the fused SDPA kernels (flash, memory-efficient), the functional reduce_scatter and aten.max — "except every second
mm", and PREFER_RECOMPUTEs every other op (norms, rotary, SiLU, the gate's product, residual adds, all-gathers).
The mm counter lives in a dict made by the checkpoint's context_fn, so it restarts at every block: the k-th mm of
a layer (k = 1, 2, …) is saved when k is odd. In a Llama layer the mms run q, k, v, o, w1, w3, w2
(`w2(silu(w1(x)) * w3(x))` evaluates w1 before w3), so
- saved: q (T, h/t), v (T, kv/t), the attention's output (T, h/t) with its log-sum-exp, w1's output (T, ffn/t),
  w2's output (T, h: each TP rank's partial sums) and, with sequence parallelism, the two reduce-scatters'
  outputs (T/t, h); the checkpoint also keeps the layer's input (T, h; T/t, h with SP);
- recomputed in the backward: the k, o and w3 GEMMs, every element-wise op, and under TP the collective that
  feeds them (SP: the two all-gathers; without SP: the all-reduce after o) — one TP collective's time.
A plain (non-gated) MLP runs q, k, v, o, fc1, fc2: fc1 is saved, fc2 neither saved nor needed again (its output
only feeds the residual add). T = b·s/cp tokens, t = TP. tests/exec/test_op_sac_policy.py runs the policy under
torch.utils.checkpoint and checks both lists against what torch saves and recomputes.
Modelled for dense layers with FlashAttention (the policy saves the fused kernel's output; eager attention's
bmm/softmax would be recomputed). Saved tensors are 16-bit (the runs that state the policy train in BF16; under
torchao's Float8, `_scaled_mm` is not in `_save_list`).
"""
from __future__ import annotations

import numpy as np

from .hybrid import rank_tokens


def layer_mms(model, k) -> list[tuple]:
    """One layer's matmuls on one TP rank, in the order the forward runs them: (name, M, N, K) each — output
    (M, N), inner dimension K."""
    tokens, h, t, ffn = rank_tokens(model, k), model.hidden, k.tp, model.ffn_width
    kv = model.kv_width
    attention = [("q", tokens, h / t, h), ("k", tokens, kv / t, h), ("v", tokens, kv / t, h), ("o", tokens, h, h / t)]
    if model.gated:  # w2(silu(w1(x)) * w3(x)): w1, then w3, then w2
        return attention + [("w1", tokens, ffn / t, h), ("w3", tokens, ffn / t, h), ("w2", tokens, h, ffn / t)]
    return attention + [("fc1", tokens, ffn / t, h), ("fc2", tokens, h, ffn / t)]


def saved_mms(model, k) -> list[tuple]:
    """The matmuls whose outputs the policy saves: the 1st, 3rd, 5th … of the layer (the counter restarts per
    block; "every second mm" is recomputed)."""
    return layer_mms(model, k)[0::2]


def recomputed_mms(model, k) -> list[tuple]:
    """The matmuls the backward runs again: the 2nd, 4th, 6th … (k, o, w3 in a gated Llama layer) — but not the
    layer's last one (a plain MLP's fc2): only the residual add reads its output, and an add's backward needs no
    input, so the checkpoint stops recomputing before it (torch's early stop, on at 820504e; torchtitan passes
    early_stop=False since, at b5bcd76, which would recompute it too)."""
    mms = layer_mms(model, k)
    unsaved = mms[1::2]
    return unsaved[:-1] if unsaved[-1] is mms[-1] else unsaved


def kept_bytes(model, k) -> dict:
    """{tensor: bytes} one layer keeps for the backward under the policy, one micro-batch, one rank, 16-bit."""
    tokens, h, t = rank_tokens(model, k), model.hidden, k.tp
    sp = np.asarray(k.sp, dtype=bool)
    replicated = np.where(sp, tokens * h / t, tokens * h)  # (T, h), or (T/t, h) under sequence parallelism
    kept = {"layer_input": 2 * replicated}  # the checkpoint's input, x
    kept |= {f"{name}_output": 2 * m * n for name, m, n, _ in saved_mms(model, k)}  # the saved mms' outputs
    kept["attention_output"] = 2 * tokens * h / t  # the flash kernel's output, (T, a/t · d)
    kept["flash_lse"] = 4 * tokens * model.heads / t  # its log-sum-exp, fp32, one per head and token
    kept["reduce_scatter_outputs"] = np.where(sp & (t > 1), 2 * 2 * tokens * h / t, 0)  # after o and the MLP
    return kept
