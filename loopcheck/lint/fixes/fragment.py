"""The statement a local fix edits, parsed alone with libcst.

Fixes edit a tree and render it, so they run on libcst's parse, while the lint reads trees built
from `ast` (which hold no whitespace). A fixer that edits only the statement its finding points
to, and reads nothing else of the file (`fixer(code, local=True)`), does not need the whole file
parsed: the lines of that statement are parsed alone, inside an `if True:` when the statement is
indented, so that its lines keep their columns and its indentation is the block's. The edits
are then moved down to the statement's lines.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import libcst as cst

from loopcheck.findings import Finding
from loopcheck.lint.fixes.edits import Edit

if TYPE_CHECKING:
    from loopcheck.lint.context import FileContext

_WRAPPER = "if True:\n"


class Fragment:
    """One statement's lines as a file of their own, and how its lines map to the file's."""

    def __init__(self, ctx: "FileContext", first: int, last: int) -> None:
        lines = ctx.source.split("\n")[first - 1:last]
        indented = lines[0][:1] in (" ", "\t")
        text = "\n".join(lines) + "\n"
        self.source = _WRAPPER + text if indented else text
        self.shift = first - 1 - (1 if indented else 0)  # a fragment line + shift = the file's line
        self.path = ctx.path

    def context(self) -> "FileContext | None":
        """The fragment's own context (libcst's parse, no project), None when it does not parse."""
        from loopcheck.lint.context import FileContext
        from loopcheck.lint.positions import register_source
        from loopcheck.lint.syntax import parse_module

        try:
            module = parse_module(self.source)
        except Exception:  # noqa: BLE001 - the whole file is parsed instead
            return None
        register_source(module, self.source)
        return FileContext(self.path, self.source, module)

    def finding(self, finding: Finding) -> Finding:
        """The finding with its lines counted in the fragment."""
        return finding.with_(line=finding.line - self.shift,
                             end_line=finding.end_line - self.shift if finding.end_line else finding.end_line)

    def edits(self, edits: list[Edit]) -> list[Edit]:
        """Edits of the fragment as edits of the file."""
        return [replace(e, line=e.line + self.shift, end_line=e.end_line + self.shift) for e in edits]


def fragment_of(ctx: "FileContext", finding: Finding) -> Fragment | None:
    """The fragment of the statement line holding the finding's position in a tree built from
    `ast`; None when there is none (the position is in a compound statement's header, or on a
    line with a one-line suite)."""
    if getattr(ctx.module, "positions", None) is None or not finding.line:
        return None
    where = (finding.line, finding.column or 1)
    for line in ctx.nodes(cst.SimpleStatementLine):
        first, column, last, end_column = ctx.module.positions.span(line)
        if (first, column) <= where < (last, end_column):
            return Fragment(ctx, first, last)
    return None
