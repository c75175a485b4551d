"""simlab.sim.gpus: a GPU's memory as CUDA reports it and what tensors can use, GEMM time by shape (the
curve against NVIDIA's A100 benchmark it was fitted to, hand-computed pieces, thin GEMMs slower),
FlashAttention at its published rate, and the SMs a collective takes from compute."""
import numpy as np
import pytest

from simlab.sim import gpus
from simlab.sim.gpus import GIB, GPUS, flash_seconds, gemm_seconds

# NVIDIA "CUDA 11 features revealed", Fig. 6: A100 BF16 cuBLAS, m = n = k, TFLOP/s (read off the chart)
A100_SQUARE = {512: 28, 1024: 88, 1280: 150, 2048: 197, 2560: 243, 4096: 258, 8192: 290}


def test_an_80_gb_part_holds_80_gib_less_what_cuda_keeps():
    h100 = GPUS["h100-80gb"]
    assert h100.memory / GIB == pytest.approx(79.18, abs=0.01)  # torch: total_memory=81082MB (MiB)
    assert h100.usable_memory == pytest.approx((h100.memory - 0.75 * GIB - 1 * GIB) * 0.95)
    # ml-engineering calls ~130 GiB an H200's usable budget: the reserve is of that size
    assert GPUS["h200"].usable_memory / GIB == pytest.approx(130, abs=1.5)
    assert GPUS["cpu-this-machine"].usable_memory == GPUS["cpu-this-machine"].memory  # a CPU keeps nothing aside


def test_gemm_time_is_latency_plus_compute_plus_traffic():
    a100 = GPUS["a100-80gb"]
    m, n, k = 4096, 12288, 4096
    rate = 312e12 * 0.869 * gpus.IN_TRAINING
    want = 8e-6 + 2 * m * n * k / rate + 2 * (m * k + k * n + m * n) / 2039e9
    assert gemm_seconds(a100, m, n, k) == pytest.approx(want)
    fp8 = GPUS["h100-80gb"]
    rate8 = 1979e12 * 0.709 * gpus.IN_TRAINING
    assert gemm_seconds(fp8, m, n, k, fp8=True) == pytest.approx(
        8e-6 + 2 * m * n * k / rate8 + (m * k + k * n + 2 * m * n) / 3350e9)
    assert gemm_seconds(GPUS["a100-80gb"], m, n, k, fp8=True) == gemm_seconds(a100, m, n, k)  # no FP8 on an A100
    cpu = GPUS["cpu-this-machine"]
    assert gemm_seconds(cpu, m, n, k) == 2 * m * n * k / 50e9  # a measured CPU: one rate, nothing else


def test_the_curve_follows_nvidias_a100_square_gemms():
    """The one constant fitted to it, the latency, leaves every point within 30 % and the mean within 10 % (the
    chart tops at 290 TFLOP/s, above mamf-finder's best 271: its clocks)."""
    ours = {n: 2 * n**3 / gemm_seconds(GPUS["a100-80gb"], n, n, n, in_training=False) / 1e12 for n in A100_SQUARE}
    errors = {n: ours[n] / A100_SQUARE[n] - 1 for n in A100_SQUARE}
    assert all(abs(e) < 0.30 for e in errors.values()), errors
    assert np.mean([abs(e) for e in errors.values()]) < 0.10
    assert list(ours.values()) == sorted(ours.values())  # bigger GEMMs run faster


def test_thin_gemms_run_below_the_best_rate():
    """A TP-8 shard of an 8B model's QKV projection (N = 768) reaches less of the GPU than the whole one, and a
    micro-batch of 1 × 2048 tokens less than 8 × 2048."""
    h100 = GPUS["h100-80gb"]
    def rate(m, n, k):
        return 2 * m * n * k / gemm_seconds(h100, m, n, k)
    assert rate(8192, 768, 4096) < 0.85 * rate(8192, 6144, 4096)
    assert rate(2048, 6144, 4096) < rate(16384, 6144, 4096) < h100.matmul_flops


def test_flash_attention_at_its_published_rate():
    h100 = GPUS["h100-80gb"]
    bh, s, d = 32, 4096, 128
    assert flash_seconds(h100, bh, s, d) == pytest.approx(3.5 * 4 * bh * s * s * d / 2 / 294e12)  # FA2 chart
    between = flash_seconds(GPUS["a100-80gb"], bh, 3000, 64)
    lo, hi = (3.5 * 4 * bh * 3000**2 * 64 / 2 / (r * 1e12) for r in (156, 140))  # 4k and 2k rates
    assert lo < between < hi
    assert flash_seconds(GPUS["b200"], bh, s, d) is None  # no published chart: the caller uses GEMMs


def test_a_collective_beside_compute_takes_ncclS_sms():
    assert GPUS["h100-80gb"].overlap_cost == pytest.approx(16 / 132)
    assert GPUS["a100-80gb"].overlap_cost == pytest.approx(16 / 108)
    assert GPUS["cpu-this-machine"].overlap_cost == 0


@pytest.mark.parametrize("gpu", ["a100-80gb", "a100-40gb"])
def test_fp8_on_a_part_without_fp8_tensor_cores_is_refused_in_one_line(gpu):
    """It used to run its GEMMs at the BF16 rate while counting FP8's memory savings, silently."""
    from simlab.sim.advisor import by_family, evaluate_plan, search
    from simlab.sim.hardware import cluster
    from simlab.sim.hybrid import Plan
    from simlab.sim.model import PRESETS

    c, model = cluster(gpu, 8), PRESETS["llama2-7b"]
    for ask in (lambda: search(model, c, 64, precision="fp8"), lambda: by_family(model, c, 64, precision="fp8"),
                lambda: evaluate_plan(model, c, 64, Plan(dp=8, precision="fp8"))):
        with pytest.raises(ValueError, match=rf"^precision='fp8': {gpu} has no FP8 tensor cores; these do: h100"):
            ask()
    assert search(PRESETS["llama2-7b"], cluster("h100-80gb", 8), 64, precision="fp8")["best"] is not None


def test_flash_attention_never_runs_faster_than_the_gpus_own_gemms():
    """A part given a peak below the chart's measured rate (20 TFLOP/s, `--peak-tflops 20`) runs FlashAttention at
    its GEMM rate at most: MFU stays below 1 at 16k tokens (it was 1.03)."""
    from simlab.sim.gpus import IN_TRAINING, flash_seconds
    slow = GPUS["a100-80gb"].with_(peak_flops=20e12)
    fast = flash_seconds(GPUS["a100-80gb"], 8, 16384, 128)
    assert flash_seconds(slow, 8, 16384, 128) == pytest.approx(3.5 * 4 * 8 * 16384**2 * 128 / 2
                                                               / (slow.matmul_flops * IN_TRAINING))
    assert flash_seconds(slow, 8, 16384, 128) > fast
