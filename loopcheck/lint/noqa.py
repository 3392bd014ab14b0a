"""`loopcheck lint --add-noqa`: a `# noqa: CODE` comment on the line of each finding.

Meant for adopting loopcheck in a project with existing findings: the comments silence them
today, and `--warn-unused-suppressions` later shows the ones that became stale. A comment goes
on the finding's line, or, when that line ends inside a string, on the next line of the same
statement that ends outside one (suppressions count on any line of a statement). Codes already
on a `# noqa: ...` comment are kept and the new ones added; a bare `# noqa` already silences
everything and is left alone. The file keeps its encoding and line endings.
"""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

from loopcheck.findings import Finding
from loopcheck.lint.fixes.files import SourceText
from loopcheck.lint.suppress import _NOQA  # one grammar for the comments read and written


def _line_ends(text: str) -> set[int]:
    """Lines whose end is outside any string (where a comment can go)."""
    ends: set[int] = set()
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type in (tokenize.NEWLINE, tokenize.NL, tokenize.COMMENT):
                ends.add(tok.start[0])
    except (tokenize.TokenError, SyntaxError, IndentationError):
        pass
    return ends


def add_to_source(text: str, findings: list[Finding]) -> tuple[str, int]:
    """(the text with the comments added, how many lines got a new or extended comment)."""
    lines = text.splitlines(keepends=True)
    ends = _line_ends(text)
    wanted: dict[int, set[str]] = {}
    for f in findings:
        line = f.line or 1
        while line <= len(lines) and line not in ends:
            line += 1
        if line <= len(lines):
            wanted.setdefault(line, set()).add(f.code)
    changed = 0
    for number, codes in sorted(wanted.items()):
        raw = lines[number - 1]
        body = raw.rstrip("\r\n")
        newline = raw[len(body):]
        found = _NOQA.search(body)
        if found is not None and found.group("codes") is None:
            continue  # a bare `# noqa` silences every code already
        if found is not None:
            present = re.split(r"[\s,]+", found.group("codes").strip())
            new = [c for c in sorted(codes) if c not in present]
            if not new:
                continue
            body = body[: found.start()] + "# noqa: " + ", ".join(present + new) + body[found.end():]
        else:
            body = body.rstrip() + "  # noqa: " + ", ".join(sorted(codes))
        lines[number - 1] = body + newline
        changed += 1
    return "".join(lines), changed


def add_to_file(path: Path, findings: list[Finding]) -> int:
    """Add the comments to a file in place; the number of lines changed. ValueError when the
    file cannot be decoded or the comments cannot be encoded in its encoding."""
    source = SourceText.decode(path.read_bytes())
    text, changed = add_to_source(source.text, findings)
    if changed:
        path.write_bytes(source.encode(text))
    return changed
