"""Autofixes for `loopcheck lint --fix`: safe ones by default, unsafe ones on request.

Two entry points:

- `describe_fix(finding, ctx)`: the `fix` field of a finding, a minimal text replacement of
  the original source (the engine fills it for findings of fixable codes; SARIF and JSON
  output carry it).
- `fix_source(source, path)`: lint, apply every available fix, lint again, until nothing
  changes. The result always parses and never holds a finding the input did not have.

Whether a code's fix is safe or unsafe is read from the `fix:` line of its rule page.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence
from weakref import WeakKeyDictionary

import libcst as cst

from loopcheck.catalog import page
from loopcheck.findings import Finding
from loopcheck.lint.fixes import amp, checkpoint, eval_mode, scheduler, zero_grad  # noqa: F401  (registers)
from loopcheck.lint.fixes.base import FIXERS, SourceIndex
from loopcheck.lint.fixes.edits import Edit, apply_edits, edit_offsets

if TYPE_CHECKING:
    from loopcheck.lint.context import FileContext

__all__ = ["FixResult", "fix_source", "describe_fix", "attach_fixes", "fixable_codes", "applicability"]

MAX_PASSES = 8

_INDEXES: "WeakKeyDictionary[Any, SourceIndex]" = WeakKeyDictionary()


@dataclass
class FixResult:
    source: str  # the fixed source (the input itself when nothing was fixed)
    fixed: list[Finding] = field(default_factory=list)  # findings whose fix was applied
    remaining: list[Finding] = field(default_factory=list)  # findings of the final source


def applicability(code: str) -> str:
    """A code's fix kind, "safe", "unsafe" or "none", from its rule page's front block."""
    return page(code).fix if code in FIXERS else "none"


def fixable_codes() -> list[str]:
    return sorted(code for code in FIXERS if applicability(code) != "none")


def _index(ctx: "FileContext") -> SourceIndex:
    index = _INDEXES.get(ctx)
    if index is None:
        index = _INDEXES[ctx] = SourceIndex(ctx)
    return index


def describe_fix(finding: Finding, ctx: "FileContext") -> dict | None:
    """The fix of a finding as `{"applicability", "message", "edits"}`, or None when the code
    has no fixer or this occurrence cannot be fixed without guessing."""
    kind = applicability(finding.code)
    if kind == "none" or finding.path not in (None, ctx.path):
        return None
    index = _index(ctx)
    if not index.renders_source:
        return None
    change = FIXERS[finding.code](index, finding)
    if change is None:
        return None
    edits = index.edits(change.module)
    if not edits:
        return None
    return {"applicability": kind, "message": change.message, "edits": [e.to_dict() for e in edits]}


def attach_fixes(findings: list[Finding], ctx: "FileContext") -> list[Finding]:
    """Fill the `fix` field of the findings that have a fixer (the others are returned as is)."""
    if not any(f.code in FIXERS and f.fix is None for f in findings):
        return findings
    out = []
    for f in findings:
        if f.code in FIXERS and f.fix is None:
            try:
                fix = describe_fix(f, ctx)
            except Exception:  # noqa: BLE001  (a fixer failure loses the fix, never the finding)
                fix = None
            if fix is not None:
                f = f.with_(fix=fix)
        out.append(f)
    return out


# --- fix_source ------------------------------------------------------------------------------

Linter = Callable[[str, str], Sequence[Finding]]


def _default_linter(source: str, path: str) -> list[Finding]:
    """The engine's findings for this source; local imports are followed as `loopcheck lint`
    follows them, so findings that span files are seen here too."""
    from loopcheck.lint.engine import check_source, project_for

    return list(check_source(source, path, project=project_for(path)).findings)


def _parses(source: str) -> bool:
    try:
        cst.parse_module(source)
    except (cst.ParserSyntaxError, RecursionError, ValueError):
        return False
    return True


class _Fixes:
    """The fixes of one version of the source: the engine's when the findings carry them,
    else described here (one parse and one loop model for all findings)."""

    def __init__(self, source: str, path: str) -> None:
        self.source, self.path = source, path
        self._ctx: "FileContext | None" = None

    def of(self, finding: Finding) -> dict | None:
        if finding.fix is not None:
            return finding.fix
        if self._ctx is None:
            from loopcheck.lint.context import FileContext

            self._ctx = FileContext(self.path, self.source, cst.parse_module(self.source))
        return describe_fix(finding, self._ctx)


def _edits(fix: dict) -> tuple[Edit, ...]:
    return tuple(Edit(**e) for e in fix["edits"])


def _pick(source: str, candidates: Iterable[tuple[Finding, tuple[Edit, ...]]]) -> list[tuple[Finding, tuple[Edit, ...]]]:
    """Fixes that do not touch each other, first come first served. Fixes with identical edits
    (one import rewrite reached from several findings) are applied once."""
    taken: list[tuple[int, int]] = []
    seen: set[tuple[Edit, ...]] = set()
    chosen: list[tuple[Finding, tuple[Edit, ...]]] = []
    for finding, edits in candidates:
        if edits in seen:
            chosen.append((finding, ()))
            continue
        spans = edit_offsets(source, edits)
        if any(s <= te and ts <= e for s, e in spans for ts, te in taken):
            continue
        taken.extend(spans)
        seen.add(edits)
        chosen.append((finding, edits))
    return chosen


def _introduces(before: Sequence[Finding], after: Sequence[Finding]) -> bool:
    """Whether the fixed source has more findings of some code than the original had."""
    was, now = Counter(f.code for f in before), Counter(f.code for f in after)
    return any(count > was[code] for code, count in now.items())


def fix_source(
    source: str,
    path: str = "<string>",
    *,
    unsafe: bool = False,
    enabled: Callable[[str], bool] = lambda code: True,
    linter: Linter | None = None,
) -> FixResult:
    """Apply the fixes of every enabled, fixable finding (safe ones; unsafe ones too with
    `unsafe=True`) and lint again, up to MAX_PASSES times. `linter(source, path)` defaults to
    `lint_source`; `remaining` holds the enabled findings of the final source."""
    lint = linter or _default_linter
    allowed = {"safe", "unsafe"} if unsafe else {"safe"}
    findings = list(lint(source, path))
    fixed: list[Finding] = []
    for _ in range(MAX_PASSES):
        candidates = []
        fixes = _Fixes(source, path)
        for f in findings:
            if not enabled(f.code) or applicability(f.code) not in allowed:
                continue
            fix = fixes.of(f)
            if fix is not None and fix.get("edits"):
                candidates.append((f, _edits(fix)))
        if not candidates:
            break
        step = _apply_pass(source, path, findings, candidates, lint)
        if step is None:
            break
        source, findings, done = step
        fixed.extend(done)
    remaining = [f for f in findings if enabled(f.code)]
    return FixResult(source=source, fixed=fixed, remaining=remaining)


def _apply_pass(source, path, findings, candidates, lint):
    """Apply the chosen fixes together; if that breaks parsing or adds a finding, fall back to
    the first fix that does neither. None when no fix can be applied."""
    chosen = _pick(source, candidates)
    attempts = [chosen] + [[c] for c in chosen if c[1]] if len(chosen) > 1 else [chosen]
    for attempt in attempts:
        edits = [e for _, group in attempt for e in group]
        new = apply_edits(source, edits)
        if new == source or not _parses(new):
            continue
        after = list(lint(new, path))
        if _introduces(findings, after):
            continue
        return new, after, [f for f, _ in attempt]
    return None
