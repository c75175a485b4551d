"""FlashAttention's Triton kernel (`attention="flash-triton"`, llm-foundry's attn_impl="triton"): FlashAttention's
memory, at the speed FlashAttention-2's paper measured against it — held here to the chart and the paper's ratios
by hand, not to the code's own arithmetic."""
import numpy as np
import pytest

from simlab.sim.gpus import FLASH_A100, FLASH_SEQ, GPUS
from simlab.sim.hybrid import Plan
from simlab.sim.hybrid_layer import attention_core
from simlab.sim.hybrid_memory import knobs, per_gpu
from simlab.sim.model import PRESETS
from simlab.sim.training_step_flops import step_flops

MODEL = PRESETS["mpt-7b"]  # 32 heads of 128, sequence 2048: a point of FlashAttention-2's published chart


def test_the_triton_kernel_is_the_papers_ratios_slower_than_flashattention_2_by_hand():
    """FA2's A100 chart at s = 2048, head dim 128: 155 TFLOP/s forward + backward, over FA's FLOP count
    3.5 × 4·b·a·s²·d / 2; the forward is 1/3.5 of it, the backward 2.5/3.5. The paper (Dao 2023 §4.1): FA2 is
    "around 1.3-1.5× faster than FlashAttention in Triton in the forward pass and around 2× faster in the backward"."""
    assert FLASH_SEQ[2] == 2048 and FLASH_A100[128][2] == 155
    b, a, s, d = 2, 32, 2048, 128
    total = 3.5 * 4 * b * a * s * s * d / 2 / 155e12
    gpu = GPUS["a100-80gb"]
    for attention, (f, bw) in (("flash", (1, 1)), ("flash-triton", (1.4, 2.0))):
        fwd, bwd = attention_core(MODEL, knobs(Plan(microbatch=b, attention=attention), MODEL), gpu)
        assert float(fwd) == pytest.approx(total / 3.5 * f, rel=1e-12)
        assert float(bwd) == pytest.approx(total * 2.5 / 3.5 * bw, rel=1e-12)


def test_the_triton_kernel_keeps_what_flashattention_keeps():
    for plan in (Plan(dp=8, zero=3, recompute="none"), Plan(dp=8, zero=3, recompute="full"), Plan(tp=2, dp=4)):
        flash, triton = (per_gpu(MODEL, plan.with_(attention=a), 64) for a in ("flash", "flash-triton"))
        assert flash == triton


def test_lesson_5b_runs_torchs_own_kernels_and_refuses_the_triton_one_in_one_line():
    with pytest.raises(ValueError) as err:
        step_flops(MODEL, 8, attention="flash-triton")
    assert str(err.value).startswith("attention='flash-triton'") and "\n" not in str(err.value)


def test_the_advisor_searches_with_the_triton_kernel_and_never_proposes_selective_under_it():
    from simlab.sim.advisor import search
    from simlab.sim.hardware import cluster
    found = search(MODEL, cluster("a100-80gb", gpus=8), 64, attention="flash-triton", top=50)
    configs = [c["config"] for c in found["candidates"]]
    assert all(c["attention"] == "flash-triton" for c in configs)
    assert not any(c["recompute"] == "selective" for c in configs)  # nothing to recompute under a fused kernel
    flash = search(MODEL, cluster("a100-80gb", gpus=8), 64, attention="flash")["best"]
    assert found["best"]["step_seconds"] > flash["step_seconds"]
    assert np.isfinite(found["best"]["step_seconds"])


@pytest.mark.parametrize("attention", ["eager", "flash-triton"])
def test_context_parallelism_runs_only_inside_flashattention(attention):
    """Megatron and torch run CP inside their own fused kernels: neither eager attention nor the Triton kernel takes
    it — refused in one line by the plan's check, by a search that fixes cp, and never proposed by a free search
    (which did propose cp = 4 under eager attention at 128K before)."""
    from simlab.sim.advisor import search
    from simlab.sim.hardware import cluster
    from simlab.sim.hybrid import check_plan
    long = PRESETS["llama3-8b"].with_(seq=131072)
    c = cluster("h100-80gb", gpus=16)
    for call in (lambda: check_plan(long, Plan(cp=4, dp=4, attention=attention), 16, 16),
                 lambda: search(long, c, 16, attention=attention, cp=4)):
        with pytest.raises(ValueError) as err:
            call()
        assert str(err.value).startswith("cp=4: context parallelism needs attention='flash'")
        assert "\n" not in str(err.value) and repr(attention) in str(err.value)
    free = search(long, c, 16, attention=attention, top=200)
    assert {p["config"]["cp"] for p in free["candidates"]} == {1}
    assert max(p["config"]["cp"] for p in search(long, c, 16, attention="flash", top=200)["candidates"]) > 1


def test_lesson_5b_and_the_executor_offer_the_same_kernels():
    """Lesson 5b's model (`LAYER_ATTENTION`) prices the kernels its real layer runs (`exec.training_step.ATTENTION`)."""
    from simlab.exec.training_step import ATTENTION as EXECUTED
    from simlab.sim.hybrid import ATTENTION, LAYER_ATTENTION
    assert LAYER_ATTENTION == EXECUTED and set(ATTENTION) - set(LAYER_ATTENTION) == {"flash-triton"}


def test_no_export_is_searched_for_a_kernel_no_framework_runs():
    from simlab.export.expressible import best_expressible
    from simlab.sim.hardware import cluster
    with pytest.raises(ValueError) as err:
        best_expressible("megatron", PRESETS["llama3-8b"], cluster("h100-80gb", gpus=8), 16, attention="flash-triton")
    assert str(err.value).startswith("attention='flash-triton':") and "\n" not in str(err.value)
