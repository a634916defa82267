"""The package's shape: no import cycle anywhere, few top-level modules, the README's layout true.

Imports are read from the source (every ``import`` statement, also inside functions and under
``TYPE_CHECKING``), so a cycle hidden behind a late import counts as one.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "ragmon"
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


def _layout_entries() -> Iterator[str]:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Layout", 1)[1].split("\n## ", 1)[0]
    yield from re.findall(r"^(ragmon/[\w/]*\.?\w*)", section, re.MULTILINE)


def test_few_top_level_modules_and_the_readme_layout_names_every_folder() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top
    folders = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists())
    entries = set(_layout_entries())
    assert [f for f in folders if f"ragmon/{f}/" not in entries] == []
    assert [e for e in entries if not (ROOT / e).exists()] == []
