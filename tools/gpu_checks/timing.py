"""The timing group: one real training step of a GPT in the time model's shape (1.1 B parameters on a GPU, bf16
autocast, SDPA, fused AdamW), timed with CUDA events against `simlab.sim.advisor.evaluate_plan`'s prediction for
the GPU's preset, and that step's peak memory against the advisor's bytes per GPU (and the allocator's reserved
peak against the model's fragmentation allowance); then that step's loss alone — plain PyTorch's cross-entropy on
upcast logits, `Plan.loss = "fp32"` — its peak bytes and time per logit against the model's. All reported, not
tested: the ratios are measurements."""
from __future__ import annotations

import contextlib
import os
import statistics

import torch

from .measure import Meter, time_calls
from .plan import checks_of
from .report import FAIL, INFO, mb, row

GPT_STEP = {"full": dict(layers=20, hidden=2048, heads=16, seq=2048, vocab=50304),
            "tiny": dict(layers=2, hidden=64, heads=4, seq=32, vocab=256)}
WARMUP, TIMED = {"full": 3, "tiny": 1}, {"full": 5, "tiny": 2}
# Autocast runs cross_entropy in fp32 (it is on autocast's fp32 list): the step's loss is plain PyTorch's on upcast
# logits, what torchtitan's train.py writes out, so the step is planned with `Plan.loss = "fp32"`
STEP_LOSS = "fp32"


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
    from simlab.sim.gpus import FRAGMENTATION
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
    seconds, loss = time_calls(train_step, cuda, WARMUP[size], TIMED[size])
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
                 attention="flash" if cuda else "eager", overlap="none", loss=STEP_LOSS)
    model_ = evaluate_plan(spec, gpu, batch, plan_)
    peak_flops = gpu.gpu.peak_flops
    mfu = lambda s: f"MFU {100 * flops / (s * peak_flops):.0f} %"  # noqa: E731 — a one-line local helper
    spread = f"{min(seconds) * 1e3:.1f}–{max(seconds) * 1e3:.1f}"
    yield row(checks[0][0], how, f"{measured * 1e3:.1f} ms/step (median of {len(seconds)}: {spread}; {mfu(measured)})",
              f"{model_['step_seconds'] * 1e3:.1f} ms ({preset}; {mfu(model_['step_seconds'])})",
              f"measured/model {measured / model_['step_seconds']:.2f}×" + ("" if finite else "; loss not finite"),
              INFO if finite else FAIL)
    predicted = model_["bytes_per_gpu"]["total"]
    reserved = torch.cuda.max_memory_reserved() if cuda else None
    allowance = 1 / (1 - FRAGMENTATION)
    yield row(checks[1][0], how, f"peak {mb(peak)}, reserved {mb(reserved)}" if peak is not None else "n/a on cpu",
              f"{mb(predicted)} (states {mb(predicted - model_['bytes_per_gpu']['activations'])})"
              + (f"; reserved ≤ {allowance:.2f}× peak" if cuda else ""), "n/a" if peak is None else
              f"measured/model {peak / predicted:.2f}×; reserved/peak {reserved / peak:.2f}×", INFO)
    yield loss_row(checks[2], dev, batch * spec.seq, spec.vocab, spec.hidden, gpu.gpu, size)
    yield gemm_row(checks[3], dev, gpu.gpu, size)


# (m, n, k) of single GEMMs, thin to square: squares (NVIDIA's curve the latency was fitted to, on an A100), then
# Llama 3 8B's forward GEMMs on 16384 tokens whole (QKV, w1, w2) and as TP-8 shards (what issue 21's "TP8 for an
# 8B model" turns on); tiny on the CPU
GEMM_SHAPES = {"full": ((1024, 1024, 1024), (4096, 4096, 4096), (8192, 8192, 8192), (16384, 6144, 4096),
                        (16384, 14336, 4096), (16384, 4096, 14336), (16384, 768, 4096), (16384, 1792, 4096),
                        (16384, 4096, 1792)),
               "tiny": ((64, 64, 64), (128, 96, 64))}


def gemm_row(check, dev, gpu, size: str) -> dict:
    """Single bf16 GEMMs timed alone with CUDA events against `gpus.gemm_seconds(..., in_training=False)`: the
    roofline (latency + FLOPs at mamf-finder's best rate + bytes at HBM speed) on this GPU, shape by shape."""
    from simlab.sim.gpus import gemm_seconds
    cuda = dev.type == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    ratios, cells = [], []
    for m, n, k in GEMM_SHAPES[size]:
        a, b = torch.randn(m, k, device=dev, dtype=dtype), torch.randn(k, n, device=dev, dtype=dtype)
        seconds, _ = time_calls(lambda: a @ b, cuda, WARMUP[size], 10)  # noqa: B023 — called at once, in this loop
        measured, modelled = statistics.median(seconds), gemm_seconds(gpu, m, n, k, in_training=False)
        ratios.append(measured / modelled)
        cells.append(f"{m}×{n}×{k} {2 * m * n * k / measured / 1e12:.3g}/{2 * m * n * k / modelled / 1e12:.3g}")
    return row(check[0], f"{len(cells)} GEMMs in {str(dtype)[6:]}, median of 10 each",
               "TFLOP/s measured/model: " + ", ".join(cells), f"gpus.gemm_seconds ({gpu.name})",
               f"measured/model {min(ratios):.2f}–{max(ratios):.2f}×", INFO)


def loss_row(check, dev, tokens: int, vocab: int, hidden: int, gpu, size: str) -> dict:
    """The fp32 loss alone, as the step runs it: logits = hidden · Wᵀ in bf16, then cross_entropy(logits.float()).
    Bytes: the peak above the inputs, per logit, against `hybrid_loss.LOSS_BYTES` (log_softmax's fp32 output and,
    in its backward, two fp32 gradients of that size). Time: forward + backward of the loss on a bf16 logits leaf,
    against `hybrid_loss.FP32_HBM_BYTES` per logit at the GPU's HBM speed (the matmul is the time model's GEMM)."""
    from torch.nn import functional as F

    from simlab.sim.hybrid import LOSSES
    from simlab.sim.hybrid_loss import FP32_HBM_BYTES, LOSS_BYTES
    cuda, which = dev.type == "cuda", LOSSES.index(STEP_LOSS)
    dtype = torch.bfloat16 if cuda else torch.float32
    gen = torch.Generator().manual_seed(1)
    h = torch.randn(tokens, hidden, generator=gen).to(dev, dtype).requires_grad_()  # (N, h)
    w = (torch.randn(vocab, hidden, generator=gen) * hidden ** -0.5).to(dev, dtype)  # (V, h)
    y = torch.randint(0, vocab, (tokens,), generator=gen).to(dev)  # (N,)
    meter = Meter(dev)
    F.cross_entropy((h @ w.T).float(), y).backward()  # no name keeps the (N, V) logits alive
    per_logit = None if meter.peak() is None else meter.peak() / (tokens * vocab)
    logits = (h.detach() @ w.T).requires_grad_()  # (N, V) bf16: the loss's input, as the output layer hands it over
    seconds, _ = time_calls(lambda: F.cross_entropy(logits.float(), y).backward(), cuda, WARMUP[size], TIMED[size],
                            before=lambda: setattr(logits, "grad", None))
    measured = statistics.median(seconds)
    modelled = FP32_HBM_BYTES * tokens * vocab / gpu.hbm_bandwidth
    how = f"{tokens} tokens × {vocab} logits in {str(dtype)[6:]} → cross_entropy(logits.float())"
    return row(check[0], how, ("bytes n/a on cpu; " if per_logit is None else f"peak {per_logit:.2f} B/logit; ")
               + f"{measured * 1e3:.2f} ms (median of {len(seconds)})",
               f"{LOSS_BYTES[which]} B/logit; {modelled * 1e3:.2f} ms ({FP32_HBM_BYTES} B/logit at "
               f"{gpu.hbm_bandwidth / 1e9:,.0f} GB/s)",
               ("" if per_logit is None else f"bytes measured/model {per_logit / LOSS_BYTES[which]:.2f}×; ")
               + f"time measured/model {measured / modelled:.2f}×", INFO)
