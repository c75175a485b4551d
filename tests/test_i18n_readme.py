"""README.zh.md covers what README.md covers: the same sections, at the same levels, in the same order. Each
Chinese heading ends with its English heading in full-width brackets — "## 命令行（Command line）" — so the
two lists compare exactly; a section added to one README and not the other fails here. And the set-up line a
reader in mainland China needs: how to point set-up at a mirror of PyTorch's CPU index.
"""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def headings(text: str) -> list[tuple[int, str]]:
    """(level, title) of every Markdown heading outside code blocks."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"^(#{1,6}) (.+)$", line)):
            out.append((len(m.group(1)), m.group(2).strip()))
    return out


def english_of(title: str) -> str:
    """'命令行（Command line）' → 'Command line': the English heading a Chinese one carries at its end."""
    m = re.search(r"（([^（）]*(?:（[^（）]*）[^（）]*)*)）$", title)
    return m.group(1) if m else ""


def test_the_chinese_readme_has_every_section_of_the_english_one():
    english = headings((ROOT / "README.md").read_text(encoding="utf-8"))
    chinese = headings((ROOT / "README.zh.md").read_text(encoding="utf-8"))
    assert len(english) >= 10
    assert [(level, english_of(title)) for level, title in chinese] == english
    assert all(re.search(r"[\u4e00-\u9fff]", title) for _level, title in chinese)  # the titles are Chinese


def test_the_comparison_catches_a_missing_or_moved_section():
    english = headings("# A\n## B\n```\n# not a heading\n```\n## C\n")
    assert english == [(1, "A"), (2, "B"), (2, "C")]
    moved = headings("# 甲（A）\n## 丙（C）\n## 乙（B）\n")
    assert [(level, english_of(t)) for level, t in moved] != english
    missing = headings("# 甲（A）\n## 乙（B）\n")
    assert [(level, english_of(t)) for level, t in missing] != english


def test_the_chinese_readme_says_how_to_point_set_up_at_a_mirror():
    text = (ROOT / "README.zh.md").read_text(encoding="utf-8")
    assert "TORCH_CPU_INDEX=" in text and "PIP_INDEX_URL=" in text and "镜像" in text
    assert "make lab LANG=zh" in text  # and how to open the Chinese course


def test_the_readmes_point_at_each_other():
    assert "README.zh.md" in (ROOT / "README.md").read_text(encoding="utf-8")
    assert "README.md" in (ROOT / "README.zh.md").read_text(encoding="utf-8")
