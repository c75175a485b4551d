"""Time per step against the papers' tables — one set of constants per GPU — and each part of the model
against its closed form, by hand: the pipeline (lesson 4's simulator, equal and unequal stages), ZeRO's
rhythm, overlap (exposed + hidden = sent), the network each group crosses, GEMM shapes and micro-batches.

Published (`simlab.sim.published`): Korthikanti et al. 2022 (arXiv 2205.05198) Table 4 (one 22B layer)
and Table 5 (iteration times); Narayanan et al. 2021 (arXiv 2104.04473) Table 1. Target: within 15 %. The
runs of `simlab.sim.published_runs` are held in tests/sim/test_published.py."""
import numpy as np
import pytest

from simlab.sim import hybrid_time as ht
from simlab.sim.hardware import cluster
from simlab.sim.hybrid import Plan
from simlab.sim.hybrid_layer import OPS_LAYER, OPS_OUTSIDE, layer_seconds
from simlab.sim.hybrid_memory import knobs, stage_params
from simlab.sim.hybrid_time import pipeline_factor, step
from simlab.sim.model import PRESETS, Transformer
from simlab.sim.network import all_gather, all_reduce, reduce_scatter, send
from simlab.sim.pipeline import bubble_fraction, closed_form_bubble, makespan, simulate
from simlab.sim.pipeline_schedules import make_schedule
from simlab.sim.published import korthikanti_table_5, narayanan_table_1

TARGET = 0.15
OLD = dict(attention="eager", overlap="none")  # Megatron-LM 2021-22


@pytest.mark.parametrize("row", korthikanti_table_5() + narayanan_table_1(), ids=lambda r: r["what"])
def test_the_papers_step_times_and_throughputs(row):
    assert abs(row["error"]) <= TARGET, row


def test_the_papers_errors_do_not_lean_one_way():
    errors = [r["error"] for r in korthikanti_table_5() + narayanan_table_1()]
    assert len(errors) == 18 and abs(np.mean(errors)) < 0.05 and max(map(abs, errors)) < 0.12


def _table_4(**kw):
    """The 22B layer at TP 8, b = 4, in ms: forward (with its 2 TP collectives), backward (its 2 hide behind
    the weight-gradient GEMMs), recompute (full: 2 more collectives)."""
    c, m = cluster(gpus=8), PRESETS["megatron-22b"]
    one = layer_seconds(m, knobs(Plan(tp=8, microbatch=4, attention="eager", **kw), m), c, "mixed")
    tc = float(one["tp_collective"])
    f, b, r = (float(one[x]) for x in ("forward", "backward", "recompute"))
    return (f + 2 * tc) * 1e3, b * 1e3, (r + (2 * tc if kw.get("recompute") == "full" else 0)) * 1e3


def test_korthikanti_table_4_one_layer():
    """The two forward times are what K_ELEMENTWISE and gpus.IN_TRAINING were fitted to; the backward and
    recompute rows are predictions."""
    f, b, _ = _table_4()
    assert f == pytest.approx(7.7, rel=0.01) and b == pytest.approx(11.9, rel=TARGET)
    fs, bs, _ = _table_4(sequence_parallel=True)
    assert fs == pytest.approx(7.2, rel=0.01) and fs + bs == pytest.approx(19.0, rel=TARGET)
    assert sum(_table_4(recompute="full")) == pytest.approx(27.2, rel=TARGET)
    assert sum(_table_4(recompute="selective")) == pytest.approx(20.9, rel=TARGET)
    assert sum(_table_4(recompute="selective", sequence_parallel=True)) == pytest.approx(20.3, rel=TARGET)


@pytest.mark.parametrize("name, p, m, v", [("1f1b", 4, 8, 1), ("gpipe", 4, 8, 1), ("interleaved", 4, 8, 2),
                                           ("1f1b", 8, 64, 1), ("interleaved", 3, 9, 3)])
def test_the_pipeline_factor_is_lesson_4s_bubble(name, p, m, v):
    """m / (1 - bubble), the closed form; and the lesson-4 simulator's makespan for equal stage times."""
    model = Transformer("x", 24, 64, 4, seq=16, vocab=64)
    factor = float(pipeline_factor(knobs(Plan(pp=p, schedule=name, chunks=v), model), m))
    assert factor == pytest.approx(m / (1 - closed_form_bubble(name, p, m, v)))
    trace = simulate(make_schedule(name, p, m, v), t_f=1 / v, t_b=2 / v)  # a stage = v chunks, 1 + 2 per stage
    assert makespan(trace) == pytest.approx(3 * factor) and bubble_fraction(trace, p) == pytest.approx(
        closed_form_bubble(name, p, m, v))


@pytest.mark.parametrize("p, m, times", [(4, 8, [1, 1.2, 1.2, 1]), (8, 32, [0.9] + [1] * 6 + [1.1]),
                                         (4, 16, [1.3, 1, 1, 1]), (16, 32, [7 / 8] + [1] * 14 + [1])])
def test_unequal_stages_the_slowest_sets_the_pace(p, m, times):
    """m·t_max + (Σ t − t_max): within 5 % of lesson 4's simulator stepping 1F1B with these stage times."""
    sim = simulate(make_schedule("1f1b", p, m, 1), t_f=[t / 3 for t in times], t_b=[2 * t / 3 for t in times])
    formula = m * max(times) + sum(times) - max(times)
    assert makespan(sim) * (1 - 1e-12) <= formula <= 1.05 * makespan(sim)


def test_fewer_layers_on_the_end_stages_shorten_the_step():
    """Llama 3's split: the first stage also embeds, the last projects to 128k tokens and takes the loss."""
    m, c = PRESETS["llama3-405b"], cluster("h100-80gb", gpus=1024, inter_node_gbps=3200)
    even = step(m, Plan(tp=8, pp=16, dp=8, sequence_parallel=True), c, 512)["step_seconds"]
    ends = step(m, Plan(tp=8, pp=16, dp=8, sequence_parallel=True, stage_layers=(7,) + (8,) * 14 + (7,)), c, 512)
    assert ends["step_seconds"] < even


def test_zero_2_and_3_with_pipelining_pay_per_micro_batch():
    """The primer keeps only ZeRO-1 with PP: ZeRO-3's gathers come once per micro-batch, so on a slow
    network its DP time grows with m while ZeRO-1's does not."""
    m, slow = PRESETS["gpt3-175b"], cluster(gpus=256, inter_node_gbps=25)
    def dp(zero, batch):
        return step(m, Plan(tp=8, pp=8, dp=4, zero=zero), slow, batch)["breakdown"]["dp_comm"]
    assert dp(1, 64) == pytest.approx(dp(1, 256))  # once per step
    assert dp(3, 256) > 3.5 * dp(3, 64) > 0  # m = 16 → 64 micro-batches
    assert dp(3, 64) > 10 * dp(1, 64)


def test_hand_computed_zero_1_with_and_without_overlap():
    """ZeRO-1 over 8 DP ranks across nodes (TP 8: one GPU per node), one collective per layer: a reduce-scatter
    of fp16 gradients and an all-gather of fp16 parameters, exposed — or hidden behind a micro-batch's backward
    and forward."""
    m, c = PRESETS["gpt3-175b"], cluster(gpus=512)
    params = 12 * m.layer_params_per_rank(8) + m.embedding_params_per_rank(8)  # first stage: 12 layers + embedding
    per = lambda f, nbytes: 12 * float(f(c, 8, 8, nbytes / 12))  # noqa: E731 — a local one-liner per collective
    rs, ag = per(reduce_scatter, 2 * params), per(all_gather, 2 * params)
    plain = step(m, Plan(tp=8, pp=8, dp=8, zero=1, overlap="none", attention="eager"), c, 512)
    assert plain["breakdown"]["dp_comm"] == pytest.approx(rs + ag) and plain["hidden"]["dp_comm"] == 0
    hidden = step(m, Plan(tp=8, pp=8, dp=8, zero=1, attention="eager"), c, 512)
    one = layer_seconds(m, knobs(Plan(tp=8, pp=8, dp=8, attention="eager"), m), c, "mixed")
    fwd, bwd = 12 * float(one["forward"]), 12 * float(one["backward"])
    assert hidden["breakdown"]["dp_comm"] == pytest.approx(max(0, rs - bwd) + max(0, ag - fwd))
    assert hidden["breakdown"]["dp_comm"] + hidden["hidden"]["dp_comm"] == pytest.approx(rs + ag)
    assert hidden["breakdown"]["overlap"] == pytest.approx(hidden["hidden"]["dp_comm"] * 16 / 108)


def test_hsdp_reduce_scatters_in_a_node_and_all_reduces_across():
    m, c = PRESETS["llama2-7b"], cluster(gpus=128, inter_node_gbps=400)
    plan = Plan(dp=128, zero=3, shard=8, overlap="none")
    grads = 2 * float(stage_params(m, knobs(plan, m), 0))
    n = 32  # one collective per layer
    rs = n * float(reduce_scatter(c, 1, 8, grads / n)) + n * float(all_reduce(c, 8, 16, grads / 8 / n))
    ag = n * float(all_gather(c, 1, 8, grads / n))
    t = step(m, plan, c, 128)
    assert t["breakdown"]["dp_comm"] == pytest.approx(2 * ag + rs)  # one micro-batch: forward and backward gathers


def test_the_breakdown_adds_up_and_hidden_time_is_what_overlap_hides():
    m, c = PRESETS["megatron-18.4b-2021"], cluster(gpus=64)
    for overlap in ("none", "dp", "dp,params", "dp,params,tp"):
        for zero in (0, 1, 3):
            t = step(m, Plan(tp=2, pp=2, dp=16, zero=zero, sequence_parallel=True, overlap=overlap), c, 512)
            assert sum(t["breakdown"].values()) == pytest.approx(t["step_seconds"])
            if overlap == "none":
                assert t["hidden"]["dp_comm"] == 0
    sent = {o: step(m, Plan(tp=2, dp=32, zero=3, overlap=o), c, 512) for o in ("none", "dp,params")}
    assert sent["dp,params"]["breakdown"]["dp_comm"] < sent["none"]["breakdown"]["dp_comm"]
    assert sent["dp,params"]["breakdown"]["dp_comm"] + sent["dp,params"]["hidden"]["dp_comm"] == pytest.approx(
        sent["none"]["breakdown"]["dp_comm"])


def test_pipeline_hand_over_and_optimizer_by_hand():
    m, c = PRESETS["gpt3-175b"], cluster(gpus=512)
    t = step(m, Plan(tp=8, pp=8, dp=8, attention="eager"), c, 512)
    # PP across nodes (stages 64 ranks apart): per micro-batch (m = 64) an activation forward and a gradient
    # back, 1/t of b·s·h·2 B (Megatron's scatter/gather)
    assert t["breakdown"]["pp_p2p"] == pytest.approx(64 * 2 * float(send(c, 64, 8, 2048 * 12288 * 2 / 8)))
    params = 12 * m.layer_params_per_rank(8) + m.embedding_params_per_rank(8)
    z1 = step(m, Plan(tp=8, pp=8, dp=8, zero=1), c, 512)["breakdown"]["optimizer"]
    assert z1 == pytest.approx(params / 8 * 32 / 2039e9)  # fused Adam on the GPU's shard at HBM speed
    off = step(m, Plan(tp=8, pp=8, dp=8, zero=2, offload=True), c, 512)["breakdown"]["offload"]
    shard = params / 8
    assert off == pytest.approx(shard * 4 / 25e9 + shard / (1e9 / 8))  # PCIe both ways, CPU Adam


def test_recomputation_costs():
    c, m = cluster(gpus=8), PRESETS["megatron-22b"]
    def compute(recompute, attention):
        return step(m, Plan(tp=8, microbatch=4, recompute=recompute, attention=attention), c, 4)["breakdown"]["compute"]
    assert compute("full", "eager") / compute("none", "eager") == pytest.approx(4 / 3, rel=0.02)  # a forward more
    assert 1.01 < compute("selective", "eager") / compute("none", "eager") < 1.10  # only the attention core
    assert compute("selective", "flash") == compute("none", "flash")  # FlashAttention stores no scores to redo
    assert compute("none", "flash") < compute("none", "eager")


def test_a_tp_group_that_leaves_its_node_pays_the_network():
    m = PRESETS["gpt3-175b"]
    inside = step(m, Plan(tp=8, pp=8), cluster(gpus=64), 64)["breakdown"]["tp_comm"]
    across = step(m, Plan(tp=16, pp=4), cluster(gpus=64), 64)["breakdown"]["tp_comm"]
    assert across > 2 * inside  # 8 NICs per node carry a ring nearly as fast as NVLink: latency is the cost
    straddles = step(m, Plan(tp=6, pp=8), cluster(gpus=48), 64)["breakdown"]["tp_comm"]  # TP 6 on 8-GPU nodes
    assert straddles > 2 * step(m, Plan(tp=4, pp=8, dp=1), cluster(gpus=32), 64)["breakdown"]["tp_comm"]


def test_a_thin_tp_shard_of_a_small_model_is_slower_than_fsdp_on_one_node():
    """What practitioners find: TP 8 on an 8B model buys thin GEMMs and all-reduces; ZeRO-3 does not."""
    m, c = PRESETS["llama3-8b"], cluster("h100-80gb", gpus=8)
    fsdp = step(m, Plan(dp=8, zero=3, microbatch=2), c, 16)["step_seconds"]
    tp8 = step(m, Plan(tp=8, sequence_parallel=True, microbatch=2), c, 16)["step_seconds"]
    assert tp8 > 1.2 * fsdp


def test_a_bigger_micro_batch_runs_more_efficiently():
    """Fatter GEMMs reach more of the GPU, and each micro-batch pays the gathers of ZeRO-3 once: the usual reason
    freed memory makes training faster."""
    m, c = PRESETS["llama2-7b"].with_(seq=1024), cluster("h100-80gb", gpus=8)
    mfu = [step(m, Plan(dp=8, zero=3, microbatch=b), c, 64)["mfu"] for b in (1, 2, 4, 8)]
    assert mfu == sorted(mfu) and mfu[-1] > 1.05 * mfu[0]


def test_fixed_costs_are_counted_operations_times_the_overhead():
    """op_overhead = 0 in every datasheet preset; where it is not, each micro-batch pays the counted aten
    calls of its layers, embedding, head and loss, and the optimizer its per-tensor and own calls."""
    from dataclasses import replace
    model, plan, batch = Transformer("tiny", 4, 64, 4, seq=16, vocab=64, tied=False), Plan(microbatch=2), 8
    base = cluster("a100-80gb", gpus=1)
    slow = base.with_(gpu=replace(base.gpu, op_overhead=1e-5))
    a, b = step(model, plan, base, batch)["breakdown"], step(model, plan, slow, batch)["breakdown"]
    per_mb = model.layers * sum(OPS_LAYER.values()) + sum(OPS_OUTSIDE.values())
    assert b["compute"] - a["compute"] == pytest.approx(batch // 2 * per_mb * 1e-5)
    tensors = model.layers * ht.TENSORS_PER_LAYER + ht.TENSORS_OUTSIDE
    assert b["optimizer"] - a["optimizer"] == pytest.approx((ht.OPS_PER_TENSOR * tensors + ht.OPS_ADAM) * 1e-5)


def test_the_course_executor_overlaps_nothing_and_runs_adam_unfused():
    """executor=True: DP's reduction no longer hides behind the last backward, nor TP's backward pair
    behind the weight-gradient matmuls; Adam moves EXECUTOR_ADAM_BYTES per parameter, not ADAM_BYTES."""
    m, c = PRESETS["megatron-1.7b-2021"], cluster(gpus=8)
    dp, ours = step(m, Plan(dp=8), c, 64), step(m, Plan(dp=8), c, 64, executor=True)
    assert dp["breakdown"]["dp_comm"] < ours["breakdown"]["dp_comm"] and ours["hidden"]["dp_comm"] == 0
    assert ours["breakdown"]["optimizer"] / dp["breakdown"]["optimizer"] == pytest.approx(
        ht.EXECUTOR_ADAM_BYTES / ht.ADAM_BYTES)
    tp, tp_ours = step(m, Plan(tp=8, **OLD), c, 64), step(m, Plan(tp=8, **OLD), c, 64, executor=True)
    one = layer_seconds(m, knobs(Plan(tp=8, **OLD), m), c, "mixed")
    hidden = min(2 * float(one["tp_collective"]), float(one["wgrad"]))  # what Megatron hides per layer
    assert tp_ours["breakdown"]["tp_comm"] - tp["breakdown"]["tp_comm"] == pytest.approx(64 * m.layers * hidden)


def test_buckets_set_how_many_collectives_pay_their_latency():
    """DeepSpeed's ZeRO-3 gathers 5e7 parameters at a time and reduces 5e8; FSDP one layer at a time."""
    m, c = PRESETS["gpt3-175b"], cluster(gpus=256)
    plan = Plan(dp=256, zero=3, microbatch=1, overlap="none", attention="eager", bucket=(50_000_000, 500_000_000))
    params = float(stage_params(m, knobs(plan, m), 0))
    g, n = np.ceil(params / 5e7), np.ceil(params / 5e8)
    want = 2 * g * float(all_gather(c, 1, 256, 2 * params / g)) + n * float(reduce_scatter(c, 1, 256, 2 * params / n))
    assert step(m, plan, c, 256)["breakdown"]["dp_comm"] == pytest.approx(want)
    per_layer = step(m, plan.with_(bucket=()), c, 256)["breakdown"]["dp_comm"]
    assert per_layer < want  # fewer, bigger collectives: fewer latencies


def test_plain_pytorchs_fp32_loss_moves_its_bytes_at_hbm_speed():
    """The fp32 loss's kernels, counted by hand: cast to fp32 (2 + 4), log_softmax (3 reads + 1 write, 16), nll's
    zeroed gradient (4), log_softmax's backward (16), the cast back (4 + 2): 48 bytes per logit, where the fused
    loss moves its 4 kept bytes K_ELEMENTWISE times. llama3-8b, b = 2, s = 8192, one H100, no TP: per micro-batch."""
    from simlab.sim.hybrid_layer import K_ELEMENTWISE, output_seconds
    from simlab.sim.hybrid_memory import knobs
    model, c = PRESETS["llama3-8b"], cluster("h100-80gb", gpus=1)
    plan = Plan(microbatch=2)
    fused, fp32 = (output_seconds(model, knobs(plan.with_(loss=loss), model), c, "mixed")["logits"]
                   for loss in ("fused", "fp32"))
    logits = 2 * 8192 * 128256
    assert float(fp32 - fused) == pytest.approx(logits * (48 - 4 * K_ELEMENTWISE) / c.gpu.hbm_bandwidth)
    m = 4  # the step pays it once per micro-batch
    steps = [step(model, plan.with_(loss=loss), c, 2 * m)["step_seconds"] for loss in ("fused", "fp32")]
    assert steps[1] - steps[0] == pytest.approx(m * float(fp32 - fused))
    # chunked (torchtitan 0.3's ChunkedLossWrapper): the same kernels on an eighth of the sequence at a time
    chunked = output_seconds(model, knobs(plan.with_(loss="chunked"), model), c, "mixed")["logits"]
    assert float(chunked) == pytest.approx(float(fp32))
