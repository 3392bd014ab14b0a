"""Positions and texts of the nodes of a tree built from `ast`, read from the `ast` spans.

What `positions.StatementPositions` works out for a parsed tree by rendering statements, a built
tree gets from the `ast` node each of its nodes was made from: a node is where that one is (a tuple
or generator expression without its parentheses, as libcst places it); a line or block of
statements runs from its first to its last statement; an argument or element is where its value
is; a node inside an f-string is where libcst's parse of the literal alone puts it, moved to the
literal. For any other node (rarely asked: a parameter, a keyword argument's name) the answer comes
from libcst's parse of the source, with the two trees walked side by side; the answers are always
the ones a parsed tree would give.
"""

from __future__ import annotations

import keyword
from typing import TYPE_CHECKING

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
        register_built(self, [*builder.origin, *builder.spans, *builder.groups])

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
        if kind is cst.Index:
            return None  # libcst gives an index no range of its own
        if kind not in _HOLDERS and kind is not cst.Arg and self._with_own_parentheses(start, end) != (start, end):
            return None
        found = self.source[start:end]
        return None if "\n" in found else found

    def render(self, node: cst.CSTNode) -> str:
        """The node's source, as `code_for_node` gives it for the parsed tree's node: an
        expression's text with its own parentheses; a statement's lines, decorators included,
        with its indentation taken off and ending in a line break. Where libcst differs, it is in
        whitespace and comments outside the node: libcst also gives the blank and comment lines
        above a statement, and reindents the continuation lines of a node to its block."""
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
            lines = source[line_start:len(source) if line_end == -1 else line_end].split("\n")
            return "".join((line[len(indent):] if line.startswith(indent) else line) + "\n" for line in lines)
        start, end = self._with_own_parentheses(start, end)
        return source[start:end]

    # -- where a node is -------------------------------------------------------------------

    def offsets(self, node: cst.CSTNode) -> tuple[int, int]:
        """Where `node` is in the source; LookupError for a node not placed from the spans."""
        kind = type(node)
        x = self.origin.get(id(node))
        if x is None:
            known = self.builder.spans.get(id(node))
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
            source = self.source
            start, end = start + 1, end - 1
            while source[start] in _BLANK:
                start += 1
            while source[end - 1] in _BLANK + ",":
                if source[end - 1] == "," and kind is cst.Tuple:
                    break
                end -= 1
        return start, end

    def _with_own_parentheses(self, start: int, end: int) -> tuple[int, int]:
        """The range with the node's own parentheses around it: a `(` not after a name, a call
        or a subscript (a call's parentheses belong to the call)."""
        source = self.source
        while True:
            i, j = start - 1, end
            while i >= 0 and source[i] in _BLANK:
                i -= 1
            while j < len(source) and source[j] in _BLANK:
                j += 1
            if i < 0 or j >= len(source) or source[i] != "(" or source[j] != ")":
                return start, end
            k = i - 1
            while k >= 0 and source[k] in " \t":
                k -= 1
            if k >= 0 and (source[k].isalnum() or source[k] in "_)]'\""):
                w = k
                while w >= 0 and (source[w].isalnum() or source[w] == "_"):
                    w -= 1
                word = source[w + 1:k + 1]
                if word == "with" or not (keyword.iskeyword(word) or keyword.issoftkeyword(word)):
                    return start, end  # `with (...)`: libcst gives those to the statement
            start, end = i, j + 1

    def twin(self) -> tuple[StatementPositions, dict[int, cst.CSTNode]]:
        """libcst's parse of the source, with its positions, and id(built node) -> its node there."""
        if self._twin is None:
            parsed = parse_module(self.source)
            self._twin = StatementPositions(parsed, self.source), {id(a): b for a, b in pairs(self._body, parsed.body)}
        return self._twin


def parenthesized(text: str) -> bool:
    """Whether `text` is wholly inside one pair of parentheses (strings are not looked into: a
    subscript's tuple of plain indexes)."""
    if not text.startswith("("):
        return False
    depth = 0
    for i, c in enumerate(text):
        depth += (c in "([{") - (c in ")]}")
        if depth == 0:
            return i == len(text) - 1
    return False
