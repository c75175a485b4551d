"""Lesson 6 reads the advisor's answers in words: every winner, tie, rejection and mechanism its prose names is
held here to what the advisor prints for that scenario, so the text cannot drift from the output."""
import json
import re
from pathlib import Path

import pytest

from simlab.sim.advisor import by_family, evaluate_plan, family, search
from simlab.sim.advisor_explain import DECIDES, MODEL_ERROR, MODERN
from simlab.sim.hardware import cluster
from simlab.sim.hybrid import Plan
from simlab.sim.hybrid_memory import ZERO3_UNIT
from simlab.sim.hybrid_scenarios import (
    BY_KEY,
    GUIDE,
    HSDP_CASE,
    SCENARIOS,
    WIDE,
    flip,
    gather_units,
    hsdp_comparison,
    largest_matrix,
    link_comparison,
    network_sweep,
    zero1_for_memory,
)
from simlab.sim.model import PRESETS
from simlab.sim.published_runs import RUNS

LESSON = Path(__file__).resolve().parents[2] / "notebooks" / "06_choosing_a_strategy.ipynb"
CELLS = {c["id"]: "".join(c["source"]) for c in json.loads(LESSON.read_text(encoding="utf-8"))["cells"]}


@pytest.fixture(scope="module")
def answers():
    out = {}
    for key, s in BY_KEY.items():
        found = search(s.model, s.cluster(), s.global_batch)
        found["rivals"] = by_family(s.model, s.cluster(), s.global_batch, families=s.rivals)
        found["tied"] = {t["family"]: t for t in found["ties"]}
        out[key] = found
    return out


def _line(found, family_name):
    return next(line for line in found["explanation"] if line.startswith(f"{family_name}: "))


def test_one_gpu(answers):
    assert "Offload only adds PCIe traffic" in CELLS["l6-1gpu-read"]
    fits = answers["1gpu-fits"]
    assert family(fits["best"]["config"]) == "single GPU"
    assert "slower, mostly offload" in _line(fits, "single GPU + Offload")
    big = answers["1gpu-too-big"]
    assert family(big["best"]["config"]) == "single GPU + Offload"
    assert any(reason.startswith("single GPU: ") and "usable" in reason for reason in big["rejected"])
    assert big["best"]["breakdown"]["offload"] > 0


def test_one_node_and_the_model_fits(answers):
    text, found = CELLS["l6-node-fits-read"], answers["node-fits"]
    assert "DDP and the ZeRO stages are\n**a tie within the model's error**" in text
    best = found["best"]["config"]
    assert (best["tp"], best["pp"], best["dp"]) == (1, 1, 8)
    assert {"DDP", "DP+ZeRO-1", "DP+ZeRO-3"} - {family(best)} <= set(found["tied"])
    assert found["tied"]["DDP"]["decide"] == DECIDES["optimizer"]  # "the optimizer step is what tells them apart"
    for rival in ("TP", "PP"):
        assert "slower" in _line(found, rival)


def test_one_node_and_the_model_or_a_layer_does_not_fit(answers):
    text, found = CELLS["l6-node-read"], answers["node-too-big"]
    assert not found["rivals"]["DDP"]["fits"] and "DDP: does not fit" in _line(found, "DDP")
    best = found["best"]["config"]
    assert best["tp"] > 1 or best["pp"] > 1 or best["zero"] >= 1
    assert len(found["ties"]) >= 2  # "several of those tie"
    assert "6.1B parameters, 97 GB of\nstates" in text
    assert round(WIDE.layer_params / 1e9, 1) == 6.1 and round(16 * WIDE.layer_params / 1e9) == 97
    layer = answers["node-layer-too-big"]
    assert not layer["rivals"]["PP+DP"]["fits"]
    assert layer["best"]["config"]["tp"] > 1 or layer["best"]["config"]["zero"] >= 2


def test_many_nodes(answers):
    text = CELLS["l6-nodes-read"]
    fast, slow = answers["nodes-fast"], answers["nodes-slow"]
    # fast: 3-D + ZeRO-1 and FSDP + TP tie, and the note says how Llama 3 and TorchTitan train
    three_d, fsdp = "TP+PP+DP+ZeRO-1", "TP+DP+ZeRO-3"
    names = {family(fast["best"]["config"])} | set(fast["tied"])
    assert {three_d, fsdp} <= names and MODERN in fast["notes"]
    # slow: ZeRO-1 wins and ties with plain DP; ZeRO-3's fastest takes big micro-batches and pays in both bars
    assert family(slow["best"]["config"]) == three_d and "TP+PP+DP" in slow["tied"]
    zero3, best = slow["rivals"]["TP+PP+DP+ZeRO-3"], slow["best"]
    assert zero3["config"]["microbatch"] > best["config"]["microbatch"]
    for part in ("dp_comm", "pp_bubble"):
        assert zero3["breakdown"][part] > best["breakdown"][part]
    assert not slow["notes"] and "the \"modern practice\" note is absent" in text
    assert all(found["best"]["config"]["tp"] <= 8 for found in (fast, slow)) and "in both winners" in text


def test_the_lesson_names_the_published_runs_it_prints():
    assert f"and {len(RUNS)} training runs of 2021–2025" in CELLS["l6-title"]
    assert f"then against {len(RUNS)} published training runs" in CELLS["l6-published-md"]


# ---------------------------------------------------------------- issue 23: every number printed, every claim held

def words(cell_id: str) -> str:
    """A markdown cell's text on one line (prose wraps anywhere)."""
    return " ".join(CELLS[cell_id].split())


def outputs(cell_id: str) -> str:
    cell = next(c for c in LESSON_CELLS if c["id"] == cell_id)
    return "".join("".join(o.get("text", "")) for o in cell.get("outputs", []))


LESSON_CELLS = json.loads(LESSON.read_text(encoding="utf-8"))["cells"]


@pytest.fixture(scope="module")
def qualifiers():
    return {"link": link_comparison(BY_KEY["node-too-big"]), "sweep": network_sweep(BY_KEY["nodes-slow"]),
            "zero1": zero1_for_memory(BY_KEY["nodes-slow"]), "hsdp": hsdp_comparison(),
            "gather": {r["unit"]: r for r in gather_units(BY_KEY["node-layer-too-big"])}}


def test_a_layer_bigger_than_a_gpu_fits_zero_3_alone_only_if_it_gathers_finely(answers, qualifiers):
    """N2: the prose said "ZeRO fits"; it fits only as finely as it gathers (lesson 5), which the cell prints."""
    text, rows = words("l6-node-read") + " " + words("l6-node-layer-read"), qualifiers["gather"]
    assert not rows["layer"]["fits"] and "Gathering a whole layer at a time" in text and "ZeRO-3 does not fit" in text
    assert rows["matrix"]["fits"] and "Gathering one weight matrix at a time" in text and "it fits" in text
    # the advisor gathers a layer, at most 1e9 of a bigger one, but never less than one matrix: here, one matrix
    assert ZERO3_UNIT == 1e9 < rows["advisor"]["params"] == rows["matrix"]["params"] == largest_matrix(WIDE)
    assert "at most 1e9 parameters of a bigger one" in text and "never less than its largest matrix" in text
    assert "the middle row" in text and list(rows) == ["layer", "matrix", "advisor"]
    assert rows["advisor"]["bytes_per_gpu"] == rows["matrix"]["bytes_per_gpu"] < rows["layer"]["bytes_per_gpu"]
    assert "memory-centric tiling" in text and "ZeRO-Infinity" in text
    layer = answers["node-layer-too-big"]  # "the DP+ZeRO-3 line above" fits and ties; "Cutting the layer (TP) fits"
    assert layer["rivals"]["DP+ZeRO-3"]["fits"] and "DP+ZeRO-3" in layer["tied"] and "DP+ZeRO-3 line above" in text
    assert layer["rivals"]["TP"]["fits"] and "Cutting the layer itself (TP) fits" in text


def test_the_calibration_prose_types_no_number_its_cells_print():
    """N3: the 8-process ratio and the ring's α vary by machine: the cells print them, the prose names none."""
    text = words("l6-predict-read")
    assert not re.search(r"\d\s*(ms|×|%)|\d\.\d", text), text
    assert "its α with 4" in CELLS["l6-calibrate"] and "predicted / measured" in outputs("l6-predict8")
    assert "within 25 %" not in words("l6-summary")


def test_beta_is_seconds_per_byte_as_in_lesson_1():
    """N6: lesson 1's α-β model charges α + β·bytes with β = 1/bandwidth; lesson 6 says and prints the same."""
    one = json.loads((LESSON.parent / "01_collectives.ipynb").read_text(encoding="utf-8"))["cells"]
    assert any("β = 1/bandwidth" in "".join(c["source"]) for c in one)
    assert "α + β·bytes" in CELLS["l6-calibrate-md"] and "β = 1/bandwidth in seconds per byte" in \
        words("l6-calibrate-md")
    assert not any("bytes/β" in source for source in CELLS.values())
    assert "ns/B (1/β = " in CELLS["l6-calibrate"]


def test_dp_talks_once_per_step_only_with_plain_dp_or_zero_1():
    """N7: the grid table's rhythm of DP, held to the time model: doubling the micro-batches leaves ZeRO-0/1's
    DP time alone and grows ZeRO-2's and ZeRO-3's (a reduce-scatter, and ZeRO-3's gathers, per micro-batch)."""
    text = words("l6-grid-md")
    assert "**once per step** with plain DP or ZeRO-1; **every micro-batch** with ZeRO-2 or ZeRO-3" in text
    model, c = PRESETS["megatron-1.7b-2021"], cluster(gpus=16, inter_node_gbps=100)
    for zero in range(4):
        one, two = (evaluate_plan(model, c, batch, Plan(dp=16, zero=zero, overlap="none"))["breakdown"]["dp_comm"]
                    for batch in (16, 32))
        assert (two == pytest.approx(one)) == (zero <= 1), zero
    assert "once a step with plain DP or ZeRO-1" in words("l6-summary")


def test_the_learner_is_sent_to_the_exercise_first_and_every_next_step_is_a_link():
    """N12 and issue 23 §5."""
    title, summary = CELLS["l6-title"], CELLS["l6-summary"]
    assert title.index("exercises/06_choosing_a_strategy.ipynb") < title.index("solutions/06_choosing_a_strategy")
    assert "(../exercises/06_choosing_a_strategy.ipynb)" in summary.split("**Where next.**")[0]
    where_next = summary.split("**Where next.**")[1]
    links = re.findall(r"\]\(([^)]+)\)", where_next)
    assert {"00_start_here.ipynb", "../GLOSSARY.md"} <= set(links) and "`notebooks/00_start_here.ipynb`" not in summary
    for link in re.findall(r"\]\(([^)]+)\)", title + summary):
        assert link.startswith("https://") or (LESSON.parent / link).exists(), link


def test_every_case_names_its_gpu():
    """N14: the cases run on A100 80 GB, all but the first (an RTX 4090)."""
    assert {s.key: s.gpu for s in SCENARIOS if s.gpu != "a100-80gb"} == {"1gpu-fits": "rtx-4090"}
    text = words("l6-guide-md")
    assert "The GPUs are A100 80 GB, 8 per node, in every case but the first, which runs on one RTX 4090" in text


def test_hundreds_of_thousands_of_plans(answers):
    assert 100_000 <= answers["nodes-fast"]["plans"] < 1_000_000 and "hundreds of thousands" in words("l6-title")


def test_nvlink_puts_pp_zero_and_tp_on_par_and_pcie_makes_pp_the_fastest(qualifiers):
    """§3: "With very fast intra-node connectivity of NVLINK or NVSwitch all three should be mostly on par,
    without these PP will be faster than TP or ZeRO" — derived for section 4.2's model."""
    nvlink, pcie = qualifiers["link"]
    assert (nvlink["link"], pcie["link"]) == ("NVLink", "PCIe") and pcie["intra_bandwidth"] < nvlink["intra_bandwidth"]
    assert all(nvlink[a]["ratio"] <= 1 + MODEL_ERROR for a in ("PP", "ZeRO", "TP"))  # "on par: each within"
    assert "PP" in pcie["best"]["family"] and "TP" not in pcie["best"]["family"]  # "Over PCIe, PP is the best"
    assert pcie["PP"]["ratio"] == pytest.approx(1) and pcie["PP"]["ratio"] < min(pcie["ZeRO"]["ratio"],
                                                                                 pcie["TP"]["ratio"])
    assert all("DP" in row["TP"]["family"] for row in (nvlink, pcie))  # "keeps DP beside TP"
    text = words("l6-qualifiers-link-read")
    assert "On NVLink the three answers are on par" in text and "Over PCIe, PP is the best" in text
    assert "over PCIe PP beats TP and ZeRO" in words("l6-summary")


def test_the_network_sweep_shows_where_zero_3_catches_up(qualifiers):
    rows = qualifiers["sweep"]
    assert len(rows) <= 8 and [r["gbps"] for r in rows] == sorted(r["gbps"] for r in rows)  # CI: ≤ 8 searches
    one, three = flip(rows, "DP+TP+PP+ZeRO-1"), flip(rows, "ZeRO-3")
    assert len(one["tie"]) == len(rows)  # "the best, or ties with it, at every speed"
    ratios = [r["ZeRO-3"]["ratio"] for r in rows]
    assert ratios == sorted(ratios, reverse=True)  # "closes in as the network gets faster"
    assert 0 < len(three["tie"]) < len(rows) and three["tie"] == [r["gbps"] for r in rows][-len(three["tie"]):]
    assert three["wins"] == [rows[-1]["gbps"]]  # "is the best only at the fastest"
    assert rows[0]["gbps"] == BY_KEY["nodes-slow"].cluster_args["inter_node_gbps"]
    assert BY_KEY["nodes-fast"].cluster_args["inter_node_gbps"] in three["tie"]  # ties in section 4.3's fast case
    text = words("l6-qualifiers-sweep-read")
    assert "ties only at the fast end and is the best only at the fastest" in text
    assert "ZeRO-3 catches up with DP+TP+PP+ZeRO-1 only on the fastest networks" in words("l6-summary")


def test_zero_1_on_a_slow_network_is_a_choice_for_memory(qualifiers):
    """N13: the same grid with plain DP takes the same time and more memory; both fit."""
    r = qualifiers["zero1"]
    assert r["zero1"]["config"]["zero"] == 1 and r["plain"]["config"]["zero"] == 0
    assert abs(r["time_ratio"] - 1) < 0.01 and r["plain"]["fits"] and r["zero1"]["fits"]
    assert r["zero1"]["bytes_per_gpu"]["total"] < r["plain"]["bytes_per_gpu"]["total"]
    text = words("l6-qualifiers-zero1-read")
    assert "so the time is the same" in text and "On this grid plain DP fits as well" in text
    assert "ZeRO-1 is there for memory" in words("l6-nodes-read")


def test_zero_with_replicas_keeps_the_gathers_inside_a_node(qualifiers):
    rows = qualifiers["hsdp"]
    for r in rows:
        full, hsdp = r["ZeRO-3"], r["ZeRO-3 (HSDP)"]
        assert full["config"]["dp"] == HSDP_CASE.gpus and full["config"]["shard"] == 0  # "a thirty-second"
        assert hsdp["config"]["shard"] == HSDP_CASE.cluster().gpus_per_node == 8  # "an eighth"
        assert hsdp["bytes_per_gpu"]["total"] > full["bytes_per_gpu"]["total"]  # "It pays in memory"
    for r in rows[:-1]:  # "On the slower networks … faster"; "neither is the best plan"
        assert r["ZeRO-3 (HSDP)"]["ratio"] < r["ZeRO-3"]["ratio"]
        assert r["best"]["family"] not in ("DP+ZeRO-3", "DP+ZeRO-3 (HSDP)")
    fast = rows[-1]  # "on the fastest network the two tie"
    assert max(fast["ZeRO-3"]["ratio"], fast["ZeRO-3 (HSDP)"]["ratio"]) <= 1 + MODEL_ERROR
    assert (HSDP_CASE.gpus // HSDP_CASE.cluster().gpus_per_node, HSDP_CASE.gpus, HSDP_CASE.global_batch) == (4, 32, 128)
    assert "on 4 nodes (32 A100s, batch 128)" in words("l6-qualifiers-zero1-read")


def test_the_guide_is_cited_and_its_conditions_named():
    text = " ".join(words(c) for c in CELLS if c.startswith("l6-qualifiers"))
    assert GUIDE in CELLS["l6-qualifiers-md"] and "Stas Bekman" in text and "Hugging Face" in text
    for condition in ("NVLink or PCIe inside a node", "Where the many-node answer flips",
                      "Slow network and still low on memory", "ZeRO with multiple replicas (HSDP)",
                      "NVMe offload and memory-centric tiling", "differ from today's practice"):
        assert condition in text, condition
    ids = [c["id"] for c in LESSON_CELLS]
    assert ids.index("l6-nodes-read") < ids.index("l6-qualifiers-md") < ids.index("l6-explore-md") \
        < ids.index("l6-export-md")


def test_the_real_runs_bytes_are_the_sum_the_prose_makes():
    """Section 2's reading: 2 blocks × 4 all-reduces × 4 micro-batches × 1 KiB, plus one embedding all-reduce of
    1 KiB per micro-batch, is what rank 0 sent on TP; 4 micro-batches of 1 KiB on PP (the stored output)."""
    text, printed = words("l6-run-read"), outputs("l6-run")
    kib = 2 * 8 * 16 * 4  # 2 sequences × 8 tokens × hidden 16, fp32
    assert kib == 1024 and "2 blocks × 4 all-reduces × 4 micro-batches × 1 KiB = 32,768 B" in text
    assert "the other 4,096 B" in text and 2 * 4 * 4 * kib == 32_768
    rank0 = next(line.split() for line in printed.splitlines() if line.startswith("0 "))
    assert rank0[1:4] == [f"{32_768 + 4 * kib:,}", rank0[2], f"{4 * kib:,}"], rank0
    assert [BY_KEY[k].cluster_args["inter_node_gbps"] for k in ("nodes-fast", "nodes-slow")] == [8 * 200, 25]
    assert "from 8 × 200 Gb/s InfiniBand to one 25 Gb/s link per node" in words("l6-nodes-read")


def test_the_lesson_states_its_prerequisites_and_links_the_lesson_that_teaches_one_step():
    """Issue 23 §5: lesson 6 uses recompute, MFU, b, m and the global batch; lesson 5b teaches them, and the
    lesson says so before it starts (and lesson 5's autograd.Function, the transformer's anatomy)."""
    before = CELLS["l6-title"].split("**Before you start.**")[1].split("The graded capstone")[0]
    assert "(05b_one_training_step.ipynb)" in before and (LESSON.parent / "05b_one_training_step.ipynb").exists()
    for concept in ("activations", "recompute", "$B = b·m·dp$", "MFU", "torch.autograd.Function", "self-attention"):
        assert concept in before, concept
