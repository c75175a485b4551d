"""The GPU, described once: what its datasheet says and what public benchmarks measured on it.

Teaches what limits each part of a training step on one GPU:
- **matmuls** (`gemm_seconds`): a GEMM of M×K by K×N does 2MNK FLOPs at the rate cuBLAS reaches in training
  (peak × `matmul_efficiency`, the best GEMM ml-engineering's mamf-finder measured, × IN_TRAINING, what a
  transformer layer's GEMMs reach of it), reads and writes its three matrices at HBM
  speed, and pays a fixed `gemm_latency` (launch and pipeline fill): time = latency + FLOPs/rate + bytes/HBM.
  Big GEMMs run near the best rate; thin ones (a TP-8 shard of a small model, a micro-batch of few tokens)
  do not — which is why a bigger micro-batch or a smaller TP can make training faster. The latency, 8 µs, is
  fitted to NVIDIA's A100 curve of square BF16 GEMMs (m = n = k from 512 to 8192: 28 to 290 TFLOP/s, "CUDA 11
  features revealed", Fig. 6, as reproduced in stas00/ml-engineering); the other constants are datasheets;
- **FlashAttention** (`flash_seconds`): the published forward + backward throughput of FlashAttention-2 for a
  causal head of 128 (64) features at each sequence length (Dao 2023, the repository's A100 and H100 charts;
  FLOPs counted as 3.5 × 4·b·s²·a·d/2); where no chart is published, the attention's batched GEMMs;
- **element-wise work** at HBM speed; **collectives** on NVLink (`intra_bandwidth`, NCCL's measured ring bus
  bandwidth; `nvls_bandwidth` for NVLink SHARP all-reduces) and over the network (`simlab.sim.network`);
- **memory**: an "80 GB" GPU reports 80 GiB less about 1 % to CUDA (`memory`, as torch prints it), and not all
  of that holds tensors (`usable_memory`).

Sources (stas00/ml-engineering @ 744d01e: compute/accelerator and network READMEs; NVIDIA datasheets):
dense BF16 / FP8 peak A100 312 / —, H100 and H200 989 / 1979, B200 2250 / 4500, RTX 4090 165.2 / 330.3 (FP32
accumulate); mamf-finder best BF16 GEMM A100 271.2 (86.9 %), H100 794.5 (80.3 %, "H200 is the same"), B200
1745 (77.6 %); FP8 H100 1402.6 (70.9 %), H200 1453.4 (73.4 %), B200 3432.5 (76.3 %); HBM A100-40GB 1,555 GB/s,
A100-80GB 2,039, H100 3,350, H200 4,800, B200 8,000, RTX 4090 1,008; all-reduce bus bandwidth in one node
(nccl-tests) A100 234.9 GB/s, H100/H200 ring 367–370 and NVLS 480, B200 ring 682 and NVLS 838; memory as torch
reports it: A100-40GB 42,298,834,944 B, H100 81,082 MiB, H200 143,156 MiB, B200 182,631 MiB (printed
device properties, cited in ARCHITECTURE.md).

    >>> g = GPUS["h100-80gb"]
    >>> round(g.memory / 2**30, 1), round(g.usable_memory / 2**30, 1), round(g.matmul_flops / 1e12, 1)
    (79.2, 73.6, 794.2)
    >>> [round(2 * n**3 / gemm_seconds(GPUS["a100-80gb"], n, n, n) / 1e12) for n in (512, 2048, 8192)]
    [27, 195, 242]
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

GB, GIB, MIB = 1e9, 2**30, 2**20
# What a GPU's memory cannot give to tensors: the CUDA context with PyTorch's kernels loaded (0.71 GiB on an
# H200, ml-engineering debug/pytorch.md), NCCL's buffers (nccl-tests keep 1 GB aside for them, nccl-tests#198),
# and the caching allocator's fragmentation, 5 % of the rest — which leaves an H200 the ~130 GiB ml-engineering
# calls its "usable budget".
CUDA_CONTEXT, NCCL_BUFFERS, FRAGMENTATION = 0.75 * GIB, 1 * GIB, 0.05
# NCCL runs each channel on one SM ("Each ring is run by a GPU SM", nccl#1360) and needs about 16 of them for
# peak bandwidth ("NVLSTree can achieve peak bandwidth with only 16 SMs … tree would require 32", nccl#1649):
# compute running beside a collective loses those SMs
NCCL_SMS = 16
GEMM_LATENCY = 8e-6  # fitted to NVIDIA's A100 square-GEMM curve (see the module's docstring)
# The fraction of mamf-finder's best rate a transformer layer's GEMMs reach in training: fitted, with
# `hybrid_layer.K_ELEMENTWISE`, to the two forward times of one 22B layer in Korthikanti et al. 2022's Table 4
# (7.7 ms; 7.2 ms with sequence parallelism): 0.811 of peak on an A100. EleutherAI's cookbook measured such
# GEMMs (h = 4096, 8192 tokens) at 235–253 TFLOP/s on an A100, 0.75–0.81 of peak. Every GPU gets the same ratio.
IN_TRAINING = 0.933
# FlashAttention-2 forward + backward, causal, TFLOP/s by sequence length (512 … 16k), head dim 128 and 64
FLASH_SEQ = (512, 1024, 2048, 4096, 8192, 16384)
FLASH_A100 = {128: (99, 133, 155, 173, 182, 189), 64: (88, 119, 140, 156, 165, 171)}
FLASH_H100 = {128: (163, 221, 265, 294, 308, 328), 64: (141, 192, 232, 257, 273, 284)}
# FlashAttention's Triton kernel (llm-foundry's attn_impl="triton") against FlashAttention-2, (forward, backward):
# "FlashAttention-2 is around 1.3-1.5× faster than FlashAttention in Triton in the forward pass and around 2× faster
# in the backward pass" (Dao 2023, arXiv 2307.08691, §4.1): the middle of the forward's range, and 2. The paper
# measured OpenAI's Triton FlashAttention on A100s; that the ratios hold for flash-attn's own Triton kernel (the one
# llm-foundry runs) and on other GPUs is an assumption
FLASH_TRITON_SLOWER = (1.4, 2.0)


def _flash_h100_at(peak: float) -> dict:
    """FLASH_H100 (an H100 SXM's chart, 989 TFLOP/s peak) on a part clocked for `peak`: compute-bound, it scales."""
    return {d: tuple(r * peak / 989e12 for r in rates) for d, rates in FLASH_H100.items()}


# The two ends of torchtitan's H100 ("between SXM and NVL"): dense BF16 and FP8 FLOP/s of the SXM and NVL datasheets
H100_96GB_PEAKS = {"sxm": dict(peak_flops=989e12, peak_flops_fp8=1979e12, flash=FLASH_H100),
                   "nvl": dict(peak_flops=835e12, peak_flops_fp8=1671e12, flash=_flash_h100_at(835e12))}


@dataclass(frozen=True)
class GPU:
    name: str
    memory: float  # bytes CUDA reports (an "80 GB" part: ~79.2 GiB)
    peak_flops: float  # dense FP16/BF16 tensor-core FLOP/s
    matmul_efficiency: float  # the fraction of peak the best GEMM reaches (mamf-finder)
    hbm_bandwidth: float  # bytes/s: element-wise work and a GEMM's reads and writes
    intra_bandwidth: float  # bytes/s of NCCL's ring bus bandwidth between GPUs of a node (NVLink or PCIe)
    intra_alpha: float  # seconds per ring step inside a node
    host_bandwidth: float  # bytes/s per direction host <-> GPU (PCIe): Offload's link
    source: str = ""
    # seconds of fixed cost per operation (Python, dispatch, kernel launch): negligible on a GPU for big layers,
    # dominant for small layers on a CPU; 0 in the datasheet presets, measured by `simlab calibrate`
    op_overhead: float = 0.0
    peak_flops_fp8: float = 0.0  # dense FP8 FLOP/s (0: no FP8 tensor cores)
    fp8_efficiency: float = 0.0
    nvls_bandwidth: float = 0.0  # bytes/s of an all-reduce's bus bandwidth with NVLink SHARP (0: none)
    gemm_latency: float = GEMM_LATENCY  # 0 with `roofline` off: a measured CPU "GPU" runs GEMMs at one rate
    roofline: bool = True
    flash: dict | None = None  # FlashAttention's published throughput by head dim (FLASH_SEQ lengths)
    sms: int = 0  # streaming multiprocessors: a collective running beside compute takes NCCL_SMS of them

    @property
    def overlap_cost(self) -> float:
        """The fraction of compute lost while a collective runs beside it (0 for a CPU)."""
        return NCCL_SMS / self.sms if self.sms else 0.0

    @property
    def matmul_flops(self) -> float:
        return self.peak_flops * self.matmul_efficiency

    @property
    def usable_memory(self) -> float:
        """Bytes tensors can hold: `memory` less the CUDA context, NCCL's buffers and fragmentation."""
        if not self.roofline:  # a calibrated CPU: its RAM share, nothing reserved
            return self.memory
        return (self.memory - CUDA_CONTEXT - NCCL_BUFFERS) * (1 - FRAGMENTATION)

    def with_(self, **changes) -> "GPU":
        return replace(self, **changes)


def check_precision(gpu: GPU, precision: str) -> None:
    """FP8 needs FP8 tensor cores: on a part without them (an A100, a CPU) its GEMMs would silently run at the BF16
    rate while its memory counted FP8's savings. Refused in one line naming the part."""
    if precision == "fp8" and not gpu.peak_flops_fp8:
        have = ", ".join(name for name, g in GPUS.items() if g.peak_flops_fp8)
        raise ValueError(f"precision='fp8': {gpu.name} has no FP8 tensor cores; these do: {have}")


def gemm_seconds(gpu: GPU, m, n, k, batch=1, fp8: bool = False, in_training: bool = True):
    """One (batched) GEMM (m×k)·(k×n): latency + 2mnk·batch / rate + bytes / HBM (16-bit; FP8 inputs 1 byte).
    `in_training=False`: a GEMM benchmarked alone, at mamf-finder's best rate."""
    flops = 2.0 * m * n * k * batch
    if fp8 and gpu.peak_flops_fp8:
        rate, in_bytes = gpu.peak_flops_fp8 * gpu.fp8_efficiency, 1
    else:
        rate, in_bytes = gpu.matmul_flops, 2
    if not gpu.roofline:
        return flops / rate
    rate *= IN_TRAINING if in_training else 1
    moved = batch * (in_bytes * (m * k + k * n) + 2 * m * n)
    return gpu.gemm_latency + flops / rate + moved / gpu.hbm_bandwidth


def flash_seconds(gpu: GPU, batch_heads, seq: int, head_dim: int):
    """Forward + backward of causal FlashAttention on `batch_heads` = b·a/t heads: its FLOPs (FA's count,
    3.5 × 4·bh·s²·d / 2) at the published rate for this sequence length, interpolated on log s (None where
    the GPU has no published chart)."""
    if not gpu.flash:
        return None
    curve = gpu.flash[128 if head_dim >= 128 else 64]
    # never faster than this GPU's own GEMMs: a part given a lower peak (`--peak-tflops`) keeps the chart's shape
    rate = np.minimum(np.interp(np.log2(seq), np.log2(FLASH_SEQ), curve) * 1e12, gpu.matmul_flops * IN_TRAINING)
    return 3.5 * 4 * batch_heads * seq * seq * head_dim / 2 / rate


def _gpu(name, memory, peak, eff, hbm, intra, alpha, host, source, **extra) -> GPU:
    return GPU(name, memory, peak, eff, hbm, intra, alpha, host, source, **extra)


GPUS = {
    "a100-40gb": _gpu("a100-40gb", 42_298_834_944, 312e12, 0.869, 1555 * GB, 235 * GB, 3.4e-6, 25 * GB,
                      "NVIDIA A100 SXM 40GB datasheet; mamf-finder 271.2/312; nccl-tests 234.9 GB/s",
                      flash=FLASH_A100, sms=108),
    "a100-80gb": _gpu("a100-80gb", 81_049 * MIB, 312e12, 0.869, 2039 * GB, 235 * GB, 3.4e-6, 25 * GB,
                      "NVIDIA A100 SXM 80GB datasheet; mamf-finder 271.2/312; nccl-tests 234.9 GB/s; NCCL caps "
                      "the ring at 235 GB/s on sm80 (tuning.cc)", flash=FLASH_A100, sms=108),
    "h100-80gb": _gpu("h100-80gb", 81_082 * MIB, 989e12, 0.803, 3350 * GB, 370 * GB, 3.4e-6, 55 * GB,
                      "NVIDIA H100 SXM datasheet; mamf-finder 794.5/989 (BF16), 1402.6/1979 (FP8); nccl#2140 "
                      "(ring 370, NVLS 480 GB/s); PCIe 5 55 GB/s measured on H200", peak_flops_fp8=1979e12,
                      fp8_efficiency=0.709, nvls_bandwidth=480 * GB, flash=FLASH_H100, sms=132),
    # torchtitan's benchmark H100s: "96GB HBM2e with 2.4 TB/sec", 500 W, and (its footnote 2) "the actual peak
    # TFLOPs number is between SXM and NVL, and we don't know its exact value": the midpoint of SXM's 989 (FP8
    # 1979) and NVL's 835 (1671) TFLOP/s, ±8 % (`H100_96GB_PEAKS`). Until 2026-12-04 the SXM figures, an upper
    # bound: changed after the first predictions, as `published_runs` records
    "h100-96gb-hbm2e": _gpu("h100-96gb-hbm2e", 96 * GIB * 0.99, 912e12, 0.803, 2400 * GB, 370 * GB, 3.4e-6, 55 * GB,
                            "pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md (96 GB HBM2e, 2.4 TB/s, "
                            "500 W; peak between SXM and NVL: the midpoint); otherwise as h100-80gb",
                            peak_flops_fp8=1825e12, fp8_efficiency=0.709, nvls_bandwidth=480 * GB,
                            flash=_flash_h100_at(912e12), sms=132),
    "h200": _gpu("h200", 143_156 * MIB, 989e12, 0.803, 4800 * GB, 367 * GB, 3.4e-6, 55 * GB,
                 "NVIDIA H200 SXM datasheet; mamf-finder (BF16 as H100; FP8 1453.4/1979); nccl-tests ring 367, "
                 "NVLS 480 GB/s; nvbandwidth 55.4 GB/s host", peak_flops_fp8=1979e12, fp8_efficiency=0.734,
                 nvls_bandwidth=480 * GB, flash=FLASH_H100, sms=132),
    "b200": _gpu("b200", 182_631 * MIB, 2250e12, 0.776, 8000 * GB, 682 * GB, 3.4e-6, 55 * GB,
                 "NVIDIA DGX B200 datasheet; mamf-finder 1745/2250 (BF16), 3432.5/4500 (FP8); nccl-tests ring 682, "
                 "NVLS 838 GB/s; PCIe generation disputed: Gen 5 assumed; no FlashAttention chart: GEMM model",
                 peak_flops_fp8=4500e12, fp8_efficiency=0.763, nvls_bandwidth=838 * GB, sms=148),
    "rtx-4090": _gpu("rtx-4090", 23.43 * GIB, 165.2e12, 0.869, 1008 * GB, 25 * GB, 5.7e-6, 25 * GB,
                     "NVIDIA Ada whitepaper App. A (165.2 TFLOP/s BF16, 330.3 FP8, FP32 accumulate); no NVLink: "
                     "GPUs talk over PCIe 4.0 x16 (31 GB/s per direction, ~80 % reached); GEMM efficiency assumed "
                     "as A100's; no FlashAttention chart: GEMM model", peak_flops_fp8=330.3e12, fp8_efficiency=0.869, sms=128),
    # filled in by `simlab calibrate` on the learner's machine (lesson 6); these are placeholders of the
    # right order for a 2-core laptop CPU with gloo, so the model runs before calibration
    "cpu-this-machine": _gpu("cpu-this-machine", 8 * GB, 50e9, 1.0, 10 * GB, 1 * GB, 2e-4, 10 * GB,
                             "placeholder until calibrated on this machine", gemm_latency=0.0, roofline=False),
}
