"""Text edits: the difference between the source and its fixed rendering as minimal
replacements (1-based lines and columns, end exclusive), and applying them back.

`edits_replacing` gives the same edits as `edits_between` when only a known span of the source
was re-rendered, in time proportional to that span rather than to the file."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Sequence

from loopcheck.lint.positions import line_column, line_starts


@dataclass(frozen=True)
class Edit:
    """Replace [start, end) of the original source with content; 1-based lines and columns."""

    line: int
    column: int
    end_line: int
    end_column: int
    content: str

    def to_dict(self) -> dict:
        return {
            "line": self.line,
            "column": self.column,
            "end_line": self.end_line,
            "end_column": self.end_column,
            "content": self.content,
        }


_LINE = re.compile(r"[^\n]*\n|[^\n]+$")


def _lines(text: str) -> list[str]:
    return _LINE.findall(text)


def _offset(starts: list[int], line: int, column: int) -> int:
    return starts[line - 1] + column - 1


def edits_between(old: str, new: str) -> list[Edit]:
    """The smallest line hunks turning old into new; a hunk of one line into one line is
    narrowed to the characters that change."""
    return _hunks(old, _lines(old), _lines(new), 0)


def edits_replacing(old: str, start: int, end: int, content: str) -> list[Edit]:
    """`edits_between(old, old[:start] + content + old[end:])`, without splitting or comparing
    the whole text: only the replaced span and as many following lines as the comparison needs.
    `start` must be the start of a line and `end` the start of a line or the end of the text."""
    line0 = old.count("\n", 0, start)
    stop = end
    while True:
        before, after = old[start:stop], content + old[end:stop]
        a, b = _lines(before), _lines(after)
        if before == after:
            return []
        if _head(a, b) < min(len(a), len(b)) or stop >= len(old):
            # the first difference lies inside the window; whatever follows the window is the
            # same unchanged text on both sides, so the hunks are those of the whole texts
            return _hunks(before, a, b, line0)
        for _ in range(max(8, len(a))):  # the head match ran through the window: widen it
            next_line = old.find("\n", stop)
            stop = len(old) if next_line == -1 else next_line + 1
            if stop >= len(old):
                break


def _head(a: list[str], b: list[str]) -> int:
    lo = 0
    while lo < min(len(a), len(b)) and a[lo] == b[lo]:
        lo += 1
    return lo


def _hunks(old: str, a: list[str], b: list[str], line0: int) -> list[Edit]:
    """Hunks turning lines a (the lines of `old`) into lines b; line numbers are shifted by
    line0 (the lines that precede `old` in the file)."""
    a_starts = [0]
    for line in a:
        a_starts.append(a_starts[-1] + len(line))
    starts = line_starts(old)
    # A fix touches a few lines of a possibly huge file: match the unchanged head and tail
    # directly and give only the middle to difflib, whose cost grows with the square of it.
    lo = _head(a, b)
    hi = 0
    while hi < min(len(a), len(b)) - lo and a[-1 - hi] == b[-1 - hi]:
        hi += 1
    out: list[Edit] = []
    matcher = difflib.SequenceMatcher(None, a[lo : len(a) - hi], b[lo : len(b) - hi], autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        i1, i2, j1, j2 = i1 + lo, i2 + lo, j1 + lo, j2 + lo
        before, after = "".join(a[i1:i2]), "".join(b[j1:j2])
        head = tail = 0
        if i2 - i1 == 1 and j2 - j1 == 1:  # one changed line: narrow to the changed characters
            while head < min(len(before), len(after)) and before[head] == after[head]:
                head += 1
            while tail < min(len(before), len(after)) - head and before[-1 - tail] == after[-1 - tail]:
                tail += 1
        start = a_starts[i1] + head
        end = a_starts[i2] - tail
        line, column = line_column(starts, start)
        end_line, end_column = line_column(starts, end)
        out.append(Edit(line + line0, column, end_line + line0, end_column, after[head : len(after) - tail]))
    return out


def apply_edits(source: str, edits: Sequence[Edit]) -> str:
    """Apply non-overlapping edits of `source` (in any order)."""
    starts = line_starts(source)
    spans = sorted(
        ((_offset(starts, e.line, e.column), _offset(starts, e.end_line, e.end_column), e.content) for e in edits),
        reverse=True,
    )
    text = source
    for start, end, content in spans:
        text = text[:start] + content + text[end:]
    return text


def edit_offsets(source: str, edits: Sequence[Edit]) -> list[tuple[int, int]]:
    starts = line_starts(source)
    return [(_offset(starts, e.line, e.column), _offset(starts, e.end_line, e.end_column)) for e in edits]
