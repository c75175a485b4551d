"""Lesson 6 reads the advisor's answers in words: every winner, tie, rejection and mechanism its prose names is
held here to what the advisor prints for that scenario, so the text cannot drift from the output."""
import json
from pathlib import Path

import pytest

from simlab.sim.advisor import by_family, family, search
from simlab.sim.advisor_explain import DECIDES, MODERN
from simlab.sim.hybrid_scenarios import BY_KEY, WIDE
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
