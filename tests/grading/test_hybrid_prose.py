"""The capstone's prose against the code it describes (issue 23: no text that an output or the code can
contradict): the two plans it writes out, the breakdown keys it lists, the variants it names, the real run's
knobs and the node layout of part B."""
import json
import re
from pathlib import Path

from simlab.grading.hybrid import BUDGETS, PAIR, PAIR_BUDGET, SHOWN
from simlab.grading.hybrid_predict import GPUS_PER_NODE, PREDICTION_RUN
from simlab.sim.advisor import evaluate_plan
from simlab.sim.hybrid import Plan
from simlab.sim.model import PRESETS

SOLUTION = Path(__file__).resolve().parents[2] / "solutions" / "06_choosing_a_strategy.ipynb"
CELLS = {c["id"]: "".join(c["source"]) for c in json.loads(SOLUTION.read_text())["cells"]}


def test_the_two_plans_and_the_breakdown_keys_are_the_ones_graded():
    text = CELLS["x6-pair"]
    for name, plan in PAIR.items():
        written = re.search(rf'PAIR\["{name}"\] == (Plan\([^)]*\))', text).group(1)
        assert eval(written, {"Plan": Plan}) == plan
    b = BUDGETS[PAIR_BUDGET]
    keys = tuple(evaluate_plan(PRESETS[b.model], b.cluster(), b.global_batch, PAIR["P"])["breakdown"])
    listed = re.search(r"breakdown:\n(.*?)\.$", text, re.S).group(1)
    assert tuple(re.findall(r'`"(\w+)"`', listed)) == keys
    assert "64 A100s, 8 per node" in text and (b.gpus, b.gpus_per_node, b.gpu) == (64, 8, "a100-80gb")


def test_the_variants_are_the_hardware_the_title_says():
    v7, v70, v175 = (BUDGETS[k] for k in ("7b-a100", "70b-h200", "175b-512"))
    s70, s7, s175 = (BUDGETS[k] for k in SHOWN)
    assert "the 7B on datacenter GPUs, the 70B on fewer GPUs with more memory and a fast network,\nthe 175B on " \
           "twice the GPUs" in CELLS["x6-title"]
    assert v7.model == s7.model and v7.gpu == "a100-80gb" and s7.gpu == "rtx-4090"
    assert v70.model == s70.model and v70.gpus < s70.gpus and v70.inter_node_gbps > s70.inter_node_gbps
    assert v70.cluster().gpu.usable_memory > s70.cluster().gpu.usable_memory
    assert v175.model == s175.model and v175.gpus == 2 * s175.gpus
    assert len(BUDGETS) == 6 and "six budgets" in CELLS["x6-title"]


def test_part_b_describes_the_run_that_is_graded():
    text = CELLS["x6-b"]
    assert "**hidden 32**" in text and PREDICTION_RUN["hidden"] == 32
    assert "**8 micro-batches**" in text and PREDICTION_RUN["microbatches"] == 8
    assert "dp = 2 × pp = 2 × tp = 2 with ZeRO-1" in text and PREDICTION_RUN["zero"] == 1
    nodes = ", ".join(f"{n}–{n + GPUS_PER_NODE - 1}" for n in range(0, 8, GPUS_PER_NODE))
    assert f"**four nodes of {GPUS_PER_NODE} GPUs** (ranks {nodes})" in text.replace("\n", " ")
