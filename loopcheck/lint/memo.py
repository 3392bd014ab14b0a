"""Facts derived from a parsed module (its walk, positions, value index), kept as long as it is.

libcst nodes take no attributes and no weak references, so what is computed from a module is
kept here, keyed by the module's identity. A module the run's `Project` holds is *pinned*: its
facts live until the project lets the module go (`release`), so a module imported by a hundred
files is walked and indexed once per run. Modules nobody pinned (a string passed to
`lint_source`, a fix attempt) share a small recency list instead.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Callable, TypeVar

if TYPE_CHECKING:
    import libcst as cst

T = TypeVar("T")

_LOOSE = 16  # unpinned modules whose facts are kept

_PINNED: dict[int, tuple["cst.Module", dict[str, Any]]] = {}
_LOOSE_FACTS: "OrderedDict[int, tuple[cst.Module, dict[str, Any]]]" = OrderedDict()


def facts(module: "cst.Module") -> dict[str, Any]:
    """The facts dictionary of `module` (created empty on first use)."""
    key = id(module)
    found = _PINNED.get(key)
    if found is not None and found[0] is module:
        return found[1]
    found = _LOOSE_FACTS.get(key)
    if found is not None and found[0] is module:
        _LOOSE_FACTS.move_to_end(key)
        return found[1]
    entry: tuple[cst.Module, dict[str, Any]] = (module, {})
    _LOOSE_FACTS[key] = entry
    while len(_LOOSE_FACTS) > _LOOSE:
        _LOOSE_FACTS.popitem(last=False)
    return entry[1]


def fact(module: "cst.Module", name: str, build: Callable[[], T]) -> T:
    """`build()`, computed once for as long as the module's facts are kept."""
    table = facts(module)
    if name not in table:
        table[name] = build()
    return table[name]


def known(module: "cst.Module", name: str) -> Any:
    """The fact `name` of `module` if it was computed, else None (never builds)."""
    key = id(module)
    for store in (_PINNED, _LOOSE_FACTS):
        found = store.get(key)
        if found is not None and found[0] is module:
            return found[1].get(name)
    return None


def pin(module: "cst.Module") -> None:
    """Keep the facts of `module` until `release` (the facts computed so far are kept too)."""
    key = id(module)
    if key in _PINNED and _PINNED[key][0] is module:
        return
    loose = _LOOSE_FACTS.pop(key, None)
    _PINNED[key] = (module, loose[1] if loose is not None and loose[0] is module else {})


def release(module: "cst.Module") -> None:
    found = _PINNED.get(id(module))
    if found is not None and found[0] is module:
        del _PINNED[id(module)]
