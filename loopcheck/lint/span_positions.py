"""Positions and texts of the nodes of a tree built from `ast`, read from the `ast` spans.

What `positions.StatementPositions` works out for a parsed tree by rendering statements, a built
tree gets from the `ast` node each of its nodes was made from: a node is where that one is (a tuple
or generator expression without its parentheses, as libcst places it); a line or block of
statements runs from its first to its last statement; an argument or element is where its value
is; a node inside an f-string is where libcst's parse of the literal alone puts it, moved to the
literal. For any other node (rarely asked: a parameter, a keyword argument's name) the answer comes
from libcst's parse of the source, with the two trees walked side by side. Parentheses are found
in the text (a node's own, a call's, a tuple's), past comments and line continuations.

Positions and one-line texts are those libcst's positions give for the parsed tree; on real code
(about a million nodes of the standard library, torch and forty projects) every one is. A node's
code (`render`) is its text as written: libcst's reindents continuation lines, and gives an element
its comma and a statement the comment lines above it.
"""

from __future__ import annotations

import ast
import keyword
from functools import cached_property
from typing import TYPE_CHECKING, Iterator

import libcst as cst

from loopcheck.lint.positions import StatementPositions, line_column, line_starts, node_span, register_built
from loopcheck.lint.syntax import parse_module
from loopcheck.lint.tree_pairs import pairs

if TYPE_CHECKING:
    from loopcheck.lint.tree_from_ast import BuiltModule, _Builder

_LINES = (cst.SimpleStatementLine, cst.SimpleStatementSuite, cst.IndentedBlock)
_HOLDERS = (cst.Element, cst.Index, cst.SubscriptElement, cst.AssignTarget, cst.Decorator)
_BLANK = " \t\n\r\\"


class SpanPositions:
    """Where the nodes of one built module are, and their source text."""

    def __init__(self, module: "BuiltModule", builder: "_Builder") -> None:
        # Not the module itself, which holds these positions: without a cycle, both go as soon
        # as the module does (the lint runs with the cyclic collector paused).
        self._body = module.body
        self.builder = builder
        self.source = builder.source
        self.origin = builder.origin
        self._twin: tuple[StatementPositions, dict[int, cst.CSTNode]] | None = None
        register_built(self, [*builder.origin, *builder.spans, *builder.groups, *builder.chains])

    # -- answers ---------------------------------------------------------------------------

    def span(self, node: cst.CSTNode) -> tuple[int, int, int, int]:
        """(line, column, end line, end column), 1-based, the end exclusive, as `positions` gives."""
        try:
            start, end = self.offsets(node)
        except LookupError:
            where, nodes = self.twin()
            return where.span(nodes[id(node)])
        starts = self.builder.starts
        return (*line_column(starts, start), *line_column(starts, end))

    def text(self, node: cst.CSTNode) -> str | None:
        """A one-line node's source text without parentheses of its own, else None (as
        `positions` answers)."""
        try:
            start, end = self.offsets(node)
        except LookupError:
            where, nodes = self.twin()
            return where.text(nodes[id(node)])
        kind = type(node)
        if kind is cst.Index or kind is cst.ClassDef or kind is cst.With or (
                kind is cst.ImportFrom and "(" in self.source[start:end]):
            return None  # as libcst's positions answer (an index has no range of its own; these have `lpar`)
        if kind not in _HOLDERS and kind is not cst.Arg and self._with_own_parentheses(start, end) != (start, end):
            return None
        found = self.source[start:end]
        return None if "\n" in found else found

    def render(self, node: cst.CSTNode) -> str:
        """The node's source, as `code_for_node` gives it for the parsed tree's node: an
        expression's text with its own parentheses; a statement's lines, decorators included,
        with its indentation taken off and ending in a line break (a compound statement's with
        the blank and comment lines below it that libcst keeps in its last block). Where libcst
        differs, it is in whitespace and comments outside the node: libcst also gives the blank and
        comment lines above a statement, and reindents the continuation lines of a node to its
        block."""
        try:
            start, end = self.offsets(node)
        except LookupError:
            where, nodes = self.twin()
            return where.module.code_for_node(nodes[id(node)])
        source = self.source
        if isinstance(node, (cst.BaseStatement, cst.BaseSuite)):
            decorators = getattr(node, "decorators", None)
            if decorators:
                start = min(start, self.offsets(decorators[0])[0])
            line_start = source.rfind("\n", 0, start) + 1
            indent = source[line_start:start]
            indent = indent[:len(indent) - len(indent.lstrip(" \t"))]
            line_end = source.find("\n", end)
            block = _last_block(node) if line_end != -1 else None
            if block is not None:
                first = self.offsets(block.body[0])[0]
                inner = source[source.rfind("\n", 0, first) + 1:first]
                line_end = _footer_end(source, line_end, inner)
            lines = source[line_start:len(source) if line_end == -1 else line_end].split("\n")
            if type(node) is cst.If and lines[0].startswith("elif", len(indent)):
                lines[0] = lines[0][:len(indent)] + lines[0][len(indent) + 2:]  # alone, an `elif` is an `if`
            return "".join((line[len(indent):] if line.startswith(indent) else line) + "\n" for line in lines)
        start, end = self._with_own_parentheses(start, end)
        return source[start:end]

    # -- where a node is -------------------------------------------------------------------

    def offsets(self, node: cst.CSTNode) -> tuple[int, int]:
        """Where `node` is in the source; LookupError for a node not placed from the spans."""
        kind = type(node)
        x = self.origin.get(id(node))
        if x is None:
            known = self.builder.spans.get(id(node)) or self._chained(node)
            if known is not None:
                return known
            placed = self.builder.placed.get(id(node))
            if placed is not None:  # inside an f-string: where it is in the literal, moved to the literal
                at, alone, token = placed
                line, column, end_line, end_column = node_span(alone, node)
                starts = line_starts(token)
                return at + starts[line - 1] + column - 1, at + starts[end_line - 1] + end_column - 1
            if kind in _LINES:
                return self.offsets(node.body[0])[0], self.offsets(node.body[-1])[1]
            if kind in _HOLDERS or (kind is cst.Arg and node.keyword is None):
                inner = getattr(node, "value", None) or getattr(node, "target", None) \
                    or getattr(node, "decorator", None) or getattr(node, "slice", None)
                start, end = self._with_own_parentheses(*self.offsets(inner))  # the value's parentheses are inside
                if kind is cst.Decorator:
                    start = self.source.rindex("@", 0, start)
                return start, end
            raise LookupError(kind.__name__)
        b = self.builder
        start, end = b.offset(x.lineno, x.col_offset), b.offset(x.end_lineno, x.end_col_offset)
        if kind in (cst.Tuple, cst.GeneratorExp) and parenthesized(self.source[start:end]):
            # libcst gives a tuple's parentheses to the tuple, around its range (the trailing
            # comma is inside it); `ast` puts them inside
            start, end = self._right(start + 1), self._left(end - 1) + 1
            while kind is cst.GeneratorExp and self.source[end - 1] == ",":
                end = self._left(end - 1) + 1
        return start, end

    def _chained(self, node: cst.CSTNode) -> tuple[int, int] | None:
        """An inner link of `a or b or c` (`a or b`): from the chain's start to its last value's end."""
        found = self.builder.chains.get(id(node))
        if found is None:
            return None
        whole, last = found
        b = self.builder
        value_end = self._with_own_parentheses(b.offset(last.lineno, last.col_offset),
                                               b.offset(last.end_lineno, last.end_col_offset))[1]
        return b.offset(whole.lineno, whole.col_offset), value_end

    def _with_own_parentheses(self, start: int, end: int) -> tuple[int, int]:
        """The range with the node's own parentheses around it: not a call's (`f(x)`, `x.match(y)`,
        a call continued on the next line) and not those of `with (a, b):`, which libcst gives to
        the statement; comments and line continuations may sit between."""
        source = self.source
        while True:
            i, j = self._left(start), self._right(end)
            if i < 0 or j >= len(source) or source[i] != "(" or source[j] != ")":
                return start, end
            k = -1 if i in self._statement_starts else self._left(i)  # the code before the `(`
            if k >= 0 and (source[k].isalnum() or source[k] in "_)]'\""):
                w = k
                while w >= 0 and (source[w].isalnum() or source[w] == "_"):
                    w -= 1
                word = source[w + 1:k + 1]
                if not keyword.iskeyword(word):
                    return start, end  # a call's
                if word == "with" and source[self._right(j + 1):self._right(j + 1) + 1] == ":":
                    return start, end  # `with (a, b):`
            start, end = i, j + 1

    @cached_property
    def _statement_starts(self) -> set[int]:
        """Where statements start: a `(` there opens no call, whatever ends the line before."""
        b = self.builder
        return {b.offset(x.lineno, x.col_offset) for x in self.origin.values() if isinstance(x, ast.stmt)}

    def _left(self, pos: int) -> int:
        """The index of the last character of code before `pos` (blanks and comments skipped); -1 if none."""
        source = self.source
        i = pos - 1
        while i >= 0:
            if source[i] in _BLANK:
                i -= 1
                continue
            line_start = source.rfind("\n", 0, i) + 1
            cut = _comment_start(source[line_start:i + 1])
            if cut == -1:
                return i
            i = line_start + cut - 1
        return -1

    def _right(self, pos: int) -> int:
        """The index of the first character of code at or after `pos` (blanks and comments skipped)."""
        source, n = self.source, len(self.source)
        j = pos
        while j < n:
            c = source[j]
            if c in _BLANK:
                j += 1
            elif c == "#":
                j = source.find("\n", j)
                if j == -1:
                    return n
            else:
                return j
        return n

    def twin(self) -> tuple[StatementPositions, dict[int, cst.CSTNode]]:
        """libcst's parse of the source, with its positions, and id(built node) -> its node there."""
        if self._twin is None:
            parsed = parse_module(self.source)
            self._twin = StatementPositions(parsed, self.source), {id(a): b for a, b in pairs(self._body, parsed.body)}
        return self._twin


def parenthesized(text: str) -> bool:
    """Whether `text` (an expression's source) is wholly inside one pair of parentheses; brackets
    in strings and comments do not count."""
    if not text.startswith("("):
        return False
    depth = 0
    for i, c in _code_characters(text):
        if c != "#":
            depth += (c in "([{") - (c in ")]}")
            if depth == 0:
                return i == len(text) - 1
    return False


def _last_block(node: cst.CSTNode) -> cst.IndentedBlock | None:
    """The indented block a compound statement ends with (None for one ending in a one-line suite,
    and for nodes that are not compound statements)."""
    while True:
        kind = type(node)
        if kind in (cst.If, cst.For, cst.While):
            node = node.orelse if node.orelse is not None else node.body  # type: ignore[attr-defined]
        elif kind in (cst.Try, cst.TryStar):
            last = node.finalbody or node.orelse or (node.handlers[-1] if node.handlers else None)  # type: ignore[attr-defined]
            node = last if last is not None else node.body  # type: ignore[attr-defined]
        elif kind is cst.Match:
            node = node.cases[-1]  # type: ignore[attr-defined]
        elif kind in _HAS_BODY:
            node = node.body  # type: ignore[attr-defined]
        else:
            return node if kind is cst.IndentedBlock and node.body else None  # type: ignore[attr-defined]


# the nodes `_last_block` goes into the body of: the rest of the compound statements and clauses
_HAS_BODY = (cst.FunctionDef, cst.ClassDef, cst.With, cst.Else, cst.Finally, cst.ExceptHandler,
             cst.ExceptStarHandler, cst.MatchCase)


def _footer_end(source: str, line_end: int, indent: str) -> int:
    """Where a compound statement's text ends when its last line ends at `line_end`: libcst keeps
    the blank and comment lines below it in the footer of its last indented block, up to the last
    one that starts with that block's `indent`."""
    end = at = line_end
    while at < len(source):
        next_end = source.find("\n", at + 1)
        line = source[at + 1:len(source) if next_end == -1 else next_end]
        code = line.lstrip(" \t\f")
        if code and not code.startswith("#"):
            break
        if line.startswith(indent):
            end = len(source) if next_end == -1 else next_end
        if next_end == -1:
            break
        at = next_end
    return end


def _comment_start(line: str) -> int:
    """Where a comment starts in one line of code, -1 when it has none (quotes are followed
    within the line)."""
    return next((i for i, c in _code_characters(line) if c == "#"), -1)


def _code_characters(text: str) -> Iterator[tuple[int, str]]:
    """(offset, character) for each character of `text` outside string literals and comments;
    a comment gives its `#` alone."""
    quote = ""
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if quote:
            if c == "\\":
                i += 2
                continue
            if text.startswith(quote, i):
                i += len(quote)
                quote = ""
                continue
        elif c in "'\"":
            quote = text[i:i + 3] if text[i:i + 3] in ('"""', "'''") else c
            i += len(quote)
            continue
        elif c == "#":
            yield i, c
            end = text.find("\n", i)
            i = n if end == -1 else end
            continue
        else:
            yield i, c
        i += 1
