"""GLOSSARY.md stays true: every place it names exists (a lesson's notebook, a module, a function or class),
every term the course needs is there, each with an English term and a meaning, and what it quotes from the
primer (原文：…) is in the primer word for word."""
import importlib
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
    for first, last in re.findall(r"lessons? (\d)(?:–(\d))?", where):
        out += [f"lesson {k}" for k in range(int(first), int(last or first) + 1)]
    return out + re.findall(r"`(simlab(?:\.\w+)+)`", where)


def resolve(name: str) -> None:
    """Import the longest module prefix of a dotted name, then follow the attributes; raise if any is missing."""
    if name.startswith("lesson "):
        k = int(name.split()[1])
        assert list((ROOT / "notebooks").glob(f"{k:02d}_*.ipynb")), f"{name}: no notebooks/{k:02d}_….ipynb"
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
