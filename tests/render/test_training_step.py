"""Lesson 5b's text tables, figures and explorer: every table shows the engine's numbers (held here to the closed
forms they teach), the memory bar's segments add up to the step's total and the GPU's to its capacity, the scene is
valid and says "does not fit" where the engine does, and each knob of the explorer redraws what `one_step` says
for the new knobs — a refused combination is one line in the readout, never a traceback."""
import matplotlib
import pytest

matplotlib.use("Agg")

from simlab.render import training_step_widgets as TW  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.chart import Chart, validate  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.style import MATCH_COLOR, STATE_COLOR, TERM_COLOR  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.training_step import (  # noqa: E402 — after matplotlib.use("Agg")
    MODES,
    microbatch_text,
    modes_text,
    recompute_text,
    step_text,
    terms_text,
)
from simlab.render.training_step_figures import (  # noqa: E402 — after matplotlib.use("Agg")
    capacity_segments,
    draw_activation_modes,
    draw_memory_bar,
    draw_microbatching,
    draw_precision,
    draw_recompute,
    draw_roofline,
    memory_segments,
)
from simlab.render.training_step_flops import flops_text, roofline_text  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.training_step_precision import formats_text, recipes_text  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.training_step_widgets import step_explorer, step_scene  # noqa: E402 — after matplotlib.use("Agg")
from simlab.sim.gpus import GPUS  # noqa: E402 — after matplotlib.use("Agg")
from simlab.sim.model import PRESETS  # noqa: E402 — after matplotlib.use("Agg")
from simlab.sim.training_step import microbatching, one_step  # noqa: E402 — after matplotlib.use("Agg")
from simlab.sim.training_step_flops import layer_roofline, machine, step_flops  # noqa: E402 — after matplotlib.use("Agg")

GPT3, SMALL = PRESETS["gpt3-175b"], PRESETS["megatron-1.7b-2021"]
SBH = GPT3.seq * GPT3.hidden  # b = 1


def test_the_terms_table_is_korthikantis_count_term_by_term():
    text = terms_text(GPT3, attention="eager")
    lines = text.splitlines()
    assert lines[0] == "gpt3-175b: s = 2048, b = 1, h = 12288, a = 96, 16-bit, eager attention, recompute none"
    coefficient = 34 + 5 * GPT3.heads * GPT3.seq / GPT3.hidden  # sbh(34 + 5as/h), Korthikanti §4.1
    assert lines[-1] == f"one layer: {SBH * coefficient / 1e9:.2f} GB = s·b·h × {coefficient:.4g}"
    rows = {line.split()[0]: line.split()[1] for line in lines[2:-1]}
    assert rows["softmax_output"] == rows["softmax_dropout_output"] == f"{2 * GPT3.heads * GPT3.seq / GPT3.hidden:.4g}"
    assert rows["softmax_dropout_mask"] == f"{GPT3.heads * GPT3.seq / GPT3.hidden:.4g}"
    assert rows["gelu_input"] == rows["gelu_output"] == "8" and rows["mlp_dropout_mask"] == "1"
    assert "flash_lse" not in rows  # a term the kernel does not keep is not listed


def test_flash_keeps_no_scores_only_a_log_sum_exp():
    rows = {line.split()[0]: line.split()[1] for line in terms_text(GPT3, attention="flash").splitlines()[2:-1]}
    assert "softmax_output" not in rows and float(rows["flash_lse"]) == 4 * GPT3.heads / GPT3.hidden


def test_the_modes_table_sets_each_kernel_and_recomputation_side_by_side():
    lines = modes_text(GPT3).splitlines()
    assert len(lines) == 2 + len(MODES)
    multiples = [float(line.split()[4]) for line in lines[2:]]  # "eager attention, recompute none  114 …"
    assert multiples == [pytest.approx(34 + 5 * 96 * 2048 / 12288), 34, pytest.approx(34 + 4 * 96 / 12288, abs=1e-2), 2]


def test_recompute_rows_are_one_step_for_each_mode():
    text = recompute_text(SMALL, "a100-80gb", 4, 8)
    for line, mode in zip(text.splitlines()[2:], ("none", "selective", "full")):
        step = one_step(SMALL, "a100-80gb", 4, 8, attention="eager", recompute=mode)
        assert line.split()[0] == mode and f"{step['memory']['total'] / 1e9:.2f} GB" in line
        assert ("yes" if step["memory"]["fits"] else "no") in line.split()
        assert f"{step['mfu']:.1%}" in line and f"{step['hfu']:.1%}" in line


def test_micro_batching_rows_divide_the_global_batch():
    text = microbatch_text(SMALL, 64, 2, (1, 4, 32))
    for line, b in zip(text.splitlines()[2:], (1, 4, 32)):
        cells = line.split()
        assert int(cells[0]) == b and int(cells[1]) == 64 // (b * 2)
        assert f"{microbatching(SMALL, 64, b, dp=2)['activation_bytes'] / 1e9:.2f} GB" in line


@pytest.mark.parametrize("recompute, fits", [("none", False), ("selective", True)])
def test_the_step_says_whether_it_fits(recompute, fits):
    step = one_step(SMALL, "a100-80gb", 4, 8, attention="eager", recompute=recompute)
    assert step["memory"]["fits"] is fits
    text = step_text(step)
    assert ("fits: " in text) is fits and ("does not fit: " in text) is not fits
    for label in ("Adam's m", "fp32 master weights", "activations of the layers", "CUDA context", "usable", "MFU"):
        assert label in text


@pytest.mark.parametrize("knobs", [dict(attention="eager"), dict(attention="flash", recompute="full"),
                                   dict(precision="fp32"), dict(precision="mixed-fp32-grads", gpu="h200")])
def test_the_bars_add_up_to_the_step_and_to_the_gpu(knobs):
    gpu = knobs.pop("gpu", "a100-80gb")
    step = one_step(SMALL, gpu, 4, 8, **knobs)
    assert sum(s[2] for s in memory_segments(step)) == pytest.approx(step["memory"]["total"], rel=1e-12)
    assert sum(s[2] for s in capacity_segments(step)) == pytest.approx(step["memory"]["capacity"], rel=1e-12)
    colours = {s[0]: s[3] for s in memory_segments(step)}
    assert all(colours[p] == STATE_COLOR[p] for p in ("params", "grads", "adam_m"))
    assert all(colours[t] == TERM_COLOR[t] for t in step["activation_terms"] if step["activation_terms"][t])


def test_the_scene_is_valid_and_marks_a_step_that_does_not_fit():
    big = one_step(SMALL, "a100-80gb", 4, 8, attention="eager")
    scene = step_scene(big)
    assert validate(scene) == scene and scene["alt"] == step_text(big)
    memory, time = scene["panels"]
    assert memory["title"].endswith("does not fit: 12.98 GB over the usable memory")
    assert memory["title_color"] == MATCH_COLOR[False]
    assert any(m["kind"] == "rect" and m.get("stroke") == MATCH_COLOR[False] for m in memory["marks"])
    assert time["title"].startswith(f"time: {big['time']['step_seconds']:.3g} s per step, MFU {big['mfu']:.1%}")
    small = step_scene(one_step(SMALL, "a100-80gb", 1, 8, attention="flash"))
    assert "fits: " in small["panels"][0]["title"]
    assert not any(m.get("stroke") == MATCH_COLOR[False] for m in small["panels"][0]["marks"])


KNOB_CHANGES = [("model", "megatron-3.6b-2021"), ("gpu", "h100-80gb"), ("microbatch", 1), ("microbatches", 32),
                ("seq", 4096), ("attention", "flash"), ("recompute", "selective"), ("precision", "fp32")]


@pytest.mark.parametrize("name, value", KNOB_CHANGES)
def test_each_knob_redraws_what_one_step_says(name, value):
    explorer = step_explorer()
    before = explorer.chart.scene
    explorer.knobs[name].value = value
    values = {k: knob.value for k, knob in explorer.knobs.items()}
    assert values[name] == value
    expected = one_step(values.pop("model"), values.pop("gpu"), values.pop("microbatch"), values.pop("microbatches"),
                        **values)
    assert explorer.chart.scene == step_scene(expected) != before
    assert explorer.shown["step"] == expected and "✗" not in explorer.readout.value


def test_a_new_model_brings_its_sequence_length():
    explorer = step_explorer()
    explorer.knobs["model"].value = "llama2-7b"
    assert explorer.knobs["seq"].value == 4096 and explorer.shown["step"]["config"]["seq"] == 4096


def test_a_refused_combination_is_one_line_and_the_picture_stays(monkeypatch):
    explorer = step_explorer()
    before = explorer.chart.scene

    def refuse(*args, **kwargs):
        raise ValueError("precision='fp8': this GPU has no FP8 units\nsecond line")
    monkeypatch.setattr(TW, "one_step", refuse)
    explorer.knobs["precision"].value = "fp8"
    assert explorer.chart.scene == before
    assert "✗ precision=&#x27;fp8&#x27;: this GPU has no FP8 units" in explorer.readout.value
    assert "second line" not in explorer.readout.value


def test_the_explorer_starts_on_its_grids_and_says_what_it_is_before_it_runs():
    explorer = step_explorer()
    assert repr(explorer).startswith("▶ run this cell to get the step explorer")
    assert isinstance(explorer.chart, Chart) and repr(explorer.chart).startswith("▶ run this cell")
    with pytest.raises(ValueError, match="microbatch=3: must be one of 1, 2, 4"):
        step_explorer(microbatch=3)


def test_the_figures_draw_what_the_engine_says():
    big = one_step(SMALL, "a100-80gb", 4, 8, attention="eager")
    ax = draw_memory_bar(big).axes[0]
    gids = {artist.get_gid() for artist in ax.get_children()}
    assert {"no-fit", "usable"} <= gids
    assert ax.get_lines()[0].get_xdata()[0] == pytest.approx(big["memory"]["usable"] / 1e9)
    assert "no-fit" not in {a.get_gid() for a in draw_memory_bar(one_step(SMALL, "h200", 1)).axes[0].get_children()}
    modes = draw_activation_modes(GPT3).axes[0]
    assert [t.get_text() for t in modes.texts][-1] == f"{2 * SBH / 1e6:,.0f} MB"  # full: the layer's input alone
    assert len(draw_recompute(SMALL, "a100-80gb", 4, 8).axes) == 2
    assert len(draw_microbatching(SMALL, 64, 2, (1, 2)).axes) == 2
    assert [t.get_text() for t in draw_precision().axes[0].texts] == ["16 B", "16 B", "18 B", "18 B"]
    me = machine(50e9, 10e9)
    fig = draw_roofline({"this machine": me, "h100-80gb": GPUS["h100-80gb"]},
                        {"this machine": layer_roofline(SMALL, me), "h100-80gb": layer_roofline(SMALL, GPUS["h100-80gb"])})
    assert len(fig.axes[0].get_legend().get_texts()) == 2


def test_the_flops_and_roofline_tables():
    lines = flops_text(SMALL, 32).splitlines()
    assert lines[0] == "megatron-1.7b-2021, one step on 32 sequences of 2048 tokens (65,536 tokens)"
    # eager attention computes the masked half of the scores too, full recomputation the forward again
    f = step_flops(SMALL, 32, attention="eager", recompute="full")
    assert f["hardware_flops"] == f["model_flops"] + f["masked_flops"] + f["recompute_flops"]
    assert f["masked_flops"] == f["attention"]  # the masked half is as big as the causal one
    assert lines[-1].split()[:2] == ["eager", "full"] and lines[-1].split()[-1] == f"{f['hardware_flops'] / f['model_flops']:.3f}"
    rows = layer_roofline(SMALL, GPUS["h100-80gb"])
    text = roofline_text(rows, "h100-80gb")
    bound = {line.split()[0]: line.split()[-3] for line in text.splitlines()[2:]}  # "… 87.8  memory-bound  294 TFLOP/s"
    assert bound == {r["name"]: f"{r['bound']}-bound" for r in rows}
    assert bound["scores"] == "memory-bound" and bound["qkv"] == "compute-bound"


def test_the_precision_tables():
    recipes = {line.split()[0]: line.split()[-1] for line in recipes_text().splitlines()[1:]}
    assert recipes == {"fp32": "16", "mixed": "16", "mixed-fp32-grads": "18", "fp8": "18"}
    formats = formats_text()
    assert "fp16      2      5              10             6.55e+04   6.1e-05          5.96e-08" in formats
