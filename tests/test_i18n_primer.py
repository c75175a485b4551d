"""What the course marks as the primer's words (原文) is the primer's words: every passage quoted as 原文 in the
Chinese lessons, solutions and exercises, and every Chinese phrase the English lessons quote, is a substring of
the primer (../shared/seed/primer-zh.txt), whitespace aside. A paraphrase is prose, not a quote, and is not
formatted as one; a section the primer does not cover opens with the note `> 原文未涉及…` instead.

The forms held here:
- a quote block `> 原文：…` or `> 原文（where）：…`, its pieces separated by the ellipsis "……" (a cut);
- an inline quote `原文："…"` or `原文：“…”`;
- in an English lesson, a Chinese phrase in double quotes ("只存在一次梯度交换").
"""
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PRIMER = ROOT.parent / "shared" / "seed" / "primer-zh.txt"  # beside the checkout, as in tests/test_glossary.py
CJK = re.compile(r"[\u4e00-\u9fff]")
QUOTE_BLOCK = re.compile(r"^>\s*原文(?:（[^）]*）)?：(.*)$")
NOTE = re.compile(r"^>\s*原文未涉及")  # "the primer does not cover this": a note, not a quote
INLINE = re.compile(r"原文：\s*[\"“]([^\"”]+)[\"”]")
ENGLISH_QUOTE = re.compile(r"\"([^\"\n]*[\u4e00-\u9fff][^\"\n]*)\"")


def squeeze(text: str) -> str:
    """Whitespace removed: the primer wraps lines and the lessons reflow them."""
    return re.sub(r"\s+", "", text)


def markdown(path: Path) -> list[tuple[str, str]]:
    return [(c["id"], "".join(c["source"])) for c in json.loads(path.read_text(encoding="utf-8"))["cells"]
            if c["cell_type"] == "markdown"]


def quoted(text: str) -> list[str]:
    """The pieces `text` marks as the primer's words (quote blocks cut at "……", and inline quotes)."""
    pieces = []
    for line in text.splitlines():
        block = QUOTE_BLOCK.match(line.strip())
        if block:
            pieces += [p.strip() for p in re.split(r"……|…", block.group(1)) if p.strip()]
        pieces += INLINE.findall(line)
    return pieces


def misquoted(text: str, primer: str) -> list[str]:
    """The marked quotes of `text` that are not in `primer`, and any `> 原文…` line that is neither a quote block
    nor the note that the primer does not cover a section."""
    body = squeeze(primer)
    bad = [p for p in quoted(text) if squeeze(p.strip("“”\"")) not in body]
    bad += [line for line in text.splitlines() if line.strip().startswith("> 原文")
            and not QUOTE_BLOCK.match(line.strip()) and not NOTE.match(line.strip())]
    return bad


def chinese_notebooks():
    return sorted(p for folder in ("notebooks/zh", "solutions/zh", "exercises/zh") for p in (ROOT / folder).glob("*.ipynb"))


needs_primer = pytest.mark.skipif(not PRIMER.exists(), reason="the primer lives beside the checkout")


@needs_primer
@pytest.mark.parametrize("path", chinese_notebooks(), ids=lambda p: f"{p.parent.parent.name}/zh/{p.name}")
def test_every_passage_marked_as_the_primer_is_the_primer(path):
    primer = PRIMER.read_text(encoding="utf-8")
    bad = [f"{cell_id}: {piece[:80]}" for cell_id, text in markdown(path) for piece in misquoted(text, primer)]
    assert bad == [], "\n".join(bad)


@needs_primer
@pytest.mark.parametrize("path", sorted((ROOT / "notebooks").glob("*.ipynb")) + sorted((ROOT / "solutions").glob(
    "*.ipynb")), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_english_lessons_quote_the_primer_verbatim(path):
    body = squeeze(PRIMER.read_text(encoding="utf-8"))
    bad = [f"{cell_id}: {q}" for cell_id, text in markdown(path) for q in ENGLISH_QUOTE.findall(text)
           if squeeze(q) not in body]
    assert bad == [], "\n".join(bad)


def test_the_chinese_lessons_quote_the_primer_often():
    """The check has something to check: the lessons open their sections with the primer's words."""
    assert sum(len(quoted(text)) for path in chinese_notebooks() for _id, text in markdown(path)) >= 60


@pytest.mark.parametrize("text", [
    "> 原文：DDP只存在一次梯度交换，而且从不等待。",  # a quote with words the primer does not have
    "> 原文说：DDP 总是更快。",  # a paraphrase formatted as a quote block
    "它说（原文：\"DDP总是更快\"）。",  # an inline paraphrase
])
def test_a_paraphrase_marked_as_the_primer_is_caught(text):
    assert misquoted(text, "DDP只存在一次梯度交换，且是通过GPU之间相互交换的方式融合所有的数据。") != []


def test_a_verbatim_quote_across_a_line_break_and_a_cut_passes():
    primer = "DP存在多次数据交换，\nDDP只存在一次梯度交换，且是通过GPU之间相互交换的方式融合所有的数据。"
    assert misquoted("> 原文：DP存在多次数据交换，DDP只存在一次梯度交换……融合所有的数据。", primer) == []
    assert misquoted("这就是原文：\"DDP只存在一次梯度交换\"的意思。", primer) == []
