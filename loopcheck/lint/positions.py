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
from itertools import accumulate
from typing import TYPE_CHECKING

import libcst as cst
from libcst._nodes.internal import CodegenState

if TYPE_CHECKING:
    from loopcheck.lint.rules.base import FileContext, Span

_KEEP = 16  # position tables kept (files of one inlined call chain)


class _Recorder:
    """The context manager `record_syntactic_position` returns (cheaper than a generator)."""

    __slots__ = ("state", "node", "start_node", "end_node", "start")

    def __init__(self, state: "_RecordingState", node: cst.CSTNode, start_node: cst.CSTNode | None,
                 end_node: cst.CSTNode | None) -> None:
        self.state = state
        self.node = node
        self.start_node = start_node
        self.end_node = end_node
        self.start = 0

    def __enter__(self) -> None:
        self.start = len(self.state.tokens)

    def __exit__(self, *exc: object) -> bool:
        ranges = self.state.ranges
        start, end = self.start, len(self.state.tokens)
        if self.start_node is not None and id(self.start_node) in ranges:
            start = ranges[id(self.start_node)][0]
        if self.end_node is not None and id(self.end_node) in ranges:
            end = ranges[id(self.end_node)][1]
        ranges[id(self.node)] = (start, end)
        return False


class _RecordingState(CodegenState):
    """A codegen state that remembers token indexes of syntactic ranges instead of tracking
    line/column for every token."""

    def __init__(self, module: cst.Module) -> None:
        super().__init__(default_indent=module.default_indent, default_newline=module.default_newline)
        self.ranges: dict[int, tuple[int, int]] = {}  # id(node) -> (first token, token after last)

    def record_syntactic_position(  # type: ignore[override]
        self,
        node: cst.CSTNode,
        *,
        start_node: cst.CSTNode | None = None,
        end_node: cst.CSTNode | None = None,
    ) -> _Recorder:
        return _Recorder(self, node, start_node, end_node)


class _OuterState(_RecordingState):
    """Also whitespace-inclusive ranges of every node (for the few node types with no syntactic
    range; only built when such a node is asked about)."""

    def __init__(self, module: cst.Module) -> None:
        super().__init__(module)
        self.outer: dict[int, tuple[int, int]] = {}
        self._stack: list[int] = []

    def before_codegen(self, node: cst.CSTNode) -> None:
        self._stack.append(len(self.tokens))

    def after_codegen(self, node: cst.CSTNode) -> None:
        self.outer[id(node)] = (self._stack.pop(), len(self.tokens))


class PositionTable:
    """Positions of every node of one module (token indexes kept, line/column computed on demand)."""

    def __init__(self, module: cst.Module) -> None:
        self.module = module  # keeps the nodes alive, so their ids stay valid
        state = _RecordingState(module)
        self._body_tokens = _module_codegen(module, state)
        self._ranges = state.ranges
        self._outer: dict[int, tuple[int, int]] | None = None
        self._offsets = list(accumulate((len(t) for t in state.tokens), initial=0))
        code = self.code = "".join(state.tokens)
        starts = [0]
        index = code.find("\n")
        while index != -1:
            starts.append(index + 1)
            index = code.find("\n", index + 1)
        self._line_starts = starts

    def body_offset(self, index: int) -> int:
        """Offset in the code of the start of top-level statement `index` of the module (of
        the footer when `index` is the number of statements): a line start."""
        return self._offsets[min(self._body_tokens[index], len(self._offsets) - 1)]

    def line_of(self, offset: int) -> int:
        return bisect_right(self._line_starts, offset)

    def _point(self, token_index: int, *, skip_space: bool = False) -> tuple[int, int]:
        offset = self._offsets[min(token_index, len(self._offsets) - 1)]
        if skip_space:  # whitespace-inclusive ranges start at the node's leading blank lines
            code = self.code
            while offset < len(code) and code[offset] in " \t\r\n\\":
                offset += 1
        line = bisect_right(self._line_starts, offset)
        return line, offset - self._line_starts[line - 1] + 1

    def text(self, node: cst.CSTNode) -> str | None:
        """The source of a one-line node (its syntactic range), as `code_for_node` would give it;
        None when the node has no recorded range, is parenthesized (the range leaves the
        parentheses out) or spans lines (`code_for_node` re-indents those)."""
        found = self._ranges.get(id(node))
        if found is None or getattr(node, "lpar", None):
            return None
        text = self.code[self._offsets[found[0]]:self._offsets[found[1]]]
        return None if "\n" in text else text

    def span(self, node: cst.CSTNode) -> tuple[int, int, int, int]:
        """(line, column, end_line, end_column) of a node of this module, 1-based."""
        found = self._ranges.get(id(node))
        inclusive = found is None
        if found is None:
            if self._outer is None:
                state = _OuterState(self.module)
                self.module._codegen(state)
                self._outer = state.outer  # same token stream: the offsets still apply
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


def _module_codegen(module: cst.Module, state: CodegenState) -> list[int]:
    """`module._codegen(state)`, step by step as libcst's Module does it, noting the token
    index where each top-level statement starts (and, last, where the footer starts)."""
    state.before_codegen(module)
    for line in module.header:
        line._codegen(state)
    starts = []
    for stmt in module.body:
        starts.append(len(state.tokens))
        stmt._codegen(state)
    starts.append(len(state.tokens))
    for line in module.footer:
        line._codegen(state)
    if module.has_trailing_newline:
        if not state.tokens:
            state.add_token(state.default_newline)
    else:
        state.pop_trailing_newline()
    state.after_codegen(module)
    return starts


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
