"""GLOSSARY.md stays true: every place it names exists (a lesson's notebook, a module, a function or class),
every term the course needs is there, each with an English term and a meaning, and what it quotes from the
primer (原文：…) is in the primer word for word."""
import importlib
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GLOSSARY = ROOT / "GLOSSARY.md"
# the primer lives beside the developers' checkout, not in it (as in tests/sim/test_hybrid_scenarios.py)
PRIMER = ROOT.parent / "shared" / "seed" / "primer-zh.txt"
HEADER = ["English (this course)", "中文", "meaning", "where in the course"]
REQUIRED = ("数据并行", "微批次", "显存", "分片", "卸载", "主权重", "激活重计算", "混合精度", "梯度累积",
            "序列并行", "通信计算重叠", "节点内", "节点间", "分桶", "死锁", "归约", "规约", "零冗余优化器")


def rows() -> list[list[str]]:
    out = []
    for line in GLOSSARY.read_text(encoding="utf-8").splitlines():
        if not line.startswith("|") or line.startswith("|---"):
            continue
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        if cells == HEADER:
            continue
        assert len(cells) == 4, line
        out.append(cells)
    return out


def places(where: str) -> list[str]:
    """'lesson 2 · lessons 3–4 · `simlab.sim.x.f`' → ['lesson 2', 'lesson 3', 'lesson 4', 'simlab.sim.x.f']."""
    out = []
    for first, b, last in re.findall(r"lessons? (\d)(b?)(?:–(\d))?", where):  # "lesson 5b" is lesson 5b, not 5
        out += [f"lesson {first}b"] if b else [f"lesson {k}" for k in range(int(first), int(last or first) + 1)]
    return out + re.findall(r"`(simlab(?:\.\w+)+)`", where)


def lesson_notebook(name: str, folder: str = "notebooks") -> Path | None:
    """'lesson 2' → notebooks/02_….ipynb, 'lesson 5b' → notebooks/05b_….ipynb (None if there is none)."""
    k = name.split()[1]
    found = sorted((ROOT / folder).glob(f"{k.zfill(2 if k.isdigit() else 3)}_*.ipynb"))
    return found[0] if found else None


def prose(path: Path) -> str:
    return " ".join("".join(c["source"]) for c in json.loads(path.read_text(encoding="utf-8"))["cells"]
                    if c["cell_type"] == "markdown")


def resolve(name: str) -> None:
    """Import the longest module prefix of a dotted name, then follow the attributes; raise if any is missing."""
    if name.startswith("lesson "):
        assert lesson_notebook(name), f"{name}: no notebooks/….ipynb"
        return
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)  # AttributeError names what is missing
        return
    raise ModuleNotFoundError(name)


def test_the_tables_have_one_header_and_rows_of_four():
    assert len(rows()) >= 40


@pytest.mark.parametrize("row", rows(), ids=lambda r: r[0])
def test_every_entry_has_a_meaning_and_points_at_something_that_exists(row):
    english, chinese, meaning, where = row
    assert re.search("[A-Za-z]", english) and re.search(r"[\u4e00-\u9fff]", chinese) and len(meaning) > 10
    named = places(where)
    assert named, f"{english}: 'where' names no lesson or module: {where}"
    assert any(p.startswith("lesson ") for p in named), f"{english}: no lesson named"
    for place in named:
        resolve(place)


def test_every_required_term_is_present_and_dp_is_split_from_the_family():
    chinese = " ".join(r[1] for r in rows())
    assert [t for t in REQUIRED if t not in chinese] == []
    by_english = {r[0]: r for r in rows()}
    family, dp = by_english["data parallelism (the family)"], by_english["DP — `nn.DataParallel`'s way"]
    assert "simlab.sim.data_parallel" in family[3] and "simulate_dp" in dp[3]
    assert "naive_all_reduce" not in dp[3]  # DP is not the naive all-reduce of lesson 1


def test_the_words_lesson_0_teaches_are_all_here():
    """Lesson 0 defines these (in bold) and sends the learner here for the rest: each needs a row."""
    english = " ".join(r[0].lower() for r in rows())
    taught = ("rank", "world size", "process group", "backend", "rendezvous", "torchrun", "local rank", "deadlock",
              "collective", "pipeline stage", "micro-batch", "bubble", "makespan", "trace")
    assert [t for t in taught if t not in english] == []
    lesson = (ROOT / "notebooks" / "00_start_here.ipynb").read_text(encoding="utf-8")
    assert "GLOSSARY.md" in lesson and all(t.split()[-1].rstrip("s") in lesson.lower() for t in taught)


def test_quotes_from_the_primer_are_verbatim():
    quotes = [q for r in rows() for q in re.findall(r"原文[^：（）]*：([^）]+)）", r[1])]
    assert len(quotes) >= 15
    pieces = [p.strip() for q in quotes for p in re.split("[；…]", q)]
    if PRIMER.exists():  # the primer lives beside the repository, not in it
        text = PRIMER.read_text(encoding="utf-8")
        assert [p for p in pieces if p not in text] == []


@pytest.mark.parametrize("bad", ["lesson 9", "simlab.sim.collectives.ring_all_reduce_v2", "simlab.sim.nowhere.f",
                                 "simlab.exec.data_parallel.BucketedDDP.no_such_method"])
def test_a_place_that_does_not_exist_is_caught(bad):
    with pytest.raises((AssertionError, AttributeError, ModuleNotFoundError)):
        resolve(bad)


# ---- one Chinese word per term, everywhere a Chinese reader looks ---------------------------------------------

# a variant the review found → (the English term's GLOSSARY row, the word GLOSSARY gives): each is a failure in any
# zh notebook, solution or exercise (prose, teaching comments, what the cells print) and in any catalog entry
VARIANTS = {
    "总时间": ("makespan", "总耗时"),
    r"(?<!闲置 / )(?<!闲置/)总时长": ("makespan", "总耗时 (总时长 only in 闲置 / 总时长, all ranks' time)"),
    "挂钟": ("wall-clock time (a real run's)", "墙钟时间"),
    "通道": ("lane", "泳道"),
    "会合": ("rendezvous", "汇合"),
    r"(?<![\w`/.{-])trace(?![\w`}-])": ("trace (Perfetto)", "追踪记录"),  # {trace}: a field's name
    r"(?<![\w`/._])advisor(?![\w`_])": ("the advisor (`simlab plan`)", "策略顾问"),
    r"(?<![\w`/._{])blocks?(?![\w`_}])": ("block (a transformer layer, an MLP or attention under TP)", "模块"),
    "全对全": ("all-to-all", "全交换"),
    "逐个阶段|几个阶段": ("phase (of a DP step)", "环节"),  # 阶段 alone: ZeRO's (test_阶段_is_said_only_of_zero)
    "各段|每段|首段|末段|段数": ("pipeline stage", "流水线级 / 级 (各级, 每级, 第一级, 级数)"),
}
CJK_CHAR = re.compile(r"[\u4e00-\u9fff]")


def _prose(text: str) -> str:
    """Chinese prose as a reader sees it, without what is not ours to word: code spans and blocks, links' targets,
    the primer's quoted words (> 原文：…) and English quoted inside Chinese ("Open trace file")."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    text = re.sub(r"\]\([^)]*\)|<https?://[^>]*>|https?://\S+", "", text)
    text = "\n".join(line for line in text.splitlines() if not re.match(r"\s*>\s*原文", line))
    return re.sub(r"[\"“][A-Za-z][^\"”\n]*[\"”]|（[A-Za-z][^）\n]*[a-z]）", "", text)


def chinese_places():
    """(where, text) for every Chinese text shipped: markdown, comments and printed lines of the zh notebooks,
    solutions and exercises, and every catalog entry."""
    import json
    out = []
    for folder in ("notebooks/zh", "solutions/zh", "exercises/zh"):
        for path in sorted((ROOT / folder).glob("*.ipynb")):
            for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
                source = "".join(cell["source"])
                where = f"{folder}/{path.name}:{cell['id']}"
                if cell["cell_type"] == "markdown":
                    out.append((where, _prose(source)))
                    continue
                comments = [c for line in source.splitlines() for c in re.findall(r"#\s*(.*)$", line)
                            if CJK_CHAR.search(c)]
                printed = ["".join(o.get("text", "")) for o in cell.get("outputs", [])]
                out.append((where, _prose("\n".join(comments + [p for p in printed if CJK_CHAR.search(p)]))))
    from simlab.i18n import entries
    out += [(f"catalog: {k[:40]!r}", _prose(v)) for k, v in entries("zh").items() if k]
    return out


@pytest.mark.parametrize("variant", VARIANTS)
def test_no_chinese_text_uses_a_variant_the_glossary_replaces(variant):
    english, word = VARIANTS[variant]
    assert english in {r[0] for r in rows()}, f"GLOSSARY.md has no row {english!r}"
    found = [f"{where}: …{m.group(0)}…" for where, text in chinese_places() for m in re.finditer(variant, text)
             if CJK_CHAR.search(text)]
    assert found == [], f"say {word} ({english!r} in GLOSSARY.md):\n" + "\n".join(found[:20])


@pytest.mark.parametrize("variant, text", [
    ("总时间", "这一步的总时间是 33"),
    (r"(?<!闲置 / )(?<!闲置/)总时长", "**总时长**（makespan）是 33"),
    ("挂钟", "真实的挂钟时间"),
    ("通道", "每个设备有一条计算通道"),
    ("会合", "各 rank 在键值存储处会合"),
    (r"(?<![\w`/.{-])trace(?![\w`}-])", "下载真实 trace 的链接"),
    (r"(?<![\w`/._])advisor(?![\w`_])", "与 advisor 的最佳方案打平"),
    (r"(?<![\w`/._{])blocks?(?![\w`_}])", "每个 block 对一个张量做全归约"),
    ("全对全", "专家的全对全"),
    ("逐个阶段|几个阶段", "一步 DP，逐个阶段看"),
    ("各段|每段|首段|末段|段数", "实测流水线各段之间的点对点带宽"),  # hybrid.po before issue 26
])
def test_each_variant_the_review_found_is_caught(variant, text):
    assert re.search(variant, _prose(text))


def test_what_is_not_ours_to_word_is_left_alone():
    kept = _prose("命令行用 `--trace FILE` 写出（\"Open trace file\"）。\n> 原文：较少通信操作\n闲置 / 总时长")
    assert not any(re.search(v, kept) for v in VARIANTS if "总时长" not in v or "闲置" not in kept)


@pytest.mark.parametrize("row", rows(), ids=lambda r: r[0])
def test_every_lesson_named_as_teaching_a_term_uses_it(row):
    """'Where taught' is true: each lesson a row names says the term in its prose, in English (any of the row's
    names: 'a (b)' or 'a — b' gives both, word-bounded) or, in its Chinese lesson, in Chinese (any alternative)."""
    english, chinese, _meaning, where = row
    names_en = [t.strip().strip("`").lower() for t in re.split(r" \(|\)|—|,|/|:", english) if len(t.strip()) > 1]
    names_zh = [t for t in re.split(r"[/，,；;（()：\s…]|原文", chinese) if re.search(r"[\u4e00-\u9fff]", t)]
    for lesson in (p for p in places(where) if p.startswith("lesson ")):
        en = prose(lesson_notebook(lesson)).lower()
        zh_path = lesson_notebook(lesson, "notebooks/zh")
        zh = prose(zh_path) if zh_path else ""
        said = any(re.search(rf"(?<![a-z]){re.escape(n)}", en) for n in names_en) or any(n in zh for n in names_zh)
        assert said, f"{english}: {lesson} never says {names_en} or {names_zh}"


# ---- 阶段 is ZeRO's word: a pipeline stage is 流水线级 (级), a DP or ring phase 环节, a 前向/反向 column 方向 ------
ZERO_WORDS = re.compile(r"ZeRO|零冗余|P_os|Offload|卸载")
PIPELINE_WORDS = re.compile(r"流水线|微批次|气泡|1F1B|GPipe|模型块|PP|嵌入层|输出层")
PHASE_阶段 = re.compile(r"(归约分散|全收集|全归约|收集|前向|反向|预热|稳态|冷却|汇合|通信|计算|更新)阶段")  # a phase, always
SENTENCE = re.compile(r"[^。；！？\n]+")
CLAUSE = re.compile(r"[^。；！？：，\n]+")  # ZeRO must be named in the clause itself, not somewhere in a long sentence


def stage_misuses(text: str, zero_place: bool) -> list[str]:
    """The clauses of `text` that say 阶段 of something other than a ZeRO stage. A clause with 阶段 must name ZeRO
    itself, unless it lies in ZeRO's own lesson or catalog (zero_place: "阶段 3 在每层运行前一刻才收集它") in a
    sentence that is not about the pipeline (its words: 流水线, 微批次, 气泡, …). "归约分散阶段" and the like are
    phases (环节) wherever they stand."""
    out = []
    for sentence in SENTENCE.findall(text):
        if "阶段" not in sentence:
            continue
        if PHASE_阶段.search(sentence):
            out.append(sentence.strip())
        elif not (zero_place and not PIPELINE_WORDS.search(sentence)):
            out += [c.strip() for c in CLAUSE.findall(sentence) if "阶段" in c and not ZERO_WORDS.search(c)]
    return out


def stage_places() -> list[tuple[str, str, bool]]:
    """(where, text, zero_place) for the zh notebooks, solutions and exercises, README.zh.md, every catalog entry
    by its .po file, and the .po files' header comments (they state the terms translators follow)."""
    from simlab.i18n import po_paths, read_po
    out = [(where, text, "03_zero" in where) for where, text in chinese_places() if not where.startswith("catalog")]
    out.append(("README.zh.md", _prose((ROOT / "README.zh.md").read_text(encoding="utf-8")), False))
    for po in po_paths("zh"):
        text = po.read_text(encoding="utf-8")
        comments = "\n".join(line for line in text.splitlines() if line.startswith("#"))
        out += [(f"{po.name}: {k[:40]!r}", _prose(v), po.stem == "zero") for k, v in read_po(text).items() if k]
        out.append((f"{po.name}: comments", comments, po.stem == "zero"))
    return out


def test_阶段_is_said_only_of_zero():
    found = [f"{where}: {s}" for where, text, zero in stage_places() for s in stage_misuses(text, zero)]
    assert found == [], ("阶段 is a ZeRO stage only (GLOSSARY.md): a pipeline stage is 流水线级 / 级 (第 0 级, 每级, "
                         "各级), a phase 环节:\n" + "\n".join(found[:20]))


@pytest.mark.parametrize("old, zero_place", [  # verbatim from the course before issue 26 (commit ac37532)
    # i18n/zh/notebooks/00_start_here.yaml: the pipeline stage where lesson 0 defines it
    ("在流水线的图里（第 4 课），模型的层被切成若干**阶段**（stage），每个 rank 一个阶段；每个批次被切成若干**微批次**，"
     "依次流过各个阶段。", False),
    # i18n/zh/notebooks/04_pipeline_parallel.yaml: a stage in a sentence that also names ZeRO-3 (caught by clause)
    ("没有任何东西被复制，所以一块 GPU 放不下的模型可以放到几块 GPU 上——前提是每个阶段都放得下：如果单独一层就超出"
     "一块 GPU，需要的是张量并行或 ZeRO-3（第 5 课；原文也这么说）", False),
    # i18n/zh/solutions/06_choosing_a_strategy.yaml
    ("3. `tp_bytes`（一个数）：global rank 0 每步在它的 TP 组上发送多少字节？它在流水线阶段 0，这个阶段放着嵌入层和"
     "前 2 个模块（loss 在阶段 1）。", False),
    ("{at} 写的是阶段 {stage}，但阶段只有 0..{last}", False),  # pipeline.po: no pipeline word, still caught
    ("红色实线箭头表示接收方把这一块*加*到自己的块上（归约分散阶段）", False),  # 00_start_here.yaml: a ring's phase
    ("阶段", False),  # tensor_parallel.po: the column that holds 前向/反向
    # constructed: the pipeline inside ZeRO's own lesson, and a phase there
    ("与流水线并行一起用时，每个阶段都要跑 m 个微批次。", True),
    ("每层的梯度在归约分散阶段之后传到 CPU", True),
])
def test_each_old_use_of_阶段_is_caught(old, zero_place):
    assert stage_misuses(_prose(old), zero_place)


@pytest.mark.parametrize("kept, zero_place", [
    ("DDP 和各个 ZeRO 阶段在模型误差之内打平", False), ("ZeRO 阶段 {stage}", False),
    ("ZeRO 的各个阶段以及每个阶段分片什么（第 3 课）", False),
    ("阶段 3 在每层运行前一刻才收集它，运行完立即释放", True), ("在 {n} 个真实进程上运行这个阶段", True),
    ("每个流水线级内部用张量并行；第 0 级放嵌入层", False),
])
def test_what_says_阶段_of_zero_or_says_级_passes(kept, zero_place):
    assert stage_misuses(_prose(kept), zero_place) == []
