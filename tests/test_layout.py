"""The package's layout: no import cycles between loopcheck's modules, a docstring on each.

The import graph is read from the sources: the imports a module runs when it is imported (its
top level, including `if`/`try` blocks there; imports inside functions and under
`TYPE_CHECKING` run later or never, so they cannot make an import cycle). Importing `a.b.c`
imports the packages `a` and `a.b` first, so those count as imported too.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "loopcheck"


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _run_on_import(body: list[ast.stmt]) -> list[ast.Import | ast.ImportFrom]:
    """The import statements of a module body that run when the module is imported."""
    found: list[ast.Import | ast.ImportFrom] = []
    for stmt in body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            found.append(stmt)
        elif isinstance(stmt, ast.If):
            if "TYPE_CHECKING" not in ast.unparse(stmt.test):
                found += _run_on_import(stmt.body) + _run_on_import(stmt.orelse)
        elif isinstance(stmt, ast.Try):
            found += _run_on_import(stmt.body) + _run_on_import(stmt.orelse) + _run_on_import(stmt.finalbody)
            for handler in stmt.handlers:
                found += _run_on_import(handler.body)
    return found


def _imported(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The loopcheck modules importing `name` imports first."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    wanted: set[str] = set()
    for stmt in _run_on_import(ast.parse(path.read_text(encoding="utf-8")).body):
        if isinstance(stmt, ast.Import):
            wanted.update(alias.name for alias in stmt.names)
            continue
        base = stmt.module or ""
        if stmt.level:
            parts = package.split(".")[: len(package.split(".")) - (stmt.level - 1)]
            base = ".".join(parts + ([stmt.module] if stmt.module else []))
        for alias in stmt.names:
            submodule = f"{base}.{alias.name}"
            wanted.add(submodule if submodule in modules else base)
    found: set[str] = set()
    for target in wanted:
        while target:  # the module, and every package above it
            if target in modules and target != name and not name.startswith(target + "."):
                found.add(target)
            target = target.rpartition(".")[0]
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other, directly or through others."""
    reach = {}
    for start in graph:
        seen: set[str] = set()
        todo = list(graph[start])
        while todo:
            node = todo.pop()
            if node not in seen:
                seen.add(node)
                todo.extend(graph.get(node, ()))
        reach[start] = seen
    groups = {tuple(sorted(m for m in reach[start] if start in reach[m])) for start in graph if start in reach[start]}
    return sorted(list(group) for group in groups)


def test_no_import_cycles_between_loopcheck_modules():
    modules = _modules()
    graph = {name: _imported(name, path, modules) for name, path in modules.items()}
    assert sum(map(len, graph.values())) > 100  # the graph was read, not empty
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_each_cycle_once():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a", "e"}, "e": {"d"}, "f": {"f"}, "g": set()}
    assert _cycles(graph) == [["a", "b", "c"], ["d", "e"], ["f"]]


def test_the_import_reader_follows_relative_imports_and_skips_type_checking(tmp_path: Path):
    source = (
        "from typing import TYPE_CHECKING\n"
        "from . import sibling\n"
        "from ..other import thing\n"
        "if TYPE_CHECKING:\n    from pkg.late import Late\n"
        "try:\n    import pkg.optional\nexcept ImportError:\n    pass\n"
        "def f():\n    import pkg.lazy\n"
    )
    path = tmp_path / "mod.py"
    path.write_text(source)
    modules = {name: tmp_path for name in ("pkg", "pkg.sub", "pkg.sub.mod", "pkg.sub.sibling", "pkg.other",
                                           "pkg.late", "pkg.optional", "pkg.lazy")}
    assert _imported("pkg.sub.mod", path, modules) == {"pkg.sub.sibling", "pkg.other", "pkg.optional"}


def test_every_module_says_its_job():
    missing = [str(path.relative_to(PACKAGE.parent)) for path in sorted(PACKAGE.rglob("*.py"))
               if not ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))]
    assert missing == []
