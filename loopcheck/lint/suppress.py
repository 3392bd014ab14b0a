"""Suppression comments: which findings a `# noqa` or `# loopcheck: ignore` comment silences.

Recognised comments:

- `# noqa` (every code), `# noqa: LC102` or `# noqa: LC102, LC201` (flake8 style);
- `# loopcheck: ignore[LC102, LC2]` or `# loopcheck: ignore` (every code);
- `# loopcheck: ignore-file` or `# loopcheck: ignore-file[LC5]` in the file's header (the comments
  and docstring before the first statement): silences the codes in the whole file.

A line comment silences a finding when it sits on any physical line of the statement the finding
starts in: a call split over several lines may carry the comment on its last line. For a
compound statement (`for`, `with`, ...) only its header counts, not its body. A code in a comment
may be a full code (LC102) or a prefix (LC1).

The engine calls `apply_suppressions(findings, lines)`; the suppressions it returns as used carry
the codes they silenced, so `unused` can later report the ones that silenced nothing (LC001).
"""

from __future__ import annotations

import io
import re
import tokenize
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Iterator

from loopcheck.findings import Finding, Severity

UNUSED_CODE = "LC001"

_ACTIVE: ContextVar[bool] = ContextVar("loopcheck_suppressions_active", default=True)

_CODE_LIST = r"[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*"
_NOQA = re.compile(rf"#\s*noqa(?::[\s]?(?P<codes>{_CODE_LIST}))?", re.I)
_IGNORE = re.compile(r"#\s*loopcheck:\s*ignore(?!-)(?:\[(?P<codes>[^\]]*)\])?", re.I)
_IGNORE_FILE = re.compile(r"#\s*loopcheck:\s*ignore-file(?:\[(?P<codes>[^\]]*)\])?", re.I)


@dataclass(frozen=True)
class Suppression:
    line: int
    codes: tuple[str, ...] | None  # None: every code (a bare `# noqa`)
    kind: str = "noqa"  # "noqa" | "ignore" | "ignore-file"
    column: int = 1  # 1-based column of the directive
    end_column: int = 1
    text: str = ""  # the directive as written, e.g. "# noqa: LC102"
    matched: tuple[str, ...] = field(default=(), compare=False)  # codes of the findings it silenced

    def covers(self, code: str) -> bool:
        return self.codes is None or any(code.startswith(c) for c in self.codes)

    @property
    def key(self) -> tuple[int, int]:
        return (self.line, self.column)


@dataclass
class FileSuppressions:
    """All suppression comments of one file, and the statement each line belongs to."""

    by_line: dict[int, list[Suppression]]
    file_level: list[Suppression]
    statements: dict[int, tuple[int, int]]  # physical line -> (first, last) line of its logical line

    def all(self) -> list[Suppression]:
        out = list(self.file_level)
        for line in sorted(self.by_line):
            out.extend(self.by_line[line])
        return out

    def statement_lines(self, line: int) -> range:
        first, last = self.statements.get(line, (line, line))
        return range(first, last + 1)


def _codes(text: str | None) -> tuple[str, ...] | None:
    if text is None or not text.strip():
        return None
    return tuple(c.upper() for c in re.split(r"[\s,]+", text.strip()) if c)


def _directives(comment: str, line: int, col0: int) -> list[Suppression]:
    """The line-level suppressions written in one comment token starting at 0-based col0."""
    found: list[Suppression] = []
    for pattern, kind in ((_IGNORE, "ignore"), (_NOQA, "noqa")):
        for match in pattern.finditer(comment):
            found.append(
                Suppression(
                    line=line,
                    codes=_codes(match.group("codes")),
                    kind=kind,
                    column=col0 + match.start() + 1,
                    end_column=col0 + match.end() + 1,
                    text=match.group(0).strip(),
                )
            )
    return found


def _file_directives(comment: str, line: int, col0: int) -> list[Suppression]:
    return [
        Suppression(
            line=line,
            codes=_codes(m.group("codes")),
            kind="ignore-file",
            column=col0 + m.start() + 1,
            end_column=col0 + m.end() + 1,
            text=m.group(0).strip(),
        )
        for m in _IGNORE_FILE.finditer(comment)
    ]


_TRIVIA = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.ENCODING, tokenize.INDENT, tokenize.DEDENT}


def scan_file(lines: list[str]) -> FileSuppressions:
    """Read the comments with the tokenizer, so `"# noqa"` inside a string is not a comment.

    A file whose text names neither `noqa` nor `loopcheck` has no directive: it is not tokenized,
    and its table is empty (no statement lines either, as nothing needs them)."""
    source = "\n".join(lines) + "\n"
    folded = source.lower()
    if "noqa" not in folded and "loopcheck" not in folded:
        return FileSuppressions({}, [], {})
    by_line: dict[int, list[Suppression]] = {}
    file_level: list[Suppression] = []
    statements: dict[int, tuple[int, int]] = {}
    header = True  # still before the first statement (a module docstring is allowed)
    docstring_seen = False
    start: int | None = None
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            kind, text, (row, col), (end_row, _), _ = tok
            if kind == tokenize.COMMENT:
                if "noqa" in text.lower() or "loopcheck" in text.lower():
                    if header:
                        file_level.extend(_file_directives(text, row, col))
                    sups = _directives(text, row, col)
                    if sups:
                        by_line.setdefault(row, []).extend(sups)
                continue
            if kind == tokenize.NEWLINE:
                if start is not None:
                    for n in range(start, row + 1):
                        statements[n] = (start, row)
                start = None
                continue
            if kind in _TRIVIA or kind == tokenize.ENDMARKER:
                continue
            if start is None:
                start = row
            if header:
                if kind == tokenize.STRING and not docstring_seen and start == row:
                    docstring_seen = True
                else:
                    header = False
    except (tokenize.TokenError, SyntaxError):
        return _scan_lines(lines)
    return FileSuppressions(by_line, file_level, statements)


def _scan_lines(lines: list[str]) -> FileSuppressions:
    """Fallback for text the tokenizer rejects: one statement per line, a `#` starts a comment."""
    by_line: dict[int, list[Suppression]] = {}
    file_level: list[Suppression] = []
    header = True
    for number, line in enumerate(lines, start=1):
        stripped = line.strip()
        if header and stripped and not stripped.startswith("#"):
            header = False
        at = line.find("#")
        if at < 0:
            continue
        comment = line[at:]
        if header:
            file_level.extend(_file_directives(comment, number, at))
        sups = _directives(comment, number, at)
        if sups:
            by_line[number] = sups
    return FileSuppressions(by_line, file_level, {})


def scan(lines: list[str]) -> dict[int, Suppression]:
    """Line suppressions by 1-based line number (the first directive of each line)."""
    return {line: sups[0] for line, sups in scan_file(lines).by_line.items()}


@contextmanager
def disabled() -> Iterator[None]:
    """Within this block `apply_suppressions` keeps every finding: for callers (the flake8
    plugin) whose host applies `# noqa` itself."""
    token = _ACTIVE.set(False)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def apply_suppressions(findings: list[Finding], lines: list[str]) -> tuple[list[Finding], list[Suppression]]:
    """(findings that remain, suppressions that silenced something, each with the codes it silenced)."""
    if not findings or not _ACTIVE.get():
        return findings, []
    table = scan_file(lines)
    if not table.by_line and not table.file_level:
        return findings, []
    kept: list[Finding] = []
    matched: dict[tuple[int, int], tuple[Suppression, list[str]]] = {}
    for f in findings:
        covering = [s for s in table.file_level if s.covers(f.code)]
        if not covering and f.line is not None:
            for n in table.statement_lines(f.line):
                covering.extend(s for s in table.by_line.get(n, ()) if s.covers(f.code))
        if not covering:
            kept.append(f)
            continue
        for s in covering:
            matched.setdefault(s.key, (s, []))[1].append(f.code)
    used = [replace(s, matched=tuple(dict.fromkeys(codes))) for s, codes in matched.values()]
    return kept, sorted(used, key=lambda s: s.key)


def unused(
    lines: list[str],
    used: Iterable[Suppression],
    path: str,
    *,
    active: Callable[[str], bool],
    known: Iterable[str],
    name: str,
    severity: Severity = Severity.INFO,
) -> list[Finding]:
    """LC001 findings for the loopcheck codes of suppressions that silenced nothing.

    `active(selector)` tells whether a code (or prefix) was checked in this file: a suppression of
    a code that did not run may be needed under another configuration, so it is not reported.
    A bare `# noqa` and other tools' codes (`# noqa: E501`) are never reported.
    """
    used_codes: dict[tuple[int, int], tuple[str, ...]] = {s.key: s.matched for s in used}
    known = list(known)
    out: list[Finding] = []
    for s in scan_file(lines).all():
        where = "in this file" if s.kind == "ignore-file" else "here"
        stale: list[str] = []
        unknown: list[str] = []
        if s.codes is None:
            if s.kind == "noqa" or s.key in used_codes:
                continue
            problem = f"no finding {where} to silence"
        else:
            matched = used_codes.get(s.key, ())
            for code in s.codes:
                if not code.startswith("LC") or any(m.startswith(code) for m in matched):
                    continue
                if not any(k.startswith(code) for k in known):
                    unknown.append(code)
                elif active(code):
                    stale.append(code)
            parts = []
            if stale:
                parts.append(f"no {', '.join(stale)} finding {where} to silence")
            if unknown:
                parts.append(f"unknown code {', '.join(unknown)}")
            problem = "; ".join(parts)
        if not problem:
            continue
        out.append(
            Finding(
                code=UNUSED_CODE,
                name=name,
                severity=severity,
                message=f"unused suppression `{s.text}`: {problem}",
                path=path,
                line=s.line,
                column=s.column,
                end_line=s.line,
                end_column=s.end_column,
            )
        )
    return out
