"""simlab's layer rules, checked from the source with `ast` (nothing from simlab is imported here).

  layer   modules                                     may not import
  base    simlab.plan, .trace, ._checks               torch, matplotlib, ipywidgets; any simlab module outside base
  sim     simlab.sim.*                                torch, matplotlib, ipywidgets; export, exec, render, parity, grading, cli
  export  simlab.export.*                             torch, matplotlib, ipywidgets; exec, render, parity, grading, cli
  exec    simlab.exec.*                               matplotlib, ipywidgets; export, render, parity, grading, cli
  parity  simlab.parity.*                             matplotlib, ipywidgets; render, grading, cli
  render  simlab.render.*                             torch; exec, parity, grading, cli (a widget that starts a real
                                                      run receives it as a callable)
  i18n    simlab.i18n (beside the layers)             torch, ipywidgets, matplotlib but only lazily (the CJK font,
                                                      for Chinese); any simlab module outside base
  grading, cli: simlab.grading, .grading.*, .grading_*; simlab.cli, .cli.*, .cli_*, .__main__ (the top: no rules)
  top     simlab (simlab/__init__.py)                 any simlab module but base and sim, and those only at module
                                                      level (exec names load through importlib strings: unseen here)
Everywhere: no import cycle between simlab modules (lazy imports count), no module over 300 lines, and gettext
imported by simlab.i18n alone (every other layer above base translates through its `_()`; base, which imports
only base, never does). ARCHITECTURE.md's layer table says the same: tests/test_architecture.py compares them.

Imports count wherever written (module level, functions, methods, if/try blocks); `from pkg import name` counts
the submodule pkg.name if it exists, else the package (its __init__). The checker is plain functions over {module:
source}: the tests add one forbidden import to a copy of the real tree and expect exactly that problem reported.
"""
import ast
import functools
import re
from pathlib import Path

import pytest

MAX_LINES = 300
DRAWING, TORCH = {"matplotlib", "ipywidgets"}, {"torch"}
LAYERS = {"top": r"simlab", "cli": r"simlab\.__main__|simlab\.cli([._].+)?", "grading": r"simlab\.grading([._].+)?",
          "base": r"simlab\.(plan|trace|_checks)(\..+)?", "sim": r"simlab\.sim(\..+)?",
          "export": r"simlab\.export(\..+)?", "exec": r"simlab\.exec(\..+)?",
          "parity": r"simlab\.parity(\..+)?", "render": r"simlab\.render(\..+)?", "i18n": r"simlab\.i18n"}
# layer: (forbidden third-party packages, why; forbidden simlab layers, or None = "only base allowed")
RULES = {
    "base": (TORCH | DRAWING, "base is numpy only", None),
    "sim": (TORCH | DRAWING, "sim/ is numpy only", {"export", "exec", "render", "parity", "grading", "cli"}),
    "export": (TORCH | DRAWING, "export/ writes text from sim's plans", {"exec", "render", "parity", "grading", "cli"}),
    "exec": (DRAWING, "exec/ does not draw", {"export", "render", "parity", "grading", "cli"}),
    "parity": (DRAWING, "parity/ does not draw", {"render", "grading", "cli"}),
    "render": (TORCH, "render/ draws without torch", {"exec", "parity", "grading", "cli"}),
    "i18n": (TORCH | {"ipywidgets"}, "i18n sits beside the layers", None),
}
# layer: (third-party packages it may import only inside a function, why)
LAZY_ONLY = {"i18n": ({"matplotlib"}, "i18n loads matplotlib only for Chinese figures")}
# third-party package: (the one layer that may import it, why)
ONLY_IN = {"gettext": ("i18n", "every string goes through simlab.i18n's _()")}
TOP_MAY_IMPORT = {"base", "sim"}  # simlab/__init__.py: at module level only


ROOT = Path(__file__).resolve().parents[1]


def load_sources(root=ROOT):
    """{dotted module name: source} for every simlab/**/*.py under `root`."""
    sources = {}
    for path in sorted(Path(root, "simlab").rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        sources[name] = path.read_text(encoding="utf-8")
    return sources


def layer(module):
    """The layer of a simlab module name, or None for a module outside every layer."""
    return next((name for name, pattern in LAYERS.items() if re.fullmatch(pattern, module)), None)


@functools.lru_cache(maxsize=None)
def _statements(source):
    """(level, module, names, lazy) for every import statement; lazy = inside a function (parsed once)."""
    found = []

    def visit(node, lazy):
        if isinstance(node, ast.Import):
            found.extend((0, alias.name, (), lazy) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.append((node.level, node.module or "", tuple(a.name for a in node.names), lazy))
        lazy = lazy or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for child in ast.iter_child_nodes(node):
            visit(child, lazy)
    visit(ast.parse(source), False)
    return tuple(found)


def imports(name, source, modules=()):
    """[(absolute dotted name, lazy)] for every import in module `name`; lazy = inside a function. `modules`
    (all module names) tells a package from a module, and `from pkg import submodule` from an attribute."""
    modules = set(modules) | {name}
    is_package = name == "simlab" or any(m.startswith(name + ".") for m in modules)
    package = name.split(".") if is_package else name.split(".")[:-1]
    found = []
    for level, module, names, lazy in _statements(source):
        base = package[:len(package) - level + 1] if level else []
        origin = ".".join(base + ([module] if module else []))
        if not names:  # import a.b.c
            found.append((origin, lazy))
        found.extend((f"{origin}.{n}" if f"{origin}.{n}" in modules else origin, lazy) for n in names)
    return found


def _owner(target, modules):
    """The simlab module an import lands in: the longest prefix of `target` that is a known module."""
    prefixes = [target.rsplit(".", cut)[0] for cut in range(target.count(".") + 1)]
    return next((prefix for prefix in prefixes if prefix in modules), target)


def import_graph(sources):
    """{module: {simlab modules it imports}} — module level and lazy imports alike."""
    return {name: {_owner(t, sources) for t, _ in imports(name, src, sources)
                   if t.split(".")[0] == "simlab" and _owner(t, sources) != name}
            for name, src in sources.items()}


def reach(graph, start):
    """Every module that `start` imports, directly or through others."""
    seen, todo = set(), [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def cycles(graph):
    """Every elementary cycle, once each, as [a, b, ..., a] starting at its smallest module."""
    back = {node: reach(graph, node) for node in graph}
    found = []
    for start in sorted(graph):
        stack = [(start, [start])]
        while stack:
            node, path = stack.pop()
            for nxt in sorted(graph.get(node, ()), reverse=True):
                if nxt == start:
                    found.append(path + [start])
                elif nxt > start and nxt not in path and start in back.get(nxt, ()):
                    stack.append((nxt, path + [nxt]))
    return found


def violations(sources):
    """One readable line per broken rule, sorted."""
    problems = set()
    for name, source in sources.items():
        here = layer(name)
        for target, lazy in imports(name, source, sources):
            verb = "lazily imports" if lazy else "imports"
            top, owner = target.split(".")[0], _owner(target, sources)
            if top in ONLY_IN and here != ONLY_IN[top][0]:
                problems.add(f"{name} {verb} {top} (only simlab.{ONLY_IN[top][0]} may: {ONLY_IN[top][1]})")
            if here in LAZY_ONLY and top in LAZY_ONLY[here][0] and not lazy:
                problems.add(f"{name} {verb} {top} ({LAZY_ONLY[here][1]}: inside a function)")
            if here in RULES:
                libs, why, banned = RULES[here]
                if top in libs:
                    problems.add(f"{name} {verb} {top} ({why})")
                elif top == "simlab" and banned is None and layer(owner) != "base":
                    problems.add(f"{name} {verb} {owner} ({here} imports only base)")
                elif top == "simlab" and banned and layer(owner) in banned:
                    problems.add(f"{name} {verb} {owner} ({here}/ must not import {layer(owner)}/)")
            elif here == "top" and top == "simlab":
                if layer(owner) not in TOP_MAY_IMPORT:
                    problems.add(f"{name} {verb} {owner} (simlab/__init__ imports only base and sim)")
                elif lazy:
                    problems.add(f"{name} {verb} {owner} (simlab/__init__ imports at module level only)")
        lines = len(source.splitlines())
        if lines > MAX_LINES:
            problems.add(f"{name} has {lines} lines (over {MAX_LINES})")
    for cycle in cycles(import_graph(sources)):
        problems.add("import cycle: " + " -> ".join(cycle))
    return sorted(problems)


SOURCES = load_sources()
BASELINE = violations(SOURCES)


def test_real_tree_keeps_the_layer_rules():
    print("\n".join(BASELINE))
    assert BASELINE == []


def test_imports_resolves_relative_lazy_and_submodule_imports():
    modules = {"simlab", "simlab.sim", "simlab.sim.cost", "simlab.exec", "simlab.exec.launch", "simlab.plan"}
    code = ("from . import cost, simulate\nfrom ..exec import launch as L\nimport torch.nn\n"
            "from simlab.plan import Action\ndef f():\n    if True:\n        from .. import exec\n")
    assert imports("simlab.sim.collectives_stepper", code, modules) == [
        ("simlab.sim.cost", False), ("simlab.sim", False), ("simlab.exec.launch", False),
        ("torch.nn", False), ("simlab.plan", False), ("simlab.exec", True)]
    assert imports("simlab.sim", "from . import cost\nfrom .cost import x", modules) == [
        ("simlab.sim.cost", False), ("simlab.sim.cost", False)]


def _candidates(sources, layer_name, preferred):
    """`preferred` first, then the layer's modules; last a new empty module (parity/ may not exist yet)."""
    names = [preferred] + sorted(m for m in sources if layer(m) == layer_name) + [f"simlab.{layer_name}.probe"]
    return [m for m in dict.fromkeys(names) if m in sources or layer(m) == layer_name]


def _with(sources, module, code):
    return {**sources, module: sources.get(module, "") + "\n" + code + "\n"}


def _relative(module, target, sources):
    """`from ..exec import launch`: `target` relative to `module`'s package (both under simlab)."""
    is_package = module == "simlab" or any(m.startswith(module + ".") for m in sources)
    parent, leaf = target.rsplit(".", 1)
    return f"from {'.' * (module.count('.') + is_package)}{parent.partition('.')[2]} import {leaf}"


# name: (layer to add to, preferred module, target: a package or (layer, preferred module), code, why)
CASES = {
    "torch_in_sim": ("sim", "simlab.sim.collectives", "torch", "import torch.distributed", "sim/ is numpy only"),
    "matplotlib_in_base": ("base", "simlab.trace", "matplotlib", "import matplotlib.pyplot", "base is numpy only"),
    "sim_in_base": ("base", "simlab.plan", ("sim", "simlab.sim.cost"), "{rel}", "base imports only base"),
    "exec_in_sim": ("sim", "simlab.sim.cost", ("exec", "simlab.exec.launch"), "import {t}",
                    "sim/ must not import exec/"),
    "render_in_exec": ("exec", "simlab.exec.collectives", ("render", "simlab.render.style"), "{absolute}",
                       "exec/ must not import render/"),
    "lazy_widgets_in_exec": ("exec", "simlab.exec.launch", "ipywidgets", "def f():\n    import ipywidgets",
                             "exec/ does not draw"),
    "render_in_parity": ("parity", "simlab.parity.pipeline", ("render", "simlab.render.collectives_figures"),
                         "{absolute}", "parity/ must not import render/"),
    "lazy_exec_in_render": ("render", "simlab.render.data_parallel_timeline", ("exec", "simlab.exec.launch"),
                            "def run():\n    if 1:\n        {rel}", "render/ must not import exec/"),
    "torch_in_render": ("render", "simlab.render.style", "torch", "from torch import nn",
                        "render/ draws without torch"),
    "exec_in_top": ("top", "simlab", ("exec", "simlab.exec.launch"), "{rel}",
                    "simlab/__init__ imports only base and sim"),
    "lazy_sim_in_top": ("top", "simlab", ("sim", "simlab.sim.cost"), "def late():\n    {rel}",
                        "simlab/__init__ imports at module level only"),
    # the i18n rule: beside the layers, on base alone; matplotlib lazily; base never translates; gettext only here
    "torch_in_i18n": ("i18n", "simlab.i18n", "torch", "import torch", "i18n sits beside the layers"),
    "sim_in_i18n": ("i18n", "simlab.i18n", ("sim", "simlab.sim.cost"), "{rel}", "i18n imports only base"),
    "eager_matplotlib_in_i18n": ("i18n", "simlab.i18n", "matplotlib", "import matplotlib",
                                 "i18n loads matplotlib only for Chinese figures: inside a function"),
    "i18n_in_base": ("base", "simlab.plan", ("i18n", "simlab.i18n"), "{rel}", "base imports only base"),
    "gettext_in_render": ("render", "simlab.render.style", "gettext", "import gettext",
                          "only simlab.i18n may: every string goes through simlab.i18n's _()"),
    "lazy_gettext_in_sim": ("sim", "simlab.sim.cost", "gettext", "def f():\n    from gettext import gettext",
                            "only simlab.i18n may: every string goes through simlab.i18n's _()"),
}


@pytest.mark.parametrize("case", CASES)
def test_one_forbidden_import_is_reported(case):
    """Into the first (module, target), preferred first, not yet reported and closing no cycle too."""
    into, preferred, target, code, why = CASES[case]
    def expected(m, t):
        return f"{m} {'lazily ' if 'def ' in code else ''}imports {t} ({why})"
    graph = import_graph(SOURCES)
    targets = [target] if isinstance(target, str) else [t for t in _candidates(SOURCES, *target) if t in SOURCES]
    module, t = next((m, t) for m in _candidates(SOURCES, into, preferred) for t in targets
                     if m not in reach(graph, t) | {t} and expected(m, t) not in BASELINE)
    parent, _, leaf = t.rpartition(".")
    rel = _relative(module, t, SOURCES) if t.startswith("simlab.") else None
    modified = _with(SOURCES, module, code.format(t=t, rel=rel, absolute=f"from {parent} import {leaf}"))
    assert [v for v in violations(modified) if v not in BASELINE] == [expected(module, t)]


def test_a_new_cycle_between_two_sim_modules_is_reported():
    """Two sim modules neither of which reaches the other yet: importing each other is exactly one cycle."""
    graph = import_graph(SOURCES)
    sim = [m for m in _candidates(SOURCES, "sim", "simlab.sim.collectives") if not m.endswith(".sim")]
    a, b = next((a, b) for a in sim for b in sim if a < b and a not in reach(graph, b) and b not in reach(graph, a))
    modified = _with(_with(SOURCES, a, _relative(a, b, SOURCES)), b, _relative(b, a, SOURCES))
    assert [line for line in violations(modified) if line not in BASELINE] == [f"import cycle: {a} -> {b} -> {a}"]


def test_an_overlong_module_is_reported():
    module = next(m for m in _candidates(SOURCES, "sim", "simlab.sim.collectives")
                  if len(SOURCES.get(m, "").splitlines()) < MAX_LINES)
    lines = SOURCES.get(module, "").splitlines()
    padded = "\n".join(lines + ["# padding"] * (MAX_LINES + 1 - len(lines))) + "\n"
    new = [line for line in violations({**SOURCES, module: padded}) if line not in BASELINE]
    assert new == [f"{module} has {MAX_LINES + 1} lines (over {MAX_LINES})"]
