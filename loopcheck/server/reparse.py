"""Parsing an edited buffer again by parsing only the top-level statements the edit touches.

An edit in an editor changes a few characters of one function; libcst has no incremental
parser, but a module is a sequence of top-level statements, and libcst nodes are immutable, so a
new module can share the statements an edit did not touch with the module of the previous text.
The text of the statements it touches is parsed as a module of its own and spliced in.

The result must be the module a parse of the whole text gives (the tests compare the two node
for node), so the splice is refused, and the whole text parsed, whenever it might not be: the
statements around the edited ones must begin with code at column 0 after blank lines and
comments at column 0 only (an indented comment between statements may change owner when the
block before it changes), the fragment must end with a newline and without lines the module's
footer would take, it must agree with the module on indentation, newline and encoding (libcst
stores what differs from those), and both must render as their texts.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field

import libcst as cst

from loopcheck.lint.positions import rendered_length, statement_offsets


@dataclass
class Parsed:
    """One text and its module; `starts` (computed when first asked): the offset of each
    top-level statement, its leading lines included, and last the offset of the footer; None
    when the module does not render as the text (libcst drops a few line continuations)."""

    text: str
    module: cst.Module
    _starts: list[int] | None = field(default=None, repr=False)
    _known: bool = field(default=False, repr=False)

    @property
    def starts(self) -> list[int] | None:
        if not self._known:
            self._starts, self._known = _offsets(self.module, self.text), True
        return self._starts


def _offsets(module: cst.Module, text: str) -> list[int] | None:
    code, offsets = statement_offsets(module)
    return offsets if code == text else None


def _common_prefix(a: str, b: str) -> int:
    """The length of the longest common prefix (compared in halves, each comparison in C)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        mid = (low + high + 1) // 2
        if a[low:mid] == b[low:mid]:
            low = mid
        else:
            high = mid - 1
    return low


def _common_suffix(a: str, b: str, limit: int) -> int:
    low, high = 0, limit
    while low < high:
        mid = (low + high + 1) // 2
        if a[len(a) - mid:len(a) - low] == b[len(b) - mid:len(b) - low]:
            low = mid
        else:
            high = mid - 1
    return low


def _starts_with_code(text: str, at: int) -> bool:
    """Whether `text` from `at` (a line start) is blank lines and comments at column 0, then
    code at column 0: lines no block of the statement before can own."""
    while at < len(text):
        char = text[at]
        if char in "\r\n":
            at += 1
        elif char == "#":
            newline = text.find("\n", at)
            if newline == -1:
                return False
            at = newline + 1
        else:
            return char not in " \t\f\\"
    return False


def reparse(previous: Parsed, text: str) -> Parsed | None:
    """`text` parsed again, sharing with `previous` the top-level statements an edit left as
    they were; None when that cannot be done exactly (parse the whole text then)."""
    old, module = previous.text, previous.module
    if text == old:
        return previous
    body = module.body
    count = len(body)
    if count == 0:
        return None
    starts = previous.starts
    if starts is None:
        return None
    prefix = _common_prefix(old, text)
    suffix = _common_suffix(old, text, min(len(old), len(text)) - prefix)
    delta = len(text) - len(old)
    # the statements holding the changed characters; a change touching a statement's start
    # may belong to the statement before it, so that one is parsed too
    first = max(bisect_left(starts, prefix, 0, count) - 1, 0)
    last = max(bisect_right(starts, len(old) - suffix, 0, count) - 1, first)
    start = starts[first] if first else 0
    through_end = last + 1 == count
    end = len(text) if through_end else starts[last + 1] + delta
    fragment = text[start:end]
    if first and not _starts_with_code(fragment, 0):
        return None
    if not through_end and (not fragment.endswith(("\n", "\r")) or not _starts_with_code(text, end)):
        return None
    try:
        part = cst.parse_module(fragment)
    except Exception:  # noqa: BLE001 - any failure: the whole text is parsed, and reports it
        return None
    if not part.body or (part.default_indent, part.default_newline) != (module.default_indent, module.default_newline):
        return None
    if first and part.encoding != module.encoding:
        return None
    if not through_end and (part.footer or not part.has_trailing_newline):
        return None
    if len(part.body) == 1 and not through_end:  # the usual edit: one statement, between others
        part_starts: list[int] | None = [rendered_length(part, part.header), len(fragment)]
    else:
        part_starts = _offsets(part, fragment)
        if part_starts is None:
            return None
    statements = list(part.body)
    if first:  # the fragment's header is the blank lines its first statement has in the module
        statements[0] = statements[0].with_changes(leading_lines=[*part.header, *statements[0].leading_lines])
        part_starts[0] = 0
    changes: dict = {"body": [*body[:first], *statements, *body[last + 1:]]}
    new_starts = [*starts[:first], *(start + s for s in part_starts[:-1])]
    if first == 0:
        changes["header"] = part.header
    if through_end:
        changes.update(footer=part.footer, has_trailing_newline=part.has_trailing_newline)
        new_starts.append(start + part_starts[-1])
    else:
        new_starts += [s + delta for s in starts[last + 1:]]
    return Parsed(text, module.with_changes(**changes), new_starts, True)
