"""The package's shape: layers that only point down, no import cycle anywhere, few top-level
modules, the documented layout true.

Imports are read from the source (every ``import`` statement, also inside functions and under
``TYPE_CHECKING``), so an import hidden behind a late import counts as one.

``FLOORS`` is the layer order, written once: a unit (a folder of ``ragmon/`` or a top-level
module) may import its own modules and those of units on lower floors, never a unit on its
own floor or above. The "Layout" section of docs/explanation/design.md lists the same floors
(checked here).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "ragmon"
FLOORS: tuple[tuple[str, ...], ...] = (
    ("errors.py", "numbers.py", "model.py", "catalogue.py", "compiled.py", "defaults.py"),
    ("formats/", "metrics/", "otlp/"),
    ("config.py", "__init__.py"),
    ("conventions/", "scoring/", "net/"),
    ("pipeline/",),
    ("receivers/", "export/"),
    ("judge/", "groundtruth/"),
    ("sidecar/", "ops/"),
    ("offline/", "demo/"),
    ("cli.py",),
    ("__main__.py",),
)
"""Floor 1 first. A unit is named as in the documented layout: ``folder/`` or ``module.py``."""
MAX_TOP_LEVEL_MODULES = 10  # numbers.py: the one check numbers from outside pass, below every stage; compiled.py (what mypyc builds) is read by setup.py alone, so it stays on its own


def _module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules(package: Path = PACKAGE) -> dict[str, Path]:
    return {_module_name(path, package.parent): path for path in sorted(package.rglob("*.py"))}


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The module ``name`` refers to: itself, or its longest prefix that is a module."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of the package that ``module`` imports by name (parents' ``__init__`` not
    counted: Python runs them, but a module cannot depend on them by accident)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # ``from p import m`` imports the module p.m when there is one, else a name of p
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        for target in targets:
            resolved = _resolve(target, modules) if target.split(".")[0] == "ragmon" else None
            if resolved and resolved != module:
                found.add(resolved)
    return found


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    modules = _modules(package)
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def unit_of(module: str) -> str:
    """The unit of FLOORS a module of the package belongs to."""
    parts = module.split(".")
    if len(parts) == 1:
        return "__init__.py"
    if len(parts) == 2 and (PACKAGE / f"{parts[1]}.py").exists():
        return f"{parts[1]}.py"
    return f"{parts[1]}/"


def imports_against_floors(graph: dict[str, set[str]], floors: tuple[tuple[str, ...], ...]) -> list[str]:
    """Every import of one unit from a unit on its own floor or above, as ``a -> b``; a module
    of a unit no floor names is reported too."""
    floor = {unit: n for n, units in enumerate(floors) for unit in units}
    found = []
    for module, targets in sorted(graph.items()):
        unit = unit_of(module)
        if unit not in floor:
            found.append(f"{module}: its unit {unit} is on no floor")
            continue
        for target in sorted(targets):
            other = unit_of(target)
            if other != unit and floor.get(other, len(floors)) >= floor[unit]:
                found.append(f"{module} -> {target}")
    return found


def test_every_import_points_to_a_lower_floor() -> None:
    graph = import_graph()
    assert imports_against_floors(graph, FLOORS) == []
    named = [unit for units in FLOORS for unit in units]
    assert len(named) == len(set(named))
    assert sorted(named) == sorted({unit_of(m) for m in graph})  # every unit on a floor, none made up


def test_the_floor_check_finds_imports_sideways_and_up(tmp_path: Path) -> None:
    """The check itself: a late import up, an import under ``TYPE_CHECKING`` sideways and a
    unit on no floor are each found; imports down and within a unit are not."""
    package = tmp_path / "ragmon"
    for folder in ("low", "mid", "side", "high"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "low" / "a.py").write_text("def f():\n    from ragmon.high import d\n")
    (package / "low" / "b.py").write_text("from ragmon.low import a\n")
    (package / "mid" / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ragmon.side import e\nfrom ragmon.low import b\n")
    (package / "side" / "e.py").write_text("")
    (package / "high" / "d.py").write_text("from ragmon.mid import c\n")
    (package / "loose.py").write_text("")
    modules = _modules(package)
    graph = {name: imports_of(name, path, modules) for name, path in modules.items()}
    floors = (("__init__.py", "low/"), ("mid/", "side/"), ("high/",))
    global PACKAGE
    saved, PACKAGE = PACKAGE, package
    try:
        assert imports_against_floors(graph, floors) == [
            "ragmon.loose: its unit loose.py is on no floor",
            "ragmon.low.a -> ragmon.high.d",
            "ragmon.mid.c -> ragmon.side.e",
        ]
    finally:
        PACKAGE = saved


def test_the_package_has_no_import_cycle() -> None:
    graph = import_graph()
    assert len(graph) > 50 and graph["ragmon.pipeline.queue"]  # the graph was really read
    assert cycles(graph) == []


def test_the_cycle_check_finds_a_cycle(tmp_path: Path) -> None:
    """The check itself: a late import closing a loop of three modules is found."""
    package = tmp_path / "ragmon"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "a.py").write_text("from ragmon.sub import b\n")
    (package / "sub" / "b.py").write_text("import ragmon.c as c\n")
    (package / "c.py").write_text("def f():\n    from ragmon import a\n")
    (package / "d.py").write_text("from ragmon.a import thing\n")
    modules = _modules(package)
    graph = {name: imports_of(name, path, modules) for name, path in modules.items()}
    assert cycles(graph) == [["ragmon.a", "ragmon.c", "ragmon.sub.b"]]
    assert graph["ragmon.d"] == {"ragmon.a"}


LAYOUT_PAGE = ROOT / "docs" / "explanation" / "design.md"
"""The page whose "Layout" section lists the floors."""


def _layout_section() -> str:
    page = LAYOUT_PAGE.read_text()
    assert page.count("\n## Layout\n") == 1, f"{LAYOUT_PAGE} has one Layout section"
    return page.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]


def _layout_entries() -> Iterator[str]:
    yield from re.findall(r"^(ragmon/[\w/]*\.?\w*)", _layout_section(), re.MULTILINE)


def documented_floors(section: str) -> list[tuple[str, ...]]:
    """The units the documented layout lists under each ``floor N`` line, in order."""
    floors: list[list[str]] = []
    for line in section.splitlines():
        if re.match(r"^floor \d+\b", line):
            assert line.split()[1].rstrip(":") == str(len(floors) + 1), line
            floors.append([])
        elif floors:
            floors[-1].extend(name.removeprefix("ragmon/") for name in re.findall(r"^(ragmon/[\w/]*\.?\w*)", line))
    return [tuple(units) for units in floors]


def test_the_documented_layout_lists_the_floors() -> None:
    assert documented_floors(_layout_section()) == [tuple(units) for units in FLOORS]


def test_few_top_level_modules_and_the_documented_layout_names_every_folder() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top
    folders = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists())
    entries = set(_layout_entries())
    assert [f for f in folders if f"ragmon/{f}/" not in entries] == []
    assert [e for e in entries if not (ROOT / e).exists()] == []


def test_every_public_error_is_in_the_one_tree() -> None:
    """``ragmon/errors.py``: every exception class ragmon defines derives from ``RagmonError``,
    but private control-flow ones (a leading ``_``) that never leave their module."""
    import importlib
    import inspect

    from ragmon.errors import RagmonError

    outside = []
    for name in sorted(set(import_graph()) - {"ragmon.__main__"}):  # (it runs the command)
        module = importlib.import_module(name)
        for attr, value in vars(module).items():
            if (inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == name
                    and not attr.startswith("_") and not issubclass(value, RagmonError)):
                outside.append(f"{name}.{attr}")
    assert outside == []


SYSTEM_SIGNS = re.compile(r"^(import (subprocess|multiprocessing)|from (subprocess|process_helpers|e2e_stack) import)", re.MULTILINE)
"""What starts a process in a test file (promtool, Chromium and ragmon run through these): then
its tests are system tests."""
SYSTEM_MARK = re.compile(r"^pytestmark = \[?pytest\.mark\.system\b", re.MULTILINE)


def test_every_test_file_that_starts_processes_is_marked_system() -> None:
    unmarked = [
        path.name for path in sorted((ROOT / "tests").glob("test_*.py"))
        if SYSTEM_SIGNS.search(path.read_text()) and not SYSTEM_MARK.search(path.read_text())
    ]
    assert unmarked == []
