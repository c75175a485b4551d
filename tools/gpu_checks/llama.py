"""The llama group: Llama 3 8B's layers as torchtitan trains them (bf16 weights, RMSNorm, rotary positions, grouped
K,V heads in causal SDPA, a SwiGLU MLP; 2 sequences of 8192 tokens, no recomputation), forward + backward timed
with CUDA events, eager and under torch.compile (torchtitan compiles each block), against the time model's layer
(`simlab.sim.hybrid_layer.layer_seconds` on the GPU's preset). Today's shapes where the timing group's GPT is
2019's: the H100 runs the model over-predicts are Llama 3s. Reported, not tested: the ratio is a measurement."""
from __future__ import annotations

import statistics

import torch

from .measure import time_calls
from .plan import checks_of
from .report import FAIL, INFO, row

SHAPE = {"full": dict(layers=4, hidden=4096, heads=32, kv_heads=8, ffn=14336, seq=8192, batch=2),
         "tiny": dict(layers=2, hidden=64, heads=4, kv_heads=2, ffn=160, seq=32, batch=2)}
WARMUP, TIMED = {"full": 2, "tiny": 1}, {"full": 5, "tiny": 2}


def llama_block(hidden, heads, kv_heads, ffn, dev, dtype):
    """One Llama 3 block on (b, s, h): x + attn(norm(x)), then + w2(silu(w1 ·) ⊙ w3 ·), no biases."""
    from torch import nn
    from torch.nn import functional as F
    d = hidden // heads

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            make = dict(bias=False, device=dev, dtype=dtype)
            self.n1, self.n2 = (nn.Parameter(torch.ones(hidden, device=dev, dtype=dtype)) for _ in range(2))
            self.wq, self.wk = nn.Linear(hidden, hidden, **make), nn.Linear(hidden, kv_heads * d, **make)
            self.wv, self.wo = nn.Linear(hidden, kv_heads * d, **make), nn.Linear(hidden, hidden, **make)
            self.w1, self.w3 = nn.Linear(hidden, ffn, **make), nn.Linear(hidden, ffn, **make)
            self.w2 = nn.Linear(ffn, hidden, **make)

        @staticmethod
        def rotary(t, cos, sin):  # (b, a, s, d): each pair of features turned by its position's angle
            t1, t2 = t[..., : d // 2], t[..., d // 2:]
            return torch.cat((t1 * cos - t2 * sin, t2 * cos + t1 * sin), dim=-1)

        def forward(self, x):  # (b, s, h)
            b, s, _ = x.shape
            angle = torch.arange(s, device=dev)[:, None] / 500000.0 ** (torch.arange(d // 2, device=dev) / (d // 2))
            cos, sin = angle.cos().to(dtype), angle.sin().to(dtype)  # (s, d/2)
            y = F.rms_norm(x, (hidden,), self.n1)
            q = self.wq(y).view(b, s, heads, d).transpose(1, 2)  # (b, a, s, d)
            k, v = (w(y).view(b, s, kv_heads, d).transpose(1, 2) for w in (self.wk, self.wv))  # (b, kv, s, d)
            q, k = self.rotary(q, cos, sin), self.rotary(k, cos, sin)
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)  # (b, a, s, d)
            x = x + self.wo(o.transpose(1, 2).reshape(b, s, hidden))
            y = F.rms_norm(x, (hidden,), self.n2)
            return x + self.w2(F.silu(self.w1(y)) * self.w3(y))

    return Block()


def child_llama(mode, gpus, size):
    from simlab.sim.hardware import cluster
    from simlab.sim.hybrid import Plan
    from simlab.sim.hybrid_layer import layer_seconds
    from simlab.sim.hybrid_memory import knobs
    from simlab.sim.model import PRESETS

    from .timing import gpu_preset
    checks = checks_of(mode, gpus, "llama")
    cuda = mode != "cpu"
    dev = torch.device("cuda", 0) if cuda else torch.device("cpu")
    dtype = torch.bfloat16 if cuda else torch.float32
    sh = SHAPE[size]
    if cuda:
        props = torch.cuda.get_device_properties(0)
        preset = gpu_preset(props.name, props.total_memory)
    else:
        preset = "cpu-this-machine"
    spec = PRESETS["llama3-8b"].with_(hidden=sh["hidden"], heads=sh["heads"], kv_heads=sh["kv_heads"],
                                      ffn=sh["ffn"], seq=sh["seq"], layers=sh["layers"])
    how = (f"1 process on {dev}, {str(dtype)[6:]}; {sh['layers']} Llama 3 8B layers, {sh['batch']} × {sh['seq']} "
           "tokens, SDPA (GQA), no recomputation")
    torch.manual_seed(0)
    blocks = torch.nn.Sequential(*(llama_block(sh["hidden"], sh["heads"], sh["kv_heads"], sh["ffn"], dev, dtype)
                                   for _ in range(sh["layers"])))
    x = torch.randn(sh["batch"], sh["seq"], sh["hidden"], device=dev, dtype=dtype, requires_grad=True)
    grad = torch.randn_like(x)

    def step(model):
        def once():
            x.grad = None
            model(x).backward(grad)
        return once

    modelled = None
    if preset:
        plan = Plan(microbatch=sh["batch"], attention="flash" if cuda else "eager", precision="mixed")
        t = layer_seconds(spec, knobs(plan, spec), cluster(preset, gpus=1), "mixed")
        modelled = sh["layers"] * float(t["forward"] + t["backward"])
    for (check, _), compiled in zip(checks, (False, True)):
        try:
            model = blocks
            if compiled:
                # torchtitan compiles per block; the CPU dry run checks the plumbing with no C++ compiler needed
                backend = "inductor" if cuda else "aot_eager"
                model = torch.nn.Sequential(*(torch.compile(b, backend=backend) for b in blocks))
            measured = statistics.median(time_calls(step(model), cuda, WARMUP[size], TIMED[size])[0])
        except Exception as err:  # a build without a compiler backend: this row says so, the other stands
            from .report import one_line
            yield row(check, how, result=f"{'compile' if compiled else 'eager'} failed: {one_line(err)}", ok=FAIL)
            continue
        expected = "n/a (no preset)" if modelled is None else f"{modelled * 1e3:.1f} ms ({preset})"
        ratio = "" if modelled is None else f"measured/model {measured / modelled:.2f}×"
        yield row(check, how, f"{measured * 1e3:.1f} ms forward + backward (median of {TIMED[size]})", expected,
                  ratio, INFO)
