"""The timing group: one real training step of a GPT in the time model's shape (1.1 B parameters on a GPU, bf16
autocast, SDPA, fused AdamW), timed with CUDA events against `simlab.sim.advisor.evaluate_plan`'s prediction for
the GPU's preset, and that step's peak memory against the advisor's bytes per GPU — both reported, not tested."""
from __future__ import annotations

import contextlib
import os
import statistics
import time

import torch

from .measure import Meter
from .plan import checks_of
from .report import FAIL, INFO, mb, row

GPT_STEP = {"full": dict(layers=20, hidden=2048, heads=16, seq=2048, vocab=50304),
            "tiny": dict(layers=2, hidden=64, heads=4, seq=32, vocab=256)}
WARMUP, TIMED = {"full": 3, "tiny": 1}, {"full": 5, "tiny": 2}


def gpu_preset(name: str, memory: float) -> str | None:
    """The `simlab.sim.gpus` preset for a device name as CUDA reports it ("NVIDIA H200", "NVIDIA A100-SXM4-80GB"
    …), `memory` in bytes telling the variants apart; None when no preset describes it."""
    n, gib = name.lower(), memory / 2**30
    if "h200" in n:
        return "h200"
    if "h100" in n:
        return "h100-96gb-hbm2e" if gib > 88 else "h100-80gb"
    if "a100" in n:
        return "a100-80gb" if gib > 48 else "a100-40gb"
    if "b200" in n:
        return "b200"
    if "4090" in n:
        return "rtx-4090"
    return None


def gpt_model(layers, hidden, heads, seq, vocab, dev):
    """A GPT in the time model's shape (`Transformer(..., tied=True, dropout=False)`): learned positions, pre-LN
    blocks of fused QKV + causal SDPA and a GeLU MLP of 4h, biases everywhere, output tied to the embedding."""
    from torch import nn
    from torch.nn import functional as F

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(hidden, device=dev), nn.LayerNorm(hidden, device=dev)
            self.qkv, self.proj = nn.Linear(hidden, 3 * hidden, device=dev), nn.Linear(hidden, hidden, device=dev)
            self.fc1, self.fc2 = nn.Linear(hidden, 4 * hidden, device=dev), nn.Linear(4 * hidden, hidden, device=dev)

        def forward(self, x):  # (b, s, h)
            b, s, h = x.shape
            q, k, v = (t.reshape(b, s, heads, h // heads).transpose(1, 2)
                       for t in self.qkv(self.ln1(x)).split(h, dim=-1))  # (b, a, s, h/a) each
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, h)
            x = x + self.proj(o)
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, hidden, device=dev), nn.Embedding(seq, hidden, device=dev)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.ln_f = nn.LayerNorm(hidden, device=dev)

        def forward(self, tokens):  # (b, s) → logits (b, s, V)
            x = self.tok(tokens) + self.pos.weight[:tokens.shape[1]]
            for block in self.blocks:
                x = block(x)
            return F.linear(self.ln_f(x), self.tok.weight)

    return GPT()


def sequences_for(memory_bytes: float) -> int:
    """Sequences per step for the 1.1 B model: its states take ~18 GB, each sequence of 2048 tokens ~7 GB more."""
    gib = memory_bytes / 2**30
    return 8 if gib >= 100 else 4 if gib >= 60 else 2


def layers_for(memory_bytes: float) -> int:
    """20 layers (1.1 B parameters) where they fit with 2 sequences, 8 (0.5 B) on a GPU under 30 GiB."""
    return 20 if memory_bytes >= 30 * 2**30 else 8


def child_timing(mode, gpus, size):
    from torch.nn import functional as F

    from simlab.sim.advisor import evaluate_plan
    from simlab.sim.hardware import cluster
    from simlab.sim.hybrid import Plan
    from simlab.sim.model import Transformer
    checks = checks_of(mode, gpus, "timing")
    cuda = mode != "cpu"
    dev = torch.device("cuda", 0) if cuda else torch.device("cpu")
    shape = GPT_STEP[size]
    if cuda:
        torch.cuda.set_device(0)
        props = torch.cuda.get_device_properties(0)
        name, memory = props.name, props.total_memory
        preset = os.environ.get("SIMLAB_GPU_PRESET") or gpu_preset(name, memory)
        batch = sequences_for(memory) if size == "full" else 2
        shape = shape | ({"layers": layers_for(memory)} if size == "full" else {})
    else:
        name, memory, preset, batch = "cpu", None, "cpu-this-machine", 2
    spec = Transformer("gpt-step", shape["layers"], shape["hidden"], shape["heads"], seq=shape["seq"],
                       vocab=shape["vocab"], tied=True, dropout=False)
    size_text = f"{spec.params / 1e9:.2f} B" if spec.params >= 1e8 else f"{spec.params / 1e6:.2f} M"
    how = f"{checks[0][1]}; GPT {size_text} parameters, {batch} × {spec.seq} tokens"
    torch.manual_seed(0)
    model = gpt_model(**shape, dev=dev)
    try:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cuda)  # fused: torch ≥ 2.0 on CUDA
    except (TypeError, RuntimeError):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, spec.vocab, (batch, spec.seq + 1), generator=gen).to(dev)
    x, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    autocast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if cuda else contextlib.nullcontext

    def train_step():
        opt.zero_grad(set_to_none=True)
        with autocast():
            loss = F.cross_entropy(model(x).reshape(-1, spec.vocab), y.reshape(-1))
        loss.backward()
        opt.step()
        return loss

    meter = Meter(dev)
    for _ in range(WARMUP[size]):
        loss = train_step()
    seconds = []
    for _ in range(TIMED[size]):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            loss = train_step()
            end.record()
            end.synchronize()
            seconds.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            loss = train_step()
            seconds.append(time.perf_counter() - t0)
    measured = statistics.median(seconds)
    peak = None if meter.peak() is None else meter.peak() + meter.base  # the whole process: model included
    finite = bool(torch.isfinite(loss.detach()).item())
    flops = spec.model_flops(batch)
    if preset is None:
        note = f"no preset in simlab.sim.gpus for {name!r}: measured only (set SIMLAB_GPU_PRESET=<name>)"
        yield row(checks[0][0], how, f"{measured * 1e3:.1f} ms/step", "n/a", note, INFO if finite else FAIL)
        yield row(checks[1][0], how, mb(peak), "n/a", note, INFO)
        return
    gpu = cluster(preset, gpus=1)
    plan_ = Plan(tp=1, pp=1, dp=1, microbatch=batch, precision="mixed" if cuda else "fp32",
                 attention="flash" if cuda else "eager", overlap="none")
    model_ = evaluate_plan(spec, gpu, batch, plan_)
    peak_flops = gpu.gpu.peak_flops
    mfu = lambda s: f"MFU {100 * flops / (s * peak_flops):.0f} %"  # noqa: E731 — a one-line local helper
    spread = f"{min(seconds) * 1e3:.1f}–{max(seconds) * 1e3:.1f}"
    yield row(checks[0][0], how, f"{measured * 1e3:.1f} ms/step (median of {len(seconds)}: {spread}; {mfu(measured)})",
              f"{model_['step_seconds'] * 1e3:.1f} ms ({preset}; {mfu(model_['step_seconds'])})",
              f"measured/model {measured / model_['step_seconds']:.2f}×" + ("" if finite else "; loss not finite"),
              INFO if finite else FAIL)
    predicted = model_["bytes_per_gpu"]["total"]
    yield row(checks[1][0], how, f"peak {mb(peak)}" if peak is not None else "n/a on cpu",
              f"{mb(predicted)} (states {mb(predicted - model_['bytes_per_gpu']['activations'])})",
              "n/a" if peak is None else f"measured/model {peak / predicted:.2f}×", INFO)
