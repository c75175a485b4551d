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
import sys
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


# Every quote verified against the primer, whitespace removed, one per line. The primer lives beside a developer's
# checkout, not in it, so a clean clone (CI) checks the lessons' quotes against this record instead of skipping:
# `python tests/test_i18n_primer.py --record` rewrites it, and only where the primer is there to verify each line.
VERIFIED = ROOT / "i18n" / "zh" / "primer_quotes.txt"
ENGLISH_LESSONS = sorted((ROOT / "notebooks").glob("*.ipynb")) + sorted((ROOT / "solutions").glob("*.ipynb"))


def english_quotes(text: str) -> list[str]:
    return ENGLISH_QUOTE.findall(text)


def every_quote() -> dict[str, str]:
    """{quote, whitespace removed: where it is quoted first} over the Chinese and the English course."""
    found = {}
    for path in chinese_notebooks():
        for cell_id, text in markdown(path):
            for piece in quoted(text):
                found.setdefault(squeeze(piece.strip("“”\"")), f"{path.relative_to(ROOT)} {cell_id}")
    for path in ENGLISH_LESSONS:
        for cell_id, text in markdown(path):
            for q in english_quotes(text):
                found.setdefault(squeeze(q), f"{path.relative_to(ROOT)} {cell_id}")
    return found


def verified() -> set[str]:
    return set(VERIFIED.read_text(encoding="utf-8").split("\n")) - {""}


@pytest.mark.parametrize("path", chinese_notebooks(), ids=lambda p: f"{p.parent.parent.name}/zh/{p.name}")
def test_every_passage_marked_as_the_primer_is_the_primer(path):
    """Against the primer where it is; against the record of quotes verified against it where it is not."""
    body = PRIMER.read_text(encoding="utf-8") if PRIMER.exists() else "\n".join(verified())
    bad = [f"{cell_id}: {piece[:80]}" for cell_id, text in markdown(path) for piece in misquoted(text, body)]
    assert bad == [], "\n".join(bad)


@pytest.mark.parametrize("path", ENGLISH_LESSONS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_english_lessons_quote_the_primer_verbatim(path):
    body = squeeze(PRIMER.read_text(encoding="utf-8")) if PRIMER.exists() else verified()
    bad = [f"{cell_id}: {q}" for cell_id, text in markdown(path) for q in english_quotes(text)
           if squeeze(q) not in body]
    assert bad == [], "\n".join(bad)


def test_the_record_of_verified_quotes_is_the_primers_text_and_current():
    """Where the primer is: every recorded line is in it, and the record is exactly today's quotes (a quote added
    or changed is verified and recorded before it lands). Without it: every quote of the course is recorded."""
    quotes, record = every_quote(), verified()
    missing = sorted(q for q in quotes if q not in record)
    assert missing == [], "not verified (python tests/test_i18n_primer.py --record):\n" + "\n".join(
        f"{quotes[q]}: {q[:60]}" for q in missing)
    if PRIMER.exists():
        body = squeeze(PRIMER.read_text(encoding="utf-8"))
        assert sorted(q for q in record if q not in body) == []
        assert record == set(quotes), sorted(record - set(quotes))


def record() -> int:
    """Write VERIFIED from the course's quotes, each checked against the primer first."""
    if not PRIMER.exists():
        print(f"{PRIMER}: not found; the record can only be written where the primer is", file=sys.stderr)
        return 1
    body, quotes = squeeze(PRIMER.read_text(encoding="utf-8")), every_quote()
    bad = sorted(q for q in quotes if q not in body)
    if bad:
        print("not in the primer:\n" + "\n".join(f"{quotes[q]}: {q}" for q in bad), file=sys.stderr)
        return 1
    VERIFIED.write_text("\n".join(sorted(quotes)) + "\n", encoding="utf-8")
    print(f"{VERIFIED.relative_to(ROOT)}: {len(quotes)} quotes")
    return 0


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


if __name__ == "__main__":
    sys.exit(record() if sys.argv[1:] == ["--record"] else print("usage: python tests/test_i18n_primer.py --record"))
