"""The held-out runs (`sim.published_held_out`) against the table they come from, copied here as NeMo prints it, so a
transcription slip (a TP for a PP, a dropped digit) fails; and the summary the README prints of them."""
import pytest

from simlab.sim import published
from simlab.sim.published_held_out import HELD_OUT_RUNS
from simlab.sim.published_runs import RUNS

# NVIDIA/NeMo docs/source/performance/performance_summary.md @ 8e3d65d, "Pretraining", as printed:
# Model | #-GPUs | GBS | MBS | Sequence Length | TP | PP | CP | VP | Tokens / sec / GPU
TABLE = """
| GPT3-5B       | 64     | 2048 | 4   | 2048           | 1  | 1  | 1  | 1  | 23406              |
| GPT3-20B      | 64     | 256  | 2   | 2048           | 2  | 1  | 1  | 1  | 5851               |
| GPT3-175B     | 128    | 256  | 1   | 2048           | 4  | 8  | 1  | 6  | 716                |
| GPT3-175B     | 512    | 2048 | 2   | 2048           | 4  | 8  | 1  | 6  | 825                |
| LLAMA2-7B     | 8      | 128  | 1   | 4096           | 1  | 1  | 1  | 1  | 16934              |
| LLAMA2-13B    | 16     | 128  | 1   | 4096           | 1  | 4  | 1  | 10 | 8715               |
| LLAMA2-70B    | 64     | 128  | 1   | 4096           | 4  | 4  | 1  | 20 | 1728               |
| Nemotron-8B   | 64     | 256  | 4   | 4096           | 2  | 1  | 1  | 1  | 12507              |
| Nemotron-22B  | 64     | 256  | 2   | 4096           | 2  | 4  | 1  | 10 | 4312               |
| Nemotron-340B | 128    | 32   | 1   | 4096           | 8  | 8  | 1  | 12 | 326                |
| LLAMA3-8B     | 8      | 128  | 1   | 8192           | 1  | 1  | 2  | 1  | 12273              |
| LLAMA3-70B    | 64     | 128  | 1   | 8192           | 4  | 4  | 2  | 5  | 1524               |
"""
ROWS = [[cell.strip() for cell in line.strip("| ").split("|")] for line in TABLE.strip().splitlines()]
# NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md @ 97ad8cc, 25.11, the dense FP8-CS rows on DGX-B200 and
# DGX-H100 as printed (FP8-MX figures in parentheses dropped): Model | #-GPUs | Precision | GBS | MBS | Sequence
# Length | FSDP | TP | PP | CP | VP | EP | GA | Tokens / sec / GPU
BRIDGE = """
| B200 | LLAMA3_8B | 8 | FP8-CS | 128 | 2 | 8192 | 0 | 1 | 1 | 1 | n/a | 1 | 8 | 30624 |
| B200 | LLAMA3.1_405B | 128 | FP8-CS | 64 | 1 | 8192 | 0 | 4 | 8 | 2 | 8 | 1 | 32 | 661 |
| H100 | LLAMA3_8B | 8 | FP8-CS | 128 | 1 | 8192 | 1 | 1 | 1 | 1 | n/a | 1 | 16 | 14451 |
| H100 | LLAMA3_70B | 64 | FP8-CS | 128 | 1 | 8192 | 0 | 4 | 8 | 1 | 5 | 1 | 64 | 1602 |
| H100 | LLAMA3.1_405B | 1024 | FP8-CS | 512 | 1 | 8192 | 0 | 8 | 8 | 2 | 8 | 1 | 64 | 292 |
"""


def test_every_row_but_lesson_6s_is_held_out_as_printed():
    lesson_6 = next(r for r in RUNS if r.key == "nemo-llama2-70b-fp8")
    assert (lesson_6.plan.tp, lesson_6.plan.pp, lesson_6.plan.chunks, lesson_6.published) == (4, 4, 20, 1728)
    held = [row for row in ROWS if row[0] != "LLAMA2-70B"]
    nemo = [r for r in HELD_OUT_RUNS if r.framework == "NeMo 24.07"]
    assert len(nemo) == len(held) == 11
    for name, gpus, gbs, mbs, seq, tp, pp, cp, vp, tps in held:
        run = next(r for r in nemo if r.gpus == int(gpus) and r.source.endswith(f"row {name}" + (
            f", {gpus}" if name == "GPT3-175B" else "")))
        p = run.plan
        assert (run.global_batch, p.microbatch, run.model.seq, p.tp, p.pp, p.cp, p.chunks, run.published) == tuple(
            map(int, (gbs, mbs, seq, tp, pp, cp, vp, tps))), name
        assert p.tp * p.pp * p.cp * p.dp == run.gpus and p.precision == "fp8" and p.recompute == "none"
        assert p.schedule == ("interleaved" if p.chunks > 1 else "1f1b") and p.sequence_parallel == (p.tp > 1)


def _gpt(layers, h, vocab):  # Megatron's GPT: 12h² + 13h per layer, tied embedding, learned positions, final norm
    return layers * (12 * h * h + 13 * h) + (vocab + 2048) * h + 2 * h


BY_HAND = {"nemo-gpt3-5b": _gpt(24, 4096, 50304),  # 50,257 padded to 128
           "nemo-gpt3-20b": _gpt(44, 6144, 50432),  # padded to 256 at TP 2
           "nemo-gpt3-175b-128": _gpt(96, 12288, 50688),  # padded to 512 at TP 4
           # Llama 2 13B: attention 4h², SwiGLU 3·h·13,824, two RMSNorms per layer, untied, a final norm
           "nemo-llama2-13b": 40 * (4 * 5120**2 + 3 * 5120 * 13824 + 2 * 5120) + 2 * 32000 * 5120 + 5120}


def test_every_bridge_row_the_model_can_express_is_held_out_as_printed():
    """Lesson 6 takes the H100 70B; the H100 8B row's recipe recomputes 5 of 32 layers, which no plan expresses."""
    lesson_6 = next(r for r in RUNS if r.key == "mbridge-llama3-70b-fp8")
    assert (lesson_6.plan.tp, lesson_6.plan.pp, lesson_6.plan.chunks, lesson_6.published) == (4, 8, 5, 1602)
    bridge = [r for r in HELD_OUT_RUNS if r.framework == "Megatron-Bridge 25.11"]
    rows = [[c.strip() for c in line.strip("| ").split("|")] for line in BRIDGE.strip().splitlines()]
    held = [row for row in rows if row[1] != "LLAMA3_70B" and (row[0], row[1]) != ("H100", "LLAMA3_8B")]
    assert len(bridge) == len(held) == 3
    for system, name, gpus, _, gbs, mbs, seq, fsdp, tp, pp, cp, vp, ep, ga, tps in held:
        run = next(r for r in bridge if r.source.endswith(f"DGX-{system} {name}"))
        p = run.plan
        assert run.gpu == {"B200": "b200", "H100": "h100-80gb"}[system] and fsdp == "0" and ep == "1"
        assert (run.gpus, run.global_batch, p.microbatch, run.model.seq, p.tp, p.pp, p.cp, run.published) == tuple(
            map(int, (gpus, gbs, mbs, seq, tp, pp, cp, tps))), name
        assert p.chunks == (1 if vp == "n/a" else int(vp)) and p.zero == 1 and p.recompute == "none"
        assert run.global_batch // (p.dp * p.microbatch) == int(ga) and p.tp * p.pp * p.cp * p.dp == run.gpus
        if p.pp > 1:  # embedding and loss each counted as a layer: (126 + 2) / 64 chunks = 2 per chunk
            assert sum(p.stage_layers) == run.model.layers == 126 and p.stage_layers[0] == p.stage_layers[-1] == 15


# pytorch/torchtitan benchmarks/ @ b5bcd76, as printed: asyncTP_llama3_h100_2025-06_torchtitan.md's two tables
# ("Llama3 70b on 256 H100s with FSDP=32, TP=8, torch.compile, full AC, local batch size 16"; "Llama3 8b on 64
# H100s with FSDP=8, TP=8, torch.compile, per op SAC, local batch size 12") and the Trainy H200 file's
ASYNC_TP = {("llama3-70b", 256, 8, 16, "full"): """
| None (bfloat16)   | 597.3 | 652.4 | 1.09 |
| float8 tensorwise | 809.8 | 942.4 | 1.16 |
| float8 rowwise    | 599.6 | 624.8 | 1.04 |
""", ("llama3-8b", 64, 8, 12, "op-sac"): """
| None (bfloat16)   | 4378   | 4809.4 | 1.10 |
| float8 tensorwise | 5078.1 | 5570.1 | 1.10 |
| float8 rowwise    | 3708.5 | 3914.9 | 1.06 |
"""}
TRAINY = """
| 4 | 10938 | 47.96 |
| 8 | 10753 | 46.97 |
"""


def test_every_torchtitan_2025_row_but_rowwise_float8_is_held_out_as_printed():
    titan = [r for r in HELD_OUT_RUNS if r.framework == "torchtitan 2025"]
    assert len(titan) == 10
    for (size, gpus, tp, local, recompute), text in ASYNC_TP.items():
        for line in text.strip().splitlines():
            quantization, vanilla, async_tp, _ = [c.strip() for c in line.strip(" |").split("|")]
            if quantization == "float8 rowwise":
                continue
            for tps, overlap in ((vanilla, "dp,params"), (async_tp, "dp,params,tp")):
                run = next(r for r in titan if r.model.name == size and r.published == float(tps))
                p = run.plan
                assert (run.gpus, p.tp, p.dp, p.microbatch, p.recompute, p.overlap, p.zero) == (
                    gpus, tp, gpus // tp, local, recompute, overlap, 3)
                assert p.precision == ("fp8" if quantization.startswith("float8") else "mixed-fp32-grads")
                assert run.gpu == "h100-96gb-hbm2e" and run.global_batch == local * (gpus // tp) and p.loss == "fp32"
    for line in TRAINY.strip().splitlines():
        nodes, tps, gib = [c.strip() for c in line.strip(" |").split("|")]
        run = next(r for r in titan if r.gpu == "h200" and r.gpus == 8 * int(nodes))
        assert (run.published, run.memory_gib, run.plan.microbatch, run.global_batch) == (
            float(tps), float(gib), 2, 2 * 8 * int(nodes))
        assert run.plan.recompute == "op-sac" and run.plan.precision == "fp8" and run.model.seq == 8192


@pytest.mark.parametrize("key", BY_HAND)
def test_the_shapes_have_their_configs_parameter_counts(key):
    run = next(r for r in HELD_OUT_RUNS if r.key == key)
    assert run.model.params == BY_HAND[key]


def _said(s: dict) -> list[str]:
    """How ARCHITECTURE and the modules' docstrings write a summary's figures."""
    return [f"{s['within_20']} of {s['runs']} within 20 %", f"median |error| {s['median']:.1%}".replace("%", " %"),
            f"mean {s['mean']:+.1%}".replace("%", " %")]


def test_the_figures_typed_in_architecture_and_the_docstrings_are_the_codes():
    """ARCHITECTURE's measured facts and the MPT module's record of its first predictions, against the code: the
    held-out NeMo and Bridge rows as they stand (their first predictions: nothing changed them since), the MPT rows
    as first predicted (FlashAttention priced as FlashAttention-2) and as they stand."""
    from pathlib import Path

    from simlab.sim import published_held_out_mpt as mpt
    arch = " ".join(Path(__file__).resolve().parents[2].joinpath("ARCHITECTURE.md").read_text().split())
    doc = " ".join(mpt.__doc__.split())
    held = published.summary(published.validation(HELD_OUT_RUNS[:14]))
    titan = published.summary(published.validation(HELD_OUT_RUNS[14:]))
    assert HELD_OUT_RUNS[13].framework != HELD_OUT_RUNS[14].framework == "torchtitan 2025"
    first = published.summary(published.validation(mpt.first_predictions()))
    now = published.summary(published.validation(mpt.MPT_RUNS))
    for said in _said(held) + _said(titan) + [f"worst the 8B at TP 8 with async TP, {titan['worst_error']:+.1%}"
                                               .replace("%", " %")]:
        assert said in arch, said
    for row in published.validation(HELD_OUT_RUNS[14:]):
        if row["memory_gib"]:  # the H200 runs' logged memory against the model's
            assert f"{row['memory_gib']:.1f}" in arch and f"{row['ours_gib']:.1f}" in arch, row["what"]
    for said in _said(first)[:1] + [f"{first['median']:.1%}".replace("%", " %"), f"{first['mean']:+.1%}".replace(
            "%", " %"), f"worst {first['worst_error']:+.1%}".replace("%", " %")]:
        assert said.replace("median |error| ", "") in doc, said
    assert f"{first['within_20']} within 20 %" in arch and f"{now['within_20']} of {now['runs']} within 20 %" in arch
    assert f"median {now['median']:.1%}".replace("%", " %") in arch


# ---- llm-foundry's MPT tables (`sim.published_held_out_mpt`) ------------------------------------------------------

# three rows as llm-foundry's README @ b2a43a1 prints them (columns 1-4, 8-10, 13, 18 and 20 are compared)
PRINTED = (  # each line as printed, cut in two only to fit here
    "|  70b | 2048 | 32 | h100_80gb | 36.15 | 48.2 | 357 | 2 | 16 | 1024 | 13 | 28242 | 882 | 2097152 "
    "| amp_bf16 | DEFAULT | FULL_SHARD | True | False | 64862437376 |",
    "|  760m | 65536 | 8 | a100_80gb | 45.34 | 60.45 | 141 | 1 | 2 | 16 | 0 | 33150 | 4143 | 1048576 "
    "| amp_bf16 | DEFAULT | FULL_SHARD | True | False | 857988096 |",
    "|  125m | 2048 | 128 | a100_40gb | 38.86 | 38.86 | 121 | 26 | 1 | 3328 | 7746 | 15863837 | 123936 | 6815744 "
    "| bf16 | PURE | FULL_SHARD | False | False | 125311488 |",
)


def test_the_mpt_rows_are_as_printed_and_every_shape_has_the_logged_parameter_count():
    from simlab.sim.published_held_out_mpt import IN_LESSON_6, MPT_RUNS, ROWS
    assert len(ROWS) == 198 and len(MPT_RUNS) == 194 and len({r.key for r in MPT_RUNS}) == 194
    gpu = {"h100_80gb": "H100 80GB BF16", "a100_80gb": "A100 80GB", "a100_40gb": "A100 40GB"}
    for line in PRINTED:
        c = [x.strip() for x in line.strip(" |").split("|")]
        row = next(r for r in ROWS if r[:4] == (gpu[c[3]], c[0], int(c[1]), int(c[2])))
        assert row[4:] == (int(c[7]), int(c[8]), int(c[9]), int(c[12]), c[17] == "True", int(c[19]))
    for row, run in zip((r for r in ROWS if r[:4] not in IN_LESSON_6), MPT_RUNS):
        _, _, seq, gpus, mbs, ga, gbs, tps, ckpt, params = row
        assert gbs == mbs * ga * gpus and run.global_batch == gbs and run.published == tps
        assert run.model.params == params and run.model.seq == seq, run.key  # biases and learned positions, exactly
        assert (run.plan.dp, run.plan.microbatch, run.plan.zero) == (gpus, mbs, 3)
        assert run.plan.recompute == ("full" if ckpt else "none") and run.plan.attention == "flash-triton"
    # the four lesson 6 takes are RUNS' own MPT runs, not held out
    lesson_6 = {(r.gpu, r.model.name, r.gpus, r.published) for r in RUNS if r.framework == "Composer FSDP"}
    taken = {("a100-80gb" if t == "A100 80GB" else "a100-40gb", f"mpt-{m}", g, row[7]) for row in ROWS
             for t, m, _, g in [row[:4]] if row[:4] in IN_LESSON_6}
    assert taken <= lesson_6 and len(taken) == 4
