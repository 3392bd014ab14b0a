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
