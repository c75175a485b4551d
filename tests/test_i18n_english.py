"""What a Chinese reader sees printed is Chinese: no English sentence in the text outputs of notebooks/zh,
solutions/zh and exercises/zh (what nbval compares), outside an allow-list.

A line fails when it holds two or more different English words that are not allowed. Allowed are:
- identifiers and numbers: any token with a digit, an underscore, a dot or a capital inside (`tp_comm`, `L0`,
  `1f1b`, `GB/GPU`, `ZeRO-3`, `X·W`), and every all-capital abbreviation (`GPU`, `TP`, `MFU`, `DDP`);
- `KEPT`: the words the course keeps in Latin letters on purpose — GLOSSARY.md's kept terms (rank, token, the
  collectives' names in their `ring-all-reduce` spelling), the simulator's event and phase names a real trace
  must match (`forward`, `free`, `to-cpu`), the plan's knob values a learner types as flags (`interleaved`,
  `none`, `full`, `yes`, `no`), column abbreviations (`params`, `grads`, `optim`, `bytes`) and units;
- `PROGRAM_TEXT`: outputs that are program text, not prose (an exported launch script, a config file, a
  function's source): a translation would make them wrong.
"""
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CJK = re.compile(r"[\u4e00-\u9fff]")
TOKEN = re.compile(r"[^\s,;:()\[\]{}<>=|\"'“”‘’，。：；（）、！？…—]+")

# GLOSSARY.md keeps these in Latin letters, and the course's identifiers that read as words
KEPT = {
    # kept terms: what a Chinese engineer says in English too
    "rank", "ranks", "token", "tokens", "backend", "gloo", "torchrun", "batch", "bucket", "buckets",
    "all-reduce", "all-gather", "reduce-scatter", "ring-all-reduce", "naive", "ring", "tree", "star",
    # the simulator's event, step and phase names, which a real run's trace must match (lessons 1-4)
    "forward", "backward", "free", "step", "to-cpu", "to-gpu", "compute", "comm", "cpu", "send", "recv",
    "fwd", "bwd", "loss", "update", "reduce",
    # schedules and the plan's knob values, as `simlab plan` and the exporters take them
    "gpipe", "interleaved", "zero-bubble", "even", "ends-1", "listed", "none", "full", "selective",
    "yes", "no", "threads", "mixed", "fp32", "bf16", "fp16", "mlp", "attention", "column", "row", "sum",
    # column abbreviations of the text tables (the data's own keys)
    "params", "grads", "optim", "bytes", "stages", "stage", "zero", "offload", "recompute", "schedule", "tp", "pp",
    "dp", "ep", "cp", "b", "m", "p", "v", "op", "local", "input", "shard",
    # units, the true/false a check prints, and the names of maths and shapes as the code writes them
    "ms", "µs", "ns", "s", "GB", "MB", "KB", "B", "MiB", "GiB", "True", "False", "s/step", "max", "min", "hidden",
    "ffn", "torch", "optimizer",
    # the parts a step's time goes to, as `hybrid_time.step`'s breakdown names them (compute, tp_comm, overlap …)
    "overlap",
    # lesson 5b: the attention kernels a learner types (attention="eager"), and the layer's ops and dtypes as torch
    # names them, which Chinese texts keep in Latin letters too
    "eager", "flash", "dropout", "softmax", "dtype",
    # lesson 7: the online softmax's log-sum-exp, as the code and FlashAttention name it
    "logsumexp",
    # names: models, papers, hardware, frameworks
    "Rajbhandari", "Korthikanti", "Narayanan", "et", "al", "Table", "Figure", "Megatron", "DeepSpeed",
    "torchtitan", "Llama", "NVLink", "PCIe", "InfiniBand", "Ethernet", "Perfetto", "Adam", "GeLU", "Offload",
    "Transformer", "Engine", "Hopper", "Ada", "Blackwell",
}
# (notebook, cell id): outputs that are program text or a source listing, printed as the tools read them
PROGRAM_TEXT = {
    ("notebooks/zh/05_tensor_parallel.ipynb", "3883e60a"): "inspect.getsource(CopyToTP): Python source",
    ("notebooks/zh/05b_one_training_step.ipynb", "l5b-hooks-src"): "inspect.getsource(SavedTensors): Python source",
    ("notebooks/zh/06_choosing_a_strategy.ipynb", "l6-export-megatron"): "a bash launch script for Megatron-LM",
    ("notebooks/zh/06_choosing_a_strategy.ipynb", "l6-export-deepspeed"): "a DeepSpeed JSON config and command",
    ("notebooks/zh/06_choosing_a_strategy.ipynb", "l6-export-torchtitan"): "a torchtitan Python config",
    ("notebooks/zh/07_long_sequences_and_experts.ipynb", "l7-export"): "a bash launch script for Megatron-LM",
}
FOLDERS = ("notebooks/zh", "solutions/zh", "exercises/zh")


def english_words(line: str) -> set[str]:
    """The English words of `line` that are not allowed: plain lower-case words (an identifier has a digit, an
    underscore, a dot or an inner capital; an abbreviation is all capitals) outside `KEPT`."""
    words = set()
    calls = set(re.findall(r"([A-Za-z_]\w*)\(", line))  # a function's name is code: choose(budget), validate(...)
    line = re.sub(r"'[^'\n]*'", "", line)  # a quoted key of a printed dict is code too: {'heads': 2}
    for token in TOKEN.findall(line):
        token = token.strip("-+*/×·.%'")
        if len(token) < 2 or token in KEPT or token.lower() in KEPT or token in calls or CJK.search(token):
            continue
        if re.fullmatch(r"L[a-z]", token):  # the walkthrough's layers La, Lb, Lc
            continue
        if re.search(r"[\d_./·×+]", token) or token.isupper() or re.search(r"[a-z][A-Z]", token):
            continue
        if re.fullmatch(r"[A-Za-z][a-z'-]*", token):
            words.add(token.lower())
    return words


def english_lines(text: str) -> list[str]:
    """The lines of `text` with two or more different English words outside the allow-list."""
    return [line for line in text.splitlines() if len(english_words(line)) >= 2]


def printed(cell: dict) -> str:
    out = []
    for output in cell.get("outputs", []):
        out.append("".join(output.get("text", "")))
        out.append("".join(output.get("data", {}).get("text/plain", "")))
        out.append("\n".join(output.get("traceback", [])) if output.get("output_type") == "error" else "")
    return "\n".join(out)


def notebooks():
    return sorted(str(p.relative_to(ROOT)) for folder in FOLDERS for p in (ROOT / folder).glob("*.ipynb"))


@pytest.mark.parametrize("path", notebooks())
def test_a_chinese_notebook_prints_no_english_sentence(path):
    found = []
    for cell in json.loads((ROOT / path).read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] != "code" or (path, cell["id"]) in PROGRAM_TEXT:
            continue
        text = re.sub(r"<Figure size [^>]*>", "", printed(cell))  # matplotlib's repr of a figure
        found += [f"{cell['id']}: {line.strip()[:120]}" for line in english_lines(text)]
    assert found == [], "\n".join(found)


def test_every_program_text_exemption_names_a_cell_that_exists():
    for (path, cell_id), why in PROGRAM_TEXT.items():
        ids = {c["id"] for c in json.loads((ROOT / path).read_text(encoding="utf-8"))["cells"]}
        assert cell_id in ids and why, (path, cell_id)


@pytest.mark.parametrize("line", [
    "best: DP+ZeRO-2 — 0.905 s per step, MFU 65%; time goes to compute 99%",
    "  TP: 1.37× slower, mostly tp_comm",
    "- deadlock: rank 0 is stuck at step 2 (0B0), waiting for 1B0 from rank 1 (step 0)",
    "La forward: GPU0 gathers a1 from GPU1 and a2 from GPU2",
    "最佳：TP+DP+ZeRO-3——每步 8.7 s，but the notes stay English here",
    "device 0 moves 3 x what each other device moves (N-1 = 3)",
])
def test_the_check_catches_the_english_the_review_found(line):
    assert english_lines(line) == [line]


@pytest.mark.parametrize("line", [
    "最佳：DP+ZeRO-2——每步 0.905 s，MFU 65%；时间花在 compute 99%",
    "1   1   1   8  8  1f1b        —       2     no       no  none        40.58  0.9046  65.2%",
    "      params          grads     optim     bytes",
    "all-gather L0          all-gather L0",
    "rank 1 第 0 步：1B0 排在 1F0（第 1 步）之前",
    "Mesh(pp=2, dp=2, tp=2)：8 个 rank，rank = (pp_rank*dp + dp_rank)*tp + tp_rank",
])
def test_the_allow_list_lets_identifiers_and_kept_terms_through(line):
    assert english_lines(line) == []
