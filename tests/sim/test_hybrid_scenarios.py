"""The primer's seven 适用场景 as data: each one's advisor answer is what the primer says, the rivals the lesson
draws are real families, and `by_family` / `pipeline_trace` agree with the search and with lesson 4."""
from pathlib import Path

import numpy as np
import pytest

from simlab.sim.advisor import by_family, candidates, evaluate, evaluate_plan, family, search
from simlab.sim.hardware import cluster
from simlab.sim.hybrid import Plan
from simlab.sim.hybrid_memory import knobs
from simlab.sim.hybrid_scenarios import BY_KEY, SCENARIOS, Scenario
from simlab.sim.hybrid_time import pipeline_factor, pipeline_trace, step
from simlab.sim.mesh import Mesh
from simlab.sim.model import PRESETS
from simlab.sim.pipeline import makespan

PRIMER = {  # what the primer's sentence allows, as a test on the best plan's config
    "1gpu-fits": lambda b: family(b) == "single GPU",
    "1gpu-too-big": lambda b: family(b) == "single GPU + Offload",
    "node-fits": lambda b: (b["tp"], b["pp"]) == (1, 1) and b["dp"] == 8,  # DDP, ZeRO may help
    "node-too-big": lambda b: b["tp"] > 1 or b["pp"] > 1 or b["zero"] >= 1,
    "node-layer-too-big": lambda b: b["tp"] > 1 or b["zero"] >= 2,  # only TP or ZeRO
    "nodes-fast": lambda b: b["zero"] >= 1 or (b["tp"] > 1 and b["pp"] > 1 and b["dp"] > 1),
    "nodes-slow": lambda b: family(b) == "TP+PP+DP+ZeRO-1",
}
# where the primer names one strategy, it is the best or ties with it within the model's error
NAMED = {"node-fits": "DDP", "nodes-slow": "TP+PP+DP+ZeRO-1"}


def test_seven_scenarios_under_the_primers_three_headings():
    assert [s.key for s in SCENARIOS] == list(PRIMER) and set(BY_KEY) == set(PRIMER)
    assert [s.where for s in SCENARIOS] == ["单GPU"] * 2 + ["单机多GPU"] * 3 + ["多机多GPU"] * 2
    primer = Path(__file__).resolve().parents[3] / "shared" / "seed" / "primer-zh.txt"
    if primer.exists():  # the developers' checkout has the primer beside it: every quote is verbatim
        text = primer.read_text(encoding="utf-8")
        assert all(s.primer in text for s in SCENARIOS)


@pytest.mark.parametrize("s", SCENARIOS, ids=lambda s: s.key)
def test_the_advisor_derives_the_primers_answer(s):
    found = search(s.model, s.cluster(), s.global_batch)
    best = found["best"]
    assert best is not None and PRIMER[s.key](best["config"]), best["config"]
    if s.key in NAMED:
        tied = {family(best["config"])} | {t["family"] for t in found["ties"]}
        assert NAMED[s.key] in tied, tied


@pytest.mark.parametrize("s", SCENARIOS, ids=lambda s: s.key)
def test_the_rivals_the_lesson_draws_exist_and_lose(s):
    best = search(s.model, s.cluster(), s.global_batch)["best"]
    rivals = by_family(s.model, s.cluster(), s.global_batch, families=s.rivals)
    assert list(rivals) == list(s.rivals)
    for name, plan in rivals.items():
        assert family(plan["config"]) == name
        assert not plan["fits"] or plan["step_seconds"] >= best["step_seconds"]


def test_by_family_is_the_fastest_fitting_member_or_the_smallest():
    model, c = PRESETS["megatron-18.4b-2021"], cluster(gpus=8)
    k = candidates(model, c, 64, {})
    mem, time, fits = evaluate(model, c, 64, k, "mixed")
    out = by_family(model, c, 64)
    for name, plan in out.items():
        members = [i for i in range(len(k.tp)) if name == family(
            {"tp": int(k.tp[i]), "pp": int(k.pp[i]), "dp": int(k.dp[i]), "zero": int(k.zero[i]),
             "offload": bool(k.offload[i]), "shard": int(k.shard[i]) if k.zero[i] else 0, "cp": int(k.cp[i]),
             "ep": int(k.ep[i])})]
        fitting = [i for i in members if fits[i]]
        if fitting:
            assert plan["fits"] and plan["step_seconds"] == pytest.approx(min(time["step_seconds"][fitting]))
        else:
            assert not plan["fits"] and plan["bytes_per_gpu"]["total"] == pytest.approx(min(mem["total"][members]))
    assert not out["DDP"]["fits"] and out["DP+ZeRO-3"]["fits"]  # 18.4B × 16 B on every GPU vs sharded
    assert isinstance(next(iter(out)), str)


@pytest.mark.parametrize("schedule, v", [("1f1b", 1), ("interleaved", 2), ("gpipe", 1)])
def test_the_predicted_pipeline_is_lesson_4s_simulator_on_this_models_stage_time(schedule, v):
    model, c = PRESETS["megatron-1.7b-2021"], cluster(gpus=8)
    plan, batch = Plan(pp=4, dp=2, schedule=schedule, chunks=v), 32
    t = step(model, plan, c, batch, precision="mixed", executor=True)
    m = batch // (plan.dp * plan.microbatch)
    stage = (t["breakdown"]["compute"] + t["breakdown"]["tp_comm"] + t["breakdown"]["pp_p2p"]) / m
    trace = pipeline_trace(model, plan, c, batch, mesh=None, precision="mixed")
    assert sorted({e.rank for e in trace}) == [0, 1, 2, 3]
    assert makespan(trace) == pytest.approx(stage * float(pipeline_factor(knobs(plan, model), m)))
    mesh = Mesh(pp=4, dp=2, tp=1)
    ranks = pipeline_trace(model, plan, c, batch, mesh=mesh, precision="mixed")
    for rank in range(8):  # every rank of a stage runs its stage's timeline
        mine = [(e.name, e.start, e.end) for e in ranks if e.rank == rank]
        assert mine == [(e.name, e.start, e.end) for e in trace.for_rank(mesh.coords(rank)[0])]
    assert np.isclose(makespan(ranks), makespan(trace))


# ---- the guide's conditions (lesson 6 §4.4) -----------------------------------------------------------------

def test_fastest_of_is_the_search_with_the_group_as_a_constraint():
    from simlab.sim.advisor import fastest_of
    s = BY_KEY["node-too-big"]
    out = fastest_of(s.model, s.cluster(), s.global_batch, {"zero3": lambda k: k.zero == 3, "none": lambda k: k.tp > 8})
    found = search(s.model, s.cluster(), s.global_batch)
    assert out["best"]["config"] == found["best"]["config"] and out["best"]["ratio"] == 1
    zero3 = search(s.model, s.cluster(), s.global_batch, zero=3)["best"]
    assert out["zero3"]["config"] == zero3["config"] and out["zero3"]["family"] == family(zero3["config"])
    assert out["zero3"]["ratio"] == pytest.approx(zero3["step_seconds"] / found["best"]["step_seconds"])
    assert out["none"] is None
    fp32 = fastest_of(s.model, s.cluster(), s.global_batch, {"zero3": lambda k: k.zero == 3}, loss="fp32")
    assert fp32["zero3"]["config"] == search(s.model, s.cluster(), s.global_batch, zero=3, loss="fp32")["best"]["config"]
    assert fp32["zero3"]["config"]["loss"] == "fp32"


def test_over_pcie_changes_only_the_link_inside_a_node():
    from simlab.sim.hybrid_scenarios import PCIE, over_pcie
    c = cluster(gpus=16)
    slow = over_pcie(c)
    assert (slow.gpu.intra_bandwidth, slow.gpu.intra_alpha) == (PCIE.intra_bandwidth, PCIE.intra_alpha)
    assert slow.gpu.with_(intra_bandwidth=c.gpu.intra_bandwidth, intra_alpha=c.gpu.intra_alpha,
                          name=c.gpu.name) == c.gpu and slow.with_(gpu=c.gpu) == c


def test_gather_units_re_count_only_the_gathered_unit():
    """The advisor's row is the model's own count (every DP+ZeRO-3 plan through `evaluate_plan`); a model whose
    layer is under the advisor's cap gathers the same whole layer in both."""
    from simlab.sim.hybrid_memory import ZERO3_UNIT
    from simlab.sim.hybrid_scenarios import gather_units, largest_matrix
    s = BY_KEY["node-layer-too-big"]
    rows = {r["unit"]: r for r in gather_units(s)}
    plans = search(s.model, s.cluster(), s.global_batch, tp=1, pp=1, zero=3, offload=False, cp=1,  # DP+ZeRO-3: 3-D
                   top=10**6)["candidates"]
    plans = [p for p in plans if not p["config"]["shard"]]
    fewest = min(evaluate_plan(s.model, s.cluster(), s.global_batch, Plan(**p["config"]))["bytes_per_gpu"]["total"]
                 for p in plans)
    assert rows["advisor"]["bytes_per_gpu"] == pytest.approx(fewest)
    assert rows["matrix"]["params"] == largest_matrix(s.model) == s.model.hidden * 4 * s.model.hidden
    small = Scenario("small", "", "", "", PRESETS["megatron-1.7b-2021"], "a100-80gb", 8, 64)
    rows = {r["unit"]: r for r in gather_units(small)}
    assert small.model.layer_params < ZERO3_UNIT and rows["layer"]["bytes_per_gpu"] == rows["advisor"]["bytes_per_gpu"]
    assert rows["matrix"]["bytes_per_gpu"] < rows["layer"]["bytes_per_gpu"]
