"""The machinery every fixer shares: the fixer registry, a position index of one module,
small syntax helpers and the block surgery that moves or inserts statements.

A fixer is a function `(index, finding) -> Change | None`. It finds the node the finding points
to by position, builds a new module with libcst (so comments and formatting survive), and
returns it with a one-line message; `SourceIndex.edits` turns that into text edits, rendering
only the statements the fix rebuilt (a fix costs the size of what it touches, not of the file).
"""

from __future__ import annotations

import dataclasses
from bisect import bisect_right
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Sequence, Union

import libcst as cst
from libcst.metadata import MetadataWrapper, ScopeProvider

from loopcheck.findings import Finding
from loopcheck.lint.fixes.edits import Edit, edits_between, edits_replacing

if TYPE_CHECKING:
    from loopcheck.lint.rules.base import FileContext


@dataclass(frozen=True)
class Change:
    """What a fixer produces: the whole module after the fix, and what the fix does."""

    module: cst.Module
    message: str


Fixer = Callable[["SourceIndex", Finding], Union[Change, None]]
FIXERS: dict[str, Fixer] = {}


def fixer(code: str) -> Callable[[Fixer], Fixer]:
    """Register the decorated function as the fixer of `code`."""

    def register(func: Fixer) -> Fixer:
        if code in FIXERS:
            raise RuntimeError(f"two fixers for {code}")
        FIXERS[code] = func
        return func

    return register


# --- positions -------------------------------------------------------------------------------


class SourceIndex:
    """Positions and parents of one module's nodes, computed once per file and only on demand.

    Positions come from the engine's position table (shared with the rules). The nodes that
    start on a line are looked for only among the top-level statements around that line, so
    locating a finding costs the size of its statement, not of the file. Nodes found here are
    the nodes of `ctx.module` (and of the loop model built on it).
    """

    def __init__(self, ctx: "FileContext") -> None:
        from loopcheck.lint.positions import table_for

        self.ctx = ctx
        self.module: cst.Module = ctx.module
        self.path = ctx.path
        self._table = table_for(self.module)
        self._spans: dict[cst.CSTNode, tuple[int, int, int, int]] = {}
        self._on_line: dict[int, list[cst.CSTNode]] = {}

    @cached_property
    def nodes(self) -> list[cst.CSTNode]:
        """Every node of the module: depth first, a node's children last to first."""
        out: list[cst.CSTNode] = []
        stack: list[cst.CSTNode] = [self.module]
        while stack:
            node = stack.pop()
            out.append(node)
            stack.extend(node.children)
        return out

    @cached_property
    def parents(self) -> dict[cst.CSTNode, cst.CSTNode]:
        return _parent_map(self.module)

    @cached_property
    def renders_source(self) -> bool:
        """Whether the module renders back to exactly the source (edits are positions in it)."""
        return self._table.code == self.ctx.source

    @cached_property
    def scopes(self) -> dict:
        return dict(MetadataWrapper(self.module, unsafe_skip_copy=True).resolve(ScopeProvider))

    @cached_property
    def _units(self) -> tuple[list[int], list[cst.CSTNode]]:
        """The module's header lines, statements and footer lines in source order, with the
        line each begins on."""
        module, table = self.module, self._table
        firsts: list[int] = []
        units: list[cst.CSTNode] = []
        for i, line in enumerate(module.header):
            firsts.append(i + 1)
            units.append(line)
        for i, stmt in enumerate(module.body):
            firsts.append(table.line_of(table.body_offset(i)))
            units.append(stmt)
        footer_line = table.line_of(table.body_offset(len(module.body)))
        for i, line in enumerate(module.footer):
            firsts.append(footer_line + i)
            units.append(line)
        return firsts, units

    def _starting_on(self, line: int) -> list[cst.CSTNode]:
        """The nodes whose span starts on `line`, in the order of `nodes`.

        Only the unit (statement, header or footer line) holding the line and the one before
        it can hold such nodes: a whitespace-only node's span starts at the next non-blank
        character, which lies in its own unit or the next. Blank header and footer lines hold
        no such character, so the walk back passes over them."""
        found = self._on_line.get(line)
        if found is not None:
            return found
        firsts, units = self._units
        at = bisect_right(firsts, line) - 1
        candidates: list[cst.CSTNode] = [self.module]
        i = at
        while i >= 0:
            stack: list[cst.CSTNode] = [units[i]]
            while stack:
                node = stack.pop()
                candidates.append(node)
                stack.extend(node.children)
            if i < at and not _blank_line(units[i]):
                break
            i -= 1
        found = self._on_line[line] = [n for n in candidates if self.span(n)[0] == line]
        return found

    @cached_property
    def model(self):  # the loop model, or None when it cannot be built
        try:
            return self.ctx.model
        except Exception:  # noqa: BLE001  (a model failure means: no model-based fixes)
            return None

    def edits(self, fixed: cst.Module) -> list[Edit]:
        """The text edits turning the source into `fixed` (a module made from this one by
        `replace_nodes`). Only the top-level statements that changed are rendered and
        compared; the result is `edits_between(source, fixed.code)`."""
        old = self.module
        if fixed is old:
            return []
        a, b = old.body, fixed.body
        same = 0
        while same < min(len(a), len(b)) and a[same] is b[same]:
            same += 1
        tail = 0
        while tail < min(len(a), len(b)) - same and a[-1 - tail] is b[-1 - tail]:
            tail += 1
        if (
            not _same_nodes(old.header, fixed.header)
            or not _same_nodes(old.footer, fixed.footer)
            or (old.encoding, old.default_indent, old.default_newline, old.has_trailing_newline)
            != (fixed.encoding, fixed.default_indent, fixed.default_newline, fixed.has_trailing_newline)
            or (tail == 0 and not old.has_trailing_newline)  # the file's last newline is dropped
        ):
            return edits_between(self.ctx.source, fixed.code)
        start, end = self._table.body_offset(same), self._table.body_offset(len(a) - tail)
        content = "".join(fixed.code_for_node(stmt) for stmt in b[same : len(b) - tail])
        return edits_replacing(self.ctx.source, start, end, content)

    def code(self, node: cst.CSTNode) -> str:
        return self.module.code_for_node(node)

    def span(self, node: cst.CSTNode) -> tuple[int, int, int, int]:
        """(line, column, end_line, end_column), 1-based, end exclusive."""
        found = self._spans.get(node)
        if found is None:
            found = self._spans[node] = self._table.span(node)
        return found

    def start(self, node: cst.CSTNode) -> tuple[int, int]:
        return self.span(node)[:2]

    def contains(self, node: cst.CSTNode, line: int, column: int) -> bool:
        """Whether (line, 1-based column) lies inside node."""
        span = self.span(node)
        return span[:2] <= (line, column) < span[2:]

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        return self.parents.get(node)

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        current = self.parents.get(node)
        while current is not None:
            yield current
            current = self.parents.get(current)

    def depth(self, node: cst.CSTNode) -> int:
        return sum(1 for _ in self.ancestors(node))

    def deepest_at(self, line: int, column: int) -> cst.CSTNode | None:
        """The innermost node that starts exactly at (line, 1-based column)."""
        here = [n for n in self._starting_on(line) if self.span(n)[1] == column]
        return max(here, key=self.depth) if here else None

    def nodes_on_line(self, line: int, kind: type | tuple[type, ...]) -> list[cst.CSTNode]:
        return [n for n in self._starting_on(line) if isinstance(n, kind)]

    def locate(
        self, finding: Finding, kind: type | tuple[type, ...], accept: Callable[[cst.CSTNode], bool] = lambda n: True
    ) -> cst.CSTNode | None:
        """The node of `kind` a finding points to.

        First the nearest `kind` around the node starting at the finding's position; failing
        that, the only acceptable `kind` node starting on the finding's line. None when
        ambiguous: a fix is never applied to a guess.
        """
        if finding.path not in (None, self.path) or not finding.line:
            return None
        start = self.deepest_at(finding.line, finding.column or 1)
        if start is not None:
            for node in (start, *self.ancestors(start)):
                if isinstance(node, kind) and accept(node):
                    return node
                if isinstance(node, cst.BaseStatement):
                    break
        on_line = [n for n in self.nodes_on_line(finding.line, kind) if accept(n)]
        return on_line[0] if len(on_line) == 1 else None

    def statement_of(self, node: cst.CSTNode) -> cst.SimpleStatementLine | None:
        """The statement line holding node, when that line is a statement of an indented block
        or of the module (not `if x: call()` on one line)."""
        for anc in (node, *self.ancestors(node)):
            if isinstance(anc, cst.SimpleStatementLine):
                parent = self.parents.get(anc)
                return anc if isinstance(parent, (cst.IndentedBlock, cst.Module)) else None
            if isinstance(anc, (cst.BaseCompoundStatement, cst.SimpleStatementSuite)):
                return None
        return None

    def block_of(self, stmt: cst.BaseStatement) -> cst.IndentedBlock | cst.Module | None:
        parent = self.parents.get(stmt)
        return parent if isinstance(parent, (cst.IndentedBlock, cst.Module)) else None

    def enclosing_function(self, node: cst.CSTNode) -> cst.FunctionDef | cst.Module:
        for anc in self.ancestors(node):
            if isinstance(anc, cst.FunctionDef):
                return anc
        return self.module


def _blank_line(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.EmptyLine) and node.comment is None


def _parent_map(module: cst.Module) -> dict[cst.CSTNode, cst.CSTNode]:
    """child -> parent for every node, reading the nodes' fields directly (every field holding
    a node or a sequence of nodes: the same relation as libcst's `children`, much faster)."""
    parents: dict[cst.CSTNode, cst.CSTNode] = {}
    stack: list[cst.CSTNode] = [module]
    fields_of = _NODE_FIELDS
    while stack:
        node = stack.pop()
        names = fields_of.get(type(node))
        if names is None:
            names = fields_of[type(node)] = tuple(f.name for f in dataclasses.fields(node))
        for name in names:
            value = getattr(node, name)
            if isinstance(value, cst.CSTNode):
                parents[value] = node
                stack.append(value)
            elif isinstance(value, (tuple, list)):
                for item in value:
                    if isinstance(item, cst.CSTNode):
                        parents[item] = node
                        stack.append(item)
    return parents


_NODE_FIELDS: dict[type, tuple[str, ...]] = {}


def _same_nodes(a: Sequence[cst.CSTNode], b: Sequence[cst.CSTNode]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


# --- small syntax helpers --------------------------------------------------------------------


def dotted(node: cst.CSTNode | None) -> str | None:
    """`torch.cuda.amp.autocast` for a Name/Attribute chain, else None."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        base = dotted(node.value)
        return f"{base}.{node.attr.value}" if base else None
    return None


def sole_call(stmt: cst.BaseStatement) -> cst.Call | None:
    """The call of a statement line that is nothing but one call expression."""
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
        expr = stmt.body[0]
        if isinstance(expr, cst.Expr) and isinstance(expr.value, cst.Call):
            return expr.value
    return None


def method_call(stmt: cst.BaseStatement, method: str) -> tuple[cst.Call, cst.BaseExpression] | None:
    """(call, receiver) when the statement is just `receiver.method(...)`."""
    call = sole_call(stmt)
    if call is not None and isinstance(call.func, cst.Attribute) and call.func.attr.value == method:
        return call, call.func.value
    return None


def walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    yield node
    for child in node.children:
        yield from walk(child)


def calls_in(node: cst.CSTNode) -> Iterator[cst.Call]:
    return (n for n in walk(node) if isinstance(n, cst.Call))


def leaves_block(stmts: Iterable[cst.CSTNode]) -> bool:
    """Whether any statement may jump out of its block part-way: return, or a break /
    continue that is not inside a loop nested in the statements themselves."""

    def visit(node: cst.CSTNode, in_loop: bool) -> bool:
        if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            return False
        if isinstance(node, cst.Return):
            return True
        if isinstance(node, (cst.Break, cst.Continue)) and not in_loop:
            return True
        nested = in_loop or isinstance(node, (cst.For, cst.While))
        return any(visit(child, nested) for child in node.children)

    return any(visit(s, False) for s in stmts)


def assigned_names(stmts: Iterable[cst.CSTNode]) -> set[str]:
    """Names (and dotted targets) bound by the statements: assignments, loop / with targets."""
    out: set[str] = set()

    def targets(node: cst.CSTNode) -> None:
        name = dotted(node)
        if name:
            out.add(name)
        elif isinstance(node, (cst.Tuple, cst.List)):
            for element in node.elements:
                targets(element.value)
        elif isinstance(node, cst.StarredElement):
            targets(node.value)

    for stmt in stmts:
        for node in walk(stmt):
            if isinstance(node, cst.AssignTarget):
                targets(node.target)
            elif isinstance(node, (cst.AugAssign, cst.AnnAssign)):
                targets(node.target)
            elif isinstance(node, (cst.For, cst.CompFor)):
                targets(node.target)
            elif isinstance(node, cst.AsName):
                targets(node.name)
            elif isinstance(node, cst.NamedExpr):
                targets(node.target)
    return out


def used_names(node: cst.CSTNode) -> set[str]:
    """Every Name and dotted chain read in node."""
    return {d for n in walk(node) if (d := dotted(n))}


# --- block surgery ---------------------------------------------------------------------------


def split_leading(stmt: cst.BaseStatement) -> tuple[tuple[cst.EmptyLine, ...], tuple[cst.EmptyLine, ...]]:
    """(lines that stay where they are, comment lines directly above that travel with stmt)."""
    lines = tuple(stmt.leading_lines)
    cut = len(lines)
    while cut > 0 and lines[cut - 1].comment is not None:
        cut -= 1
    return lines[:cut], lines[cut:]


class NodeSwap(cst.CSTTransformer):
    """Replaces nodes (by identity) with new nodes, several nodes, or nothing.

    With `inside` (the ids of the nodes above the replaced ones) only those nodes are rebuilt:
    every other subtree is kept as it is, the same objects, which is what lets the fixed module
    be rendered and compared statement by statement."""

    def __init__(self, mapping: dict[int, object], inside: set[int] | None = None) -> None:
        super().__init__()
        self.mapping = mapping
        self.inside = inside

    def on_visit(self, node: cst.CSTNode) -> bool:
        # a replaced node's own children need no visit: its replacement is used as given
        return self.inside is None or id(node) in self.inside

    def on_leave(self, original_node, updated_node):  # type: ignore[override]
        return self.mapping.get(id(original_node), updated_node)


def replace_nodes(index: SourceIndex, mapping: dict[cst.CSTNode, object]) -> cst.Module:
    """The module of `index` with the given nodes replaced (by a node, a FlattenSentinel or
    RemoveFromParent)."""
    inside: set[int] | None = set()
    for node in mapping:
        if node is index.module:
            inside = None
            break
        parent = index.parents.get(node)
        if parent is None:  # not a node of this module: fall back to visiting everything
            inside = None
            break
        while parent is not None and id(parent) not in inside:
            inside.add(id(parent))
            parent = index.parents.get(parent)
    swap = NodeSwap({id(k): v for k, v in mapping.items()}, inside)
    return index.module.visit(swap)  # type: ignore[return-value]


def move_statement(
    index: SourceIndex,
    stmt: cst.BaseStatement,
    block: Sequence[cst.BaseStatement],
    after: cst.BaseStatement,
    *,
    first_in: cst.IndentedBlock | None = None,
) -> cst.Module:
    """Move `stmt` (an element of `block`) to just after `after`, or to the top of the block
    `first_in`. Comment lines directly above stmt move with it; blank lines stay put."""
    stay, travel = split_leading(stmt)
    moved = stmt.with_changes(leading_lines=travel)
    mapping: dict[cst.CSTNode, object] = {stmt: cst.RemoveFromParent()}
    at = list(block).index(stmt)
    follower = block[at + 1] if at + 1 < len(block) else None
    if follower is not None and stay:
        mapping[follower] = follower.with_changes(leading_lines=(*stay, *follower.leading_lines))
    if first_in is not None:
        head = first_in.body[0]
        current = mapping.get(head, head)
        mapping[head] = cst.FlattenSentinel([moved, current])  # type: ignore[list-item]
    else:
        current = mapping.get(after, after)
        mapping[after] = cst.FlattenSentinel([current, moved])  # type: ignore[list-item]
    return replace_nodes(index, mapping)
