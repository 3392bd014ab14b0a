"""Suppression comments: `# noqa`, `# noqa: LC102,LC201`, `# loopcheck: ignore[LC102]`.

`apply_suppressions` drops the findings a comment on their line suppresses and tells which
suppressions were used. A code in a comment may be a full code (LC102) or a prefix (LC1).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from loopcheck.findings import Finding

_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]*(?:\s*,\s*[A-Z]+[0-9]*)*))?", re.I)
_IGNORE = re.compile(r"#\s*loopcheck:\s*ignore\[(?P<codes>[^\]]*)\]", re.I)


@dataclass(frozen=True)
class Suppression:
    line: int
    codes: tuple[str, ...] | None  # None: every code (a bare `# noqa`)

    def covers(self, code: str) -> bool:
        return self.codes is None or any(code.startswith(c) for c in self.codes)


def _codes(text: str | None) -> tuple[str, ...] | None:
    if not text:
        return None
    return tuple(c.strip().upper() for c in text.split(",") if c.strip())


def scan(lines: list[str]) -> dict[int, Suppression]:
    """Suppression comments by 1-based line number."""
    found: dict[int, Suppression] = {}
    for number, line in enumerate(lines, start=1):
        if "#" not in line:
            continue
        match = _IGNORE.search(line) or _NOQA.search(line)
        if match:
            found[number] = Suppression(number, _codes(match.group("codes")))
    return found


def apply_suppressions(findings: list[Finding], lines: list[str]) -> tuple[list[Finding], list[Suppression]]:
    """(findings that remain, suppressions that suppressed something)."""
    table = scan(lines)
    if not table:
        return findings, []
    kept: list[Finding] = []
    used: dict[int, Suppression] = {}
    for f in findings:
        s = table.get(f.line or 0)
        if s is not None and s.covers(f.code):
            used[s.line] = s
        else:
            kept.append(f)
    return kept, list(used.values())
