"""What the rules read about one file: its path, text, parsed module, the run's project, and the
loop model (built once, on first use). The engine makes one per analysed file."""

from __future__ import annotations

import re
from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable, TypeVar

import libcst as cst

from loopcheck.lint.positions import Span
from loopcheck.lint.syntax import classes_of, module_nodes

if TYPE_CHECKING:
    from loopcheck.lint.loopmodel import ModuleModel

T = TypeVar("T")

# The last model built in the engine's current run, with what it was built from: a file linted
# again unchanged in the same run (what `--fix` would fix, worked out after the file's analysis)
# reuses it. Within a run the other files are taken as unchanged, so the model still holds.
_LAST_MODEL: list = []


class FileContext:
    """Everything a rule may read about one file. The loop model is built once, on first use."""

    def __init__(self, path: str, source: str, module: cst.Module, project: Any = None) -> None:
        self.path = path
        self.source = source
        self.module = module
        self.project = project  # the project index (loopmodel follows local imports through it)

    def derived(self, build: "Callable[[FileContext], T]") -> "T":
        """`build(self)`, computed once per file: facts that several rules share."""
        memo = self.__dict__.setdefault("_derived", {})
        if build not in memo:
            memo[build] = build(self)
        return memo[build]

    @cached_property
    def lines(self) -> list[str]:
        return self.source.splitlines()

    @cached_property
    def model(self) -> "ModuleModel":
        from loopcheck.lint.loopmodel import build_model
        from loopcheck.lint.project import current_run

        run = current_run()
        if run is not None and _LAST_MODEL and _LAST_MODEL[0] is run and _LAST_MODEL[1] is self.module \
                and _LAST_MODEL[2] == self.path:
            return _LAST_MODEL[3]  # the same tree analysed again in this run (the fix promise)
        model = build_model(self.path, self.module, project=self.project)
        _LAST_MODEL[:] = [run, self.module, self.path, model] if run is not None else []
        return model

    def on_parsed_tree(self) -> "FileContext":
        """This file's context on libcst's parse of its source, for what edits a tree and renders
        it (the fixes): a tree built from `ast` holds no whitespace or comments. The loop model is
        copied, with each node of this file replaced by its counterpart in the parse (the two
        trees have the same shape)."""
        if getattr(self.module, "positions", None) is None:
            return self
        from loopcheck.lint.positions import register_source
        from loopcheck.lint.syntax import parse_module
        from loopcheck.lint.tree_pairs import pairs, translated

        parsed = parse_module(self.source)
        register_source(parsed, self.source)
        nodes = {id(built): node for built, node in pairs(self.module, parsed)}
        found = FileContext(self.path, self.source, parsed, self.project)
        found.__dict__["model"] = translated(self.model, nodes)
        return found

    def span(self, node: cst.CSTNode) -> Span:
        """Position of a node of this file's module (computed on demand, never for the whole tree)."""
        from loopcheck.lint.positions import span_of

        return span_of(self, node)

    @property
    def _nodes(self) -> tuple[list[cst.CSTNode], dict[int, cst.CSTNode]]:
        return module_nodes(self.module)

    def nodes(self, *types: type) -> list[cst.CSTNode]:
        """Every node of these types in the module, in source order, from one shared walk.

        Much cheaper than a `module.visit(...)` per rule (libcst visitors rebuild the tree as
        they go); whitespace, commas and parentheses are not included."""
        everything = self._nodes[0]
        if not types:
            return list(everything)
        classes = classes_of(types)
        return [n for n in everything if type(n) in classes]

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        """The syntactic parent of a node of this module (None for the module itself)."""
        return self._nodes[1].get(id(node))

    @cached_property
    def followed(self) -> list[str]:
        """The other files the loop model's events come from."""
        return sorted({e.path for e in self.model.events if e.path and e.path != self.path})

    def mentions(self, pattern: "re.Pattern[str]") -> bool:
        """Whether `pattern` matches this file or a file the loop model followed (True when the
        text of a followed file cannot be read back). What is asked of another file is recorded
        with the project: a kept analysis depends on the answer, not on the rest of the text."""
        if pattern.search(self.source):
            return True
        return any(self._searched(path, pattern) is not False for path in self.followed)

    def count(self, pattern: "re.Pattern[str]") -> int | None:
        """How often `pattern` matches in this file and the files the loop model followed; None
        when the text of one of them cannot be read back."""
        total = len(pattern.findall(self.source))
        for path in self.followed:
            found = self._searched(path, pattern, count=True)
            if found is None:
                return None
            total += found
        return total

    def _searched(self, path: str, pattern: "re.Pattern[str]", count: bool = False) -> Any:
        if hasattr(self.project, "searched"):
            return self.project.searched(path, pattern, count)
        from pathlib import Path

        from loopcheck.lint.project import parse_path

        parsed = parse_path(Path(path), self.project)
        if parsed is None:
            return None
        return len(pattern.findall(parsed.source)) if count else bool(pattern.search(parsed.source))
