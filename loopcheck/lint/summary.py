"""Module summaries: what the rest of a project needs to know about a module without its tree.

A summary is plain, picklable data read with the standard `ast` parser (several times cheaper
than libcst): the module's imports (for the import graph and the cache's dependencies),
`__all__`, the functions and classes it defines, and the identifiers it mentions (for the cheap
"could tracing from here ever meet a softmax?" tests). Whether a module must be parsed with
libcst, and which files a cached result depends on, are decided from summaries alone.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ModuleSummary:
    path: str
    imports: tuple[tuple[str, int, tuple[str, ...]], ...]  # (module, level, imported names)
    exports: tuple[str, ...] | None  # `__all__` when it is a literal list or tuple
    functions: tuple[str, ...]  # top-level functions
    classes: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...]  # (name, bases, methods)
    identifiers: frozenset[str] = field(repr=False)  # every name and attribute, lower case

    def import_targets(self) -> list[tuple[str, int]]:
        """What an import may load: the module, and each imported name as a submodule
        (`from . import engine`, `from pkg import engine`)."""
        targets: dict[tuple[str, int], None] = {}
        for module, level, names in self.imports:
            if module or level:
                targets[(module, level)] = None
            for name in names:
                if name != "*":
                    targets[(f"{module}.{name}" if module else name, level)] = None
        return list(targets)

    def mentions_any(self, words: tuple[str, ...]) -> bool:
        """Whether an identifier of the module contains one of `words` (lower case)."""
        return any(word in ident for ident in self.identifiers for word in words)


def summarize(source: bytes, path: str) -> ModuleSummary | None:
    """The summary of one module's source (None when Python cannot parse it)."""
    try:
        tree = ast.parse(source, filename=path)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    imports: list[tuple[str, int, tuple[str, ...]]] = []
    identifiers: set[str] = set()
    exports: tuple[str, ...] | None = None
    try:
        nodes = list(ast.walk(tree))
    except RecursionError:
        return None
    for node in nodes:
        kind = type(node)
        if kind is ast.Name:
            identifiers.add(node.id.lower())  # type: ignore[attr-defined]
        elif kind is ast.Attribute:
            identifiers.add(node.attr.lower())  # type: ignore[attr-defined]
        elif kind is ast.Import:
            for alias in node.names:  # type: ignore[attr-defined]
                imports.append((alias.name, 0, ()))
        elif kind is ast.ImportFrom:
            names = tuple(alias.name for alias in node.names)  # type: ignore[attr-defined]
            imports.append((node.module or "", node.level, names))  # type: ignore[attr-defined]
    functions: list[str] = []
    classes: list[tuple[str, tuple[str, ...], tuple[str, ...]]] = []
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions.append(stmt.name)
        elif isinstance(stmt, ast.ClassDef):
            bases = tuple(ast.unparse(b) for b in stmt.bases)
            methods = tuple(s.name for s in stmt.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)))
            classes.append((stmt.name, bases, methods))
        elif isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in stmt.targets):
            if isinstance(stmt.value, (ast.List, ast.Tuple)):
                exports = tuple(e.value for e in stmt.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str))
    return ModuleSummary(path, tuple(imports), exports, tuple(functions), tuple(classes), frozenset(identifiers))
