"""Lesson 3 speaks the language it is told: its graders, widgets, tables and pictures print Chinese after
`set_language("zh")`, with the same numbers as in English, and English stays exactly what it was.

English is held to the outputs stored in solutions/03_zero.ipynb (what nbval compares), not to strings copied
from this code. No process is started: the byte grader gets a run's result built from the memory model (what
the real run's counters equal, as tests/grading/test_zero_predict.py checks on real processes)."""
import re
from pathlib import Path
from types import SimpleNamespace

import matplotlib
import nbformat
import pytest

matplotlib.use("Agg")

from simlab import i18n  # noqa: E402 — after matplotlib.use("Agg")
from simlab.grading.common import CheckFailed  # noqa: E402 — after matplotlib.use("Agg")
from simlab.grading.zero import check_bytes_prediction, check_fit_70b, check_zero_memory  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.style import display_width  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.zero import draw_zero_step  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.zero_run import draw_real_vs_model, real_run_text  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.zero_widgets import memory_calculator, zero_explorer  # noqa: E402 — after matplotlib.use("Agg")
from simlab.sim.memory import comm_volume_per_step, per_gpu_bytes  # noqa: E402 — after matplotlib.use("Agg")
from simlab.sim.zero import executor_names, walkthrough  # noqa: E402 — after matplotlib.use("Agg")

ROOT = Path(__file__).resolve().parent.parent
CJK = re.compile(r"[\u4e00-\u9fff]")
NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
SIZES = (3, 4, 2, 5)  # the exercise's MLP


pytestmark = pytest.mark.usefixtures("english_afterwards")  # tests/conftest.py: English again after each test


def stored_output(path: str, cell_id: str) -> str:
    """The text a notebook stored for one cell: what nbval compares."""
    cell = next(c for c in nbformat.read(ROOT / path, as_version=4).cells if c.id == cell_id)
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


def memory(psi, n_gpus, stage):  # a correct answer to the exercise, written out (the check refuses simlab's own)
    shard = -(-psi // n_gpus)
    params, grads, optimizer = (2 * (shard if stage >= 3 else psi), 2 * (shard if stage >= 2 else psi),
                                12 * (shard if stage >= 1 else psi))
    return {"params": params, "grads": grads, "optimizer": optimizer, "total": params + grads + optimizer}


def fake_zero2_run() -> dict:
    """What run_zero(2, world_size=3, steps=1, sizes=SIZES) returns, as far as the byte grader reads it."""
    numels = [(a + 1) * b for a, b in zip(SIZES, SIZES[1:])]
    return {"bytes_sent_per_rank": [comm_volume_per_step(numels, 2, 3, "fp32")] * 3, "world_size": 3, "stage": 2}


def graded(capsys, check, *args) -> str:
    """The one line a check prints, whether it passes or fails."""
    try:
        check(*args)
    except CheckFailed:
        pass
    return capsys.readouterr().out


def in_both(capsys, check, *args) -> tuple[str, str]:
    english = graded(capsys, check, *args)
    i18n.set_language("zh")
    chinese = graded(capsys, check, *args)
    i18n.set_language("en")
    return english, chinese


def same_numbers(english: str, chinese: str) -> bool:
    return sorted(NUMBER.findall(english)) == sorted(NUMBER.findall(chinese))


# ---- graders ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("cell_id, check, args", [
    ("dad2e273", check_zero_memory, (memory,)),
    ("l3-run", check_bytes_prediction, (240, fake_zero2_run(), SIZES, 1)),
    ("l3-fit-70b", check_fit_70b, (3, 15, False)),
], ids=["memory", "bytes", "fit-70b"])
def test_a_right_answer_is_graded_as_the_english_solution_stored_it_and_in_chinese(capsys, cell_id, check, args):
    english, chinese = in_both(capsys, check, *args)
    assert english.strip() in stored_output("solutions/03_zero.ipynb", cell_id)  # English unchanged
    assert "✓" in chinese and CJK.search(chinese) and same_numbers(english, chinese), chinese
    assert chinese.strip() in stored_output("solutions/zh/03_zero.ipynb", cell_id)  # what the zh solution stores


@pytest.mark.parametrize("check, args, words", [
    (check_fit_70b, (2, 10, False), ["放不下", "16 位参数", "混合精度 Adam"]),  # stage 2 never fits: 16-bit params
    (check_fit_70b, (3, 2, True), ["主机内存", "560.0 GB", "DGX H100"]),  # offload: the host's share overflows
    (check_fit_70b, (2, 4, True), ["Offload", "主机内存"]),  # offload still keeps the parameters on each GPU
    (check_fit_70b, (3, 16, False), ["不是最少的", "15 块 GPU"]),
    (check_fit_70b, (3, 14, False), ["超过 80 GB", "两步之间"]),
    (check_fit_70b, (1, 8, True), ["必须是 True 或 False"]),
    (check_bytes_prediction, (120, fake_zero2_run(), SIZES, 1), ["只算了一次集合通信", "归约分散", "全收集"]),
    (check_bytes_prediction, (60, fake_zero2_run(), SIZES, 1), ["元素个数"]),
    (check_bytes_prediction, (360, fake_zero2_run(), SIZES, 1), ["3Ψ"]),
    (check_bytes_prediction, (999, fake_zero2_run(), SIZES, 1), ["逐层来数", "fp32"]),
    (check_zero_memory, (lambda psi, n, stage: per_gpu_bytes(psi, n, stage, precision="mixed"),), ["simlab 自己的模型"]),
    (check_zero_memory, (lambda psi, n, stage: {"total": 0},), ["答案的形式", "dict"]),
    (check_zero_memory, (lambda psi, n, stage: {**memory(psi, n, stage), "total": 1},), ["论文的例子，阶段 0"]),
    (check_zero_memory, (lambda psi, n, stage: {**memory(psi, n, stage), "grads": 2 * psi},), ["分片向上取整"]),
], ids=["never", "host", "offload-never", "too-many", "too-few", "bad-offload", "half", "elements", "zero3", "other",
        "simlabs-own", "form", "paper", "unsharded-grads"])
def test_a_wrong_answer_gets_its_reason_in_chinese_with_the_same_numbers(capsys, check, args, words):
    english, chinese = in_both(capsys, check, *args)
    assert "✗" in english and not CJK.search(english)
    assert chinese.count("✗") == 1 and all(w in chinese for w in words), chinese
    assert same_numbers(english, chinese), (english, chinese)


def test_an_unanswered_prediction_says_so_in_chinese():
    i18n.set_language("zh")
    with pytest.raises(NotImplementedError, match="^练习：请先在上面的单元格里写下你的预测$"):
        check_bytes_prediction(None, fake_zero2_run(), SIZES)


# ---- widgets and text ------------------------------------------------------------------------------------

def test_widget_hints_and_knobs_are_chinese_and_stay_english_in_english():
    english = repr(memory_calculator())
    assert english == stored_output_hint("e823e5cb")
    i18n.set_language("zh")
    panel = memory_calculator()
    assert repr(panel).startswith("▶ ") and CJK.search(repr(panel))
    assert [panel.knobs[k].description for k in ("params", "precision")] == ["参数", "精度"]
    assert panel.knobs["params"].label == "7.5 B"  # the values are not words: unchanged
    explorer = zero_explorer(run=lambda stage: None, stage=1)
    assert CJK.search(repr(explorer)) and CJK.search(explorer.control.button.description)


def stored_output_hint(cell_id: str) -> str:
    cell = next(c for c in nbformat.read(ROOT / "notebooks/03_zero.ipynb", as_version=4).cells if c.id == cell_id)
    return "".join(o["data"]["text/plain"] for o in cell.outputs if "data" in o)


@pytest.mark.parametrize("language", ["en", "zh"])
def test_the_calculator_table_speaks_the_language_in_force(language):
    i18n.set_language(language)
    panel = memory_calculator()
    panel.knobs["offload"].value = True
    table = panel.children[3].value  # the calculator's table (HTML), redrawn on the change
    assert ("阶段 3 (P_os+g+p) +卸载" in table) == (language == "zh")
    assert ("stage 3 (P_os+g+p) +offload" in table) == (language == "en")


def fake_zero3_run(stage_run: int = 3) -> dict:
    """A 3-rank run of 3 layers whose rank 0 recorded `stage_run`'s walkthrough events, bytes as the model says."""
    kept = [{"params": 12, "grads": 12, "optimizer": 24}] * 3
    trace = [SimpleNamespace(name=name, rank=0, step=0, start=k)
             for k, name in enumerate(executor_names(walkthrough(stage_run, 3, 3)))]
    return {"world_size": 3, "stage": 3, "measured_bytes_per_rank": kept, "predicted_bytes_per_rank": kept,
            "bytes_sent_per_rank": [448] * 3, "predicted_bytes_sent_per_rank": [448] * 3, "trace": trace}


@pytest.mark.parametrize("language", ["en", "zh"])
def test_the_real_run_text_lines_up_and_gives_the_verdict_in_the_language(language):
    i18n.set_language(language)
    text = real_run_text(fake_zero3_run(), 3)
    table = text.splitlines()[:4]  # header + 3 ranks: the third column starts at one display column
    starts = {display_width(line[:list(re.finditer(r" {2,}", line))[-1].end()]) for line in table}
    assert len(starts) == 1, text
    verdict = {"en": "same events in the same order", "zh": "事件相同，顺序也相同"}[language]
    assert text.splitlines()[-1] == verdict
    differ = real_run_text(fake_zero3_run(stage_run=2), 3).splitlines()[-1]
    assert differ == {"en": "the orders differ (≠)", "zh": "顺序不同（≠）"}[language]


def test_pictures_carry_chinese_labels_and_keep_the_data_names():
    i18n.set_language("zh")
    fig = draw_real_vs_model(fake_zero3_run())
    assert fig._suptitle.get_text() == "ZeRO-3，3 个进程：实测 = 模型"
    step = walkthrough(3)[1]
    ax = draw_zero_step(step, 3).axes[0]
    assert ax.get_title().startswith(f"第 1 步：{step.name}")  # the step's name is the trace's: unchanged
    assert {t.get_text() for t in ax.get_legend().get_texts()} == {"自己的分片", "别的 GPU 的分片"}
    assert {"参数", "梯度", "优化器状态"} <= {t.get_text() for t in ax.texts}
