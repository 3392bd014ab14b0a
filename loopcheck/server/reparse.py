"""Parsing an edited buffer again by parsing only the statements the edit touches.

An edit in an editor changes a few characters of one function; libcst has no incremental
parser, but a module is a sequence of top-level statements, and libcst nodes are immutable, so a
new module can share the statements an edit did not touch with the module of the previous text.
The text of the statements it touches is parsed as a module of its own and spliced in. Inside a
function (a class, a loop, a `with`), the same is done one block down, as deep as the edit goes:
usually a single line is parsed.

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
from itertools import accumulate

import libcst as cst
from libcst._nodes.internal import CodegenState

from loopcheck.lint.positions import render_nodes, statement_offsets
from loopcheck.lint.syntax import classes_of, parse_module

_STATEMENTS = classes_of(cst.BaseStatement)


@dataclass
class Parsed:
    """One text and its module; `starts` (computed when first asked): the offset of each
    top-level statement, its leading lines included, and last the offset of the footer; None
    when the module does not render as the text (libcst drops a few line continuations)."""

    text: str
    module: cst.Module
    _starts: list[int] | None = field(default=None, repr=False)
    _known: bool = field(default=False, repr=False)
    # the statement last edited inside, and where each statement within it is (`_within`)
    _inner: tuple[int, dict[int, tuple[int, int]]] | None = field(default=None, repr=False)

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
    if first == last and not through_end and starts[first] < prefix and _opens_block(body[first]):
        found = _inside(previous, first, text, prefix, len(old) - suffix, delta)
        if found is not None:
            return found
    end = len(text) if through_end else starts[last + 1] + delta
    fragment = text[start:end]
    if first and not _starts_with_code(fragment, 0):
        return None
    if not through_end and (not fragment.endswith(("\n", "\r")) or not _starts_with_code(text, end)):
        return None
    try:
        part = parse_module(fragment)
    except Exception:  # noqa: BLE001 - any failure: the whole text is parsed, and reports it
        return None
    if not part.body or (part.default_indent, part.default_newline) != (module.default_indent, module.default_newline):
        return None
    if first and part.encoding != module.encoding:
        return None
    if not through_end and (part.footer or not part.has_trailing_newline):
        return None
    if len(part.body) == 1 and not through_end:  # the usual edit: one statement, between others
        part_starts: list[int] | None = [len(render_nodes(part, part.header)), len(fragment)]
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


def _inside(previous: Parsed, index: int, text: str, low: int, high: int, delta: int) -> Parsed | None:
    """`text` parsed again within top-level statement `index` of `previous` (see `_within`)."""
    module, starts = previous.module, previous.starts
    assert starts is not None
    stmt = module.body[index]
    spans = previous._inner[1] if previous._inner is not None and previous._inner[0] == id(stmt) else None
    splice = _within(stmt, spans, previous.text, text, low, high, delta, "", module) if spans is not None else None
    if splice is None:  # the statement is rendered once to find its statements
        spans = _spans(module, stmt, previous.text, starts[index], starts[index + 1])
        splice = _within(stmt, spans, previous.text, text, low, high, delta, "", module) if spans is not None else None
    if splice is None:
        return None
    assert spans is not None
    new = splice.path[0][1]
    body = [*module.body[:index], new, *module.body[index + 1:]]
    parsed = Parsed(text, module.with_changes(body=body), [*starts[:index + 1], *(s + delta for s in starts[index + 1:])], True)
    parsed._inner = (id(new), _moved_spans(spans, splice, delta))
    return parsed


# --- inside a statement -------------------------------------------------------------------------
#
# An edit inside a function (a loop, a `with`) re-parses only the innermost statements of its
# block that hold the change: their lines, less the block's indentation, parse as a module of
# their own. Only blocks whose lines all carry that indentation and hold no blank line, comment
# line, multi-line string or backslash continuation qualify: there, and only there, removing the
# indentation changes nothing libcst records.

_BLOCK_KINDS = (cst.FunctionDef, cst.ClassDef, cst.For, cst.While, cst.With, cst.If)


def _opens_block(stmt: cst.CSTNode) -> bool:
    """A statement whose one block is its last part: `def`, `class`, `for` / `while` / `if`
    without `else`, `with`."""
    if type(stmt) not in _BLOCK_KINDS or getattr(stmt, "orelse", None) is not None:
        return False
    block = stmt.body  # type: ignore[attr-defined]
    return type(block) is cst.IndentedBlock and bool(block.body) and not block.footer


class _SpanState(CodegenState):
    """Records where each statement's code starts and ends (token indexes)."""

    def __init__(self, module: cst.Module) -> None:
        super().__init__(default_indent=module.default_indent, default_newline=module.default_newline)
        self.opened: dict[int, int] = {}
        self.spans: dict[int, tuple[int, int]] = {}

    def before_codegen(self, node: cst.CSTNode) -> None:
        if type(node) in _STATEMENTS:
            self.opened[id(node)] = len(self.tokens)

    def after_codegen(self, node: cst.CSTNode) -> None:
        opened = self.opened.pop(id(node), None)
        if opened is not None:
            self.spans[id(node)] = (opened, len(self.tokens))


def _spans(module: cst.Module, stmt: cst.CSTNode, text: str, start: int, end: int) -> dict[int, tuple[int, int]] | None:
    """Offsets in `text` of every statement inside top-level `stmt` (at `text[start:end]`);
    None when the statement does not render as that text."""
    state = _SpanState(module)
    stmt._codegen(state)
    if "".join(state.tokens) != text[start:end]:
        return None
    offsets = list(accumulate((len(t) for t in state.tokens), initial=start))
    return {key: (offsets[a], offsets[b]) for key, (a, b) in state.spans.items()}


@dataclass
class _Splice:
    """What `_within` changed: the statements from the top-level one down (old and new), the
    old text's region parsed again, and what it parsed to."""

    path: list[tuple[cst.CSTNode, cst.CSTNode]]
    start: int
    end: int
    part: cst.Module


def _within(stmt: cst.CSTNode, spans: dict[int, tuple[int, int]], old: str, text: str, low: int, high: int,
            delta: int, indent: str, module: cst.Module) -> _Splice | None:
    """`stmt` (a statement of the old text) with the statements of its block that hold the
    change `old[low:high]` parsed again from `text`; None when that cannot be done exactly (or
    `spans` lacks a statement of the way)."""
    block = stmt.body  # type: ignore[attr-defined]
    indent += module.default_indent if block.indent is None else block.indent
    body = block.body
    count = len(body)
    if any(id(s) not in spans for s in body):
        return None
    offsets = [spans[id(s)][0] for s in body] + [spans[id(body[-1])][1]]
    if not offsets[0] < low or high > offsets[-1]:
        return None  # the change reaches the header, or past the block
    first = max(bisect_left(offsets, low, 0, count) - 1, 0)
    last = max(bisect_right(offsets, high, 0, count) - 1, first)
    if first == last and offsets[first] < low and _opens_block(body[first]):
        inner = _within(body[first], spans, old, text, low, high, delta, indent, module)
        if inner is not None:
            new = stmt.with_changes(body=block.with_changes(body=[*body[:first], inner.path[0][1], *body[first + 1:]]))
            inner.path.insert(0, (stmt, new))
            return inner
    start, end = offsets[first], offsets[last + 1] + delta
    if last + 1 < count:
        if not _code_at(text, end, indent):
            return None
    elif not _block_ends(text, end, len(indent)):
        return None
    part = _parse_dedented(text[start:end], indent, module)
    if part is None:
        return None
    new = stmt.with_changes(body=block.with_changes(body=[*body[:first], *part.body, *body[last + 1:]]))
    return _Splice([(stmt, new)], start, offsets[last + 1], part)


def _moved_spans(spans: dict[int, tuple[int, int]], splice: _Splice, delta: int) -> dict[int, tuple[int, int]]:
    """The spans of the statements of the new top-level statement that are known without
    rendering it: the ones before and after the region (shifted), those on the way down, and
    the region's statement when it parsed to one."""
    moved: dict[int, tuple[int, int]] = {}
    on_path = {id(old) for old, _ in splice.path}
    for key, (start, end) in spans.items():
        if key in on_path:
            continue
        if end <= splice.start:
            moved[key] = (start, end)
        elif start >= splice.end:
            moved[key] = (start + delta, end + delta)
    for old, new in splice.path:
        start, end = spans[id(old)]
        moved[id(new)] = (start, end + delta)
    if len(splice.part.body) == 1:
        moved[id(splice.part.body[0])] = (splice.start, splice.end + delta)
    return moved


def _code_at(text: str, at: int, indent: str) -> bool:
    """Whether the line at `at` is code at exactly `indent`."""
    return text.startswith(indent, at) and at + len(indent) < len(text) and text[at + len(indent)] not in " \t\f#\r\n\\"


def _block_ends(text: str, at: int, width: int) -> bool:
    """Whether, after blank lines, the text at `at` is its end or code indented less than `width`
    (a comment there could belong to the block)."""
    while at < len(text) and text[at] in "\r\n":
        at += 1
    if at == len(text):
        return True
    line_end = text.find("\n", at)
    line = text[at:] if line_end == -1 else text[at:line_end]
    stripped = line.lstrip(" \t\f")
    return bool(stripped) and not stripped.startswith("#") and len(line) - len(stripped) < width


def _parse_dedented(fragment: str, indent: str, module: cst.Module) -> cst.Module | None:
    if not fragment.endswith(("\n", "\r")) or '"""' in fragment or "'''" in fragment or "\\\n" in fragment or "\\\r" in fragment:
        return None
    lines = fragment.splitlines(keepends=True)
    width = len(indent)
    for line in lines:
        rest = line[width:].lstrip(" \t\f")
        if not line.startswith(indent) or not rest.strip() or rest.startswith("#"):
            return None
    try:
        part = parse_module("".join(line[width:] for line in lines))
    except Exception:  # noqa: BLE001 - any failure: a wider parse decides
        return None
    if not part.body or part.header or part.footer or not part.has_trailing_newline:
        return None
    if (part.default_indent, part.default_newline) != (module.default_indent, module.default_newline):
        return None
    return part
