"""Lesson 5b's prose says what its cells print: every number typed in its markdown is held here — to the engine
it cites, to the configuration the next cell runs, or to the stored output — and a number added to the text
without a test here fails `test_every_number_in_the_text_is_held`. The claims in words (what fits, what is
memory-bound, what vanishes with flash) are checked against the engine the same way."""
import re

import pytest
from notebook_cells import cells, printed, source  # tests/notebook_cells.py: one reader of stored notebooks

from simlab.sim.gpus import GPUS
from simlab.sim.model import PRESETS
from simlab.sim.training_step import one_step
from simlab.sim.training_step_flops import layer_roofline, step_flops
from simlab.sim.training_step_memory import activation_terms, state_recipe

LESSON = "notebooks/05b_one_training_step.ipynb"
CELLS = cells(LESSON)
GPT3, SMALL = PRESETS["gpt3-175b"], PRESETS["megatron-1.7b-2021"]

# every number the markdown types, cell by cell; the tests below hold each one that is a quantity (the others are
# lesson, section and equation numbers, years, names: 1–5, §4.1, 2022, GPT-3, A100, H100, fp16, RTX 4090 …)
HELD = {
    "l5b-title": {"1", "2", "3", "4", "5", "6", "16", "18", "8", "32", "05"},
    "l5b-act-md": {"1", "2", "4", "5", "6", "34", "2022", "16", "3"},
    "l5b-terms-read": {"32"},
    "l5b-modes-read": {"2", "4", "6"},
    "l5b-measure-md": {"16"},
    "l5b-measure-read": {"2", "24", "4", "2048", "80", "100", "6"},
    "l5b-recompute-real-md": {"32"},
    "l5b-recompute-timing-md": {"6"},
    "l5b-micro-md": {"1", "2", "3", "4", "64"},
    "l5b-predict-accumulate": {"2", "4", "16"},
    "l5b-accumulate-read": {"1", "2", "4"},
    "l5b-predict-bytes": {"2", "16", "32"},
    "l5b-precision-read": {"1", "12", "16", "3", "8", "32"},
    "l5b-flops-md": {"2", "5", "6", "12", "32"},
    "l5b-mfu-md": {"2", "5", "8", "16", "100", "2009"},
    "l5b-machine-md": {"100"},
    "l5b-step-md": {"1", "3", "4", "6", "32", "100"},
    "l5b-explore-md": {"1", "4090", "6", "8", "16", "32", "100"},
    "l5b-summary": {"2", "4", "5", "6", "8", "16", "18", "34", "05", "06", "32"},
}


def markdown(cell_id: str) -> str:
    return source(CELLS[cell_id])


def test_every_number_in_the_text_is_held():
    typed = {cid: set(re.findall(r"\d+", source(c))) for cid, c in CELLS.items() if c["cell_type"] == "markdown"}
    loose = {cid: sorted(found - HELD.get(cid, set())) for cid, found in typed.items() if found - HELD.get(cid, set())}
    assert loose == {}, "a number typed in markdown needs a test here (or print it from a cell)"


def test_korthikantis_count_as_the_text_gives_it():
    """sbh(34 + 5as/h) in 16 bits: the softmax's output 2 bytes an element, its dropout mask 1, the dropped-out
    probabilities 2 (l5b-act-md, l5b-summary)."""
    assert "$sbh\\,(34 + 5as/h)$" in markdown("l5b-act-md") and "$sbh\\,(34 + 5as/h)$" in markdown("l5b-summary")
    assert "(2 bytes an element), the\ndropout mask on it (1 byte) and the dropped-out probabilities (2 bytes)" in \
        markdown("l5b-act-md")
    for model in (GPT3, SMALL, PRESETS["megatron-22b"]):
        s, h, a = model.seq, model.hidden, model.heads
        terms = activation_terms(model, 3, attention="eager")
        sbh = s * 3 * h
        assert sum(terms.values()) == pytest.approx(sbh * (34 + 5 * a * s / h), rel=1e-12)
        assert (terms["softmax_output"], terms["softmax_dropout_mask"], terms["softmax_dropout_output"]) == \
            (2 * a * s * s * 3, a * s * s * 3, 2 * a * s * s * 3)
    assert sum(activation_terms(GPT3, 1, attention="eager", recompute="selective").values()) == 34 * GPT3.seq * GPT3.hidden
    assert sum(activation_terms(GPT3, 1, recompute="full").values()) == 2 * GPT3.seq * GPT3.hidden


def test_the_scores_dominate_and_flash_keeps_a_sliver():
    """l5b-terms-read: the three s × s tensors take more than all the others together; l5b-modes-read: flash keeps
    selective's tensors plus its log-sum-exp."""
    assert "take more than all the others together" in markdown("l5b-terms-read")
    terms = activation_terms(GPT3, 1, attention="eager")
    scores = terms["softmax_output"] + terms["softmax_dropout_mask"] + terms["softmax_dropout_output"]
    assert scores > sum(terms.values()) - scores
    flash = activation_terms(GPT3, 1, attention="flash")
    selective = activation_terms(GPT3, 1, attention="eager", recompute="selective")
    assert {k: v for k, v in flash.items() if k != "flash_lse"} == {k: v for k, v in selective.items() if k != "flash_lse"}
    assert selective["flash_lse"] == 0 < flash["flash_lse"] < 1e-3 * sum(flash.values())


def test_the_recomputation_question_is_the_cell_it_asks_about():
    """l5b-measure-read's predict prompt: 24 layers, b = 4 sequences of 2048 tokens, one 80 GB A100, eager."""
    text = markdown("l5b-measure-read")
    assert "24 layers, $b$ = 4 sequences of 2048 tokens per micro-batch, on one\n80 GB A100 with eager attention" in text
    assert (SMALL.layers, SMALL.seq) == (24, 2048)
    assert 'recompute_text(SMALL, "a100-80gb", microbatch=4, microbatches=8, attention="eager")' in source(
        CELLS["l5b-recompute-sim"])
    assert "24 layers, h = 2304, 24 heads" in source(CELLS["l5b-imports"])
    assert "(A backward costs about two forwards.)" in text
    step = one_step(SMALL, "a100-80gb", 4, 8, attention="eager")
    assert step["time"]["backward"] == pytest.approx(2 * step["time"]["forward"], rel=0.05)


def test_selective_buys_most_of_fulls_memory_for_a_fraction_of_its_time():
    """l5b-recompute-real-md, after the table: the three modes as the table printed them."""
    assert "Selective recomputation buys most of full recomputation's memory for a fraction of its time" in \
        markdown("l5b-recompute-real-md")
    none, selective, full = (one_step(SMALL, "a100-80gb", 4, 8, attention="eager", recompute=r)
                             for r in ("none", "selective", "full"))
    saved = none["memory"]["activations"] - selective["memory"]["activations"]
    assert saved > 0.5 * (none["memory"]["activations"] - full["memory"]["activations"])
    assert selective["time"]["recompute"] < 0.5 * full["time"]["recompute"]
    assert [s["memory"]["fits"] for s in (none, selective, full)] == [False, True, True]
    assert "no" in printed(CELLS["l5b-recompute-sim"]).splitlines()[2].split()  # none does not fit, as printed
    assert selective["hfu"] > selective["mfu"] and full["hfu"] > full["mfu"] and none["hfu"] > none["mfu"]  # eager
    # attention computes the masked half of the scores too: hardware FLOPs, not the model's
    assert "(fp32 here, so the gradients can be compared closely)" in markdown("l5b-recompute-real-md")
    assert 'measure_recompute(microbatch=2, seq=16, hidden=32, heads=4)' in source(CELLS["l5b-recompute-real"])
    assert "fp32" in printed(CELLS["l5b-recompute-real"]).splitlines()[0]


def test_the_micro_batch_section_runs_what_it_says():
    assert "The same global batch of 64 sequences on 2 replicas, cut five ways" in markdown("l5b-micro-md")
    assert "global_batch=64, dp=2, microbatch_sizes=(1, 2, 4, 8, 32)" in source(CELLS["l5b-micro-sim"])
    assert "ZeRO-2 and -3 keep only a shard of the gradients, so they reduce-scatter after every micro-batch (lesson 3)" \
        in markdown("l5b-micro-md")
    text = markdown("l5b-predict-accumulate")
    assert "starts 2 processes; each accumulates 4 micro-batches of 2 sequences" in text
    assert "the same 16 sequences at once" in text
    assert "run_training_step(world_size=2, microbatches=4, microbatch_size=2)" in source(CELLS["l5b-accumulate"])
    out = printed(CELLS["l5b-accumulate"])
    assert "2 processes (gloo) × 4 micro-batches of 2 = a global batch of 16" in out
    assert out.count("✓") == 4 and "✗" not in out
    assert "$2(N-1)/N$ of the buffer" in markdown("l5b-accumulate-read")


def test_bytes_per_parameter():
    """16 with mixed-precision Adam (2 + 2 + 4 + 4 + 4), 18 with fp32 gradients; master and moments 12 of 16."""
    assert "why 16 or 18 bytes per parameter" in markdown("l5b-title")
    assert "16 bytes per parameter (2 + 2 + 4 + 4 + 4), Megatron's fp32 gradients 18" in markdown("l5b-summary")
    mixed = state_recipe("mixed")
    assert [mixed[p] for p in ("params", "grads", "master", "adam_m", "adam_v")] == [2, 2, 4, 4, 4]
    assert mixed["total"] == 16 and state_recipe("mixed-fp32-grads")["total"] == 18
    assert "12 of mixed precision's 16\nbytes" in markdown("l5b-precision-read")
    assert mixed["master"] + mixed["adam_m"] + mixed["adam_v"] == 12
    fp8 = state_recipe("fp8")
    assert {k: v for k, v in fp8.items() if k != "params"} == {k: v for k, v in state_recipe(
        "mixed-fp32-grads").items() if k != "params"}  # "the rest as in Megatron's mixed precision"


def test_six_n_tokens_and_attention():
    """6 FLOPs per weight per token in the dense GEMMs; causal attention 6·L·s·h per token; 32 sequences."""
    text = markdown("l5b-flops-md")
    assert "6 FLOPs per weight per token, the famous **6·N·tokens**" in text and "$6·L·s·h$ per token" in text
    assert "For the small model's step of 32 sequences" in text and "samples=32" in source(CELLS["l5b-flops"])
    f = step_flops(SMALL, 32)
    weights = SMALL.layers * SMALL.matmul_params + SMALL.vocab * SMALL.hidden
    assert f["dense"] == 6 * weights * f["tokens"]
    assert f["attention"] == 6 * SMALL.layers * SMALL.seq * SMALL.hidden * f["tokens"]


def test_the_roofline_claims():
    """l5b-mfu-md: an H100's balance point is a few hundred FLOP per byte; l5b-machine-md: attention's per-head GEMMs
    fall below it, and a TP-8 shard thins the weights' GEMMs too (the cell runs tp=8)."""
    assert "An H100's balance point is a few hundred FLOP per byte in 16-bit" in markdown("l5b-mfu-md")
    assert "cut 8 ways" in markdown("l5b-mfu-md") and "tp=8" in source(CELLS["l5b-roofline-h100"])
    rows = {r["name"]: r for r in layer_roofline(SMALL, GPUS["h100-80gb"])}
    assert 100 <= rows["qkv"]["balance"] < 1000
    assert rows["scores"]["bound"] == rows["context"]["bound"] == "memory"
    assert {rows[n]["bound"] for n in ("qkv", "attn_out", "fc1", "fc2")} == {"compute"}
    tp8 = {r["name"]: r for r in layer_roofline(SMALL, GPUS["h100-80gb"], tp=8)}
    assert any(tp8[n]["bound"] == "memory" for n in ("qkv", "attn_out", "fc1", "fc2"))
    assert "Attention's per-head GEMMs are thin" in markdown("l5b-machine-md")


def test_the_whole_step_does_not_fit_as_the_explorer_text_says():
    assert markdown("l5b-explore-md").startswith("It does not fit: the red outline.")
    step = one_step(SMALL, "a100-80gb", 4, 8, attention="eager")
    assert not step["memory"]["fits"] and "does not fit: " in printed(CELLS["l5b-step"])
    assert 'one_step(SMALL, "a100-80gb", microbatch=4, microbatches=8, attention="eager", recompute="none")' in source(
        CELLS["l5b-step"])
    assert "with $b$ = 4 and eager attention" in markdown("l5b-step-md")


def test_the_primer_is_quoted_word_for_word():
    from pathlib import Path
    primer = Path(__file__).resolve().parents[3] / "shared" / "seed" / "primer-zh.txt"
    quote = next(line[2:] for line in markdown("l5b-title").splitlines() if line.startswith("> "))
    assert "激活层、临时存储，不可用的内存碎片" in quote
    if primer.exists():  # the primer lives beside the repository, not in it
        assert quote in primer.read_text(encoding="utf-8")


def test_every_section_predicts_before_it_reveals_and_the_lesson_links_on():
    ids = list(CELLS)
    for prompt, reveal in (("l5b-terms-read", "l5b-modes"), ("l5b-measure-read", "l5b-recompute-sim"),
                           ("l5b-predict-accumulate", "l5b-accumulate"), ("l5b-predict-bytes", "l5b-recipes"),
                           ("l5b-mfu-md", "l5b-roofline-h100")):
        assert "**Predict, then run.**" in markdown(prompt) and ids.index(prompt) + 1 == ids.index(reveal)
    assert "**Next:** [Lesson 6 — Choosing a strategy](06_choosing_a_strategy.ipynb)" in markdown("l5b-summary")
    assert "[`exercises/05b_one_training_step.ipynb`](../exercises/05b_one_training_step.ipynb)" in markdown("l5b-title")
