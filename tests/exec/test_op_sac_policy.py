"""`hybrid_op_sac`'s reading of torchtitan's op-level policy, checked against torch itself: a small Llama layer
(the model code of torchtitan/models/llama3/model.py @ 820504e: wq, wk, wv, SDPA, wo; w2(silu(w1(x)) * w3(x)))
run under torch.utils.checkpoint with the policy of parallelize_llama.py @ 820504e, lines 254-274. What torch's
dispatcher reports as saved and as recomputed must be the model's `saved_mms` and `recomputed_mms`."""
from collections import Counter
from functools import partial

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

from simlab.sim.hybrid import Plan
from simlab.sim.hybrid_memory import knobs
from simlab.sim.hybrid_op_sac import recomputed_mms, saved_mms
from simlab.sim.model import Transformer

H, HEADS, KV_HEADS, FFN, SEQ, BATCH = 16, 4, 2, 24, 8, 2
D = H // HEADS
# the CPU's fused SDPA stands for the GPU's flash kernel, which the policy names
SAVE = {torch.ops.aten.mm.default, torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default}


class LlamaLayer(torch.nn.Module):
    def __init__(self, gated: bool):
        super().__init__()
        self.gated = gated
        lin = partial(torch.nn.Linear, bias=False)
        self.wq, self.wk, self.wv, self.wo = lin(H, H), lin(H, KV_HEADS * D), lin(H, KV_HEADS * D), lin(H, H)
        self.w1, self.w2 = lin(H, FFN), lin(FFN, H)
        self.w3 = lin(H, FFN) if gated else None
        self.norm1, self.norm2 = torch.nn.RMSNorm(H), torch.nn.RMSNorm(H)

    def forward(self, x):  # x: (b, s, h)
        y = self.norm1(x)
        q, k, v = self.wq(y), self.wk(y), self.wv(y)  # (b, s, h), (b, s, kv·d) twice
        q, k, v = (t.view(BATCH, SEQ, -1, D).transpose(1, 2) for t in (q, k, v))  # (b, heads, s, d)
        rep = HEADS // KV_HEADS  # grouped-query attention: each K,V head serves `rep` query heads
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(BATCH, SEQ, H)
        h = x + self.wo(out)
        z = self.norm2(h)
        mlp = self.w2(F.silu(self.w1(z)) * self.w3(z)) if self.gated else self.w2(F.gelu(self.w1(z)))
        return h + mlp


class _Matmuls(TorchDispatchMode):
    """Every aten.mm run while active, by its output's shape (M, N)."""

    def __init__(self):
        super().__init__()
        self.shapes = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func == torch.ops.aten.mm.default:
            self.shapes[(args[0].shape[0], args[1].shape[1])] += 1
        return func(*args, **(kwargs or {}))


def _policy(decided, ctx, func, *args, **kwargs):
    """torchtitan's: save every op of the list, except every second mm (torch ≥ 2.9 asks only in the forward and
    replays the decisions in the recompute), and a record of the mms it saved."""
    if func == torch.ops.aten.mm.default:
        decided["count"] += 1
    save = func in SAVE and not (func == torch.ops.aten.mm.default and decided["count"] % 2 == 0)
    if func == torch.ops.aten.mm.default and save:
        decided["saved"].append((args[0].shape[0], args[1].shape[1]))
    return CheckpointPolicy.MUST_SAVE if save else CheckpointPolicy.PREFER_RECOMPUTE


def _run(gated: bool) -> tuple:
    """Two checkpointed calls of one layer (two blocks' worth: the counter restarts each time): the (M, N) of each
    mm the policy saved, and of the mms the backward ran beyond a plain layer's backward (the recomputed ones)."""
    torch.manual_seed(0)
    layer = LlamaLayer(gated)
    saved = []

    def context():  # a new counter per checkpointed call, as torchtitan's context_fn makes one per block
        decided = {"count": 0, "saved": saved}
        return create_selective_checkpoint_contexts(partial(_policy, decided))

    backward = {}
    for sac in (False, True):
        x = torch.randn(BATCH, SEQ, H, requires_grad=True)
        outs = [checkpoint(layer, x, use_reentrant=False, context_fn=context) if sac else layer(x) for _ in range(2)]
        with _Matmuls() as seen:
            sum(o.sum() for o in outs).backward()
        backward[sac] = seen.shapes
    return saved, backward[True] - backward[False]


@pytest.mark.parametrize("gated", [True, False])
def test_torch_saves_and_recomputes_the_mms_the_model_says(gated):
    model = Transformer("small", layers=2, hidden=H, heads=HEADS, seq=SEQ, vocab=32, ffn=FFN, kv_heads=KV_HEADS,
                        gated=gated)
    k = knobs(Plan(microbatch=BATCH, recompute="op-sac"), model)
    saved, recomputed = _run(gated)
    assert saved == [(m, n) for _, m, n, _ in saved_mms(model, k)] * 2
    assert recomputed == Counter((int(m), int(n)) for _, m, n, _ in recomputed_mms(model, k) * 2)
