"""The machinery every fixer shares: the fixer registry, a position index of one module,
small syntax helpers and the block surgery that moves or inserts statements.

A fixer is a function `(index, finding) -> Change | None`. It finds the node the finding points
to by position, builds a new module with libcst (so comments and formatting survive), and
returns it with a one-line message; `SourceIndex.edits` turns that into text edits, rendering
only the statements the fix rebuilt (a fix costs the size of what it touches, not of the file).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Sequence, Union

import libcst as cst
from libcst.metadata import MetadataWrapper, ScopeProvider

from loopcheck.findings import Finding
from loopcheck.lint.fixes.edits import Edit, edits_between, edits_replacing
from loopcheck.lint.positions import line_starts, render_nodes
from loopcheck.lint.syntax import child_nodes

if TYPE_CHECKING:
    from loopcheck.lint.context import FileContext


@dataclass(frozen=True)
class Change:
    """What a fixer produces: the whole module after the fix, and what the fix does."""

    module: cst.Module
    message: str


Fixer = Callable[["SourceIndex", Finding], Union[Change, None]]
FIXERS: dict[str, Fixer] = {}
LOCAL: set[str] = set()  # codes whose fixer edits only the statement line of its finding


def fixer(code: str, *, local: bool = False) -> Callable[[Fixer], Fixer]:
    """Register the decorated function as the fixer of `code`. `local`: it edits only the
    statement line its finding points into and reads nothing else of the file (no loop model,
    no imports, no other statement), so it may run on that statement parsed alone."""

    def register(func: Fixer) -> Fixer:
        if code in FIXERS:
            raise RuntimeError(f"two fixers for {code}")
        FIXERS[code] = func
        if local:
            LOCAL.add(code)
        return func

    return register


# --- positions -------------------------------------------------------------------------------


class SourceIndex:
    """Positions and parents of one module's nodes, asked for one node at a time.

    Parents come from the shared walk of the module (`FileContext.parent`), spans from
    `positions.node_span`, which renders only the statement holding a node. A finding's node is
    looked for among the few nodes that could be it (their kind and shape), never by walking
    every node of its line. Nodes found here are the nodes of `ctx.module` (and of the loop
    model built on it).
    """

    def __init__(self, ctx: "FileContext") -> None:
        self.ctx = ctx
        self.module: cst.Module = ctx.module
        self.path = ctx.path
        self._spans: dict[cst.CSTNode, tuple[int, int, int, int]] = {}

    @cached_property
    def renders_source(self) -> bool:
        """Whether the module renders back to exactly the source (edits are positions in it)."""
        from loopcheck.lint.positions import source_of

        return source_of(self.module) == self.ctx.source

    @cached_property
    def scopes(self) -> dict:
        return dict(MetadataWrapper(self.module, unsafe_skip_copy=True).resolve(ScopeProvider))

    @cached_property
    def model(self):  # the loop model, or None when it cannot be built
        try:
            return self.ctx.model
        except Exception:  # noqa: BLE001  (a model failure means: no model-based fixes)
            return None

    @cached_property
    def _line_starts(self) -> list[int]:
        return line_starts(self.ctx.source)

    def edits(self, fixed: cst.Module) -> list[Edit]:
        """The text edits turning the source into `fixed` (a module made from this one by
        `replace_nodes`): `edits_between(source, fixed.code)`, found by rendering only the
        statements of the innermost block that changed, old and new."""
        old = self.module
        if fixed is old:
            return []
        source = self.ctx.source
        if (
            _same_nodes(old.header, fixed.header)
            and _same_nodes(old.footer, fixed.footer)
            and (old.encoding, old.default_indent, old.default_newline, old.has_trailing_newline)
            == (fixed.encoding, fixed.default_indent, fixed.default_newline, fixed.has_trailing_newline)
        ):
            region = self._changed_region(fixed)
            if region is not None:
                start, before, after = region
                if source.startswith(before, start):  # else a render differs from the text: do it all
                    return edits_replacing(source, start, start + len(before), after)
        return edits_between(source, fixed.code)

    def _changed_region(self, fixed: cst.Module) -> tuple[int, str, str] | None:
        """(offset, old text, new text) of the statements that differ between the module and
        `fixed`, in the innermost block holding every difference; None when the first of them
        cannot be placed."""
        old_block: cst.Module | cst.IndentedBlock = self.module
        new_block: cst.Module | cst.IndentedBlock = fixed
        indents: list[str] = []
        while True:
            a, b = old_block.body, new_block.body
            same = 0
            while same < min(len(a), len(b)) and a[same] is b[same]:
                same += 1
            tail = 0
            while tail < min(len(a), len(b)) - same and a[-1 - tail] is b[-1 - tail]:
                tail += 1
            if len(a) - same - tail == 1 and len(b) - same - tail == 1:
                inner = _changed_block(a[same], b[same])
                if inner is not None:
                    old_block, new_block = inner
                    indents.append(self.module.default_indent if old_block.indent is None else old_block.indent)
                    continue
            if same + tail == len(a):  # a pure insertion: take a neighbour along, to have a place
                if tail:
                    tail -= 1
                elif same:
                    same -= 1
                else:
                    return None
            first = a[same]
            start = self._first_offset(first, indents)
            if start is None:
                return None
            before = render_nodes(self.module, a[same : len(a) - tail], indents)
            after = render_nodes(self.module, b[same : len(b) - tail], indents)
            return start, before, after

    def _first_offset(self, stmt: cst.BaseStatement, indents: list[str]) -> int | None:
        """Offset of the first line a statement renders (its leading lines and decorators
        included)."""
        line = self.span(stmt)[0]
        lines = len(stmt.leading_lines)
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
            lines += render_nodes(self.module, stmt.decorators, indents).count("\n") + len(stmt.lines_after_decorators)
        line -= lines
        starts = self._line_starts
        return starts[line - 1] if 1 <= line <= len(starts) else None

    def code(self, node: cst.CSTNode) -> str:
        return self.module.code_for_node(node)

    def span(self, node: cst.CSTNode) -> tuple[int, int, int, int]:
        """(line, column, end_line, end_column), 1-based, end exclusive."""
        found = self._spans.get(node)
        if found is None:
            from loopcheck.lint.positions import node_span

            found = self._spans[node] = node_span(self.module, node)
        return found

    def start(self, node: cst.CSTNode) -> tuple[int, int]:
        return self.span(node)[:2]

    def contains(self, node: cst.CSTNode, line: int, column: int) -> bool:
        """Whether (line, 1-based column) lies inside node."""
        span = self.span(node)
        return span[:2] <= (line, column) < span[2:]

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        return self.ctx.parent(node)

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        current = self.ctx.parent(node)
        while current is not None:
            yield current
            current = self.ctx.parent(current)

    def depth(self, node: cst.CSTNode) -> int:
        return sum(1 for _ in self.ancestors(node))

    def within(self, node: cst.CSTNode, outer: cst.CSTNode) -> bool | None:
        """Whether node is outer or lies inside it; None when node is not a node of this module
        (a node of another parse of the file)."""
        for current in (node, *self.ancestors(node)):
            if current is outer:
                return True
            if current is self.module:
                return False
        return None

    def locate(
        self, finding: Finding, kind: type | tuple[type, ...], accept: Callable[[cst.CSTNode], bool] = lambda n: True
    ) -> cst.CSTNode | None:
        """The node of `kind` a finding points to.

        First the innermost acceptable `kind` node around the finding's position (a call or an
        import holds no statement, so that is the nearest one above the node the finding
        starts at); failing that, the only acceptable `kind` node starting on the finding's
        line. None when ambiguous: a fix is never applied to a guess. Only the acceptable
        nodes of `kind` are placed, so `accept` should be as narrow as the fixer allows.
        """
        if finding.path not in (None, self.path) or not finding.line:
            return None
        line, column = finding.line, finding.column or 1
        kinds = kind if isinstance(kind, tuple) else (kind,)
        candidates = [n for n in self.ctx.nodes(*kinds) if accept(n)]
        around = [n for n in candidates if self.contains(n, line, column)]
        if around:
            return max(around, key=self.depth)
        on_line = [n for n in candidates if self.span(n)[0] == line]
        return on_line[0] if len(on_line) == 1 else None

    def statement_of(self, node: cst.CSTNode) -> cst.SimpleStatementLine | None:
        """The statement line holding node, when that line is a statement of an indented block
        or of the module (not `if x: call()` on one line)."""
        for anc in (node, *self.ancestors(node)):
            if isinstance(anc, cst.SimpleStatementLine):
                parent = self.parent(anc)
                return anc if isinstance(parent, (cst.IndentedBlock, cst.Module)) else None
            if isinstance(anc, (cst.BaseCompoundStatement, cst.SimpleStatementSuite)):
                return None
        return None

    def block_of(self, stmt: cst.BaseStatement) -> cst.IndentedBlock | cst.Module | None:
        parent = self.parent(stmt)
        return parent if isinstance(parent, (cst.IndentedBlock, cst.Module)) else None

    def enclosing_function(self, node: cst.CSTNode) -> cst.FunctionDef | cst.Module:
        for anc in self.ancestors(node):
            if isinstance(anc, cst.FunctionDef):
                return anc
        return self.module


# statements whose blocks a change is followed into; the wrappers of their other blocks
_BLOCK_OWNERS = (cst.If, cst.For, cst.While, cst.With, cst.Try, cst.FunctionDef, cst.ClassDef)
_BLOCK_WRAPPERS = (cst.Else, cst.Finally, cst.ExceptHandler)


def _changed_block(old: cst.CSTNode, new: cst.CSTNode) -> tuple[cst.IndentedBlock, cst.IndentedBlock] | None:
    """The (old, new) indented block that holds the only difference between two versions of a
    compound statement, when the difference is inside one block's statements."""
    if not isinstance(old, _BLOCK_OWNERS):
        return None
    while True:
        change = _only_change(old, new)
        if change is None:
            return None
        old, new = change
        if isinstance(old, cst.IndentedBlock) and isinstance(new, cst.IndentedBlock):
            if old.header is new.header and old.indent == new.indent and _same_nodes(old.footer, new.footer):
                return old, new
            return None
        if not isinstance(old, _BLOCK_WRAPPERS):
            return None


def _only_change(old: cst.CSTNode, new: cst.CSTNode) -> tuple[cst.CSTNode, cst.CSTNode] | None:
    """The one child (old, new) in which two nodes of the same type differ; None when they
    differ in anything else or in more than one child."""
    if type(old) is not type(new):
        return None
    found = None
    for name in _fields_of(type(old)):
        x, y = getattr(old, name), getattr(new, name)
        if x is y:
            continue
        if isinstance(x, cst.CSTNode) and isinstance(y, cst.CSTNode):
            pair = (x, y)
        elif isinstance(x, (tuple, list)) and isinstance(y, (tuple, list)) and len(x) == len(y):
            differ = [(p, q) for p, q in zip(x, y) if p is not q]
            if not differ:
                continue
            if len(differ) > 1 or not isinstance(differ[0][0], cst.CSTNode):
                return None
            pair = differ[0]
        elif not isinstance(x, (cst.CSTNode, tuple, list)) and x == y:
            continue
        else:
            return None
        if found is not None:
            return None
        found = pair
    return found


def _fields_of(tp: type) -> tuple[str, ...]:
    names = _NODE_FIELDS.get(tp)
    if names is None:
        names = _NODE_FIELDS[tp] = tuple(f.name for f in dataclasses.fields(tp))
    return names


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
    """node and every node under it, in source order (whitespace and punctuation left out)."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        children = child_nodes(current)
        children.reverse()
        stack.extend(children)


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
        return any(visit(child, nested) for child in child_nodes(node))

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
        parent = index.parent(node)
        if parent is None:  # not a node of this module: fall back to visiting everything
            inside = None
            break
        while parent is not None and id(parent) not in inside:
            inside.add(id(parent))
            parent = index.parent(parent)
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
