"""The machinery every fixer shares: the fixer registry, a position index of one module,
small syntax helpers and the block surgery that moves or inserts statements.

A fixer is a function `(index, finding) -> Change | None`. It finds the node the finding points
to by position, builds a new module with libcst (so comments and formatting survive), and
returns it with a one-line message; `edits.edits_between` turns that into text edits.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Sequence, Union

import libcst as cst
from libcst.metadata import MetadataWrapper, ScopeProvider

from loopcheck.findings import Finding

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

    Positions come from the engine's position table (shared with the rules); the parent map is
    one walk of the tree. Nodes found here are the nodes of `ctx.module` (and of the loop
    model built on it).
    """

    def __init__(self, ctx: "FileContext") -> None:
        from loopcheck.lint.positions import table_for

        self.ctx = ctx
        self.module: cst.Module = ctx.module
        self.path = ctx.path
        self._table = table_for(self.module)
        self.nodes: list[cst.CSTNode] = []
        self.parents: dict[cst.CSTNode, cst.CSTNode] = {}
        stack: list[cst.CSTNode] = [self.module]
        while stack:
            node = stack.pop()
            self.nodes.append(node)
            for child in node.children:
                self.parents[child] = node
                stack.append(child)
        self._spans: dict[cst.CSTNode, tuple[int, int, int, int]] = {}

    @cached_property
    def renders_source(self) -> bool:
        """Whether the module renders back to exactly the source (edits are positions in it)."""
        return self.module.code == self.ctx.source

    @cached_property
    def scopes(self) -> dict:
        return dict(MetadataWrapper(self.module, unsafe_skip_copy=True).resolve(ScopeProvider))

    @cached_property
    def _by_line(self) -> dict[int, list[cst.CSTNode]]:
        table: dict[int, list[cst.CSTNode]] = {}
        for node in self.nodes:
            table.setdefault(self.span(node)[0], []).append(node)
        return table

    @cached_property
    def model(self):  # the loop model, or None when it cannot be built
        try:
            return self.ctx.model
        except Exception:  # noqa: BLE001  (a model failure means: no model-based fixes)
            return None

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
        here = [n for n in self._by_line.get(line, ()) if self.span(n)[1] == column]
        return max(here, key=self.depth) if here else None

    def nodes_on_line(self, line: int, kind: type | tuple[type, ...]) -> list[cst.CSTNode]:
        return [n for n in self._by_line.get(line, ()) if isinstance(n, kind)]

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
    """Replaces nodes (by identity) with new nodes, several nodes, or nothing."""

    def __init__(self, mapping: dict[int, object]) -> None:
        super().__init__()
        self.mapping = mapping

    def on_leave(self, original_node, updated_node):  # type: ignore[override]
        return self.mapping.get(id(original_node), updated_node)


def replace_nodes(module: cst.Module, mapping: dict[cst.CSTNode, object]) -> cst.Module:
    return module.visit(NodeSwap({id(k): v for k, v in mapping.items()}))  # type: ignore[return-value]


def move_statement(
    module: cst.Module,
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
    index = list(block).index(stmt)
    follower = block[index + 1] if index + 1 < len(block) else None
    if follower is not None and stay:
        mapping[follower] = follower.with_changes(leading_lines=(*stay, *follower.leading_lines))
    if first_in is not None:
        head = first_in.body[0]
        current = mapping.get(head, head)
        mapping[head] = cst.FlattenSentinel([moved, current])  # type: ignore[list-item]
    else:
        current = mapping.get(after, after)
        mapping[after] = cst.FlattenSentinel([current, moved])  # type: ignore[list-item]
    return replace_nodes(module, mapping)
