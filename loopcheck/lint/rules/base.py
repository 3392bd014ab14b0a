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

import re
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterator, TypeVar

import libcst as cst

from loopcheck.catalog import RulePage, page
from loopcheck.findings import Finding, Severity
from loopcheck.lint.syntax import child_nodes, classes_of, module_nodes, walk, walk_pruned  # noqa: F401  (the rules' walks)

if TYPE_CHECKING:
    from loopcheck.lint.loopmodel import Event, ModuleModel

REGISTRY: dict[str, type["Rule"]] = {}
T = TypeVar("T")


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

        return build_model(self.path, self.module, project=self.project)

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
    def texts(self) -> list[str] | None:
        """The text of this file, then of every other file the loop model's events come from;
        None when one of those cannot be read back."""
        texts = [self.source]
        paths = {e.path for e in self.model.events if e.path and e.path != self.path}
        if paths:
            from pathlib import Path

            from loopcheck.lint.project import parse_path

            for path in sorted(paths):
                parsed = parse_path(Path(path), self.project)
                if parsed is None:  # changed or gone since
                    return None
                texts.append(parsed.source)
        return texts

    def mentions(self, pattern: "re.Pattern[str]") -> bool:
        """Whether `pattern` matches this file or a file the loop model followed (True when the
        text of a followed file cannot be read back)."""
        texts = self.texts
        return texts is None or any(pattern.search(text) for text in texts)


class Rule:
    code: ClassVar[str]
    # Regular expressions: when set, the rule runs only if one of them matches the text of the
    # file or of a project file whose code the loop model followed (where the rule's events can
    # come from). Declared only where a finding is impossible without such a word, e.g. a
    # checkpoint rule without any `save`: a cheap way to skip work, never a change of results.
    requires: ClassVar[tuple[str, ...]] = ()

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


def required_pattern(rule: type[Rule]) -> "re.Pattern[str] | None":
    """The rule's `requires` as one compiled pattern (None: the rule always runs)."""
    if not rule.requires:
        return None
    found = _REQUIRED.get(rule.requires)
    if found is None:
        found = _REQUIRED[rule.requires] = re.compile("|".join(f"(?:{p})" for p in rule.requires))
    return found


_REQUIRED: dict[tuple[str, ...], "re.Pattern[str]"] = {}


def all_rules() -> list[type[Rule]]:
    """Every registered rule, in code order (importing the family modules registers them)."""
    import loopcheck.lint.rules  # noqa: F401  (registers the families)

    return [REGISTRY[c] for c in sorted(REGISTRY)]
