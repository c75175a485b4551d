"""A Chinese-only reader finds their way: `make lab LANG=zh` (or a Chinese locale) opens the Chinese start page,
the Chinese lesson 0 grades the Chinese exercises, an exercise stub says what to do in Chinese, and a grader's
line uses Chinese punctuation."""
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import lab  # noqa: E402 — after sys.path gains tools/
import make_exercises  # noqa: E402 — after sys.path gains tools/

pytestmark = pytest.mark.usefixtures("english_afterwards")  # tests/conftest.py: English again after each test


@pytest.mark.parametrize("env, language", [
    ({"LANG": "zh"}, "zh"),  # make lab LANG=zh
    ({"LANG": "zh_CN.UTF-8"}, "zh"),
    ({"LANG": "en_US.UTF-8", "LC_ALL": "zh_TW.UTF-8"}, "zh"),  # LC_ALL wins over LANG, as for a locale
    ({"LANG": "zh_CN.UTF-8", "LC_ALL": "C.UTF-8"}, "en"),
    ({"LANG": "zh_CN.UTF-8", "SIMLAB_LANG": "en"}, "en"),  # simlab's own switch wins
    ({"SIMLAB_LANG": "zh"}, "zh"),
    ({}, "en"),
    ({"LANG": ""}, "en"),
])
def test_the_course_language_comes_from_make_lab_lang_or_the_locale(env, language):
    assert lab.course_language(env) == language


def test_the_chinese_start_page_opens_where_the_copy_has_it(tmp_path):
    (tmp_path / "notebooks/zh").mkdir(parents=True)
    (tmp_path / "notebooks/00_start_here.ipynb").write_text("{}")
    assert lab.page_for(tmp_path, "en") == Path("notebooks/00_start_here.ipynb")
    assert lab.page_for(tmp_path, "zh") == Path("notebooks/00_start_here.ipynb")  # no Chinese copy: English
    (tmp_path / "notebooks/zh/00_start_here.ipynb").write_text("{}")
    assert lab.page_for(tmp_path, "zh") == Path("notebooks/zh/00_start_here.ipynb")
    assert (ROOT / lab.ZH_START).exists()  # the page it names is the one tools/build_zh.py writes


def test_the_makefile_documents_make_lab_lang_zh():
    assert "make lab LANG=zh" in (ROOT / "Makefile").read_text(encoding="utf-8")


def _markdown(path: str) -> str:
    return "\n".join("".join(c["source"]) for c in json.loads((ROOT / path).read_text(encoding="utf-8"))["cells"]
                     if c["cell_type"] == "markdown")


def test_the_chinese_lesson_0_grades_the_chinese_exercises():
    text = _markdown("notebooks/zh/00_start_here.ipynb")
    assert "pytest --nbval work/exercises/zh/01_collectives.ipynb" in text
    assert "pytest --nbval work/exercises/01_collectives.ipynb" not in text
    assert "pytest --nbval work/exercises/01_collectives.ipynb" in _markdown("notebooks/00_start_here.ipynb")


def test_a_chinese_exercise_stub_says_what_to_do_in_chinese():
    stubs = {path.name: path.read_text(encoding="utf-8") for path in (ROOT / "exercises/zh").glob("*.ipynb")}
    assert len(stubs) == 8  # one per graded lesson: 1–7 and 5b
    for name, text in stubs.items():
        assert "exercise: write your answer here" not in text, name
    assert sum(text.count("练习：请在这里写下你的答案") for text in stubs.values()) >= 20
    english = "".join(p.read_text(encoding="utf-8") for p in (ROOT / "exercises").glob("*.ipynb"))
    assert "练习：" not in english and "exercise: write your answer here" in english


def test_the_stub_follows_the_notebooks_language():
    source = "x = 1\n### BEGIN SOLUTION\nx = 2\n### END SOLUTION"
    assert 'raise NotImplementedError("exercise: write your answer here")' in make_exercises.strip_solutions(
        source, "code")
    assert 'raise NotImplementedError("练习：请在这里写下你的答案")' in make_exercises.strip_solutions(
        source, "code", "zh")
    assert make_exercises.strip_solutions("a\n### BEGIN SOLUTION\nb\n### END SOLUTION", "markdown", "zh") == \
        "a\n*请在这里写下你的答案。*"


def test_grader_lines_use_full_width_colons_in_chinese(capsys):
    from simlab.grading.common import CheckFailed, fail, passed
    from simlab.i18n import set_language
    passed("环形全收集计划", "18 种情形")
    passed("显存", "15 块 GPU", case="阶段 3")
    set_language("zh")
    passed("环形全收集计划", "18 种情形")
    passed("显存", "15 块 GPU", case="阶段 3")
    with pytest.raises(CheckFailed):
        fail("预测", "rank 2", "你的答案是 60")
    assert capsys.readouterr().out.splitlines() == [
        "环形全收集计划: ✓ 18 种情形", "显存: ✓ 阶段 3: 15 块 GPU",  # English: ASCII, as before
        "环形全收集计划：✓ 18 种情形", "显存：✓ 阶段 3：15 块 GPU", "预测：✗ rank 2：你的答案是 60"]
