"""Fixing files rather than strings: bytes decoded and encoded back as written, which findings
`--fix` will really fix, and the notes that say what it did and did not do.

A file is decoded with the encoding Python itself would use (a PEP 263 coding cookie, a UTF-8
BOM, else UTF-8) and written back in that encoding, BOM and line endings included, so a latin-1
module stays latin-1. A fix whose result the file's encoding cannot hold is refused.
"""

from __future__ import annotations

from collections import Counter
from typing import Callable, Iterable

from loopcheck.findings import Finding
from loopcheck.lint.output.report import fix_kind
from loopcheck.lint.source_text import SourceText  # noqa: F401  (re-exported: fixes decode and encode files)


Applied = dict[str, list[tuple[str, int, int]]]  # fix kind -> (code, line, column) of each finding fixed


def fixes_applied(kinds: Iterable[str], text: str, path: str, enabled: Callable[[str], bool]) -> Applied:
    """What a fix run (`--fix`, and `--fix --unsafe-fixes` for "unsafe") would fix in `text`,
    per kind of fix. The unchanged text is linted once for both kinds; a fixed text only where a
    fix the run tries is not neutral to the model (`fixing.promised`)."""
    from loopcheck.lint.fixing import default_linter, promised

    seen: dict[str, list[Finding]] = {}

    def lint(source: str, where: str) -> list[Finding]:
        if source not in seen:
            seen.clear()  # only the unchanged text is linted twice
            seen[source] = list(default_linter(source, where))
        return seen[source]

    lint.attaches_fixes = True  # type: ignore[attr-defined]
    applied: Applied = {}
    for kind in sorted(set(kinds)):
        try:
            done = promised(text, path, unsafe=kind == "unsafe", enabled=enabled, linter=lint)
        except Exception:  # noqa: BLE001  (a fixer failure means: nothing is promised)
            done = []
        applied[kind] = [(f.code, f.line or 0, f.column or 0) for f in done]
    return applied


def keep_applied(findings: list[Finding], text: str, path: str, enabled: Callable[[str], bool],
                 applied: Applied | None = None) -> list[Finding]:
    """The findings, with the `fix` of each one `--fix` (or `--fix --unsafe-fixes`) would not
    apply removed: fixes that overlap and fail, that would break parsing or add findings. So
    "fixable" counts and `[*]` marks promise only what a fix run delivers. `applied`: the fix
    runs' results when already known (`fixes_applied`, computed where the file was analysed)."""
    kinds = {fix_kind(f) for f in findings} - {None}
    if not kinds:
        return findings
    if applied is None or not kinds <= applied.keys():
        applied = fixes_applied(kinds, text, path, enabled)
    keep = [False] * len(findings)
    for kind in kinds:
        exact = Counter(applied[kind])
        by_code = Counter(code for code, _, _ in applied[kind])
        mine = [i for i, f in enumerate(findings) if fix_kind(f) == kind]
        for i in mine:  # first the findings fixed where they are, then the ones fixed in later passes
            f = findings[i]
            if exact[(f.code, f.line or 0, f.column or 0)] > 0:
                exact[(f.code, f.line or 0, f.column or 0)] -= 1
                by_code[f.code] -= 1
                keep[i] = True
        for i in mine:
            if not keep[i] and by_code[findings[i].code] > 0:
                by_code[findings[i].code] -= 1
                keep[i] = True
    return [f if keep[i] or fix_kind(f) is None else f.with_(fix=None) for i, f in enumerate(findings)]


def fixed_lines(fixed: Iterable[tuple[str, Finding]]) -> list[str]:
    """`--show-fixes`: one line per applied fix, `path:line:column: CODE what the fix did`."""
    lines = []
    for where, f in fixed:
        what = (f.fix or {}).get("message") or f.name
        lines.append(f"  {where}:{f.line}:{f.column}: {f.code} {what}")
    return lines
