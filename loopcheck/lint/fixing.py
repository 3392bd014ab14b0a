"""Applying fixes: lint, apply every available fix, lint again, until nothing changes.

`fix_source(source, path)` is what `loopcheck lint --fix` and the language server's "fix all"
run. The result always parses and never holds a finding the input did not have; overlapping
fixes are retried in later passes; a fix that would add a finding is refused with its reason.
No fix touches a method of an `nn.Module` subclass (`fixes.module_methods`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

import libcst as cst

from loopcheck.findings import Finding
from loopcheck.lint.fixes import applicability, describe_fix, module_methods
from loopcheck.lint.fixes.edits import Edit, apply_edits, edit_offsets
from loopcheck.lint.fixes.neutral import neutral
from loopcheck.lint.syntax import parse_module

if TYPE_CHECKING:
    from loopcheck.lint.context import FileContext

MAX_PASSES = 8


@dataclass
class FixResult:
    source: str  # the fixed source (the input itself when nothing was fixed)
    fixed: list[Finding] = field(default_factory=list)  # findings whose fix was applied
    remaining: list[Finding] = field(default_factory=list)  # findings of the final source
    rejected: list[tuple[Finding, str]] = field(default_factory=list)  # (finding, why its fix was not applied)


Linter = Callable[[str, str], Sequence[Finding]]


def default_linter(source: str, path: str) -> list[Finding]:
    """The engine's findings for this source; local imports are followed as `loopcheck lint`
    follows them, so findings that span files are seen here too."""
    from loopcheck.lint.engine import check_source, project_for

    parsed = _LAST_PARSE[1] if _LAST_PARSE and _LAST_PARSE[0] is source else None
    _LAST_PARSE.clear()
    return list(check_source(source, path, project=project_for(path), parsed=parsed).findings)


default_linter.attaches_fixes = True  # type: ignore[attr-defined]  (the engine attaches every fix it can describe)

# The fixed text `_parses` has just parsed, and its module: the lint that follows reuses it.
_LAST_PARSE: list = []


def _parses(source: str) -> bool:
    try:
        module = parse_module(source)
    except (cst.ParserSyntaxError, RecursionError, ValueError):
        return False
    _LAST_PARSE[:] = [source, module]
    return True


class _Fixes:
    """The fixes of one version of the source: the engine's when the findings carry them,
    else described here (one parse and one loop model for all findings). `attached`: the
    findings come from a linter that already described every fix it could (the engine's)."""

    def __init__(self, source: str, path: str, attached: bool) -> None:
        self.source, self.path, self.attached = source, path, attached
        self._ctx: "FileContext | None" = None

    def of(self, finding: Finding) -> dict | None:
        if finding.fix is not None:
            if module_methods(self.source).touches(finding.fix.get("edits") or ()):
                return None
            return finding.fix
        if self.attached:
            return None
        if self._ctx is None:
            from loopcheck.lint.context import FileContext

            self._ctx = FileContext(self.path, self.source, parse_module(self.source))
        return describe_fix(finding, self._ctx)


def _edits(fix: dict) -> tuple[Edit, ...]:
    return tuple(Edit(**e) for e in fix["edits"])


Candidate = tuple[Finding, tuple[Edit, ...]]


def _pick(source: str, candidates: Iterable[Candidate]) -> tuple[list[Candidate], list[Candidate]]:
    """(fixes that do not touch each other, first come first served; the ones that overlap
    them, for a later pass). Fixes with identical edits (one import rewrite reached from several
    findings) are applied once."""
    taken: list[tuple[int, int]] = []
    seen: set[tuple[Edit, ...]] = set()
    chosen: list[Candidate] = []
    later: list[Candidate] = []
    for finding, edits in candidates:
        if edits in seen:
            chosen.append((finding, ()))
            continue
        spans = edit_offsets(source, edits)
        if any(s <= te and ts <= e for s, e in spans for ts, te in taken):
            later.append((finding, edits))
            continue
        taken.extend(spans)
        seen.add(edits)
        chosen.append((finding, edits))
    return chosen, later


def _introduced(before: Sequence[Finding], after: Sequence[Finding]) -> list[str]:
    """The codes the fixed source has more findings of than the original had."""
    was, now = Counter(f.code for f in before), Counter(f.code for f in after)
    return sorted(code for code, count in now.items() if count > was[code])


def _key(finding: Finding, edits: tuple[Edit, ...]) -> tuple:
    return (finding.code, tuple((e.content, e.end_line - e.line) for e in edits))


def fix_source(
    source: str,
    path: str = "<string>",
    *,
    unsafe: bool = False,
    enabled: Callable[[str], bool] = lambda code: True,
    linter: Linter | None = None,
) -> FixResult:
    """Apply the fixes of every enabled, fixable finding (safe ones; unsafe ones too with
    `unsafe=True`) and lint again, pass after pass, until no fix is left to try (at most
    MAX_PASSES). Fixes that overlap one applied in a pass are tried again in the next one; a fix
    that breaks parsing or adds a finding is rejected, with the reason in `rejected`.
    `linter(source, path)` defaults to the engine; `remaining` holds the enabled findings of the
    final source."""
    lint = linter or default_linter
    findings = list(lint(source, path))
    fixed: list[Finding] = []
    refused: dict[tuple, tuple[Finding, str]] = {}
    for _ in range(MAX_PASSES):
        candidates = _candidates(source, path, findings, unsafe, enabled, lint, refused)
        if not candidates:
            break
        step = _apply_pass(source, path, findings, candidates, lint, refused)
        if step is None:
            break
        source, findings, done = step
        fixed.extend(done)
    remaining = [f for f in findings if enabled(f.code)]
    still = {(f.code, f.message) for f in remaining}
    rejected = [(f, why) for f, why in refused.values() if (f.code, f.message) in still]
    return FixResult(source=source, fixed=fixed, remaining=remaining, rejected=rejected)


def _candidates(source: str, path: str, findings: Sequence[Finding], unsafe: bool, enabled: Callable[[str], bool],
                lint: Linter, refused: dict[tuple, tuple[Finding, str]]) -> list[Candidate]:
    """The findings of `source` whose fix a pass tries, with the fix's edits."""
    allowed = {"safe", "unsafe"} if unsafe else {"safe"}
    fixes = _Fixes(source, path, getattr(lint, "attaches_fixes", False))
    candidates = []
    for f in findings:
        if not enabled(f.code) or applicability(f.code) not in allowed:
            continue
        fix = fixes.of(f)
        if fix is not None and fix.get("edits"):
            edits = _edits(fix)
            if _key(f, edits) not in refused:
                candidates.append((f, edits))
    return candidates


def promised(
    source: str,
    path: str = "<string>",
    *,
    unsafe: bool = False,
    enabled: Callable[[str], bool] = lambda code: True,
    linter: Linter | None = None,
) -> list[Finding]:
    """The findings a fix run (`fix_source` with the same arguments) fixes: what "fixable"
    promises. When every fix the run would try is neutral to the model (`fixes.neutral`) and
    none overlaps another, they are all applied in the first pass, which adds no finding and
    leaves none to try: the findings of `source` say so without linting the fixed text."""
    lint = linter or default_linter
    findings = list(lint(source, path))
    candidates = _candidates(source, path, findings, unsafe, enabled, lint, {})
    if all(neutral(f.code) for f, _ in candidates):
        chosen, later = _pick(source, candidates)
        if not later and (not chosen or apply_edits(source, [e for _, group in chosen for e in group]) != source):
            return [f for f, _ in chosen]
    return fix_source(source, path, unsafe=unsafe, enabled=enabled, linter=lint).fixed


def _attempt(source: str, path: str, findings: Sequence[Finding], attempt: Sequence[Candidate], lint: Linter) -> tuple[str, list[Finding] | None, str]:
    """(new source, its findings or None when rejected, why rejected)."""
    new = apply_edits(source, [e for _, group in attempt for e in group])
    if new == source:
        return new, None, "the fix changes nothing"
    if not _parses(new):
        return new, None, "the fixed code would not parse"
    after = list(lint(new, path))
    added = _introduced(findings, after)
    if added:
        return new, None, f"the fix would add a finding ({', '.join(added)})"
    return new, after, ""


def _apply_pass(source, path, findings, candidates, lint, refused):
    """Apply the non-overlapping fixes together; if that breaks parsing or adds a finding, fall
    back to one fix at a time, overlapping ones included (refusing those that fail on their
    own). None when no fix can be applied."""
    chosen, later = _pick(source, candidates)
    new, after, why = _attempt(source, path, findings, chosen, lint)
    if after is not None:
        return new, after, [f for f, _ in chosen]
    singles = [c for c in chosen if c[1]]
    if len(singles) == 1:
        refused[_key(*singles[0])] = (singles[0][0], why)
        singles = []
    for single in singles + later:
        new, after, why = _attempt(source, path, findings, [single], lint)
        if after is not None:
            return new, after, [single[0]]
        refused[_key(*single)] = (single[0], why)
    return None
