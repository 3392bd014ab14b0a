"""Fast parsing and walks over libcst trees: a node's meaningful children read straight from its
fields, in source order (whitespace, commas and parentheses left out).

libcst's visitors and `node.children` rebuild or re-visit every node and cost about ten times
more; the loop model, the rules and the fixes walk trees through these functions instead.
"""

from __future__ import annotations

import collections.abc
from functools import cache
from typing import Any, Callable, Iterator, Literal, NamedTuple, Union, get_args, get_origin

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


# Every libcst node checks its own fields when it is made (`CSTNode.__post_init__`), which is
# for trees built by hand: the parser only makes valid ones, and on a real project the checks
# are about a tenth of the parse. Parsing skips them.
_VALIDATE = cst.CSTNode.__dict__.get("__post_init__")


def _unchecked(node: cst.CSTNode) -> None:
    return None


def parse_module(source: str | bytes) -> cst.Module:
    """`libcst.parse_module`, without the per-node checks meant for trees built by hand.

    The checks are off only while the parser runs. A node another thread builds meanwhile skips
    them too (loopcheck's own nodes are valid; the checks catch mistakes, they change nothing),
    and the original method always comes back, never a copy of the switched one, so parses
    overlapping in threads cannot leave the checks off.
    """
    if _VALIDATE is None:  # a libcst whose nodes check themselves elsewhere: parse as it does
        return cst.parse_module(source)
    cst.CSTNode.__post_init__ = _unchecked  # type: ignore[method-assign]
    try:
        return cst.parse_module(source)
    finally:
        cst.CSTNode.__post_init__ = _VALIDATE  # type: ignore[method-assign]


def _child_fields(tp: type) -> tuple[str, ...]:
    found = _FIELDS.get(tp)
    if found is None:
        import dataclasses

        found = _FIELDS[tp] = tuple(
            f.name for f in dataclasses.fields(tp)
            if f.name not in _SKIPPED_FIELDS and "whitespace" not in f.name and not f.name.endswith("colon")
        )
    return found


def _reader(tp: type) -> Callable[[cst.CSTNode], list[cst.CSTNode]]:
    """The function giving the child nodes of a `tp` node, written for its fields: a field
    typed as a node is taken as it is, a sequence of nodes is added whole, and only a field that
    may hold something else (None, a sentinel, a string) is looked at. A generic loop over the
    fields costs about twice as much, and `child_nodes` runs for every node of every walk."""
    import dataclasses

    types = {f.name: f.type for f in dataclasses.fields(tp)}
    lines = ["def read(node):", "    out = []"]
    for name in _child_fields(tp):
        kind = _field_kind(types[name])
        if kind == "node":
            lines.append(f"    out.append(node.{name})")
        elif kind == "nodes":
            lines.append(f"    out += node.{name}")
        elif kind == "maybe":
            lines += [f"    value = node.{name}", "    if type(value) in NODES:", "        out.append(value)"]
        elif kind == "any":
            lines.append(f"    _add_nodes(node.{name}, out)")
    lines.append("    return out")
    scope = {"NODES": _NODE_CLASSES, "_add_nodes": _add_nodes}
    exec("\n".join(lines), scope)  # noqa: S102 - the source is made above from field names only
    found = _READERS[tp] = scope["read"]
    return found


def _field_kind(annotation: Any) -> str:
    """What a field typed `annotation` holds: "node" (always a node), "nodes" (a sequence of
    nodes), "maybe" (a node or something else), "" (never a node), "any" (not known)."""
    if isinstance(annotation, type):
        return "node" if annotation in _NODE_CLASSES or issubclass(annotation, cst.CSTNode) else ""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return ""
    if origin is Union:
        kinds = {_field_kind(a) for a in args}
        if kinds == {"node"} or kinds == {""}:
            return kinds.pop()
        return "maybe" if kinds <= {"node", ""} else "any"
    if origin is collections.abc.Sequence and len(args) == 1:
        return "nodes" if _field_kind(args[0]) == "node" else "any"
    return "any"


def _add_nodes(value: Any, out: list[cst.CSTNode]) -> None:
    """Add `value` to `out` if it is a node, or its items that are nodes if it is a sequence."""
    kind = type(value)
    if kind in _NODE_CLASSES:
        out.append(value)
    elif kind is list or kind is tuple:
        out.extend(v for v in value if type(v) in _NODE_CLASSES)


_READERS: dict[type, Callable[[cst.CSTNode], list[cst.CSTNode]]] = {}


def child_nodes(node: cst.CSTNode) -> list[cst.CSTNode]:
    """The child nodes `walk` goes through, in source order (whitespace and punctuation left out)."""
    read = _READERS.get(type(node))
    return (read or _reader(type(node)))(node)


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


_NODE_CLASSES = classes_of(cst.CSTNode)


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
    readers = _READERS
    # The stack holds nodes to enter and 1-tuples: a node whose subtree is done when popped.
    stack: list = [module]
    pop, push, enter = stack.pop, stack.extend, nodes.append
    count = 0
    while stack:
        node = pop()
        kind = type(node)
        if kind is tuple:
            closed.append((node[0], count))
            continue
        key = id(node)
        order[key] = count
        count += 1
        enter(node)
        children = (readers.get(kind) or _reader(kind))(node)
        kids[key] = children
        if kind in closing:
            stack.append((node,))
        if children:
            for child in children:
                parents[id(child)] = node
            push(children[::-1])
    return ModuleWalk(nodes, parents, order, kids, closed)


def module_nodes(module: cst.Module) -> tuple[list[cst.CSTNode], dict[int, cst.CSTNode]]:
    """Every node of `module` in `walk` order, and id(node) -> parent (from `module_walk`)."""
    found = module_walk(module)
    return found.nodes, found.parents

