"""Notebooks: the code cells checked as one module, the findings handed back to their cells.

A notebook's loop is often spread over cells (the model in one, the optimizer in the next, the
loop in a third), so the cells are joined in order into one module and checked together. Each
cell keeps its own lines, so a finding's line is the module line minus the lines of the cells
above it, and its columns are unchanged. IPython magics are not Python: a `%line` or `!shell`
line becomes `pass` at the same indentation, and a cell that starts with a `%%cell` magic is
left out (its lines stay, empty, so the numbering holds).
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import Any, Sequence

from loopcheck.findings import Finding
from loopcheck.lint.output import FileError


@dataclass(frozen=True)
class Cell:
    uri: str
    version: int | None
    text: str
    start: int  # the module line of the cell's first line (1-based)
    lines: int  # how many module lines the cell takes


def _python(text: str) -> str:
    lines = text.split("\n")
    first = next((line.strip() for line in lines if line.strip()), "")
    if first.startswith("%%"):
        return "\n".join("" for _ in lines)
    out = []
    for line in lines:
        stripped = line.lstrip()
        if stripped.startswith(("%", "!")):
            line = line[: len(line) - len(stripped)] + "pass"
        out.append(line)
    return "\n".join(out)


def module_source(cells: Sequence[tuple[str, int | None, str]]) -> tuple[str, list[Cell]]:
    """The module made of the code cells `(uri, version, text)`, and where each cell lies in it."""
    parts: list[str] = []
    placed: list[Cell] = []
    line = 1
    for uri, version, text in cells:
        body = _python(text)
        if not body.endswith("\n"):
            body += "\n"
        count = body.count("\n")
        placed.append(Cell(uri, version, text, line, count))
        parts.append(body)
        line += count
    return "".join(parts), placed


def _cell_of(cells: Sequence[Cell], line: int | None) -> Cell | None:
    if not cells:
        return None
    if line is None:
        return cells[0]
    index = bisect_right([c.start for c in cells], line) - 1
    return cells[max(index, 0)]


def _shift_fix(fix: dict[str, Any] | None, cell: Cell) -> dict[str, Any] | None:
    """The fix in the cell's own lines; None when an edit reaches outside the cell."""
    if not fix:
        return fix
    edits = []
    for edit in fix.get("edits", []):
        first, last = edit["line"] - cell.start + 1, edit["end_line"] - cell.start + 1
        at_end = last == cell.lines + 1 and edit["end_column"] == 1  # up to the end of the cell
        if first < 1 or first > cell.lines or (last > cell.lines and not at_end):
            return None
        edits.append({**edit, "line": first, "end_line": last})
    return {**fix, "edits": edits}


def split(cells: Sequence[Cell], findings: Sequence[Finding], errors: Sequence[FileError]) -> dict[str, tuple[list[Finding], list[FileError]]]:
    """Each cell's findings and errors, in the cell's own line numbers."""
    out: dict[str, tuple[list[Finding], list[FileError]]] = {c.uri: ([], []) for c in cells}
    for f in findings:
        cell = _cell_of(cells, f.line)
        if cell is None or f.line is None:
            continue
        last = cell.start + cell.lines - 1
        end_line, end_column = f.end_line, f.end_column
        if end_line is not None and end_line > last:
            end_line, end_column = last, None  # to the end of the cell's last line
        out[cell.uri][0].append(f.with_(
            line=f.line - cell.start + 1,
            end_line=None if end_line is None else end_line - cell.start + 1,
            end_column=end_column,
            fix=_shift_fix(f.fix, cell),
        ))
    for e in errors:
        cell = _cell_of(cells, e.line)
        if cell is not None:
            line = None if e.line is None else e.line - cell.start + 1
            out[cell.uri][1].append(FileError(e.path, line, e.message, e.code))
    return out
