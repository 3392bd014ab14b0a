"""Two trees of the same shape side by side: a tree built from `ast` and libcst's parse of the
same source have the same nodes, fields and order, and differ only in whitespace and punctuation.

`difference` says where two trees differ (the tests and the fidelity benchmark); `pairs` walks both
at once; `translated` copies a loop model made from one tree onto the other (fixes edit and render
libcst's parse, while the model was made from the built tree).
"""

from __future__ import annotations

import copy
import dataclasses
import enum
from typing import Any, Iterator

import libcst as cst

from loopcheck.lint.syntax import child_nodes

_TRIVIA = {"lpar", "rpar", "comma", "semicolon", "leading_lines", "lines_after_decorators", "header", "footer",
           "newline", "indent", "trailing_whitespace", "equal", "colon", "second_colon", "lbracket", "rbracket",
           "lbrace", "rbrace", "dot", "encoding", "default_indent", "default_newline", "has_trailing_newline",
           "arrow"}
_COMPARED: dict[type, list[str]] = {}


def _compared(node: cst.CSTNode) -> list[str]:
    """The fields of a node's class that trees are compared on: all but whitespace and punctuation."""
    names = _COMPARED.get(type(node))
    if names is None:
        names = _COMPARED[type(node)] = [f.name for f in dataclasses.fields(node)
                                         if f.name not in _TRIVIA and "whitespace" not in f.name]
    return names


def difference(a: Any, b: Any) -> str | None:
    """Where two trees differ in a node type or a field other than whitespace and punctuation,
    as a path from the module; None when they do not."""
    stack = [(a, b, "module")]
    while stack:
        a, b, path = stack.pop()
        sequences = isinstance(a, (list, tuple)) and isinstance(b, (list, tuple))
        modules = isinstance(a, cst.Module) and isinstance(b, cst.Module)  # a BuiltModule is one
        if type(a) is not type(b) and not sequences and not modules:
            return f"{path}: {type(a).__name__} against {type(b).__name__}"
        if isinstance(a, cst.CSTNode):
            stack.extend((getattr(a, name), getattr(b, name), f"{path}.{name}") for name in reversed(_compared(a)))
        elif sequences:
            if len(a) != len(b):
                return f"{path}: {len(a)} items against {len(b)}"
            stack.extend((x, y, f"{path}[{i}]") for i, (x, y) in reversed(list(enumerate(zip(a, b)))))
        elif a != b:
            return f"{path}: {a!r} against {b!r}"
    return None


def pairs(a: Any, b: Any) -> Iterator[tuple[cst.CSTNode, cst.CSTNode]]:
    """The nodes of two trees of the same shape (`difference` finds none), side by side, roots
    first (a root may be a list of statements); whitespace and punctuation nodes left out."""
    stack = list(zip(a, b)) if isinstance(a, (list, tuple)) else [(a, b)]
    pop, push = stack.pop, stack.extend
    while stack:
        a, b = pop()
        yield a, b
        push(zip(child_nodes(a), child_nodes(b)))


def translated(value: Any, nodes: dict[int, Any], done: dict[int, Any] | None = None) -> Any:
    """A copy of `value` (a loop model, or any part of one) in which each node that `nodes`
    maps (by id) is replaced by its counterpart; shared and cyclic parts stay shared."""
    done = {} if done is None else done
    key = id(value)
    if key in nodes:
        return nodes[key]
    if key in done:
        return done[key]
    if value is None or isinstance(value, (str, int, float, bool, bytes, enum.Enum, type, cst.CSTNode)):
        return value
    out: Any
    if isinstance(value, list):
        out = done[key] = []
        out.extend(translated(x, nodes, done) for x in value)
        return out
    if isinstance(value, dict):
        out = done[key] = {}
        out.update((translated(k, nodes, done), translated(v, nodes, done)) for k, v in value.items())
        return out
    if isinstance(value, (tuple, set, frozenset)):
        made = [translated(x, nodes, done) for x in value]
        out = done[key] = type(value)(made) if not hasattr(value, "_fields") else type(value)(*made)
        return out
    if callable(value) and not hasattr(value, "__dict__") and not hasattr(value, "__slots__"):
        return value
    try:
        out = done[key] = copy.copy(value)
    except Exception:  # noqa: BLE001 - left as it is
        return value
    names = list(getattr(value, "__dict__", {}))
    for cls in type(value).__mro__:
        names.extend(n for n in getattr(cls, "__slots__", ()) if isinstance(n, str))
    for name in dict.fromkeys(names):
        if name.startswith("__") or not hasattr(value, name):
            continue
        try:
            object.__setattr__(out, name, translated(getattr(value, name), nodes, done))
        except (AttributeError, TypeError):
            pass
    return out
