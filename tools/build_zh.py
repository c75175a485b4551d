"""Generate the Chinese course from the English one: notebooks/zh/, solutions/zh/ and exercises/zh/.

    python tools/build_zh.py           # write notebooks/zh and solutions/zh (outputs of unchanged code cells kept)
    python tools/build_zh.py --run     # … then run them so their outputs are current; regenerate exercises/zh
    python tools/build_zh.py --check   # exit 1, one line per problem: drift, missing, stale, not run
    python tools/build_zh.py --stamp   # after re-translating a cell, record its English: `en_sha: new` → hash

The English notebooks stay the source. Each translated notebook has one file, i18n/zh/<folder>/<name>.yaml
(folder: notebooks or solutions), keyed by cell id:

    source: notebooks/06_choosing_a_strategy.ipynb
    cells:
      l6-title:                       # a markdown cell: its Chinese text
        en_sha: 1f0c2a9b7d3e          # the English source it translates (sha256, 12 hex: `en_sha(text)`)
        zh: |
          # 第 6 课 …
      l6-calibrate:                   # a code cell (optional): its teaching comments, English → Chinese
        en_sha: 7d3e1f0c2a9b
        comments:
          "# (times differ from run to run)": "# （每次运行的时间都不同）"
        code:                         # … and what it prints: its literals, and simlab's Messages said with _()
          '"measured:"': '"实测："'
          "print(problem)": "print(_(problem))"

A generated notebook is the English one with every markdown cell replaced by its translation, code cells
unchanged but for the comments and `code` pieces mapped, and one first cell that sets the language
(`simlab.set_language`) and imports `_`, so what the package prints (figure titles, text tables, grader lines)
is Chinese too. A `code` piece may change only string literals (labels, table keys, titles) and wrap values in
`_()` (a simulator's Message, a Transfer, a phase's name): `same_code` holds every mapping to that. Problems
`--check` finds, as `make_exercises.py --check` does for exercises/:
- drift: an English cell changed after its translation (en_sha differs) — re-translate, then update en_sha;
- missing: a markdown cell with no translation; orphan: a translation of a cell that no longer exists;
- stale: a generated notebook whose cells differ from what this tool writes now, or not run (a code cell
  without the outputs its English cell has); exercises/zh not generated from solutions/zh;
- a relative link in the Chinese text that does not resolve from notebooks/zh/.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import os
import re
import sys
import tokenize
from pathlib import Path

import nbformat
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import make_exercises  # noqa: E402 — after sys.path gains tools/

I18N = ROOT / "i18n" / "zh"
FOLDERS = ("notebooks", "solutions")
LANGUAGE_CELL_ID = "zh-language"
# the first cell of every Chinese notebook: what simlab prints from here on is Chinese
LANGUAGE_CELL = ('import simlab\nfrom simlab.i18n import _  # _(x)：把 simlab 返回的英文消息说成中文\n\n'
                 'simlab.set_language("zh")  # 图表标题、文字表格与评分信息都改用中文')
SAID = re.compile(r"^_\((.*)\)$")  # an f-string field said in the reader's language: `{_(key)}`
LINK = re.compile(r"\]\((?!https?:|#|mailto:)([^)#\s]+)")


def code_tokens(source: str) -> list[str]:
    """A cell's code without its comments and string literals (f-strings' text too) and with every `_(…)` call
    unwrapped to its argument: two cells with the same tokens differ only in what they say, not in what they do."""
    skip = {tokenize.COMMENT, tokenize.STRING, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
            tokenize.ENDMARKER, *(getattr(tokenize, n) for n in ("FSTRING_START", "FSTRING_MIDDLE", "FSTRING_END")
                                  if hasattr(tokenize, n))}
    tokens = []
    for t in _tokens(source):
        if t.type == tokenize.STRING and "f" in t.string.split(t.string[-1])[0].lower():  # an f-string (3.11)
            # its fields' code, in any order (a translation may reorder them): `{_(x)}` reads as `{x}`, a literal
            # `{'stage':<12}` as any text, and widths are layout
            tokens += sorted("{%s!%s}" % ("''" if field[0] in "'\"" else SAID.sub(r"\1", field), conv)
                             for _text, field, _spec, conv in _fields(t.string) if field)
        elif t.type not in skip:
            tokens.append(t.string)
    out, brackets = [], []  # per open bracket: whether it opened a `_(` call (its ")" is dropped too)
    for i, tok in enumerate(tokens):
        if tok == "_" and i + 1 < len(tokens) and tokens[i + 1] == "(":
            continue
        if tok in "([{":
            brackets.append(tok == "(" and i > 0 and tokens[i - 1] == "_")
            if brackets[-1]:
                continue
        elif tok in ")]}" and brackets and brackets.pop():
            continue
        out.append(tok)
    return out


def _tokens(source: str):
    """Python's tokens of `source`, which may be a piece of a statement (an unclosed bracket ends it)."""
    try:
        yield from tokenize.generate_tokens(io.StringIO(source).readline)
    except tokenize.TokenError:  # "EOF in multi-line statement": every token before it was already given
        return


def _fields(fstring: str):
    """The (text, expression, spec, conversion) pieces of an f-string token's body: its expressions are code."""
    import string
    prefix = re.match(r"[a-zA-Z]*", fstring).group()
    quote = fstring[len(prefix):][:3] if fstring[len(prefix):][:3] in ('"""', "'''") else fstring[len(prefix)]
    return string.Formatter().parse(fstring[len(prefix) + len(quote):-len(quote)])


def same_code(english: str, chinese: str) -> bool:
    """Whether `chinese` is `english` with only literals, comments and `_()` wrappers changed."""
    try:
        return code_tokens(english) == code_tokens(chinese)
    except (tokenize.TokenError, SyntaxError, ValueError):  # not whole Python: compare it as text
        return english == chinese


def en_sha(text: str) -> str:
    """What a translation records of the English it translates: the first 12 hex digits of its sha256."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


ONLY: list[str] = []  # --only: the lessons to build, run or stamp (parts of their file names); all if empty


def translation_files() -> list[Path]:
    return sorted(p for folder in FOLDERS for p in (I18N / folder).glob("*.yaml")
                  if not ONLY or any(part in p.name for part in ONLY))


def load(path: Path) -> dict:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get("cells"), dict) or "source" not in data:
        raise ValueError(f"{path.relative_to(ROOT)}: expected 'source:' and 'cells:'")
    # cell ids are strings, but YAML reads an unquoted all-digit id (88699517) as a number
    data["cells"] = {str(cell_id): entry for cell_id, entry in data["cells"].items()}
    return data


def target(source: str, folder: str) -> Path:
    """notebooks/06_x.ipynb → notebooks/zh/06_x.ipynb (the same for solutions/)."""
    return ROOT / folder / "zh" / Path(source).name


def stamp(path: Path) -> list[str]:
    """Replace each `en_sha: new` in a translation file by the hash of its cell's English now (what a
    translator writes after re-translating a drifted cell); returns the cell ids stamped. Drift is only
    silenced by this explicit word, never by the tool on its own."""
    text, data = path.read_text(encoding="utf-8"), load(path)
    english = {c.id: c.source for c in nbformat.read(ROOT / data["source"], as_version=4).cells}
    stamped = []
    for cell_id in (c for c, entry in data["cells"].items() if entry.get("en_sha") == "new"):
        key = rf"['\"]?{re.escape(cell_id)}['\"]?"  # a quoted key too ('88699517':)
        text, found = re.subn(rf"^(  {key}:\n    en_sha: )new$", rf"\g<1>{en_sha(english[cell_id])}", text,
                              count=1, flags=re.M)
        if found:
            stamped.append(cell_id)
    path.write_text(text, encoding="utf-8")
    return stamped


def problems_of(path: Path, data: dict, english) -> list[str]:
    """Drift, missing and orphan translations of one notebook, one line each."""
    where, out = path.relative_to(ROOT), []
    cells = {c.id: c for c in english.cells}
    for cell_id, entry in data["cells"].items():
        if cell_id not in cells:
            out.append(f"{where}: orphan: no cell {cell_id!r} in {data['source']}")
            continue
        cell = cells[cell_id]
        if entry.get("en_sha") != en_sha(cell.source):
            out.append(f"{where}: drift: {cell_id} changed in English since it was translated "
                       f"(en_sha {entry.get('en_sha')} ≠ {en_sha(cell.source)}): update the translation and en_sha")
        if cell.cell_type == "markdown" and not str(entry.get("zh") or "").strip():
            out.append(f"{where}: missing: {cell_id} has no Chinese text")
        for english_comment in entry.get("comments") or {}:
            if english_comment not in cell.source:
                out.append(f"{where}: drift: {cell_id} no longer has the comment {english_comment!r}")
        for english_code, chinese in (entry.get("code") or {}).items():
            if english_code not in cell.source:
                out.append(f"{where}: drift: {cell_id} no longer has the code {english_code!r}")
            elif not same_code(english_code, chinese):
                out.append(f"{where}: {cell_id}: {chinese!r} changes more than literals, comments and _() around "
                           f"{english_code!r}")
    for cell in english.cells:
        if cell.cell_type == "markdown" and cell.id not in data["cells"]:
            out.append(f"{where}: missing: no translation of markdown cell {cell.id}")
    return out


def generate(data: dict, english, previous=None):
    """The Chinese notebook: a language cell first, then every English cell translated. Outputs of code cells
    whose source did not change are taken from `previous` (the notebook generated last time)."""
    nb = nbformat.from_dict(english)  # a copy
    kept = {c.id: c for c in previous.cells if c.cell_type == "code"} if previous is not None else {}
    cells = [nbformat.v4.new_code_cell(LANGUAGE_CELL, id=LANGUAGE_CELL_ID)]
    for cell in nb.cells:
        entry = data["cells"].get(cell.id) or {}
        if cell.cell_type == "markdown":
            cell.source = str(entry.get("zh", cell.source)).rstrip("\n")
        elif cell.cell_type == "code":
            for english_comment, chinese in (entry.get("comments") or {}).items():
                cell.source = cell.source.replace(english_comment, chinese)
            for english_code, chinese in (entry.get("code") or {}).items():  # literals, and Messages said
                cell.source = cell.source.replace(english_code, chinese)
            old = kept.get(cell.id)
            same = old is not None and old.source == cell.source
            cell.outputs = old.outputs if same else []
            cell.execution_count = old.execution_count if same else None
        cells.append(cell)
    if LANGUAGE_CELL_ID in kept and kept[LANGUAGE_CELL_ID].source == LANGUAGE_CELL:
        cells[0].execution_count = kept[LANGUAGE_CELL_ID].execution_count
    nb.cells = cells
    nb.metadata.pop("widgets", None)
    nb.metadata["simlab"] = {"generated_from": data["source"], "by": "tools/build_zh.py", "language": "zh"}
    return nb


def _shape(nb) -> list[tuple]:
    return [(c.id, c.cell_type, c.source) for c in nb.cells]


def build(check: bool) -> list[str]:
    """Write (or, with `check`, compare) every generated notebook; returns the problems, one line each."""
    problems, written = [], set()
    for path in translation_files():
        data, folder = load(path), path.parent.name
        english = nbformat.read(ROOT / data["source"], as_version=4)
        problems += problems_of(path, data, english)
        out = target(data["source"], folder)
        written.add(out)
        previous = nbformat.read(out, as_version=4) if out.exists() else None
        nb = generate(data, english, previous)
        for link in LINK.findall("\n".join(c.source for c in nb.cells if c.cell_type == "markdown")):
            if not Path(os.path.normpath(out.parent / link)).exists():  # notebooks/zh/ may not exist yet
                problems.append(f"{path.relative_to(ROOT)}: broken link {link} (from {out.parent.relative_to(ROOT)})")
        if not check:
            out.parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, out)
            continue
        if previous is None or _shape(previous) != _shape(nb):
            problems.append(f"stale: {out.relative_to(ROOT)}: run python tools/build_zh.py --run")
            continue
        ran = {c.id for c in english.cells if c.cell_type == "code" and c.outputs}
        if any(c.id in ran and not c.outputs for c in previous.cells if c.cell_type == "code"):
            problems.append(f"not run: {out.relative_to(ROOT)}: run python tools/build_zh.py --run")
    for folder in FOLDERS:
        for extra in sorted(set((ROOT / folder / "zh").glob("*.ipynb")) - written):
            if ONLY and not any(part in extra.name for part in ONLY):
                continue
            problems.append(f"stale: {extra.relative_to(ROOT)} has no translation in i18n/zh/{folder}/")
    return problems + exercises(check)


def exercises(check: bool) -> list[str]:
    """exercises/zh from solutions/zh, as make_exercises does for English."""
    problems = []
    for solution in sorted((ROOT / "solutions" / "zh").glob("*.ipynb")):
        out, text = ROOT / "exercises" / "zh" / solution.name, make_exercises.make_exercise(solution)
        if not check:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text)
        elif not out.exists() or out.read_text() != text:
            problems.append(f"stale: {out.relative_to(ROOT)}: run python tools/build_zh.py")
    return problems


def run_all() -> None:
    """Execute every generated notebook in place, as tools/run_notebooks.py does for English."""
    import run_notebooks
    for folder in FOLDERS:
        for path in sorted((ROOT / folder / "zh").glob("*.ipynb")):
            if not ONLY or any(part in path.name for part in ONLY):
                run_notebooks.run(path)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="fail if a translation or generated notebook is out of date")
    parser.add_argument("--run", action="store_true", help="also run the generated notebooks (outputs current)")
    parser.add_argument("--stamp", action="store_true", help="record the English of every `en_sha: new` entry")
    parser.add_argument("--only", action="append", default=[], metavar="LESSON",
                        help="only the lessons whose file name contains this (e.g. 01_collectives); repeatable")
    args = parser.parse_args(argv)
    ONLY[:] = args.only
    if args.stamp:
        for path in translation_files():
            print("\n".join(f"stamped {path.relative_to(ROOT)}: {cell_id}" for cell_id in stamp(path)))
    problems = build(check=args.check)
    if args.run and not args.check:
        run_all()
        exercises(check=False)  # from the solutions just run
    for line in problems:
        print(line)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
