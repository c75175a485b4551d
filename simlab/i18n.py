"""The language simlab prints in: English, or Chinese with `set_language("zh")` or `SIMLAB_LANG=zh`.

Text the package shows a learner — figure titles, widget labels, the text tables nbval compares, grader
lines — goes through `_()`, Python's stdlib gettext. The catalogs are `simlab/locale/<lang>/LC_MESSAGES/*.po`,
one per lesson stem (collectives.po … hybrid.po) and the widget toolkit's (controls.po), merged and compiled to
gettext's binary .mo form **in memory** on first use (`mo_bytes`): no binary file sits in git to drift from its
source, an editable install needs no build step, and the .po files stay what a translator edits (Poedit and
msgfmt read them as usual). An English message with no entry prints as English.

Messages are format templates with named fields, `_("{n} plans evaluated").format(n=…)`, so a translation
may reorder them; `tests/test_i18n.py` checks every marked message has a translation with the same fields.

Chinese figures need a font with CJK glyphs. `use_cjk_font()` is the one place that configures it, lazily
(the base modules never import matplotlib): it registers the first CJK font found — the pip package
`noto-cjk-sans-otc` (Noto Sans CJK), else one the system has — and appends it to `font.family`, so
matplotlib keeps drawing Latin text in its default font and falls back to the CJK one glyph by glyph.

    >>> set_language("en"); _("why:")
    'why:'
    >>> set_language("zh"); _("why:")
    '原因：'
    >>> set_language("fr")
    Traceback (most recent call last):
    ValueError: language='fr': must be one of en, zh
    >>> set_language("en")
"""
from __future__ import annotations

import ast
import gettext
import io
import logging
import os
import struct
import warnings
from pathlib import Path

from ._checks import check_choice

LANGUAGES = ("en", "zh")
LOCALE_DIR = Path(__file__).with_name("locale")
# Noto Sans CJK SC first (simplified Chinese glyph shapes), then faces a system may have
CJK_FAMILIES = ("Noto Sans CJK SC", "Noto Sans SC", "Source Han Sans SC", "WenQuanYi Zen Hei", "PingFang SC",
                "Microsoft YaHei", "SimHei", "Noto Sans CJK JP")
_state: dict = {"language": None, "font": None}
_catalogs: dict = {}


def set_language(language: str) -> None:
    """Print in `language` ("en" or "zh") from now on, in this process."""
    _state["language"] = check_choice("language", language, LANGUAGES)  # one line naming it, as everywhere
    if language == "zh":
        use_cjk_font()


def language() -> str:
    """The language in force: the last `set_language`, else $SIMLAB_LANG ("zh…" → zh), else English."""
    if _state["language"] is None:
        env = os.environ.get("SIMLAB_LANG", "").strip().lower()
        set_language("zh" if env.startswith("zh") else "en")
    return _state["language"]


def _(message: str) -> str:
    """`message` in the language in force (gettext's lookup; English when the catalog has no entry). A simulator's
    `simlab.sim.message.Message` (known by its template and fields: i18n imports no sim) is said by translating
    its template and formatting its fields, each Message among them said the same way."""
    template = getattr(message, "template", None)
    if template is not None:
        fields = {k: _(v) if hasattr(v, "template") else v for k, v in message.fields.items()}
        return catalog(language()).gettext(template).format(**fields) if template else ""  # "": the .po header
    return catalog(language()).gettext(message)


def N_(message: str) -> str:
    """Mark a constant for translation without translating it yet (gettext's "noop"): `_()` it where shown."""
    return message


def catalog(lang: str) -> gettext.NullTranslations:
    """The gettext translations of `lang`, compiled from its .po files on first use (English: the identity)."""
    if lang not in _catalogs:
        _catalogs[lang] = (gettext.GNUTranslations(io.BytesIO(mo_bytes(entries(lang))))
                           if lang != "en" else gettext.NullTranslations())
    return _catalogs[lang]


def po_paths(lang: str) -> list[Path]:
    """One <lesson>.po per lesson stem and controls.po (the toolkit's), merged into one catalog (`entries`)."""
    return sorted((LOCALE_DIR / lang / "LC_MESSAGES").glob("*.po"))


def entries(lang: str) -> dict[str, str]:
    """{msgid: msgstr} of all of `lang`'s .po files; a message translated twice differently is refused."""
    merged: dict[str, str] = {}
    for po in po_paths(lang):
        for key, value in read_po(po.read_text(encoding="utf-8")).items():
            if key and merged.get(key, value) != value:
                raise ValueError(f"{po.name}: {key[:40]!r} is translated differently in another .po file")
            merged.setdefault(key, value)
    return merged


def read_po(text: str) -> dict[str, str]:
    """{msgid: msgstr} of a .po file (with its "" header), for the subset simlab uses: msgid/msgstr, each
    string possibly continued on following "…" lines; comments ignored. Empty msgstr = untranslated, dropped."""
    entries, key, field = {}, None, None
    parts: dict[str, list[str]] = {}

    def flush():
        if parts:
            msgid, msgstr = "".join(parts.get("msgid", [])), "".join(parts.get("msgstr", []))
            if msgstr:
                entries[msgid] = msgstr
        parts.clear()
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith(("msgid ", "msgstr ")):
            key, _sep, rest = line.partition(" ")
            if key == "msgid":
                flush()
            parts[key], field = [], key
            line = rest
        if not (line.startswith('"') and line.endswith('"')) or field is None:
            raise ValueError(f"line {number} of the .po: expected msgid, msgstr or a quoted string: {line[:60]}")
        parts[field].append(ast.literal_eval(line))  # a C-escaped string, as Python reads it
    flush()
    return entries


def mo_bytes(entries: dict[str, str]) -> bytes:
    """The GNU .mo file of {msgid: msgstr} (what msgfmt writes, without a hash table): deterministic."""
    keys = sorted(entries)  # gettext's readers expect the originals sorted
    ids = [k.encode("utf-8") for k in keys]
    strs = [entries[k].encode("utf-8") for k in keys]
    n, header = len(keys), 7 * 4
    start = header + 16 * n  # after the header and the two tables of (length, offset)
    offsets, blob = [], b""
    for s in ids + strs:
        offsets.append((len(s), start + len(blob)))
        blob += s + b"\0"
    table = b"".join(struct.pack("<2I", *o) for o in offsets)
    return struct.pack("<7I", 0x950412DE, 0, n, header, header + 8 * n, 0, 0) + table + blob


def use_cjk_font() -> str | None:
    """Let matplotlib draw Chinese: register a CJK font and append it to `font.family` (Latin text keeps the
    default font; matplotlib falls back per glyph). Returns its family name, or None if no CJK font exists."""
    if _state["font"] is not None:
        return _state["font"] or None
    from matplotlib import font_manager, rcParams
    try:  # Noto Sans CJK, from PyPI: every face of the collection is registered (JP only before matplotlib 3.11)
        from noto_cjk_sans_otc import FONT_PATH
        font_manager.fontManager.addfont(str(FONT_PATH))
    except ImportError:
        pass
    names = {f.name for f in font_manager.fontManager.ttflist}
    family = next((f for f in CJK_FAMILIES if f in names), "")
    _state["font"] = family
    if family:
        _add_bold_face(font_manager, family)
        # without a bold face (the PyPI collection has one weight) bold text logs "Failed to find font weight
        # bold for <it>" on every new size, and falls back to the regular weight: drop that one message
        logging.getLogger("matplotlib.font_manager").addFilter(
            lambda record: not ("Failed to find font weight" in record.getMessage() and family in record.getMessage()))
        current = rcParams["font.family"]
        current = [current] if isinstance(current, str) else list(current)
        rcParams["font.family"] = [f for f in current if f != family] + [family]
    else:  # the figures would draw boxes for every Chinese character: say how to get the font, once
        warnings.warn("no CJK font found, Chinese in figures will be missing: pip install noto-cjk-sans-otc",
                      stacklevel=3)
    return family or None


def _add_bold_face(font_manager, family: str) -> None:
    """Bold Chinese in bold: the PyPI collection has one weight, so register the bold face of a CJK sans-serif
    the system has (Debian's fonts-noto-cjk: NotoSansCJK-Bold.ttc, whose faces include Noto Sans CJK SC Bold)."""
    def has_bold() -> bool:
        return any(f.name == family and f.weight in (700, "bold") for f in font_manager.fontManager.ttflist)
    if has_bold():
        return
    for path in font_manager.findSystemFonts():
        name = Path(path).name
        if "Bold" in name and "Sans" in name and ("CJK" in name or "SourceHan" in name):
            font_manager.fontManager.addfont(path)
            if has_bold():
                return
