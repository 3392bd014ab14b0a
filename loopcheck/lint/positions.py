"""Source positions of libcst nodes, computed cheaply and only for the nodes asked about.

libcst's `PositionProvider` tracks line and column for every token of the whole tree, which costs
more than parsing. Most nodes are never reported, so positions are found one statement at a time
(`StatementPositions`): the statement holding the node is rendered alone and placed in the source
text where that text occurs (or, when it occurs more than once, at the line Python's `ast` gives).
`PositionTable` renders the whole module once, recording token indexes of each node's syntactic
range; it answers whatever the statement-at-a-time way cannot (and checks it in the tests).

Lines and columns are 1-based; `end_column` is the 1-based column just after the node's last
character (the SARIF convention), so a one-character node at column 5 ends at column 6.
"""

from __future__ import annotations

import ast
import weakref
from bisect import bisect_right
from dataclasses import dataclass
from itertools import accumulate
from typing import TYPE_CHECKING, Iterable, Sequence

import libcst as cst
from libcst._nodes.internal import CodegenState

from loopcheck.lint.memo import fact, facts, known
from loopcheck.lint.summary import ast_tree

if TYPE_CHECKING:
    from loopcheck.lint.context import FileContext
    from loopcheck.lint.span_positions import SpanPositions


@dataclass(frozen=True)
class Span:
    """Where a node is: 1-based lines and columns, the end column exclusive."""

    line: int
    column: int  # 1-based
    end_line: int
    end_column: int


def line_starts(text: str) -> list[int]:
    """The offset of the start of each line of `text` (the first is 0)."""
    starts = [0]
    index = text.find("\n")
    while index != -1:
        starts.append(index + 1)
        index = text.find("\n", index + 1)
    return starts


def line_column(starts: list[int], offset: int) -> tuple[int, int]:
    """(line, column), 1-based, of an offset, given the line starts."""
    line = bisect_right(starts, offset)
    return line, offset - starts[line - 1] + 1


def _span_between(text: str, starts: list[int], start: int, end: int, *, inclusive: bool,
                  statement: bool) -> tuple[int, int, int, int]:
    """(line, column, end_line, end_column) of `text[start:end]`. A whitespace-inclusive range
    starts at the node's first non-blank character, and a statement's ends on its last line,
    not after its newline."""
    if inclusive:
        while start < len(text) and text[start] in " \t\r\n\\":
            start += 1
    line, column = line_column(starts, start)
    end_line, end_column = line_column(starts, end)
    if inclusive and statement and end_column == 1 and end_line > line:
        end_line -= 1
        end_column = starts[end_line] - starts[end_line - 1]
    return line, column, end_line, end_column


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
        self._line_starts = line_starts(code)

    def body_offset(self, index: int) -> int:
        """Offset in the code of the start of top-level statement `index` of the module (of
        the footer when `index` is the number of statements): a line start."""
        return self._offsets[min(self._body_tokens[index], len(self._offsets) - 1)]

    def line_of(self, offset: int) -> int:
        return bisect_right(self._line_starts, offset)

    def _offset(self, token_index: int) -> int:
        return self._offsets[min(token_index, len(self._offsets) - 1)]

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
        start, end = self._offset(found[0]), self._offset(found[1])
        return _span_between(self.code, self._line_starts, start, end,
                             inclusive=inclusive, statement=isinstance(node, cst.BaseStatement))


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


def statement_offsets(module: cst.Module) -> tuple[str, list[int]]:
    """`module.code`, and the offset in it where each top-level statement starts (its leading
    lines included), and last where the footer starts."""
    state = CodegenState(default_indent=module.default_indent, default_newline=module.default_newline)
    tokens = _module_codegen(module, state)
    offsets = list(accumulate((len(t) for t in state.tokens), initial=0))
    return "".join(state.tokens), [offsets[min(t, len(offsets) - 1)] for t in tokens]


def render_nodes(module: cst.Module, nodes: Sequence[cst.CSTNode], indents: Sequence[str] = ()) -> str:
    """The code of `nodes` (statements of one block, a module's header lines) as they render in
    `module`, inside blocks indented by `indents`."""
    state = CodegenState(default_indent=module.default_indent, default_newline=module.default_newline)
    state.indent_tokens = list(indents)
    for node in nodes:
        node._codegen(state)
    return "".join(state.tokens)


def table_for(module: cst.Module) -> PositionTable:
    """The whole-module table (one render of the module, kept with the module's facts)."""
    return fact(module, "positions.table", lambda: PositionTable(module))


# --- positions one statement at a time --------------------------------------------------------


class _Chunk:
    """One statement (or its header) rendered on its own: token ranges, and where its text
    starts in the source."""

    __slots__ = ("ranges", "outer", "opened", "offsets", "base")

    def __init__(self, state: "_StatementState", offsets: list[int], base: int) -> None:
        self.ranges = state.ranges
        self.outer = state.outer
        self.opened = state.opened
        self.offsets = offsets
        self.base = base


class _Fallback(Exception):
    """The statement-at-a-time positions do not apply: use the whole-module table."""


class _Stop(Exception):
    """Raised by `_StatementState` when the render reaches the node it stops at."""


class _OpenRecorder(_Recorder):
    __slots__ = ()

    def __enter__(self) -> None:
        self.start = len(self.state.tokens)
        self.state.opened[id(self.node)] = self.start  # type: ignore[attr-defined]


class _StatementState(_OuterState):
    """Records both kinds of ranges and where each syntactic range opens; stops before the
    `stop_at` node (rendering a compound statement's header without its body)."""

    def __init__(self, module: cst.Module, stop_at: cst.CSTNode | None) -> None:
        super().__init__(module)
        self.stop_at = stop_at
        self.opened: dict[int, int] = {}

    def before_codegen(self, node: cst.CSTNode) -> None:
        if node is self.stop_at:
            raise _Stop
        self._stack.append(len(self.tokens))

    def record_syntactic_position(  # type: ignore[override]
        self, node: cst.CSTNode, *, start_node: cst.CSTNode | None = None, end_node: cst.CSTNode | None = None,
    ) -> _Recorder:
        return _OpenRecorder(self, node, start_node, end_node)


_AST_KINDS: dict[type, tuple[type, ...]] = {
    cst.If: (ast.If,),
    cst.For: (ast.For, ast.AsyncFor),
    cst.While: (ast.While,),
    cst.With: (ast.With, ast.AsyncWith),
    cst.Try: (ast.Try,),
    cst.FunctionDef: (ast.FunctionDef, ast.AsyncFunctionDef),
    cst.ClassDef: (ast.ClassDef,),
    cst.Match: (ast.Match,),
}
if hasattr(ast, "TryStar"):
    _AST_KINDS[cst.TryStar] = (ast.TryStar,)
_COMPOUND_AST = tuple(k for kinds in _AST_KINDS.values() for k in kinds)
_HANDLERS = (cst.ExceptHandler, cst.ExceptStarHandler) if hasattr(cst, "ExceptStarHandler") else (cst.ExceptHandler,)
_ERRORS = (_Fallback, RecursionError, MemoryError, ValueError, SyntaxError, IndexError, AttributeError, KeyError, TypeError)


class StatementPositions:
    """Positions of nodes of one module, computed one statement at a time.

    The libcst statement that holds an asked-for node is rendered alone (with the indentation of
    its blocks; a compound statement only up to its body when the node is in its header). Where
    that text occurs once in the source, that is where the statement is. Otherwise Python's own
    parser (`ast`, in C, several times faster than libcst's) gives the line: the statement is
    matched to its `ast` statement through the chain of enclosing blocks, and the text is checked
    against the source at that line. Only statements that hold asked-for nodes are rendered, so
    a file costs the size of what the rules report. Anything unexpected (a mismatch, syntax this
    Python's `ast` does not know, nodes outside statements) falls back to the whole-module
    `PositionTable`: the answers are always the table's.
    """

    def __init__(self, module: cst.Module, source: str) -> None:
        self.module = module
        self.source = source
        self._tree: ast.Module | None = None
        self._chunks: dict[tuple[int, bool], _Chunk] = {}
        self._ast_of: dict[int, ast.AST] = {}
        self._block_index: dict[int, dict[int, int]] = {}
        self._table: PositionTable | None = None
        self._line_starts: list[int] | None = None

    # -- answers ---------------------------------------------------------------------------

    def span(self, node: cst.CSTNode) -> tuple[int, int, int, int]:
        if self._table is None:
            try:
                return self._span(node)
            except _ERRORS:
                pass
        return self.table().span(node)

    def text(self, node: cst.CSTNode) -> str | None:
        if self._table is None:
            try:
                chunk, found = self._locate(node, whole=True)
            except _ERRORS:
                return self.table().text(node)
            if found is None or getattr(node, "lpar", None):
                return None
            text = self.source[chunk.base + chunk.offsets[found[0]]:chunk.base + chunk.offsets[found[1]]]
            return None if "\n" in text else text
        return self.table().text(node)

    def table(self) -> PositionTable:
        if self._table is None:
            self._table = table_for(self.module)
        return self._table

    # -- one statement ---------------------------------------------------------------------

    def _span(self, node: cst.CSTNode) -> tuple[int, int, int, int]:
        if isinstance(node, cst.BaseCompoundStatement):
            last = _last_statement(node)
            if last is not None:  # the header's start, the end of the last statement of its body
                chunk = self._chunk(node, header=True)
                line, column = line_column(self._starts(), self._offset(chunk, chunk.opened[id(node)]))
                return (line, column, *self._span(last)[2:])
        chunk, found = self._locate(node, whole=False)
        inclusive = found is None
        if found is None:
            found = chunk.outer.get(id(node))
            if found is None:
                raise _Fallback
        start, end = self._offset(chunk, found[0]), self._offset(chunk, found[1])
        return _span_between(self.source, self._starts(), start, end,
                             inclusive=inclusive, statement=isinstance(node, cst.BaseStatement))

    def _locate(self, node: cst.CSTNode, *, whole: bool) -> tuple[_Chunk, tuple[int, int] | None]:
        """The rendered statement (or header) holding `node`, and the node's syntactic token
        range in it (None when it has none)."""
        parents = self._parents()
        stmt: cst.CSTNode | None = node
        below: cst.CSTNode | None = None  # the child of `stmt` on the way to `node`
        while stmt is not None and not isinstance(stmt, cst.BaseStatement):
            below = stmt
            stmt = parents.get(id(stmt))
        if stmt is None:
            raise _Fallback
        header = below is not None and _in_header(stmt, below)
        chunk = self._chunk(stmt, header=header)
        return chunk, chunk.ranges.get(id(node))

    def _chunk(self, stmt: cst.CSTNode, *, header: bool) -> _Chunk:
        key = (id(stmt), header)
        chunk = self._chunks.get(key)
        if chunk is None:
            chunk = self._chunks[key] = self._render(stmt, header=header)
        return chunk

    def _parents(self) -> dict[int, cst.CSTNode]:
        from loopcheck.lint.syntax import module_nodes

        return module_nodes(self.module)[1]

    def _render(self, stmt: cst.CSTNode, *, header: bool) -> _Chunk:
        module, parents = self.module, self._parents()
        indents: list[str] = []
        current = parents.get(id(stmt))
        while current is not None:
            if isinstance(current, (cst.IndentedBlock, cst.Match)):  # a match indents its cases too
                indents.append(module.default_indent if current.indent is None else current.indent)
            current = parents.get(id(current))
        stop = (stmt.cases[0] if isinstance(stmt, cst.Match) else stmt.body) if header else None  # type: ignore[attr-defined]
        state = _StatementState(module, stop)
        state.indent_tokens = indents[::-1]
        elif_ = isinstance(stmt, cst.If) and _is_elif(stmt, parents)
        try:
            if elif_:
                stmt._codegen(state, is_elif=True)  # type: ignore[call-arg]
            else:
                stmt._codegen(state)
        except _Stop:
            pass
        tokens = state.tokens
        offsets = list(accumulate((len(t) for t in tokens), initial=0))
        code = "".join(tokens)
        opened = state.opened.get(id(stmt))
        if opened is None:
            raise _Fallback
        source = self.source
        # The statement's text occurs in the source where the statement is; when it occurs
        # only once, that is where. Otherwise the line `ast` gives decides.
        base = source.find(code) if code else -1
        if base == -1 or source.find(code, base + 1) != -1:
            line = self._first_line(stmt, parents) - code.count("\n", 0, offsets[opened])
            starts = self._starts()
            if not 1 <= line <= len(starts):
                raise _Fallback
            base = starts[line - 1]
            if source[base:base + len(code)] != code:
                raise _Fallback
        return _Chunk(state, offsets, base)

    @staticmethod
    def _offset(chunk: _Chunk, token_index: int) -> int:
        return chunk.base + chunk.offsets[min(token_index, len(chunk.offsets) - 1)]

    def _starts(self) -> list[int]:
        starts = self._line_starts
        if starts is None:
            starts = self._line_starts = line_starts(self.source)
        return starts

    # -- the matching ast statement --------------------------------------------------------

    def _first_line(self, stmt: cst.CSTNode, parents: dict[int, cst.CSTNode]) -> int:
        found = self._ast_stmt(stmt, parents)
        kinds = _AST_KINDS.get(type(stmt))
        if kinds is None:
            if not isinstance(stmt, cst.SimpleStatementLine) or isinstance(found, _COMPOUND_AST):
                raise _Fallback
        elif not isinstance(found, kinds):
            raise _Fallback
        return found.lineno  # type: ignore[attr-defined]

    def _ast_stmt(self, stmt: cst.CSTNode, parents: dict[int, cst.CSTNode]) -> ast.AST:
        found = self._ast_of.get(id(stmt))
        if found is not None:
            return found
        parent = parents.get(id(stmt))
        if isinstance(parent, cst.Module):
            found = self._nth(self._ast_tree().body, parent.body, stmt)
        elif isinstance(parent, cst.IndentedBlock):
            found = self._nth(self._ast_body(parent, parents), parent.body, stmt)
        elif isinstance(parent, cst.If) and parent.orelse is stmt:  # elif
            orelse = self._ast_stmt(parent, parents).orelse  # type: ignore[attr-defined]
            if len(orelse) != 1:
                raise _Fallback
            found = orelse[0]
        else:
            raise _Fallback
        self._ast_of[id(stmt)] = found
        return found

    def _ast_body(self, block: cst.IndentedBlock, parents: dict[int, cst.CSTNode]) -> list[ast.stmt]:
        """The `ast` statement list that corresponds to a libcst block."""
        owner = parents.get(id(block))
        if isinstance(owner, (cst.Else, cst.Finally, cst.MatchCase, *_HANDLERS)):
            holder = parents.get(id(owner))
            if holder is None:
                raise _Fallback
            parsed = self._ast_stmt(holder, parents)
            if isinstance(owner, cst.Else):
                return parsed.orelse  # type: ignore[attr-defined]
            if isinstance(owner, cst.Finally):
                return parsed.finalbody  # type: ignore[attr-defined]
            if isinstance(owner, cst.MatchCase):
                return parsed.cases[_position(holder.cases, owner)].body  # type: ignore[attr-defined]
            return parsed.handlers[_position(holder.handlers, owner)].body  # type: ignore[attr-defined]
        if owner is None or type(owner) not in _AST_KINDS:
            raise _Fallback
        return self._ast_stmt(owner, parents).body  # type: ignore[attr-defined]

    def _nth(self, parsed: list[ast.stmt], stmts: Sequence[cst.BaseStatement], stmt: cst.CSTNode) -> ast.stmt:
        index = self._block_index.get(id(stmts))
        if index is None:
            index = self._block_index[id(stmts)] = {}
            count = 0
            for s in stmts:
                index[id(s)] = count
                count += len(s.body) if isinstance(s, cst.SimpleStatementLine) else 1
            if count != len(parsed):
                raise _Fallback
        return parsed[index[id(stmt)]]

    def _ast_tree(self) -> ast.Module:
        if self._tree is None:
            self._tree = ast_tree(self.source)
            if self._tree is None:
                raise _Fallback
        return self._tree


def _is_elif(stmt: cst.If, parents: dict[int, cst.CSTNode]) -> bool:
    above = parents.get(id(stmt))
    return isinstance(above, cst.If) and above.orelse is stmt


def _in_header(stmt: cst.CSTNode, child: cst.CSTNode) -> bool:
    """Whether `child` (a direct child of statement `stmt`) is rendered before its body."""
    if isinstance(stmt, cst.Match):
        return child is stmt.subject
    if not isinstance(stmt, cst.BaseCompoundStatement) or child is stmt.body:
        return False
    return not any(child is getattr(stmt, name, None) for name in ("orelse", "finalbody")) and not any(
        child is h for h in getattr(stmt, "handlers", ())
    )


def _last_statement(stmt: cst.BaseCompoundStatement) -> cst.BaseStatement | None:
    """The statement a compound statement's syntactic range ends with (None when its last
    block is a one-line suite)."""
    if isinstance(stmt, cst.Match):
        block = stmt.cases[-1].body
    elif isinstance(stmt, (cst.Try, getattr(cst, "TryStar", cst.Try))):
        last = stmt.finalbody or stmt.orelse or (stmt.handlers[-1] if stmt.handlers else None)
        block = last.body if last is not None else stmt.body
    elif isinstance(stmt, cst.If) and isinstance(stmt.orelse, cst.If):
        return stmt.orelse
    else:
        orelse = getattr(stmt, "orelse", None)
        block = orelse.body if orelse is not None else stmt.body
    if not isinstance(block, cst.IndentedBlock) or not block.body:
        return None
    return block.body[-1]


def _position(items: Sequence[cst.CSTNode], item: cst.CSTNode) -> int:
    for i, candidate in enumerate(items):
        if candidate is item:
            return i
    raise _Fallback


def register_source(module: cst.Module, source: str) -> None:
    """Tell where a parsed module's text is (its `code` without rendering it): positions of
    its nodes are then found one statement at a time. A tree built from `ast` knows its own."""
    if getattr(module, "positions", None) is None:
        facts(module)["positions.source"] = StatementPositions(module, source)


def positions_for(module: cst.Module) -> "StatementPositions | PositionTable | SpanPositions":
    """The cheapest position source of a module: its own for a tree built from `ast`, statement
    by statement when its text was registered, else the whole-module table."""
    found = getattr(module, "positions", None) or known(module, "positions.source")
    return found if found is not None else table_for(module)


def source_of(module: cst.Module) -> str:
    """A module's text: the built or registered source, else a render of the module."""
    found = getattr(module, "positions", None) or known(module, "positions.source")
    return found.source if found is not None else table_for(module).code


def node_code(node: cst.CSTNode, module: cst.Module | None = None) -> str:
    """What `module.code_for_node(node)` gives (the node's source text; a statement dedented),
    also for a node of a tree built from `ast`, which holds no whitespace or comments of its own.
    `module`: the parsed module holding the node, if known (it gives the indentation)."""
    ref = _BUILT_NODES.get(id(node))
    if ref is not None:
        where = ref()
        if where is not None:
            return where.render(node)
    return (module or _EMPTY).code_for_node(node)


# id(node) -> a weak reference to the positions of the built tree holding it. An entry goes when
# those positions do, with their module: never while the node can be alive in its tree.
_BUILT_NODES: dict[int, "weakref.ref[SpanPositions]"] = {}


def register_built(where: "SpanPositions", nodes: Iterable[int]) -> None:
    """Make `node_code` answer for the nodes with these ids from `where`, as long as it lives."""
    keys = list(nodes)

    def forget(ref: "weakref.ref[SpanPositions]", table: dict = _BUILT_NODES) -> None:
        for key in keys:
            if table.get(key) is ref:
                del table[key]
    ref = weakref.ref(where, forget)
    _BUILT_NODES.update(dict.fromkeys(keys, ref))


_EMPTY = cst.Module(body=[])


def node_span(module: cst.Module, node: cst.CSTNode) -> tuple[int, int, int, int]:
    return positions_for(module).span(node)


def span_of(ctx: "FileContext", node: cst.CSTNode) -> "Span":
    return Span(*node_span(ctx.module, node))
