"""ARCHITECTURE.md stays true, as GLOSSARY.md does (tests/test_glossary.py): every path it cites exists, every
code name it cites in backticks exists, and its table of what each layer may import is exactly what
tests/test_layers.py enforces (the i18n rule and the 300-line limit included).

What counts as a code name in backticks: a dotted name (`simlab.x.y`, `sim.collectives_stepper.simulate`, a module
stem then its attribute, `Class.method`) is resolved by importing it; a bare name (`Recorder`, `check_int`,
`signature()`) must be a name simlab (or its tools, benchmarks and browser tests) defines or uses, or one of torch's
or the standard library's. A path (`tests/…`, `tools/…`, `sim/cost.py`, a bare `test_x.py`) must exist. Commands,
flags, snippets with spaces and names of other projects' files are not checked; `ALLOWED` lists the few names
from elsewhere, each with its reason.
"""
import ast
import builtins
import importlib
import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ARCHITECTURE = ROOT / "ARCHITECTURE.md"
SKIP_DIRS = {".git", ".venv", "venv", "work", "browser_artifacts", "node_modules", "simlab.egg-info", "__pycache__"}
LAYER_DIRS = ("sim", "export", "exec", "parity", "render", "grading", "cli", "locale")  # `sim/cost.py` is simlab/sim/cost.py
BASE = ("plan", "trace", "_checks", "i18n")  # simlab's top-level modules, cited by their stem
# "Where is X" columns: the layer a module stem in that column lives in
COLUMN_LAYER = {1: "sim", 2: "exec", 4: "render"}
# torch's and the standard library's namespaces a bare name may come from
EXTERNAL = ("torch", "torch.distributed", "torch.nn", "torch.cuda", "torch.distributed.pipelining",
            "torch.distributed.fsdp", "torch.distributed.optim", "gc", "signal", "faulthandler")
ALLOWED = {  # names and paths from other projects, which nothing here can import: each with why it is cited
    "stage3_max_live_parameters": "DeepSpeed's ZeRO-3 setting, a published default the model uses",
    "transformer_flops": "Megatron-LM's FLOP count, which the model reproduces",
    "DeepSpeedConfig": "DeepSpeed's config class (the optional `export` dependencies), which validates our export",
    "ConfigManager": "torchtitan's config loader (the optional `export` dependencies), which loads our export",
    "ParallelDims": "torchtitan's parallel-degree check (the optional `export` dependencies)",
    "is_first_microbatch": "Transformer Engine's argument (FP8 weights cached across micro-batches)",
    "reshard_after_forward": "FSDP2's argument as torchtitan sets it (torch's own, on fully_shard)",
    "playwright": "the PyPI package that drives the browser tests (the optional `browser` dependencies)",
    "find_unused_parameters": "torch DDP's argument, named in a measured fact",
    "NCCL_CROSS_NIC": "an environment variable of NCCL's",
    "PYTHONWARNINGS": "Python's environment variable, which the Makefile sets",
    "benchmarks/benchmark_flash_attention.py": "a file of Dao-AILab/flash-attention, cited as a source",
    "benchmarks/llama3_h100_202412_torchtitan.md": "a file of pytorch/torchtitan, cited as a source",
    "performance_summary.md": "a file of NVIDIA/NeMo, cited as a source",
    "performance-summary.md": "a file of NVIDIA-NeMo/Megatron-Bridge, cited as a source",
}
PATH_SUFFIXES = (".py", ".md", ".ipynb", ".txt", ".po", ".json", ".yaml", ".yml", ".png", ".toml")


def _load_layer_rules():
    """tests/test_layers.py, imported under its own name (its rules are plain module-level constants)."""
    spec = importlib.util.spec_from_file_location("layer_rules", ROOT / "tests" / "test_layers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def repo_files() -> list[Path]:
    found, todo = [], [ROOT]
    while todo:
        for path in todo.pop().iterdir():
            if path.is_dir():
                if path.name not in SKIP_DIRS:
                    todo.append(path)
            else:
                found.append(path)
    return found


def sections(text: str) -> dict[str, str]:
    """{'## heading': its text}, the part before the first heading under ''."""
    parts = re.split(r"^(## .*)$", text, flags=re.M)
    return {"": parts[0], **dict(zip(parts[1::2], parts[2::2]))}


def citations(text: str) -> list[tuple[str, int | None]]:
    """Every `backticked` token with the "Where is X" column it sits in (None outside that table)."""
    found = []
    for line in text.splitlines():
        cells = line.strip().strip("|").split(" | ") if line.startswith("| ") and line.count(" | ") == 4 else [line]
        for column, cell in enumerate(cells):
            found += [(token, column if len(cells) == 5 else None) for token in re.findall(r"`([^`\n]+)`", cell)]
    return found


def kind(token: str) -> str:
    """'path', 'dotted', 'name' or 'other' (commands, flags, snippets, symbols): what a token claims."""
    if token.startswith(("-", "#", ".ttc")) or token.startswith("simlab ") or token.startswith("make "):
        return "other"
    if "/" in token or token.endswith(PATH_SUFFIXES):
        return "other" if " " in token else "path"
    callee = re.match(r"^\.?([A-Za-z_][\w*<>]*(?:\.[A-Za-z_][\w*]*)*)(\(.*\))?(\[.*\])?(=.*)?( -> \w+)?$", token)
    if not callee:
        return "other"
    return "dotted" if "." in callee[1] else "name"


def callee(token: str) -> str:
    """`render.player.frame_player(frames)` → 'render.player.frame_player'; `group=` → 'group'."""
    return re.match(r"^\.?([\w*<>]+(?:\.[\w*]+)*)", token)[1]


def _identifiers() -> set[str]:
    """Every name simlab, tools/, benchmarks/ and browser_tests/ define or use: identifiers, attributes,
    arguments, keywords, imports, string constants that are identifiers, and module stems."""
    names = set()
    for folder in ("simlab", "tools", "benchmarks", "browser_tests"):
        for path in (ROOT / folder).rglob("*.py"):
            names.add(path.stem)
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Name):
                    names.add(node.id)
                elif isinstance(node, ast.Attribute):
                    names.add(node.attr)
                elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.add(node.name)
                elif isinstance(node, (ast.arg, ast.keyword)) and node.arg:
                    names.add(node.arg)
                elif isinstance(node, ast.alias):
                    names.update((node.asname or node.name).split("."))
                elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
                    names.add(node.value)
    return names


def _external(name: str) -> bool:
    if hasattr(builtins, name):
        return True
    for module in EXTERNAL:
        try:
            if hasattr(importlib.import_module(module), name):
                return True
        except ImportError:
            continue
    return False


def _classes() -> dict[str, list[str]]:
    """{class name: [modules defining it]} over simlab."""
    out = {}
    for path in (ROOT / "simlab").rglob("*.py"):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef):
                out.setdefault(node.name, []).append(module)
    return out


def _has(obj, attr: str) -> bool:
    if "*" in attr:  # `collectives.ring_*`: some attribute matches
        return any(re.fullmatch(attr.replace("*", r"\w*"), a) for a in dir(obj))
    try:
        getattr(obj, attr)
        return True
    except AttributeError:
        return attr in getattr(obj, "__dataclass_fields__", {}) or attr in getattr(obj, "_fields", ())


def resolve(dotted: str) -> bool:
    """Import the longest module prefix of a dotted name, then follow its attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not _has(obj, attr):
                return False
            obj = getattr(obj, attr, obj) if "*" not in attr else obj
        return True
    return False


def _modules_with_stem(stem: str) -> list[str]:
    found = [f"simlab.{layer}.{stem}" for layer in LAYER_DIRS if (ROOT / "simlab" / layer / f"{stem}.py").exists()]
    return found + ([f"simlab.{stem}"] if (ROOT / "simlab" / f"{stem}.py").exists() else [])


def check_dotted(name: str, column: int | None) -> bool | None:
    """True/False for a claim about simlab; None for another project's name (torch.x is checked by import)."""
    first, _, rest = name.partition(".")
    if first == "simlab":
        return resolve(name)
    if first in LAYER_DIRS or first in BASE:
        return resolve(f"simlab.{name}")
    if _modules_with_stem(first):
        candidates = _modules_with_stem(first)
        layer = COLUMN_LAYER.get(column)
        if layer and f"simlab.{layer}.{first}" in candidates:
            candidates = [f"simlab.{layer}.{first}"]
        return any(resolve(f"{module}.{rest}") for module in candidates)
    if first in CLASSES:
        return any(resolve(f"{module}.{name}") for module in CLASSES[first])
    try:
        importlib.import_module(first)
    except ImportError:
        return None  # not a module: an rcParam (`font.family`), a JavaScript object, a local variable
    return resolve(name)


def check_path(path: str) -> bool:
    """A path of ours exists; `<lesson>`, `…`, `*` and `{a,b}` are wildcards."""
    if path in ALLOWED:
        return True
    folder, pattern = path.endswith("/"), re.sub(r"<[^>]*>|…", "*", path.rstrip("/"))
    options = [pattern]
    while any("{" in p for p in options):
        p = next(p for p in options if "{" in p)
        head, body, tail = re.match(r"(.*?)\{([^}]*)\}(.*)", p).groups()
        options = [o for o in options if o != p] + [head + b + tail for b in body.split(",")]
    first = pattern.split("/")[0]
    if "/" not in pattern and not folder:  # a bare file name: somewhere in the repository
        return any(f.match(p) for f in FILES for p in options)
    if first in LAYER_DIRS:
        base = ROOT / "simlab"
    elif (ROOT / first).exists():
        base = ROOT
    else:
        return True  # another project's file (`torch/csrc/…`, `src/graph/tuning.cc`): cited, not ours
    return all(any(base.glob(p)) for p in options)


def problems(text: str) -> list[str]:
    """One line per citation in `text` that does not hold."""
    found = []
    for token, column in citations(text):
        what = kind(token)
        if what == "path" and not check_path(token):
            found.append(f"no such path: {token}")
        elif what == "dotted" and check_dotted(callee(token), column) is False:
            found.append(f"no such name: {token}")
        elif what == "name":
            name = callee(token)
            if re.sub(r"<[^>]*>", "", name) and name not in NAMES and name not in ALLOWED and not _external(name):
                if not (("<" in name or "*" in name) and any(re.fullmatch(
                        re.sub(r"<[^>]*>|\*", r"\\w+", name), n) for n in NAMES)):
                    found.append(f"no such name: {token}")
    # the tree of simlab/ in "Layers": each file and folder it draws
    block = re.search(r"```\n(simlab/\n.*?)```", text, re.S)
    for entry in re.findall(r"(?<![\w/.])(\w+(?:\.py|/))", block[1] if block else ""):
        if entry != "simlab/" and not (ROOT / "simlab" / entry).exists():
            found.append(f"no such path: simlab/{entry}")
    return found


TEXT = ARCHITECTURE.read_text(encoding="utf-8")
FILES = repo_files()
NAMES = _identifiers()
CLASSES = _classes()
RULES = _load_layer_rules()


def test_every_cited_path_and_name_exists():
    assert problems(TEXT) == []


@pytest.mark.parametrize("entry", list(ALLOWED))
def test_every_allowance_is_still_needed(entry, monkeypatch):
    """Without its allowance each entry would be reported: the list holds nothing that is checkable."""
    monkeypatch.delitem(ALLOWED, entry)
    assert problems(TEXT) != []


def test_the_citations_are_read():
    """The parser sees the document: enough citations of each kind, the table's columns included."""
    kinds = [kind(token) for token, _ in citations(TEXT)]
    assert kinds.count("path") >= 60 and kinds.count("dotted") >= 100 and kinds.count("name") >= 100
    assert {column for _, column in citations(TEXT)} >= {None, 1, 2, 3, 4}


@pytest.mark.parametrize("bad, reported", [
    ("`tests/sim/test_hybrid.py`", "no such path: tests/sim/test_hybrid.py"),
    ("`simlab/sim/nowhere.py`", "no such path: simlab/sim/nowhere.py"),
    ("`sim/nowhere.py`", "no such path: sim/nowhere.py"),
    ("`test_no_such_test.py`", "no such path: test_no_such_test.py"),
    ("`simlab.sim.collectives.ring_all_reduce_v2`", "no such name: simlab.sim.collectives.ring_all_reduce_v2"),
    ("`collectives_stepper.simulate_everything`", "no such name: collectives_stepper.simulate_everything"),
    ("`zero.ZeroAdam.no_such_method()`", "no such name: zero.ZeroAdam.no_such_method()"),
    ("`Trace.no_such_method()`", "no such name: Trace.no_such_method()"),
    ("`frobnicate_the_plan()`", "no such name: frobnicate_the_plan()"),
    ("`NoSuchClass`", "no such name: NoSuchClass"),
    ("`torch.distributed.no_such_collective`", "no such name: torch.distributed.no_such_collective"),
])
def test_a_doctored_copy_with_a_bad_citation_is_reported(bad, reported):
    doctored = TEXT.replace("## The contracts\n", f"## The contracts\n\nSee {bad}.\n", 1)
    assert problems(doctored) == [reported]


def test_a_module_in_the_where_is_x_table_is_looked_up_in_its_columns_layer():
    """`data_parallel.BucketedDDP` is exec's; in the simulator's column it would name nothing."""
    row = "| x | `data_parallel.BucketedDDP` | `data_parallel.BucketedDDP` | — | — |\n"
    doctored = TEXT.replace("|---|---|---|---|---|\n", "|---|---|---|---|---|\n" + row, 1)
    assert problems(doctored) == ["no such name: data_parallel.BucketedDDP"]


def test_a_file_drawn_in_the_layers_tree_must_exist():
    doctored = TEXT.replace("trace.py  _checks.py", "trace.py  _moved.py  _checks.py", 1)
    assert problems(doctored) == ["no such path: simlab/_moved.py"]


# ---- the layer table: exactly the rules tests/test_layers.py enforces ------------------------------------

def layer_table(text: str) -> dict[str, dict]:
    """{layer: {modules, packages, lazy, simlab}} from the table under "What each layer may import"."""
    rows = re.search(r"\| layer \| modules \|.*?\n\|---.*?\n((?:\|.*\n)+)", text)[1]
    table = {}
    for row in rows.splitlines():
        names, modules, packages, simlab = (c.strip() for c in row.strip().strip("|").split(" | "))
        packages = packages.split(" — ")[0]
        simlab = re.sub(r"\s*\(.*\)$", "", simlab.split(" — ")[0])  # a remark after a dash or in brackets
        banned = [p.strip() for p in re.split(r"[,;] ", packages) if p.strip() not in ("", "—")]
        layers = re.findall(r"\w+", names)
        for name in layers:
            table[name] = {
                "layers": layers, "modules": re.findall(r"`([^`]+)`", modules),
                "packages": {p for p in banned if " " not in p},
                "lazy": {p.split()[0] for p in banned if p.endswith(" only lazily")},
                "simlab": simlab}
    return table


def _simlab_rule(cell: str):
    """The table's simlab column in test_layers' terms: None = only base; a set of banned layers; or a
    (allowed layers, 'module level') pair for simlab/__init__."""
    if cell == "—":
        return set()
    if cell == "any simlab module outside base":
        return None
    top = re.fullmatch(r"any simlab module outside (.+); those only at module level", cell)
    if top:
        return set(top[1].split(" and ")), "module level"
    return {layer.strip() for layer in cell.split(",")}


def _module_name(cited: str) -> str:
    """`plan` → simlab.plan, `sim/` → simlab.sim.x, `simlab/__init__.py` → simlab."""
    if cited == "simlab/__init__.py":
        return "simlab"
    return f"simlab.{cited.rstrip('/')}" + (".x" if cited.endswith("/") else "")


def layer_problems(text: str) -> list[str]:
    """One line per difference between the document's layer rules and tests/test_layers.py's."""
    table, found = layer_table(text), []
    if set(table) != set(RULES.LAYERS):
        found.append(f"layers {sorted(table)} != test_layers' {sorted(RULES.LAYERS)}")
    for layer, row in table.items():
        found += [f"{layer}: `{m}` is not in that layer" for m in row["modules"]
                  if RULES.layer(_module_name(m)) not in row["layers"]]
        if layer in RULES.RULES:
            libs, _why, banned = RULES.RULES[layer]
            if row["packages"] != libs:
                found.append(f"{layer}: may not import {sorted(row['packages'])}, test_layers says {sorted(libs)}")
            if _simlab_rule(row["simlab"]) != banned:
                found.append(f"{layer}: simlab rule '{row['simlab']}', test_layers says "
                             f"{'only base' if banned is None else sorted(banned)}")
        elif layer == "top" and _simlab_rule(row["simlab"]) != (RULES.TOP_MAY_IMPORT, "module level"):
            found.append(f"top: simlab rule '{row['simlab']}', test_layers says {sorted(RULES.TOP_MAY_IMPORT)}")
        elif layer not in ("top", *RULES.RULES) and (row["packages"] or row["simlab"] != "—"):
            found.append(f"{layer}: has rules in the document, none in test_layers")
        if row["lazy"] != RULES.LAZY_ONLY.get(layer, (set(), ""))[0]:
            found.append(f"{layer}: only lazily {sorted(row['lazy'])}, test_layers says "
                         f"{sorted(RULES.LAZY_ONLY.get(layer, (set(), ''))[0])}")
    base = re.search(r"simlab\\\.\(([^)]*)\)", RULES.LAYERS["base"])[1].split("|")
    if sorted(table.get("base", {}).get("modules", [])) != sorted(base):  # every base module, and only those
        found.append(f"base: {table.get('base', {}).get('modules')}, test_layers says {base}")
    only = {package: layer for layer, package in re.findall(r"Only `simlab\.(\w+)` imports `(\w+)`", text)}
    if only != {package: layer for package, (layer, _) in RULES.ONLY_IN.items()}:
        found.append(f"only-in rules {only}, test_layers says {RULES.ONLY_IN}")
    if re.findall(r"no module over (\d+) lines", text) != [str(RULES.MAX_LINES)]:
        found.append(f"the line limit is not {RULES.MAX_LINES}")
    return found


def test_the_layer_rules_are_what_test_layers_enforces():
    assert layer_problems(TEXT) == []


@pytest.mark.parametrize("old, new, reported", [
    ("| exec | `exec/` | matplotlib, ipywidgets |", "| exec | `exec/` | ipywidgets |",
     "exec: may not import ['ipywidgets'], test_layers says ['ipywidgets', 'matplotlib']"),
    ("| base | `plan`, `trace`, `_checks` |", "| base | `plan`, `trace`, `_checks`, `_moved` |",
     "base: ['plan', 'trace', '_checks', '_moved'], test_layers says ['plan', 'trace', '_checks']"),
    ("| export, parity, render, grading, cli |", "| export, render, grading, cli |",
     "exec: simlab rule 'export, render, grading, cli', test_layers says ['cli', 'export', 'grading', 'parity', "
     "'render']"),
    ("matplotlib only lazily", "matplotlib", "i18n: may not import ['ipywidgets', 'matplotlib', 'torch'], "
     "test_layers says ['ipywidgets', 'torch']"),
    ("Only `simlab.i18n` imports `gettext`", "Only `simlab.render` imports `gettext`",
     "only-in rules {'gettext': 'render'}, test_layers says {'gettext': ('i18n', \"every string goes through "
     "simlab.i18n's _()\")}"),
])
def test_a_doctored_layer_table_is_caught(old, new, reported):
    assert old in TEXT
    found = layer_problems(TEXT.replace(old, new, 1))
    assert reported in found, found
