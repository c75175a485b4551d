"""Lesson 2 in Chinese: its translations are complete and current, what its modules print is translated with the
same fields, the Chinese text tables still line up, the graders give the same reasons in Chinese, and English
stays English. (tests/test_i18n.py checks the whole course the same way; this file checks lesson 2 alone, so a
lesson being translated elsewhere at the same time cannot hide a lesson-2 problem.)"""
import io
import re
import sys
import unicodedata
import warnings
from pathlib import Path

import matplotlib
import nbformat
import pytest

matplotlib.use("Agg")

from simlab import i18n  # noqa: E402 — after matplotlib.use("Agg")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "tests"))
import build_zh  # noqa: E402 — after sys.path gains tests/
import make_exercises  # noqa: E402 — after sys.path gains tests/
import test_i18n  # noqa: E402 — after sys.path gains tests/

MODULES = ("simlab/render/data_parallel_timeline.py", "simlab/render/data_parallel.py",
           "simlab/grading/data_parallel.py")
PO = ROOT / "simlab/locale/zh/LC_MESSAGES/data_parallel.po"
FILES = [ROOT / "i18n/zh/notebooks/02_data_parallel.yaml", ROOT / "i18n/zh/solutions/02_data_parallel.yaml"]


@pytest.fixture
def zh():
    i18n.set_language("zh")
    yield
    i18n.set_language("en")


def width(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


# ---- the translation files and the generated notebooks ----------------------------------------------------

@pytest.mark.parametrize("path", FILES, ids=lambda p: p.parent.name)
def test_every_cell_is_translated_and_none_drifted(path):
    data = build_zh.load(path)
    english = nbformat.read(ROOT / data["source"], as_version=4)
    assert build_zh.problems_of(path, data, english) == []
    assert all(isinstance(cell_id, str) for cell_id in data["cells"])  # an all-digit id must be quoted


def test_the_generated_lesson_is_current(monkeypatch):
    monkeypatch.setattr(build_zh, "ONLY", ["02_data_parallel"])
    assert build_zh.build(check=True) == []


def test_generated_notebooks_keep_the_code_and_print_chinese_where_simlab_prints():
    for path in FILES:
        data = build_zh.load(path)
        english = nbformat.read(ROOT / data["source"], as_version=4)
        nb = nbformat.read(build_zh.target(data["source"], path.parent.name), as_version=4)
        assert [c.id for c in nb.cells[1:]] == [c.id for c in english.cells]
        for zh_cell, en_cell in zip(nb.cells[1:], english.cells):
            if en_cell.cell_type == "code":  # only comments, literals and `_()` around a value differ
                assert build_zh.same_code(en_cell.source, zh_cell.source), en_cell.id
                assert "NBVAL_IGNORE_OUTPUT" not in en_cell.source or zh_cell.source.startswith("# NBVAL_IGNORE_OUTPUT")

    def text(path, cell_id):
        cell = next(c for c in nbformat.read(ROOT / path, as_version=4).cells if c.id == cell_id)
        return "".join(make_exercises._output_text(o) for o in cell.outputs)
    assert "r0 计算 |" in text("notebooks/zh/02_data_parallel.ipynb", "c66466ec")
    assert "运行这个单元格" in text("notebooks/zh/02_data_parallel.ipynb", "e7eda3b8")
    assert "DDP 分桶：✓" in text("solutions/zh/02_data_parallel.ipynb", "336a2b66")
    assert "DDP 预测：✓ 4 个桶" in text("solutions/zh/02_data_parallel.ipynb", "l2-predict-real")
    assert "r0 compute |" in text("notebooks/02_data_parallel.ipynb", "c66466ec")  # English stays English


def test_every_section_opens_with_the_primer_or_says_it_does_not_cover_it():
    """The house style of the Chinese course (lesson 6): a numbered section quotes the primer (> 原文：…, checked
    verbatim against /work/shared/seed/primer-zh.txt when the course was translated) or says 原文未涉及."""
    sections = 0
    for path in FILES:
        for cell_id, entry in build_zh.load(path)["cells"].items():
            for section in re.split(r"^(?=## )", str(entry.get("zh", "")), flags=re.M)[1:]:
                if not section.startswith(("## 小结", "## DP 与 DDP 一览")):  # the summary and the table
                    sections += 1
                    assert re.search(r"^> 原文(：|未涉及)", section, re.M), (cell_id, section[:40])
    assert sections == 6  # §1–5 of the lesson, "predict, then run" of the exercise


# ---- the messages -------------------------------------------------------------------------------------------

def marked_in_my_modules() -> set[str]:
    return {m for m, where in test_i18n.marked_messages().items() if where.split(":")[0] in MODULES}


def test_every_message_of_lesson_2_has_a_chinese_entry_with_its_fields():
    catalog, mine = i18n.entries("zh"), marked_in_my_modules()
    assert len(mine) > 80
    assert sorted(m for m in mine if m not in catalog) == []
    for message in mine:
        assert set(test_i18n.FIELD.findall(catalog[message])) <= set(test_i18n.FIELD.findall(message)), message
        assert test_i18n.CJK.search(catalog[message]), message
    own = {k for k in i18n.read_po(PO.read_text(encoding="utf-8")) if k}
    assert sorted(own - set(test_i18n.marked_messages())) == []  # no entry that no code uses


def test_lesson_2_renders_each_glossary_term_one_way():
    texts = [t for t in test_i18n.chinese_texts() if "02_data_parallel" in t[0]]
    po = i18n.read_po(PO.read_text(encoding="utf-8"))
    texts += [(f"data_parallel.po: {k[:40]!r}", v, k) for k, v in po.items() if k]
    assert len(texts) > 100
    for chinese, variants, pattern in test_i18n.TERMS.values():
        assert [(where, v) for where, text, _en in texts for v in variants if v in text] == []
        if pattern:
            assert [where for where, text, en in texts if re.search(pattern, en, re.I) and chinese not in text] == []


# ---- what the package prints, in Chinese ---------------------------------------------------------------------

def test_chinese_text_timeline_lines_up_like_the_english_one(zh):
    from simlab.render.data_parallel_timeline import lanes_text
    from simlab.sim.data_parallel import simulate_ddp, simulate_dp, workload_from_layers
    for result in (simulate_dp(workload_from_layers()), simulate_ddp(workload_from_layers())):
        lines = lanes_text(result.trace, 4, width=60).splitlines()
        assert lines[0].startswith("时间 0 .. ") and "每列" in lines[0]
        rows = lines[1:-1]
        assert [row.split(" |")[0].split()[1] for row in rows] == ["计算", "通信"] * 4
        assert {width(row.split("|")[0]) for row in rows} == {width("r0 计算 ")}  # the bars start in one column
        assert {len(row.split("|")[1]) for row in rows} == {60}
        legend = lines[-1]
        assert "前向" in legend and not re.search(r"\b(fwd|bwd|update)\b", legend)


def test_bar_labels_are_translated_and_measured_in_display_columns(zh):
    from simlab.render.data_parallel_timeline import _label, _shown_name
    from simlab.trace import Event
    assert _shown_name("bwd L3") == "反向 L3" and _shown_name("all-reduce b2") == "全归约 b2"
    assert _shown_name("reduce grads") == "归约梯度" and _shown_name("bwd fc1.weight") == "反向 fc1.weight"
    # "归约梯度" is 4 characters but 8 columns: a bar just wide enough for 5 columns does not hold it
    bar = Event(0, "comm", 0, name="reduce grads", start=0.0, end=5 * 1.0 / 85)
    assert _label(bar, 1.0) is None
    i18n.set_language("en")
    assert _label(bar, 1.0) is None and _shown_name("bwd L3") == "bwd L3"  # "reduce grads" needs 13 columns


def test_the_dp_ddp_figure_draws_chinese_without_missing_glyphs(zh):
    from simlab.render.data_parallel_timeline import draw_dp_vs_ddp
    from simlab.sim.data_parallel import simulate_ddp, simulate_dp, workload_from_layers
    w = workload_from_layers()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fig = draw_dp_vs_ddp(simulate_dp(w), simulate_ddp(w))
        fig.savefig(io.BytesIO(), format="png")
    assert [str(c.message) for c in caught if "missing from font" in str(c.message)] == []
    ax_dp, ax_ddp = fig.axes
    assert "星形模型" in ax_dp.get_title(loc="left") and "分 3 个桶" in ax_ddp.get_title(loc="left")
    assert ax_ddp.get_xlabel() == "时间（ms）"
    assert [t.get_text() for t in ax_dp.get_yticklabels()][:2] == ["r0 计算", "r0 通信"]
    assert "复制模型" in [t.get_text() for t in ax_dp.get_legend().get_texts()]


def test_the_explorer_speaks_chinese_and_a_tie_is_still_a_tie(zh):
    from simlab.render.data_parallel import dp_ddp_explorer
    panel = dp_ddp_explorer()
    assert repr(panel) == "▶ 运行这个单元格，获得 DP 与 DDP 对比探索器"
    assert "更快：DDP" in panel.summary.value and "策略" in panel.summary.value
    assert panel.knobs["world_size"].description == "进程总数"
    panel.knobs["world_size"].value = 1
    assert "更快：打平" in panel.summary.value


def test_the_real_run_readout_in_chinese():
    """real_frame's text from a real 2-process run: every line translated, the real numbers kept."""
    from simlab.parity.data_parallel import run_dp_and_ddp
    from simlab.render.data_parallel import real_frame
    result = run_dp_and_ddp(2, 25.0, 58720256, steps=2)
    english = real_frame(result)[1]
    i18n.set_language("zh")
    try:
        fig, text, _links = real_frame(result)
    finally:
        i18n.set_language("en")
    assert len(text.splitlines()) == len(english.splitlines()) == 5
    assert "模拟器分出的桶相同" in text and "一致性：" in text and "rank 0 每步发送的字节数" in text
    numbers = lambda s: re.findall(r"\d(?:[\d,.e+-]*\d)?", s)  # noqa: E731 — a local one-liner, applied to both texts
    assert numbers(text) == numbers(english.replace("1 process", "单进程"))  # the same numbers, in order
    assert "2 个进程上的真实 DDP" in fig.axes[0].get_title(loc="left")


def test_graders_name_the_same_mistakes_in_chinese(zh, capsys):
    from simlab.grading.data_parallel import check_bucketing, check_ddp_prediction
    from simlab.sim.data_parallel_buckets import BucketReadiness

    def forwards(sizes, cap):  # packs first to last: the order mistake
        buckets, current, used = [], [], 0
        for i, size in enumerate(sizes):
            if current and used + size > cap:
                buckets.append(current)
                current, used = [], 0
            current.append(i)
            used += size
        return buckets + [current] if current else buckets
    with pytest.raises(AssertionError):
        check_bucketing(forwards, BucketReadiness)
    line = capsys.readouterr().out
    assert line == ("DDP 分桶：✗ 小 MLP 8-16-16-4, cap_bytes=1：桶 [[0], [1], [2], [3], [4], [5]]：要从最后一个参数往前"
                    "遍历（反向传播最先算出最后一层的梯度），所以下标依次是 5, 4, … 0\n")
    real = {"world_size": 4, "param_numels": [512, 32, 1024, 32, 1024, 32, 128, 4],
            "buckets": [[7, 6, 5, 4, 3], [2, 1], [0]], "bytes_sent_per_rank": [16728] * 4}
    with pytest.raises(AssertionError):
        check_ddp_prediction(3, 11152, real)  # the model once
    assert capsys.readouterr().out == ("DDP 预测：✗ 预测了 11,152 字节：这不是 rank 0 一步发送的字节数："
                                       "这只是一份模型的字节数：环形全归约是一次归约分散加一次全收集，"
                                       "两者各发送每个桶的 (N-1)/N\n")  # the concept, not the measured 16,728
    check_ddp_prediction(3, 16728, real)
    assert capsys.readouterr().out == "DDP 预测：✓ 3 个桶，rank 0 每步发送 16,728 字节，与真实运行测得的一致\n"
    with pytest.raises(NotImplementedError, match="^练习：运行之前先设置"):
        check_ddp_prediction(None, None, real)
