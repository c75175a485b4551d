"""Memory per GPU for 3-D plans: Korthikanti et al. 2022's Figure 1 and Table 2, the ZeRO paper's model
states, the pipeline schedules' in-flight micro-batches, FlashAttention, no dropout, FP8, HSDP, unequal stages,
and the GPU's usable memory."""
import numpy as np
import pytest

from simlab.sim.gpus import GPUS
from simlab.sim.hybrid import Plan
from simlab.sim.hybrid_memory import knobs, layer_activation_bytes, per_gpu
from simlab.sim.memory import per_gpu_bytes
from simlab.sim.model import PRESETS, Transformer
from simlab.sim.published import KORTHIKANTI_RUNS, korthikanti_figure_1

GIB = 2**30


@pytest.mark.parametrize("row", korthikanti_figure_1(), ids=lambda r: r["what"])
def test_korthikanti_figure_1(row):
    """Activations exactly; the layers' states within 0.1 %: the figure counts 12Lh²/t, we add the biases and
    the norms, which tensor parallelism replicates (≈ 55/(12h) more)."""
    assert abs(row["error"]) <= (0 if "activations" in row["what"] else 1e-3)


@pytest.mark.parametrize("size", list(KORTHIKANTI_RUNS))
def test_the_baseline_does_not_fit_and_the_present_work_does(size):
    name, plan, batch, _ = KORTHIKANTI_RUNS[size]
    plan = plan.with_(precision="mixed-fp32-grads")
    base = per_gpu(PRESETS[name], plan, batch)
    work = per_gpu(PRESETS[name], plan.with_(sequence_parallel=True, recompute="selective"), batch)
    usable = GPUS["a100-80gb"].usable_memory
    assert base["total"] > usable > work["total"]  # "the baseline is above the 80GB memory": the paper's point
    assert 0 < base["activations"] - base["layer_activations"] < 0.01 * base["layer_activations"]  # embedding terms


def _sbh(b=1, s=2048, h=12288):
    return s * b * h


@pytest.mark.parametrize("t", [1, 2, 8])
def test_korthikanti_table_2_per_layer(t):
    m = PRESETS["gpt3-175b"]  # a = 96, s = 2048, h = 12288: 5as/h = 80
    sbh, as_h = _sbh(), 5 * 96 * 2048 / 12288
    cases = {(False, "none"): sbh * (10 + 24 / t + as_h / t), (True, "none"): sbh * (34 / t + as_h / t),
             (False, "selective"): sbh * (10 + 24 / t), (True, "selective"): sbh * 34 / t,
             (False, "full"): 2 * sbh}
    for (sp, rec), want in cases.items():
        if sp and t == 1:
            continue
        plan = Plan(tp=t, sequence_parallel=sp, recompute=rec, attention="eager")
        got = layer_activation_bytes(m, knobs(plan, m))
        assert float(got) == pytest.approx(want if not (sp and rec == "full") else want / t, rel=1e-12), (sp, rec)
    assert as_h == 80  # "5as/h = 80" for GPT-3, as the paper says


def test_flash_attention_keeps_selective_recomputations_memory_without_recomputing():
    """No s² scores, only a row's log-sum-exp (4 bytes per head and token); selective has nothing left to drop."""
    m, sbh = PRESETS["gpt3-175b"], _sbh()
    flash = {r: float(layer_activation_bytes(m, knobs(Plan(tp=8, recompute=r), m))) for r in ("none", "selective")}
    eager = float(layer_activation_bytes(m, knobs(Plan(tp=8, recompute="selective", attention="eager"), m)))
    assert flash["none"] == flash["selective"] == pytest.approx(eager + 4 * 96 * 2048 / 8)
    assert flash["none"] == pytest.approx(sbh * (10 + 24 / 8) + 4 * 96 * 2048 / 8)


def test_no_dropout_drops_its_masks_and_fp8_halves_the_gemm_inputs():
    llama = PRESETS["llama2-7b"]  # no dropout, gated, 32 heads
    sbh, h, f = 4096 * 4096, 4096, 11008
    split = 4 + 4 + 6 * f / h  # kv = h: 4 + 4·kv/h
    plan = Plan(attention="eager")
    assert float(layer_activation_bytes(llama, knobs(plan, llama))) == pytest.approx(
        sbh * (8 + split + 2 * 32 * 4096 / h))  # the softmax's output alone, 2as/h
    fp8 = float(layer_activation_bytes(llama, knobs(plan, llama), fp8=True))
    assert fp8 == pytest.approx(sbh * (6 + split - 1 - f / h + 2 * 32 * 4096 / h))  # 4 GEMM inputs in one byte


@pytest.mark.parametrize("name", ["gpt3-175b", "llama2-70b", "megatron-1.7b-2021"])
@pytest.mark.parametrize("dp, zero", [(1, 0), (64, 0), (64, 1), (64, 2), (64, 3), (1000, 3)])
def test_model_states_are_lesson_3s_zero_model(name, dp, zero):
    """Without TP or PP, the states are `simlab.sim.memory.per_gpu_bytes` of the whole model (the ZeRO
    paper's Figure 1 model, tested exactly there), plus ZeRO-3's one gathered layer."""
    m = PRESETS[name]
    got = per_gpu(m, Plan(dp=dp, zero=zero, overlap="none"), global_batch=dp)
    want = per_gpu_bytes(m.params, dp, zero, precision="mixed")
    gathered = min(m.layer_params, 1e9) * 4 if zero == 3 else 0  # weights and gradients of the unit at work, 2 + 2 B
    # (GPT-3's 1.8e9-parameter layer is gathered 1e9 parameters at a time: DeepSpeed's stage3_max_live_parameters)
    assert (got["params"], got["grads"], got["optimizer"]) == (want["params"] + gathered, want["grads"],
                                                               want["optimizer"])


def test_offload_moves_gradients_and_optimizer_to_the_host():
    m = PRESETS["llama2-7b"]
    on, off = (per_gpu(m, Plan(dp=1, zero=2, offload=o), global_batch=1) for o in (False, True))
    assert off["grads"] == off["optimizer"] == 0 and off["params"] == on["params"] == 2 * m.params
    assert off["cpu"] == 16 * m.params  # fp32 master, m, v and gradient on the host (lesson 3's 16 B)


def test_pipeline_schedules_hold_different_numbers_of_micro_batches():
    m = Transformer("x", layers=8, hidden=1024, heads=16, seq=1024, vocab=1000)
    act = {s: per_gpu(m, Plan(pp=4, dp=1, schedule=s, chunks=2 if s == "interleaved" else 1, attention="eager"),
                      global_batch=16)["layer_activations"] for s in ("gpipe", "1f1b", "interleaved")}
    one = float(layer_activation_bytes(m, knobs(Plan(pp=4, attention="eager"), m)))
    assert act["gpipe"] == 16 * 2 * one  # m = 16 micro-batches of the stage's 2 layers
    assert act["1f1b"] == 4 * 2 * one  # p = 4: L layers' worth whatever p is
    assert act["interleaved"] == pytest.approx(act["1f1b"] * (1 + 3 / 8))  # ×(1 + (p-1)/(pv))


def test_full_recompute_keeps_inputs_and_one_working_layer_and_fp32_doubles():
    m = PRESETS["megatron-22b"]
    full = per_gpu(m, Plan(tp=8, microbatch=4, recompute="full", attention="eager"), 4)
    sbh = 2048 * 4 * 6144
    assert full["layer_activations"] == 48 * 2 * sbh
    working = float(layer_activation_bytes(m, knobs(Plan(tp=8, microbatch=4, attention="eager"), m)))
    extra = sbh / 8 + 4 * sbh / 8 * (1 + 51200 / 6144)  # embedding dropout; without PP the final norm, fp32 logits
    assert full["activations"] == pytest.approx(48 * 2 * sbh + working + extra)
    fp32 = per_gpu(m, Plan(tp=8, microbatch=4, recompute="full", precision="fp32", attention="eager"), 4)
    logits = 4 * sbh / 8 * (1 + 51200 / 6144)  # Korthikanti: bytes, fp32 whatever the precision
    assert fp32["activations"] == pytest.approx(2 * (full["activations"] - logits) + logits)


def test_arrays_and_plans_agree():
    m = PRESETS["gpt3-175b"]
    plans = [Plan(tp=8, pp=8, dp=16, zero=z, recompute=r) for z in (0, 1, 3) for r in ("none", "full")]
    arrays = knobs(plans[0], m)._make(np.array([getattr(knobs(p, m), f) for p in plans])
                                      for f in knobs(plans[0], m)._fields)
    together = per_gpu(m, arrays, 1024, precision="mixed")
    for i, p in enumerate(plans):
        assert together["total"][i] == per_gpu(m, p, 1024)["total"]


def test_hsdp_shards_over_one_nodes_part_only():
    m = PRESETS["llama2-7b"]
    full, node = (per_gpu(m, Plan(dp=128, zero=3, shard=s, overlap="none"), 128) for s in (0, 8))
    assert node["optimizer"] == pytest.approx(16 * full["optimizer"], rel=1e-6)  # sharded over 8, not 128
    assert node["grads"] == pytest.approx(16 * full["grads"], rel=1e-6)


def test_the_end_stages_with_fewer_layers_hold_less_and_the_fullest_gpu_is_the_one_that_must_fit():
    """Llama 3's split: one layer fewer on the two stages that also hold the embedding and the output layer."""
    m = PRESETS["llama3-405b"]
    even = per_gpu(m, Plan(tp=8, pp=16, dp=8, microbatch=1, sequence_parallel=True), 2048)
    ends = per_gpu(m, Plan(tp=8, pp=16, dp=8, microbatch=1, sequence_parallel=True,
                           stage_layers=(7,) + (8,) * 14 + (7,)), 2048)
    assert ends["layer_activations"] == pytest.approx(even["layer_activations"] * 7 / 8)
    assert ends["total"] < even["total"]
    # 1F1B: stage r holds p − r micro-batches; the middle stage 1 (8 layers × 15) or the first (7 × 16) is fullest
    assert ends["stage"] in (0, 1)


def test_the_last_stage_can_be_the_fullest():
    """A huge vocabulary and one micro-batch in flight: the output layer's weights and fp32 logits win."""
    m = PRESETS["bloom-176b"].with_(vocab=2_000_000)
    out = per_gpu(m, Plan(tp=1, pp=8, dp=1, recompute="full", attention="eager"), 8)
    assert out["stage"] == 2


def test_zero3_gathers_a_layer_or_1e9_parameters_but_never_less_than_one_matrix():
    """A parameter is gathered whole (DeepSpeed's stage3_max_live_parameters limits how many are live, it does not
    cut one): the unit is min(layer, max(1e9, largest matrix)) on a GPU of t, by hand for a wide layer."""
    from simlab.sim.hybrid_memory import ZERO3_UNIT, zero3_unit
    from simlab.sim.model import Transformer

    wide = Transformer("wide", layers=2, hidden=32768, heads=64, seq=2048, vocab=1024)  # fc1: 32768 × 131072
    fc1 = 32768 * 4 * 32768
    assert wide.largest_matrix == fc1 == 4_294_967_296 > ZERO3_UNIT
    assert zero3_unit(wide, 1) == fc1  # a layer of 12.9e9: the 1e9 cap would cut fc1, which no framework does
    assert zero3_unit(wide, 8) == ZERO3_UNIT  # a TP-8 shard of fc1 is 0.54e9: the cap binds again
    small = Transformer("small", layers=2, hidden=1024, heads=16, seq=2048, vocab=1024)
    assert zero3_unit(small, 1) == small.layer_params_per_rank(1) < ZERO3_UNIT  # a whole small layer


def test_activations_stay_linear_in_the_micro_batch_up_to_the_largest_batch():
    """b·s·h once ran in int64 and wrapped past 2⁶³: llama2-7b with 2⁴⁰ sequences per micro-batch came out
    "28.9 GB over" a GPU instead of ~2·10¹³ GB. Floats keep it linear in b."""
    from simlab.sim.hybrid import Plan
    from simlab.sim.hybrid_memory import per_gpu
    from simlab.sim.model import preset
    model = preset("llama2-7b")
    one = per_gpu(model, Plan(microbatch=1), global_batch=1)["activations"]
    huge = per_gpu(model, Plan(microbatch=2 ** 40), global_batch=2 ** 40)["activations"]
    assert huge > 0 and abs(huge / one / 2 ** 40 - 1) < 0.05  # the logits' share is per micro-batch too


def test_plain_pytorchs_fp32_loss_holds_more_per_logit_on_the_last_stage_only():
    """torchtitan's loss, cross_entropy(logits.float()), holds log_softmax's fp32 output and, in its backward, the
    incoming and outgoing fp32 gradients: 12 bytes per logit where a fused loss holds 4; with the vocabulary split
    over t it runs as torch's loss_parallel, 16. By hand: llama3-8b, b = 2, s = 8192, t = 1 and 2: 8 (12) bytes more
    per logit, 16384 · 128256 / t logits, on the GPU holding the output layer (the last stage) and nowhere else."""
    from simlab.sim.hybrid_memory import FIRST, LAST, MIDDLE, activations
    model = PRESETS["llama3-8b"]
    for tp, pp in ((1, 1), (2, 1), (2, 4)):
        by_hand = (8 if tp == 1 else 12) * 2 * 8192 * 128256 / tp
        plan = Plan(tp=tp, pp=pp, dp=8 // pp // tp, microbatch=2)
        m = 16 // plan.dp // 2
        more = {s: float(activations(model, knobs(plan.with_(loss="fp32"), model), m, "mixed", s)["activations"]
                         - activations(model, knobs(plan, model), m, "mixed", s)["activations"])
                for s in (FIRST, MIDDLE, LAST)}
        assert more == ({FIRST: by_hand, MIDDLE: 0, LAST: by_hand} if pp == 1 else {FIRST: 0, MIDDLE: 0, LAST: by_hand})
        if pp == 1:  # one stage: the GPU that must fit holds all of it
            assert (per_gpu(model, plan.with_(loss="fp32"), 16)["total"] - per_gpu(model, plan, 16)["total"]
                    == pytest.approx(by_hand))


def test_torchtitans_chunked_loss_holds_the_fp32_loss_for_an_eighth_of_the_sequence():
    """torchtitan 0.3's ChunkedLossWrapper runs the output layer and the fp32 loss on 8 slices of the sequence in
    turn, each slice's backward before the next one's forward: 12 bytes per logit of one slice (16 under TP, its
    vocab-parallel loss), 1.5 (2) per logit of the micro-batch. By hand: llama3-8b, b = 2, s = 8192, t = 1 and 2."""
    model = PRESETS["llama3-8b"]
    for tp, whole in ((1, 12), (2, 16)):
        logits = 2 * 8192 * 128256 / tp
        plan = Plan(tp=tp, dp=8 // tp, microbatch=2)
        total = {loss: per_gpu(model, plan.with_(loss=loss), 16)["total"] for loss in ("fused", "fp32", "chunked")}
        assert total["fp32"] - total["chunked"] == pytest.approx(logits * (whole - whole / 8))
        assert total["fused"] - total["chunked"] == pytest.approx(logits * (4 - whole / 8))


def test_bf16_optimizer_states_are_two_bytes_each_and_shard_as_zero_says():
    """NeMo's distributed_fused_adam with dtype bf16: weights 2, gradients 2, master copy + m + v 2 + 2 + 2; ZeRO-1
    over d = 4 shards the 6 bytes of the optimizer only."""
    model = PRESETS["llama2-7b"]
    plan = Plan(dp=4, zero=1, precision="bf16-optimizer")
    mem = per_gpu(model, plan, 4)
    assert (mem["params"], mem["grads"], mem["optimizer"]) == (2 * model.params, 2 * model.params,
                                                               6 * -(-model.params // 4))


def test_the_chunked_loss_needs_each_ranks_sequence_in_eight_equal_chunks():
    """torchtitan's ChunkedLossWrapper splits each rank's sequence (seq/cp) into 8: a plan, a search and the CP sizes
    the search tries all keep to it, refused in one line where nothing can."""
    from simlab.sim.advisor import search
    from simlab.sim.advisor_space import context_sizes
    from simlab.sim.hardware import cluster
    from simlab.sim.hybrid import check_plan
    model = PRESETS["llama3-8b"]
    with pytest.raises(ValueError, match=r"^loss='chunked': each rank's sequence \(seq/cp = 8196/1\)"):
        check_plan(model.with_(seq=8196), Plan(dp=8, loss="chunked"), 8, 16)
    with pytest.raises(ValueError, match=r"^loss='chunked': each rank's sequence \(seq/cp = 48/4\)"):
        check_plan(model.with_(seq=48), Plan(dp=2, cp=4, loss="chunked"), 8, 2)  # 12 tokens a rank
    check_plan(model.with_(seq=48), Plan(dp=4, cp=2, loss="chunked"), 8, 4)  # 24 tokens a rank: 8 chunks of 3
    assert context_sizes(model.with_(seq=48), 8, 1, "ring") == [1, 2, 4, 8]
    assert context_sizes(model.with_(seq=48), 8, 1, "ring", "chunked") == [1, 2]  # 48/4 = 12 does not divide by 8
    with pytest.raises(ValueError, match=r"^loss='chunked'"):
        search(model.with_(seq=8196), cluster("h100-80gb", gpus=8), 16, loss="chunked")
