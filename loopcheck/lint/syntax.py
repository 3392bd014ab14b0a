"""Fast walks over libcst trees: a node's meaningful children read straight from its fields,
in source order (whitespace, commas and parentheses left out).

libcst's visitors and `node.children` rebuild or re-visit every node and cost about ten times
more; the loop model, the rules and the fixes walk trees through these functions instead.
"""

from __future__ import annotations

from functools import cache
from operator import attrgetter
from typing import Any, Callable, Iterator, NamedTuple

import libcst as cst

from loopcheck.lint.memo import fact

_SKIPPED_FIELDS = frozenset({
    "lpar", "rpar", "comma", "semicolon", "leading_lines", "lines_after_decorators", "trailing_whitespace",
    "header", "footer", "newline", "equal", "colon", "dot", "indent", "star_tok", "lbracket", "rbracket",
    "lbrace", "rbrace", "asynchronous",
})
# dataclass field order differs from source order for these
_FIELDS: dict[type, tuple[str, ...]] = {
    cst.FunctionDef: ("decorators", "name", "params", "returns", "body"),
    cst.ClassDef: ("decorators", "name", "bases", "keywords", "body"),
    cst.IfExp: ("body", "test", "orelse"),
    cst.ExceptHandler: ("type", "name", "body"),
    cst.ExceptStarHandler: ("type", "name", "body"),
    cst.Arg: ("keyword", "value"),
    cst.ImportFrom: ("relative", "module", "names"),
}


def _child_fields(tp: type) -> tuple[str, ...]:
    found = _FIELDS.get(tp)
    if found is None:
        import dataclasses

        found = _FIELDS[tp] = tuple(
            f.name for f in dataclasses.fields(tp)
            if f.name not in _SKIPPED_FIELDS and "whitespace" not in f.name and not f.name.endswith("colon")
        )
    return found


def _getter(tp: type) -> tuple[Callable[[cst.CSTNode], Any] | None, bool]:
    """(reader of the child fields of `tp`, whether it reads a single field); fields typed `str`
    (a Name's value, a number's digits) are left out: they never hold nodes."""
    import dataclasses

    text = {f.name for f in dataclasses.fields(tp) if f.type in ("str", str)}
    fields = tuple(f for f in _child_fields(tp) if f not in text)
    found: tuple[Callable[[cst.CSTNode], Any] | None, bool]
    if not fields:
        found = (None, False)
    else:
        found = (attrgetter(*fields), len(fields) == 1)
    _GETTERS[tp] = found
    return found


_GETTERS: dict[type, tuple[Callable[[cst.CSTNode], Any] | None, bool]] = {}


def child_nodes(node: cst.CSTNode) -> list[cst.CSTNode]:
    """The child nodes `walk` goes through, in source order (whitespace and punctuation left out)."""
    get, single = _GETTERS.get(type(node)) or _getter(type(node))
    children: list[cst.CSTNode] = []
    if get is None:
        return children
    is_node = _IS_NODE
    for value in (get(node),) if single else get(node):
        kind = type(value)
        found = is_node.get(kind)
        if found is None:
            found = is_node[kind] = issubclass(kind, cst.CSTNode)
        if found:
            children.append(value)
        elif kind is list or kind is tuple:
            for v in value:
                found = is_node.get(type(v))
                if found is None:
                    found = is_node[type(v)] = isinstance(v, cst.CSTNode)
                if found:
                    children.append(v)
    return children


# type -> whether its instances are nodes (a dict lookup instead of an ABC isinstance check)
_IS_NODE: dict[type, bool] = {}


@cache
def classes_of(kind: type | tuple[type, ...]) -> frozenset[type]:
    """The classes whose instances are `kind` instances: `type(node) in classes_of(kind)` is
    `isinstance(node, kind)`. libcst's node classes are ABCs, on which `isinstance` is slow:
    filtering a module's nodes with it costs about as much as walking them. (libcst defines all
    its node classes on import, and nothing registers virtual subclasses.)"""
    found: set[type] = set()
    todo = list(kind) if isinstance(kind, tuple) else [kind]
    while todo:
        current = todo.pop()
        if current not in found:
            found.add(current)
            todo.extend(current.__subclasses__())
    return frozenset(found)


def walk(root: cst.CSTNode) -> Iterator[tuple[cst.CSTNode, cst.CSTNode | None]]:
    """(node, parent) for every node under `root`, root first, in source order.

    Reads the nodes' fields directly instead of going through libcst's visitor machinery,
    which is about ten times faster."""
    stack: list[tuple[cst.CSTNode, cst.CSTNode | None]] = [(root, None)]
    while stack:
        node, parent = stack.pop()
        yield node, parent
        stack.extend((child, node) for child in reversed(child_nodes(node)))


def walk_pruned(root: cst.CSTNode, prune: tuple[type, ...]) -> Iterator[cst.CSTNode]:
    """Like `walk` (nodes only, root first, source order), without going below the nodes of the
    `prune` types other than root (they themselves are yielded): what a libcst visitor whose
    `visit_X` returns False sees."""
    stack: list[cst.CSTNode] = [root]
    while stack:
        node = stack.pop()
        yield node
        if node is not root and isinstance(node, prune):
            continue
        stack.extend(reversed(child_nodes(node)))


# Kinds whose subtree end `module_walk` records: the value index binds a name only after the
# value assigned to it (`x = f(x)` sees the previous `x`) and lists calls innermost first.
CLOSED_KINDS = frozenset({
    cst.Call, cst.ClassDef, cst.FunctionDef, cst.Import, cst.ImportFrom, cst.Assign, cst.AnnAssign,
    cst.AugAssign, cst.NamedExpr, cst.For, cst.CompFor, cst.WithItem,
})


class ModuleWalk(NamedTuple):
    """One walk of a module, shared by the rules, the value index and the positions."""

    nodes: list[cst.CSTNode]  # every node in `walk` order (source order, parents first)
    parents: dict[int, cst.CSTNode]  # id(node) -> parent
    order: dict[int, int]  # id(node) -> index in `nodes`
    kids: dict[int, list[cst.CSTNode]]  # id(node) -> `child_nodes(node)`
    closed: list[tuple[cst.CSTNode, int]]  # CLOSED_KINDS nodes as their subtrees end, with len(nodes) then


def module_walk(module: cst.Module) -> ModuleWalk:
    """The walk of `module` (one per module, kept as long as its facts are: see `memo`)."""
    return fact(module, "walk", lambda: _walk_module(module))


def _walk_module(module: cst.Module) -> ModuleWalk:
    nodes: list[cst.CSTNode] = []
    parents: dict[int, cst.CSTNode] = {}
    order: dict[int, int] = {}
    kids: dict[int, list[cst.CSTNode]] = {}
    closed: list[tuple[cst.CSTNode, int]] = []
    closing = CLOSED_KINDS
    # The stack holds nodes to enter and 1-tuples: a node whose subtree is done when popped.
    stack: list = [module]
    while stack:
        node = stack.pop()
        if type(node) is tuple:
            closed.append((node[0], len(nodes)))
            continue
        order[id(node)] = len(nodes)
        nodes.append(node)
        children = child_nodes(node)
        kids[id(node)] = children
        if type(node) in closing:
            stack.append((node,))
        if children:
            for child in children:
                parents[id(child)] = node
            stack.extend(children[::-1])
    return ModuleWalk(nodes, parents, order, kids, closed)


def module_nodes(module: cst.Module) -> tuple[list[cst.CSTNode], dict[int, cst.CSTNode]]:
    """Every node of `module` in `walk` order, and id(node) -> parent (from `module_walk`)."""
    found = module_walk(module)
    return found.nodes, found.parents

