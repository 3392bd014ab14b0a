"""The rule base class and registry.

A rule is a small class in its family's module:

    class SchedulerBeforeOptimizer(Rule):
        code = "LC201"

        def check(self, ctx: FileContext) -> Iterator[Finding]:
            for loop in ctx.model.walk_loops():
                ...
                yield self.finding(ctx, event, f"`{sched}.step()` runs before `{opt}.step()` ...")

Name, severity and summary come from the rule's page in `rules/` (loopcheck.catalog); the class
holds only the check. Subclasses register themselves on definition.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar, Iterator

import libcst as cst

from loopcheck.catalog import RulePage, page
from loopcheck.findings import Finding, Severity

if TYPE_CHECKING:
    from loopcheck.lint.loopmodel import Event, ModuleModel

REGISTRY: dict[str, type["Rule"]] = {}


@dataclass(frozen=True)
class Span:
    line: int
    column: int  # 1-based
    end_line: int
    end_column: int


class FileContext:
    """Everything a rule may read about one file. The loop model is built once, on first use."""

    def __init__(self, path: str, source: str, module: cst.Module, project: Any = None) -> None:
        self.path = path
        self.source = source
        self.module = module
        self.project = project  # the project index (loopmodel follows local imports through it)
        self.lines = source.splitlines()

    @cached_property
    def model(self) -> "ModuleModel":
        from loopcheck.lint.loopmodel import build_model

        return build_model(self.path, self.module, project=self.project)

    def span(self, node: cst.CSTNode) -> Span:
        """Position of a node of this file's module (computed on demand, never for the whole tree)."""
        from loopcheck.lint.positions import span_of

        return span_of(self, node)

    @cached_property
    def _nodes(self) -> tuple[list[cst.CSTNode], dict[int, cst.CSTNode]]:
        nodes: list[cst.CSTNode] = []
        parents: dict[int, cst.CSTNode] = {}
        for node, parent in walk(self.module):
            nodes.append(node)
            if parent is not None:
                parents[id(node)] = parent
        return nodes, parents

    def nodes(self, *types: type) -> list[cst.CSTNode]:
        """Every node of these types in the module, in source order, from one shared walk.

        Much cheaper than a `module.visit(...)` per rule (libcst visitors rebuild the tree as
        they go); whitespace, commas and parentheses are not included."""
        everything = self._nodes[0]
        return [n for n in everything if isinstance(n, types)] if types else list(everything)

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        """The syntactic parent of a node of this module (None for the module itself)."""
        return self._nodes[1].get(id(node))


_SKIPPED_FIELDS = frozenset({
    "lpar", "rpar", "comma", "semicolon", "leading_lines", "lines_after_decorators", "trailing_whitespace",
    "header", "footer", "newline", "equal", "colon", "dot", "indent", "star_tok", "lbracket", "rbracket",
    "lbrace", "rbrace", "asynchronous",
})
# dataclass field order differs from source order for these
_FIELDS: dict[type, tuple[str, ...]] = {
    cst.FunctionDef: ("decorators", "name", "params", "returns", "body"),
    cst.ClassDef: ("decorators", "name", "bases", "keywords", "body"),
    cst.IfExp: ("body", "test", "orelse"),
    cst.ExceptHandler: ("type", "name", "body"),
    cst.ExceptStarHandler: ("type", "name", "body"),
    cst.Arg: ("keyword", "value"),
    cst.ImportFrom: ("relative", "module", "names"),
}


def _child_fields(tp: type) -> tuple[str, ...]:
    found = _FIELDS.get(tp)
    if found is None:
        import dataclasses

        found = _FIELDS[tp] = tuple(
            f.name for f in dataclasses.fields(tp)
            if f.name not in _SKIPPED_FIELDS and "whitespace" not in f.name and not f.name.endswith("colon")
        )
    return found


def walk(root: cst.CSTNode) -> Iterator[tuple[cst.CSTNode, cst.CSTNode | None]]:
    """(node, parent) for every node under `root`, root first, in source order.

    Reads the nodes' fields directly instead of going through libcst's visitor machinery,
    which is about ten times faster."""
    stack: list[tuple[cst.CSTNode, cst.CSTNode | None]] = [(root, None)]
    while stack:
        node, parent = stack.pop()
        yield node, parent
        children: list[tuple[cst.CSTNode, cst.CSTNode | None]] = []
        for name in _child_fields(type(node)):
            value = getattr(node, name)
            if isinstance(value, cst.CSTNode):
                children.append((value, node))
            elif isinstance(value, (list, tuple)):
                children.extend((v, node) for v in value if isinstance(v, cst.CSTNode))
        children.reverse()
        stack.extend(children)


class Rule:
    code: ClassVar[str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "code" in cls.__dict__:
            if cls.code in REGISTRY:
                raise RuntimeError(f"rule code {cls.code} defined twice")
            REGISTRY[cls.code] = cls

    @classmethod
    def meta(cls) -> RulePage:
        return page(cls.code)

    @property
    def name(self) -> str:
        return self.meta().name

    @property
    def severity(self) -> Severity:
        return self.meta().severity

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        raise NotImplementedError

    def finding(
        self,
        ctx: FileContext,
        at: "Event | cst.CSTNode | Span",
        message: str,
        fix: dict[str, Any] | None = None,
    ) -> Finding:
        """A finding of this rule at an event, a node of ctx.module, or an explicit span."""
        path = ctx.path
        if isinstance(at, Span):
            span = at
        elif hasattr(at, "kind") and hasattr(at, "end_column"):  # an Event (possibly in another file)
            span = Span(at.line, at.column, at.end_line, at.end_column)
            path = at.path
        else:
            span = ctx.span(at)
        meta = self.meta()
        return Finding(
            code=self.code,
            name=meta.name,
            severity=meta.severity,
            message=message,
            path=path,
            line=span.line,
            column=span.column,
            end_line=span.end_line,
            end_column=span.end_column,
            fix=fix,
        )


def all_rules() -> list[type[Rule]]:
    """Every registered rule, in code order (importing the family modules registers them)."""
    import loopcheck.lint.rules  # noqa: F401  (registers the families)

    return [REGISTRY[c] for c in sorted(REGISTRY)]
