"""Hover: the rule page of the finding under the cursor, or of a code named in a `# noqa` comment."""

from __future__ import annotations

import re

from lsprotocol import types

from loopcheck.catalog import catalog
from loopcheck.findings import Finding

_CODE = re.compile(r"\b[A-Z]{2}[0-9]{3}\b")


def rule_markdown(code: str, finding: Finding | None = None) -> str | None:
    """A rule page as Markdown, headed by the finding's own message when there is one."""
    page = catalog().get(code)
    if page is None:
        return None
    head = f"**{page.code}** `{page.name}` ({finding.severity.value if finding else page.severity.value})"
    if finding is not None:
        head += f"\n\n{finding.message}"
    return f"{head}\n\n---\n\n{page.text.strip()}\n"


def code_in_comment(line: str, column: int) -> tuple[str, int, int] | None:
    """(code, start, end) of a rule code in a comment of `line` under 1-based `column`
    (start and end are 1-based, end exclusive)."""
    hash_at = line.find("#")
    if hash_at < 0 or column <= hash_at:
        return None
    for match in _CODE.finditer(line, hash_at):
        if match.start() + 1 <= column <= match.end() + 1 and match.group(0) in catalog():
            return match.group(0), match.start() + 1, match.end() + 1
    return None


def hover(markdown: str, rng: types.Range) -> types.Hover:
    return types.Hover(contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=markdown), range=rng)
