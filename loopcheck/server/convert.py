"""Findings, errors and fix edits as LSP diagnostics and text edits.

loopcheck positions are 1-based lines and columns counted in characters, the end column just
after the last character; LSP positions are 0-based, with columns in the code units the client
negotiated (UTF-16 unless it asked for another), converted by pygls's position codec.
"""

from __future__ import annotations

from typing import Any, Sequence

from lsprotocol import types
from pygls.workspace.position_codec import PositionCodec, ServerTextPosition

from loopcheck.findings import Finding, Severity
from loopcheck.lint.output import FileError
from loopcheck.lint.suppress import UNUSED_CODE

SOURCE = "loopcheck"

_SEVERITY = {
    Severity.ERROR: types.DiagnosticSeverity.Error,
    Severity.WARNING: types.DiagnosticSeverity.Warning,
    Severity.INFO: types.DiagnosticSeverity.Information,
}


class Positions:
    """Converts between loopcheck's positions and one document version's LSP positions."""

    def __init__(self, lines: Sequence[str], codec: PositionCodec) -> None:
        self.lines = lines
        self.codec = codec

    def _line_length(self, line0: int) -> int:
        if line0 >= len(self.lines):
            return 0
        return len(self.lines[line0].rstrip("\r\n"))

    def position(self, line: int, column: int | None) -> types.Position:
        """LSP position of a 1-based line and column (None: the end of the line)."""
        line0 = max(line - 1, 0)
        if line0 >= len(self.lines):  # just past the last line (an edit appending to the file)
            return types.Position(line=len(self.lines), character=0)
        length = self._line_length(line0)
        char = length if column is None else min(max(column - 1, 0), length)
        return self.codec.position_to_client_units(self.lines, ServerTextPosition(line0, char))

    def range(self, line: int | None, column: int | None, end_line: int | None, end_column: int | None) -> types.Range:
        """The range of a finding; without an end, to the end of its first line; without a
        line at all, the first line of the file."""
        line = line or 1
        start = self.position(line, column or 1)
        end = self.position(end_line or line, end_column)
        if (end.line, end.character) < (start.line, start.character):
            end = start
        return types.Range(start=start, end=end)

    def server_position(self, position: types.Position) -> tuple[int, int]:
        """(1-based line, 1-based column) of an LSP position."""
        p = self.codec.position_from_client_units(self.lines, types.Position(position.line, position.character))
        return p.line + 1, p.character + 1

    def text_edit(self, edit: dict[str, Any]) -> types.TextEdit:
        """An LSP edit from a fix edit (`{"line", "column", "end_line", "end_column", "content"}`)."""
        return types.TextEdit(
            range=types.Range(
                start=self.position(edit["line"], edit["column"]),
                end=self.position(edit["end_line"], edit["end_column"]),
            ),
            new_text=edit["content"],
        )


def diagnostic(finding: Finding, positions: Positions) -> types.Diagnostic:
    tags = [types.DiagnosticTag.Unnecessary] if finding.code == UNUSED_CODE else None
    return types.Diagnostic(
        range=positions.range(finding.line, finding.column, finding.end_line, finding.end_column),
        message=finding.message,
        severity=_SEVERITY[finding.severity],
        code=finding.code,
        source=SOURCE,
        tags=tags,
        data={"name": finding.name, "fix": (finding.fix or {}).get("applicability")},
    )


def error_diagnostic(error: FileError, positions: Positions) -> types.Diagnostic:
    """A file that could not be checked (syntax error, undecodable text) or a rule that failed:
    shown on the line it names, or on the first line."""
    return types.Diagnostic(
        range=positions.range(error.line, 1, None, None),
        message=error.message,
        severity=types.DiagnosticSeverity.Error,
        code=error.code,
        source=SOURCE,
    )


def message_diagnostic(message: str) -> types.Diagnostic:
    """A problem with the configuration, shown at the top of the file it stops from being checked."""
    return types.Diagnostic(
        range=types.Range(start=types.Position(0, 0), end=types.Position(0, 0)),
        message=message,
        severity=types.DiagnosticSeverity.Error,
        source=SOURCE,
    )


def contains(rng: types.Range, position: types.Position) -> bool:
    start, end, at = (rng.start.line, rng.start.character), (rng.end.line, rng.end.character), (position.line, position.character)
    return start <= at <= end


def overlaps(a: types.Range, b: types.Range) -> bool:
    return (a.start.line, a.start.character) <= (b.end.line, b.end.character) and (
        b.start.line, b.start.character) <= (a.end.line, a.end.character)
