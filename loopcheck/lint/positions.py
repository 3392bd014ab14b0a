"""Source positions of libcst nodes, computed cheaply.

libcst's `PositionProvider` tracks line and column for every token of the whole tree, which costs
more than parsing. Here one code-generation pass records only token indexes for each node's
syntactic start and end; the indexes are turned into (line, column) with a prefix sum and a
binary search over line starts, only for the nodes that are asked about. A module's table is
built on first use and kept for the few most recent modules.

Lines and columns are 1-based; `end_column` is the 1-based column just after the node's last
character (the SARIF convention), so a one-character node at column 5 ends at column 6.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import OrderedDict
from contextlib import contextmanager
from itertools import accumulate
from typing import TYPE_CHECKING, Iterator

import libcst as cst
from libcst._nodes.internal import CodegenState

if TYPE_CHECKING:
    from loopcheck.lint.rules.base import FileContext, Span

_KEEP = 16  # position tables kept (files of one inlined call chain)


class _RecordingState(CodegenState):
    """A codegen state that remembers token indexes instead of line/column per token."""

    def __init__(self, module: cst.Module) -> None:
        super().__init__(default_indent=module.default_indent, default_newline=module.default_newline)
        self.ranges: dict[int, tuple[int, int]] = {}  # id(node) -> (first token, token after last)
        self.outer: dict[int, tuple[int, int]] = {}  # whitespace-inclusive, for nodes with no syntactic range
        self._stack: list[int] = []

    def before_codegen(self, node: cst.CSTNode) -> None:
        self._stack.append(len(self.tokens))

    def after_codegen(self, node: cst.CSTNode) -> None:
        start = self._stack.pop()
        self.outer[id(node)] = (start, len(self.tokens))

    @contextmanager
    def record_syntactic_position(
        self,
        node: cst.CSTNode,
        *,
        start_node: cst.CSTNode | None = None,
        end_node: cst.CSTNode | None = None,
    ) -> Iterator[None]:
        start = len(self.tokens)
        try:
            yield
        finally:
            end = len(self.tokens)
            if start_node is not None and id(start_node) in self.ranges:
                start = self.ranges[id(start_node)][0]
            if end_node is not None and id(end_node) in self.ranges:
                end = self.ranges[id(end_node)][1]
            self.ranges[id(node)] = (start, end)


class PositionTable:
    """Positions of every node of one module (token indexes kept, line/column computed on demand)."""

    def __init__(self, module: cst.Module) -> None:
        self.module = module  # keeps the nodes alive, so their ids stay valid
        state = _RecordingState(module)
        module._codegen(state)
        tokens = state.tokens
        self._offsets = list(accumulate((len(t) for t in tokens), initial=0))
        self._ranges = state.ranges
        self._outer = state.outer
        code = "".join(tokens)
        starts = [0]
        index = code.find("\n")
        while index != -1:
            starts.append(index + 1)
            index = code.find("\n", index + 1)
        self._line_starts = starts
        self._code = code

    def _point(self, token_index: int, *, skip_space: bool = False) -> tuple[int, int]:
        offset = self._offsets[min(token_index, len(self._offsets) - 1)]
        if skip_space:  # whitespace-inclusive ranges start at the node's leading blank lines
            code = self._code
            while offset < len(code) and code[offset] in " \t\r\n\\":
                offset += 1
        line = bisect_right(self._line_starts, offset)
        return line, offset - self._line_starts[line - 1] + 1

    def span(self, node: cst.CSTNode) -> tuple[int, int, int, int]:
        """(line, column, end_line, end_column) of a node of this module, 1-based."""
        found = self._ranges.get(id(node))
        inclusive = found is None
        if found is None:
            found = self._outer.get(id(node))
        if found is None:
            return (1, 1, 1, 1)
        line, column = self._point(found[0], skip_space=inclusive)
        end_line, end_column = self._point(found[1])
        if inclusive and isinstance(node, cst.BaseStatement) and end_column == 1 and end_line > line:
            # a statement's range ends after its newline: report the end of its last line instead
            end_line -= 1
            end_column = self._line_starts[end_line] - self._line_starts[end_line - 1]
        return line, column, end_line, end_column


_TABLES: "OrderedDict[int, PositionTable]" = OrderedDict()


def table_for(module: cst.Module) -> PositionTable:
    key = id(module)
    table = _TABLES.get(key)
    if table is not None and table.module is module:
        _TABLES.move_to_end(key)
        return table
    table = PositionTable(module)
    _TABLES[key] = table
    while len(_TABLES) > _KEEP:
        _TABLES.popitem(last=False)
    return table


def node_span(module: cst.Module, node: cst.CSTNode) -> tuple[int, int, int, int]:
    return table_for(module).span(node)


def span_of(ctx: "FileContext", node: cst.CSTNode) -> "Span":
    from loopcheck.lint.rules.base import Span

    return Span(*node_span(ctx.module, node))
