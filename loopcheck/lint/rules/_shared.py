"""Helpers several rule families share: condition (guard) normalisation, loops, the model's
events grouped into units with before/after walks and placed at the call sites that reached them,
and a few small syntax queries over a parsed module. Names, imports, parents and values of one
module are `loopcheck.lint.values`' job.

Nothing here knows a rule code; the families build their checks on top of it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

import libcst as cst

from loopcheck.lint.loopmodel import CallSite, Event, Loop, LoopKind
from loopcheck.lint.positions import node_span
from loopcheck.lint.rules.base import FileContext, module_nodes, walk, walk_pruned
from loopcheck.lint.syntax import classes_of

# --- prefilters -------------------------------------------------------------------------------


def whole_word(*words: str) -> str:
    """A `Rule.requires` expression matching any of `words` as a whole word. The word comes first
    and the boundary before it is checked behind it: a leading `\\b` keeps the regex engine from
    searching for the literal text, which makes the search many times slower."""
    return "|".join(rf"{re.escape(w)}\b(?<!\w{re.escape(w)})" for w in words)


# --- guards ------------------------------------------------------------------------------------


def guard_key(text: str, negated: bool) -> tuple[str, bool]:
    """A condition's text and polarity with `not x`, `x is None`, `x is not None` normalised,
    so `if not amp:` and the `else` of `if amp:` are recognised as the same branch."""
    text = " ".join(text.split())
    while text.startswith("(") and text.endswith(")"):
        text = text[1:-1].strip()
    if text.startswith("not "):
        return guard_key(text[4:], not negated)
    if text.endswith(" is not None"):
        return text[: -len(" is not None")].strip(), negated
    if text.endswith(" is None"):
        return text[: -len(" is None")].strip(), not negated
    return text, negated


def exclusive(a: Event, b: Event) -> bool:
    """True when a and b sit on opposite branches of one condition (never on one path)."""
    keys = {guard_key(g.text, g.negated) for g in a.guards}
    for g in b.guards:
        text, negated = guard_key(g.text, g.negated)
        if (text, not negated) in keys:
            return True
    return False


# --- loops -------------------------------------------------------------------------------------


def iteration_loop(loop: Loop) -> Loop:
    """The loop whose iteration is one training step: the batch loop around `loop` (a small
    `for opt in optimizers:` loop inside it does not count), else `loop` itself."""
    here: Loop | None = loop
    while here is not None:
        if here.kind is LoopKind.BATCH:
            return here
        here = here.parent
    return loop


def item_names(loop: Loop) -> set[str]:
    """The names a `for` loop binds to each item (`for opt in optimizers:` -> {"opt"}); none for `while`."""
    node = loop.node
    return _bound_names(node.target) if isinstance(node, cst.For) else set()


def _bound_names(target: cst.BaseExpression) -> set[str]:
    if isinstance(target, cst.Name):
        return {target.value}
    if isinstance(target, (cst.Tuple, cst.List)):
        return {n for el in target.elements for n in _bound_names(el.value)}
    return set()


def outermost(loop: Loop) -> Loop:
    while loop.parent is not None:
        loop = loop.parent
    return loop


def inside(event: Event, loop: Loop) -> bool:
    """Whether `event` runs in `loop` (in a loop nested in it included)."""
    current = event.loop
    while current is not None:
        if current is loop:
            return True
        current = current.parent
    return False


def call_site(
    path: str, line: int, via: tuple[CallSite, ...], frame: tuple[CallSite, ...] = ()
) -> tuple[str, int] | None:
    """(file, line) where something reached through the call chain `via` sits in the code of
    `frame` (the chain that reached that code; () for the linted file's own code): the call that
    leaves the frame, or the thing itself when it is written there. None when `via` does not pass
    through `frame`."""
    depth = len(frame)
    if via[:depth] != frame:
        return None
    if len(via) > depth:
        site = via[depth]
        return site.path, site.line
    return path, line


# --- the event trace ---------------------------------------------------------------------------

class Trace:
    """The model's events in trace order, grouped into units: one top-level loop, or one entry
    function for the events outside any loop. Walking before/after an event stays in its unit
    and skips the events that cannot be on the same path (the opposite branch of a condition)."""

    def __init__(self, ctx: FileContext) -> None:
        # no reference to ctx itself: the trace is kept by ctx (FileContext.derived)
        self.path = ctx.path
        self.module = ctx.module
        self.model = ctx.model
        self.events: list[Event] = list(ctx.model.events)
        self._functions: list[tuple[int, int]] | None = None
        self.units = [self._unit(e) for e in self.events]

    @classmethod
    def of(cls, ctx: FileContext) -> "Trace":
        return ctx.derived(cls)

    def _unit(self, event: Event) -> tuple:
        if event.loop is not None:
            return ("loop", id(outermost(event.loop)))
        return self.entry(event)

    def entry(self, event: Event) -> tuple:
        """The entry point the event was reached from: the outermost function of this file
        around it or around the call that reached it (None for the module body), or another file."""
        site = event.via[0] if event.via else None
        path = site.path if site is not None else event.path
        if path != self.path:
            return ("file", path)
        outermost = self.entry_function(event)
        return ("function", id(outermost) if outermost is not None else None)

    def entry_function(self, event: Event) -> cst.FunctionDef | None:
        """The outermost function of this file around the event or the call that reached it."""
        site = event.via[0] if event.via else None
        node = site.node if site is not None else event.node
        parents = module_nodes(self.module)[1]
        outermost = None
        current = node
        while current is not None:
            if isinstance(current, cst.FunctionDef):
                outermost = current
            current = parents.get(id(current))
        return outermost

    def function_at(self, line: int) -> int:
        """Start line of the outermost function around `line` (0: module level)."""
        if self._functions is None:
            module = self.module
            self._functions = [  # outermost functions and the methods of classes
                node_span(module, node)[::2]
                for node in walk_pruned(module, (cst.FunctionDef,))
                if isinstance(node, cst.FunctionDef)
            ]
        for start, end in self._functions:
            if start <= line <= end:
                return start
        return 0

    exclusive = staticmethod(exclusive)

    def unit_events(self, i: int) -> list[Event]:
        unit = self.units[i]
        return [e for e, u in zip(self.events, self.units) if u == unit]

    def before(self, i: int) -> Iterator[Event]:
        """Events of i's unit that may precede it on one path, nearest first."""
        here, unit = self.events[i], self.units[i]
        for j in range(i - 1, -1, -1):
            if self.units[j] != unit:
                break
            if not exclusive(self.events[j], here):
                yield self.events[j]

    def after(self, i: int) -> Iterator[Event]:
        """Events of i's unit that may follow it on one path, nearest first."""
        here, unit = self.events[i], self.units[i]
        for j in range(i + 1, len(self.events)):
            if self.units[j] != unit:
                break
            if not exclusive(self.events[j], here):
                yield self.events[j]

    @staticmethod
    def remember(seen: set[tuple], event: Event, *more: object) -> bool:
        """False when a finding was already made at this event's position (an inlined helper
        reached from two call sites), told apart by `more` when given."""
        key = (event.path, event.line, event.column, *more)
        if key in seen:
            return False
        seen.add(key)
        return True


# --- syntax queries over one module ------------------------------------------------------------


def nodes_of(root: cst.CSTNode, kind: type | tuple[type, ...]) -> list:
    """Every node of `kind` under `root` (root included), in source order."""
    types = classes_of(kind)
    if isinstance(root, cst.Module):  # one shared walk serves all the queries on a module
        return [node for node in module_nodes(root)[0] if type(node) in types]
    return [node for node, _ in walk(root) if type(node) in types]


def module_of(path: str, ctx: FileContext) -> cst.Module | None:
    """The parsed module of `path`: the linted file itself, or a project file the model followed."""
    if path == ctx.path:
        return ctx.module
    from loopcheck.lint.project import parse_path

    parsed = parse_path(Path(path), ctx.project)
    return parsed.module if parsed is not None else None
