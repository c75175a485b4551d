"""Lesson 5 in Chinese: what simlab/render/tensor_parallel*.py and simlab/grading/tensor_parallel.py print.

- The simulator's words the lesson shows (phases, collectives, op names, step descriptions, where each split
  communicates and what) are translated where they are shown; if the simulator's wording changes, a test here
  fails instead of the Chinese output silently falling back to English.
- English stays English (the notebooks' nbval outputs hold it byte for byte; here: plurals, no CJK), and the
  cells' gids — what the figure tests and the browser key on — are the same in both languages.
- Chinese output has no English left where a sentence was: tables, figures, widget labels, ✓/✗ lines.
- The generated zh notebooks store Chinese outputs where simlab prints, English ones stay English.
"""
import re
from pathlib import Path

import matplotlib
import nbformat
import pytest

matplotlib.use("Agg")

from simlab import i18n  # noqa: E402 — after matplotlib.use("Agg")
from simlab.grading.tensor_parallel_predict import MLP_RUN, check_forward_bytes, check_split_choice  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.tensor_parallel import COUNTS, count_of, draw_split, draw_tp_steps, shown  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.tensor_parallel_widgets import mlp_explorer, mlp_split_frame, step_frame, steps_text  # noqa: E402 — after matplotlib.use("Agg")
from simlab.sim.tensor_parallel import COMBINE, KINDS, block_steps, split_linear  # noqa: E402 — after matplotlib.use("Agg")
from simlab.sim.tensor_parallel_choices import SYNCS  # noqa: E402 — after matplotlib.use("Agg")

ROOT = Path(__file__).resolve().parent.parent
CJK = re.compile(r"[\u4e00-\u9fff]")
# English words that may stay in Chinese output: names, units and formula tokens, not sentences
ALLOWED = {"rank", "token", "hidden", "ffn", "fp32", "fp64", "fp16", "gloo", "Megatron", "GeLU", "local", "nn",
           "Linear", "dX", "dW", "db", "dZ", "dU_r", "dB_r", "dX_r", "dA_r", "Z_r", "Y_r", "U_r", "X", "A", "B", "Z",
           "Y", "W", "f", "g", "B/rank", "softmax", "Q_r", "K_r", "V_r", "W_o", "W_qkv", "QKV", "RowParallelLinear",
           "MLP", "TP", "N", "r", "d", "b", "s", "h", "in", "out", "weight"}  # weight: fc1.weight, a name
# words of 3+ letters ("by", "of" are caught by the words around them); A_r, Xᵀ, d(QKV)_r are formulas
WORD = re.compile(r"(?<![\w(])[A-Za-z]{3,}(?![\w)ᵀ'])")


def english_words(text: str) -> set[str]:
    return {w for w in WORD.findall(text) if w not in ALLOWED}


@pytest.fixture
def zh():
    i18n.set_language("zh")
    yield
    i18n.set_language("en")


@pytest.fixture(scope="module")
def real():
    from simlab.parity.tensor_parallel import run_tp
    return run_tp(**MLP_RUN)


def all_steps():
    return block_steps("mlp", 4, 8, 8, 16, itemsize=4) + block_steps("attention", 4, 8, 8, heads=4, itemsize=4)


# ---- the simulator's words are translated where they are shown ---------------------------------------------

def test_every_simulator_word_the_lesson_shows_has_a_chinese_entry(zh):
    catalog = i18n.entries("zh")
    words = {w for s in all_steps() for w in (s.phase, s.collective)} | {f"{k}-parallel" for k in KINDS}
    words |= {s.name for s in all_steps() if s.name not in ("f", "g")} | set(COMBINE.values())
    words |= {s.compute for s in all_steps() if s.compute.startswith("identity")}
    words |= {w for rows in SYNCS.values() for where, op, what, _size in rows for w in (where, op, what)}
    words -= {"GeLU(X·A)"}  # a formula: the same in every language
    assert sorted(w for w in words if w not in catalog) == []


def test_step_descriptions_keep_their_formulas_and_translate_their_words(zh):
    """The MLP's steps, the ones lesson 5 shows (the attention block's descriptions, "2 heads", "back through
    softmax", are shown nowhere in the lesson and stay English)."""
    for s in block_steps("mlp", 4, 8, 8, 16, itemsize=4):
        text = shown(s.compute)
        assert not english_words(text), (s.compute, text)
        formulas = re.findall(r"[A-Za-z_]+\S*\s*=", s.compute)  # "U_r =", "dX_r =": the left-hand sides stay
        assert all(f in text for f in formulas), (s.compute, text)


# ---- English stays English ---------------------------------------------------------------------------------

def test_english_is_untouched_by_the_marking():
    i18n.set_language("en")
    assert [count_of(n, noun) for noun in COUNTS for n in (1, 2)] == [
        "1 rank", "2 ranks", "1 process", "2 processes", "1 collective", "2 collectives"]
    steps = block_steps("mlp", 4, 8, 8, 16, itemsize=4)
    assert all(shown(w) == w for s in steps for w in (s.phase, s.collective, s.name, s.compute))
    table = steps_text(steps)
    assert not CJK.search(table) and all(s.compute in table for s in steps)
    text = mlp_split_frame("row", "row", 2, figure=False)[1]
    assert not CJK.search(text) and text.startswith("A by rows, B by rows on 2 ranks (X: ")


@pytest.mark.parametrize("language", ["en", "zh"])
def test_figure_cells_keep_their_english_gids_in_both_languages(language):
    i18n.set_language(language)
    try:
        fig = draw_split(split_linear("row", 2, [[1, 2, 3, 4]], [[1], [2], [3], [4]]))
        gids = {p.get_gid() for p in fig.axes[0].patches}
        assert {"X rank 0", "W rank 1", "Y sum", "partial rank 0", "partial rank 1"} <= gids
    finally:
        i18n.set_language("en")


# ---- Chinese output ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("a_split, b_split", [(a, b) for a in KINDS for b in KINDS])
@pytest.mark.parametrize("ranks", [1, 4])
def test_the_explorer_text_is_chinese(zh, a_split, b_split, ranks):
    text = mlp_split_frame(a_split, b_split, ranks, figure=False)[1]
    assert not english_words(text), english_words(text)
    assert f"共 {ranks} 个 rank" in text and "每个 rank 发送" in text
    exact = a_split == "column" or ranks == 1  # on one rank a partial sum is the whole sum
    assert ("精确" in text) == exact and ("错误" in text) == (not exact)


def test_the_steps_table_player_and_figure_are_chinese(zh, real):
    steps = block_steps("mlp", 4, 8, 8, 16, itemsize=4)
    assert not english_words(steps_text(steps))
    frames = [step_frame(k, steps, real) for k in range(len(steps))]
    assert all(not english_words(f) for f in frames)
    assert "真实运行：反向全归约 ×1" in frames[-1]
    fig = draw_tp_steps(steps, current=3, real=real)
    texts = [t.get_text() for t in fig.axes[0].texts] + [fig.axes[0].get_title()]
    assert all(not english_words(t) for t in texts), [t for t in texts if english_words(t)]
    counts = next(t for t in texts if t.startswith("真实运行"))
    assert counts.count("\n") == 1 and counts.split("\n")[1].startswith("每个 rank 发送的字节数")


def test_the_split_figure_title_and_legend_are_chinese(zh):
    fig = draw_split(split_linear("column", 4, [[1] * 8] * 2, [[1] * 12] * 8))
    ax = fig.axes[0]
    shown_text = [ax.get_title()] + [t.get_text() for t in ax.texts] + [t.get_text() for t in ax.get_legend().get_texts()]
    assert ax.get_title().startswith("列并行，共 4 个 rank：结果用全收集")
    assert all(not english_words(t) for t in shown_text), shown_text


def test_the_explorer_labels_are_chinese_and_its_values_stay_the_simulators(zh):
    panel = mlp_explorer()
    assert repr(panel) == "▶ 运行这个单元格，获得拆分探索器"
    a, b = panel.children[0].children
    assert a.options == (("按列", "column"), ("按行", "row")) and (a.value, b.value) == ("column", "row")
    assert a.description == "A 拆分" and panel.children[1].description == "TP 大小"


def test_the_graders_lines_are_chinese(zh, real, capsys):
    right = 2 * (MLP_RUN["world_size"] - 1) * MLP_RUN["batch"] * MLP_RUN["seq"] * MLP_RUN["hidden"] * 4 // 4
    check_split_choice(0, 1, "b", real)
    check_forward_bytes(right, real)
    with pytest.raises(AssertionError, match="对应 A 的列"):
        check_split_choice(1, 1, "b", real)
    with pytest.raises(AssertionError, match="不是原因"):
        check_split_choice(0, 1, "d", real)
    with pytest.raises(AssertionError, match="每个 rank 的字节数"):
        check_forward_bytes(right * 2, real)
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("：")[0] for line in lines] == ["MLP 的拆分", "前向字节数", "MLP 的拆分", "MLP 的拆分", "前向字节数"]
    assert ["✓" in line for line in lines] == [True, True, False, False, False]
    assert "nn.Linear 把 A 转置存储" in lines[2] and "f 的前向是恒等" in lines[3]
    assert "f 对 dX 的全归约发生在反向" in lines[4]
    assert all(not english_words(line) for line in lines), [english_words(line) for line in lines]
    with pytest.raises(NotImplementedError, match="^练习：请在上面的单元格里写下你的预测$"):
        check_forward_bytes(None, real)


# ---- the generated notebooks -------------------------------------------------------------------------------

def outputs(path: str, cell_id: str) -> str:
    cell = next(c for c in nbformat.read(ROOT / path, as_version=4).cells if c.id == cell_id)
    return "".join(o.get("text", "") or o.get("data", {}).get("text/plain", "") for o in cell.outputs)


@pytest.mark.parametrize("path, cell_id, chinese, english", [
    ("notebooks/{}05_tensor_parallel.ipynb", "d4abf418", "前向：1 次集合通信，每个 rank 发送 384 B", "forward: 1 collective"),
    ("notebooks/{}05_tensor_parallel.ipynb", "a8c68087", "真实运行，4 个进程：前向全归约 ×1", "real run, 4 processes"),
    ("notebooks/{}05_tensor_parallel.ipynb", "ff4c37e5", "▶ 运行这个单元格，获得拆分探索器", "▶ run this cell"),
    ("solutions/{}05_tensor_parallel.ipynb", "3138e8d3", "RowParallelLinear：✓ TP 大小为 1、2、4", "TP sizes 1, 2, 4"),
    ("solutions/{}05_tensor_parallel.ipynb", "l5-check-bytes", "前向字节数：✓ 每个 rank 432 B", "forward bytes: ✓"),
])
def test_the_zh_notebooks_store_chinese_where_simlab_prints(path, cell_id, chinese, english):
    assert chinese in outputs(path.format("zh/"), cell_id)
    assert english in outputs(path.format(""), cell_id) and not CJK.search(outputs(path.format(""), cell_id))
