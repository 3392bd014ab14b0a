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
from typing import TYPE_CHECKING, Any, ClassVar, Iterator

import libcst as cst

from loopcheck.catalog import RulePage, page
from loopcheck.findings import Finding, Severity
from loopcheck.lint.context import FileContext
from loopcheck.lint.positions import Span
from loopcheck.lint.citations import citations, without_places
from loopcheck.lint.rules._display import cite, user_names
from loopcheck.lint.syntax import child_nodes, classes_of, module_nodes, walk, walk_pruned  # noqa: F401  (the rules' walks)

if TYPE_CHECKING:
    from loopcheck.lint.loopmodel import CallSite, Event

__all__ = ["REGISTRY", "FileContext", "Rule", "Span", "all_rules", "required_pattern"]

REGISTRY: dict[str, type["Rule"]] = {}


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
        at: "Event | CallSite | cst.CSTNode | Span",
        message: str,
        fix: dict[str, Any] | None = None,
        severity: Severity | None = None,
    ) -> Finding:
        """A finding of this rule at an event, a node of ctx.module, or an explicit span. `severity`
        lowers the page's severity for a finding whose proof rests on something unresolved."""
        path = ctx.path
        if isinstance(at, Span):
            span = at
        elif hasattr(at, "path") and hasattr(at, "end_column"):  # an Event or a CallSite (possibly in another file)
            span = Span(at.line, at.column, at.end_line, at.end_column)
            path = at.path
        else:
            span = ctx.span(at)
        meta = self.meta()
        message = user_names(message)
        cited = citations(message)  # (kept apart: a kept analysis depends on the lines it cites)
        return Finding(
            code=self.code,
            name=meta.name,
            severity=meta.severity if severity is None else min(severity, meta.severity, key=lambda s: s.rank),
            message=cite(without_places(message), path),
            path=path,
            line=span.line,
            column=span.column,
            end_line=span.end_line,
            end_column=span.end_column,
            fix=fix,
            extra={"cites": cited} if cited else {},
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
