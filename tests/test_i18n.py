"""The Chinese course stays true to the English one, and simlab speaks the language it is told.

- tools/build_zh.py: no translation drifted from its English cell, none is missing, the generated notebooks
  (notebooks/zh, solutions/zh, exercises/zh) are current; and each of those failures is detected.
- gettext: every message marked with `_()`/`N_()` has a Chinese entry with the same {fields}, every entry
  is used, the in-memory .mo compiles the .po faithfully; `set_language` / SIMLAB_LANG switch the output.
- glossary: each term is rendered the one way GLOSSARY.md gives, in every Chinese text we ship.
"""
import ast
import gettext
import io
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from simlab import i18n

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import build_zh  # noqa: E402 — after sys.path gains tools/
import make_exercises  # noqa: E402 — after sys.path gains tools/

CJK = re.compile(r"[\u4e00-\u9fff]")
FULL_WIDTH = re.compile(r"[\u3000-\u303f\uff00-\uffef]")  # Chinese punctuation: ，。：；（）
FIELD = re.compile(r"\{(\w*)[^{}]*\}")


pytestmark = pytest.mark.usefixtures("english_afterwards")  # tests/conftest.py: English again after each test


def translations():
    return [(path, build_zh.load(path)) for path in build_zh.translation_files()]


# ---- drift, missing, stale -------------------------------------------------------------------------------

def test_every_lesson_and_solution_is_translated():
    sources = sorted(data["source"] for _path, data in translations())
    english = sorted(f"{folder}/{p.name}" for folder in build_zh.FOLDERS for p in (ROOT / folder).glob("*.ipynb"))
    assert sources == english


@pytest.mark.parametrize("path", build_zh.translation_files(), ids=lambda p: p.stem)
def test_no_translation_drifted_or_is_missing(path):
    data = build_zh.load(path)
    english = nbformat.read(ROOT / data["source"], as_version=4)
    assert build_zh.problems_of(path, data, english) == []


def test_the_generated_chinese_course_is_current():
    """As tests/test_course.py does for exercises/: rerun `python tools/build_zh.py --run` when this fails."""
    problems = build_zh.build(check=True)
    assert problems == [], "\n".join(problems)


def _english_and_data():
    data = build_zh.load(ROOT / "i18n/zh/notebooks/06_choosing_a_strategy.yaml")
    return nbformat.read(ROOT / data["source"], as_version=4), data


def test_drift_missing_and_orphans_are_reported():
    english, data = _english_and_data()
    path = ROOT / "i18n/zh/notebooks/06_choosing_a_strategy.yaml"
    english.cells[0].source += " One more sentence."  # the English title cell changed
    del data["cells"]["l6-summary"]  # a markdown cell without a translation
    data["cells"]["l6-gone"] = {"en_sha": "0" * 12, "zh": "旧的"}  # a cell that no longer exists
    data["cells"]["l6-calibrate"]["comments"]["# a comment the code no longer has"] = "# 已删除的注释"
    found = "\n".join(build_zh.problems_of(path, data, english))
    assert "drift: l6-title changed in English" in found
    assert "missing: no translation of markdown cell l6-summary" in found
    assert "orphan: no cell 'l6-gone'" in found
    assert "no longer has the comment '# a comment the code no longer has'" in found


def test_a_stale_or_unrun_generated_notebook_is_reported(tmp_path, monkeypatch):
    """A copy of the tree with lesson 0 only: fresh → not run; a hand edit → stale; a new English cell →
    missing."""
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "GLOSSARY.md").write_text("")
    (tmp_path / "notebooks/zh").mkdir()
    (tmp_path / "notebooks/zh/01_collectives.ipynb").write_text("")  # lesson 0 links to the next lesson
    english_path = tmp_path / "notebooks/00_start_here.ipynb"
    english_path.write_text((ROOT / "notebooks/00_start_here.ipynb").read_text())
    (tmp_path / "i18n/zh/notebooks").mkdir(parents=True)
    (tmp_path / "i18n/zh/notebooks/00_start_here.yaml").write_text(
        (ROOT / "i18n/zh/notebooks/00_start_here.yaml").read_text())
    monkeypatch.setattr(build_zh, "ROOT", tmp_path)
    monkeypatch.setattr(build_zh, "I18N", tmp_path / "i18n" / "zh")
    monkeypatch.setattr(build_zh, "ONLY", ["00_start"])  # the placeholder next lesson is not built here
    assert build_zh.build(check=True) == ["stale: notebooks/zh/00_start_here.ipynb: run python tools/build_zh.py --run"]
    assert build_zh.build(check=False) == []
    assert build_zh.build(check=True) == [
        "not run: notebooks/zh/00_start_here.ipynb: run python tools/build_zh.py --run"]
    generated = tmp_path / "notebooks/zh/00_start_here.ipynb"
    nb = nbformat.read(generated, as_version=4)
    nb.cells[1].source += "\n手工改动"
    nbformat.write(nb, generated)
    assert build_zh.build(check=True)[0].startswith("stale: notebooks/zh/00_start_here.ipynb")
    nb = nbformat.read(english_path, as_version=4)
    nb.cells.append(nbformat.v4.new_markdown_cell("A new paragraph.", id="l0-new"))
    nbformat.write(nb, english_path)
    assert any("missing: no translation of markdown cell l0-new" in p for p in build_zh.build(check=True))


def test_generated_notebooks_set_the_language_first_and_keep_the_code():
    for path, data in translations():
        english = nbformat.read(ROOT / data["source"], as_version=4)
        nb = nbformat.read(build_zh.target(data["source"], path.parent.name), as_version=4)
        assert nb.cells[0].id == build_zh.LANGUAGE_CELL_ID and 'simlab.set_language("zh")' in nb.cells[0].source
        assert [c.id for c in nb.cells[1:]] == [c.id for c in english.cells]
        for zh, en in zip(nb.cells[1:], english.cells):
            if zh.cell_type == "markdown":
                assert len(CJK.findall(zh.source)) > 0.2 * len(zh.source.split()), zh.id  # Chinese, not a copy
            else:  # the same code: only comments, literals (labels, keys, titles) and `_()` around a value differ
                assert build_zh.same_code(en.source, zh.source), zh.id


def test_the_zh_lesson_6_prints_in_chinese_where_the_package_prints():
    """The mechanism end to end: stored outputs (what nbval compares) of simlab's text are Chinese."""
    def text(path, cell_id):
        cell = next(c for c in nbformat.read(ROOT / path, as_version=4).cells if c.id == cell_id)
        return "".join(make_exercises._output_text(o) for o in cell.outputs)
    assert "个进程（gloo）" in text("notebooks/zh/06_choosing_a_strategy.ipynb", "l6-run")
    assert "原文（多机多GPU）" in text("notebooks/zh/06_choosing_a_strategy.ipynb", "l6-nodes-slow")
    assert "运行这个单元格" in text("notebooks/zh/06_choosing_a_strategy.ipynb", "l6-explorer")
    assert "每块 GPU 占用" in text("solutions/zh/06_choosing_a_strategy.ipynb", "x6-choose-check")
    assert "primer (" in text("notebooks/06_choosing_a_strategy.ipynb", "l6-nodes-slow")  # English stays English


def _nbval(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "--nbval", str(path), "-q", "-p", "no:cacheprovider",
                           "--override-ini=addopts=", "--timeout=600"],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)


@pytest.mark.slow
def test_the_chinese_exercise_fails_on_its_stubs():
    stub = _nbval(ROOT / "exercises/zh/06_choosing_a_strategy.ipynb")
    assert stub.returncode == 1 and "NotImplementedError" in stub.stdout, stub.stdout[-2000:]


# ---- gettext ---------------------------------------------------------------------------------------------

def marked_messages() -> dict[str, str]:
    """{message: where} for every `_("…")` and `N_("…")` call with a literal in simlab/, and every simulator
    `Message("…", …)` (sim/ never translates: the layer that prints it says it through `_`)."""
    found = {}
    for path in sorted((ROOT / "simlab").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("_", "N_", "Message")
                    and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                found.setdefault(node.args[0].value, f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def zh_catalog() -> dict[str, str]:
    return i18n.entries("zh")  # every lesson's .po, merged


def test_every_marked_message_has_a_chinese_entry_with_its_fields():
    marked, catalog = marked_messages(), zh_catalog()
    assert len(marked) > 50  # lesson 6's renderers and graders, at least
    assert [f"{where}: {m!r}" for m, where in marked.items() if m not in catalog] == []
    for message, chinese in catalog.items():
        if message:  # "" is the header
            # a translation may drop an English plural ending ({s}) but never invents or renames a field
            assert set(FIELD.findall(chinese)) <= set(FIELD.findall(message)), message
            assert CJK.search(chinese) or FULL_WIDTH.search(chinese), message  # a colon alone may be all it changes
    assert sorted(m for m in catalog if m and m not in marked) == [], "entries no code uses"


def test_the_catalog_compiles_to_what_gettext_reads():
    catalog = zh_catalog()
    mo = i18n.mo_bytes(catalog)
    assert mo == i18n.mo_bytes(dict(reversed(list(catalog.items()))))  # deterministic, whatever the order
    translations = gettext.GNUTranslations(io.BytesIO(mo))
    assert all(translations.gettext(k) == v for k, v in catalog.items() if k)
    assert translations.gettext("not in the catalog") == "not in the catalog"


def test_po_strings_with_escapes_and_continuations_round_trip():
    po = ('msgid ""\nmsgstr "Content-Type: text/plain; charset=UTF-8\\n"\n\n'
          '# a comment\nmsgid "a \\"quoted\\" {x}\\n"\n"second line"\nmsgstr "引号 \\"{x}\\"\\n"\n"第二行"\n\n'
          'msgid "untranslated"\nmsgstr ""\n')
    entries = i18n.read_po(po)
    assert entries['a "quoted" {x}\nsecond line'] == '引号 "{x}"\n第二行' and "untranslated" not in entries
    translations = gettext.GNUTranslations(io.BytesIO(i18n.mo_bytes(entries)))
    assert translations.gettext('a "quoted" {x}\nsecond line') == '引号 "{x}"\n第二行'
    with pytest.raises(ValueError, match="line 1 of the .po"):
        i18n.read_po("msgid unquoted")


def test_set_language_switches_what_simlab_prints(capsys):
    from simlab.grading.hybrid import BUDGETS, check_tp_bytes_prediction
    from simlab.render.hybrid_run import time_text
    result = {"predicted_step_seconds": 0.5, "measured_step_seconds": 0.4, "predicted_breakdown": {"compute": 0.5}}
    fake_run = lambda **kw: {"bytes_sent_per_group": {"tp": [147456]}}  # noqa: E731 — a stand-in for the real run
    assert time_text(result).startswith("step time: predicted 500.0 ms")
    i18n.set_language("zh")
    assert time_text(result).startswith("每步时间：预测 500.0 ms，实测 400.0 ms")
    assert BUDGETS["70b-ethernet"].text.startswith("Llama-2 70B，64 × A100 80 GB")
    check_tp_bytes_prediction(147456, run=fake_run)
    assert capsys.readouterr().out == ("3D 并行运行，TP 字节数：✓ 你的答案是 147,456 B；"
                                       "rank 0 一步内在它的 TP 组上发送的正是这么多\n")
    i18n.set_language("en")
    assert BUDGETS["70b-ethernet"].text.startswith("Llama-2 70B on 64 × A100")
    with pytest.raises(ValueError, match=r"^language='de': must be one of en, zh$"):
        i18n.set_language("de")


@pytest.mark.parametrize("value, expected", [("zh", "zh"), ("zh_CN.UTF-8", "zh"), ("", "en"), ("fr", "en")])
def test_simlab_lang_picks_the_language_when_none_was_set(monkeypatch, value, expected):
    monkeypatch.setitem(i18n._state, "language", None)
    monkeypatch.setenv("SIMLAB_LANG", value)
    assert i18n.language() == expected


def test_import_simlab_stays_light_and_exports_set_language():
    code = ("import sys, simlab; before = 'matplotlib' in sys.modules; simlab.set_language('en'); "
            "print(before, 'matplotlib' in sys.modules, simlab.set_language.__module__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.split() == ["False", "False", "simlab.i18n"]


# ---- glossary --------------------------------------------------------------------------------------------

# English row of GLOSSARY.md → (the course's Chinese for it, renderings that must not appear, the English words
# that, in an English cell, require the Chinese term in its translation)
TERMS = {
    "data parallelism (the family)": ("数据并行", ["资料并行"], r"\bdata[- ]parallel"),
    "tensor parallel (TP)": ("张量并行", ["张量平行"], r"\btensor[- ]parallel"),
    "pipeline parallel (PP)": ("流水线并行", ["管道并行", "管线并行"], r"\bpipeline[- ]parallel"),
    "micro-batch": ("微批次", ["微批量", "小批次", "微型批次"], r"\bmicro-batch"),
    "all-reduce": ("全归约", ["全规约", "全局归约"], r"(?<![-\w])all-reduce"),  # not `ring-all-reduce`
    "reduce-scatter": ("归约分散", ["规约分散"], r"(?<![-\w])reduce-scatter"),
    "all-gather": ("全收集", ["全聚集", "全局收集"], r"(?<![-\w])all-gather"),
    "pipeline bubble (idle time)": ("气泡", ["空泡"], r"\bbubble"),
    "activation recomputation (checkpointing)": ("激活重计算", ["激活检查点", "重新计算激活"],
                                                 r"\bactivation recomputation"),
    "zero redundancy optimizer (ZeRO)": ("零冗余优化器", ["零冗余优化算法"], None),
    "GPU memory": ("显存", ["GPU内存", "GPU 内存"], None),
    "process group": ("进程组", ["进程群组"], r"\bprocess group"),
    "3-D parallelism": ("3D 并行", ["三维并行"], r"\b3-D parallelism"),
    "sequence parallelism": ("序列并行", [], r"\bsequence parallelism"),
    "when to use what": ("适用场景", [], None),
}


def chinese_texts():
    """(where, Chinese text, the English it translates) for every text we ship in Chinese; quotes of the
    primer (lines starting '> 原文') are the primer's words, not ours, and are left out."""
    out = []
    for path, data in translations():
        english = {c.id: c.source for c in nbformat.read(ROOT / data["source"], as_version=4).cells}
        for cell_id, entry in data["cells"].items():
            ours = "\n".join(line for line in str(entry.get("zh", "")).splitlines() if not line.startswith("> 原文"))
            comments = entry.get("comments") or {}
            out.append((f"{path.name}:{cell_id}", ours + "\n".join(comments.values()),
                        english.get(cell_id, "") if ours else "\n".join(comments)))
    out += [(f"locale/zh: {k[:40]!r}", v, k) for k, v in zh_catalog().items() if k]
    return out


def test_the_glossary_gives_each_term_as_the_course_writes_it():
    import test_glossary
    rows = {r[0]: r[1] for r in test_glossary.rows()}
    for english, (chinese, _variants, _pattern) in TERMS.items():
        assert chinese in rows[english], f"GLOSSARY.md's row {english!r} does not give {chinese}"


@pytest.mark.parametrize("english", TERMS)
def test_each_term_is_rendered_one_way_everywhere(english):
    chinese, variants, pattern = TERMS[english]
    texts = chinese_texts()
    assert [(where, v) for where, text, _en in texts for v in variants if v in text] == []
    if pattern:  # wherever the English says it, the Chinese says it the glossary's way
        untranslated = [where for where, text, en in texts if re.search(pattern, en, re.I) and chinese not in text]
        assert untranslated == [], f"{english!r} not rendered as {chinese}"
