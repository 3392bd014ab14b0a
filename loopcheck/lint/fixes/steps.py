"""Where the optimizer steps: which statements of a block run `optimizer.step()` or
`scaler.step(optimizer)`, directly or through a helper call. Shared by the fixes that move a
statement relative to the step (LC201, LC102).

The loop model's STEP / SCALER_STEP events are the evidence (their nodes, and the call sites
they were inlined through; positions only for nodes of another parse of the file); without a
model, only a written `x.step(...)` on a name the model's roles know counts.
"""

from __future__ import annotations

from typing import Iterator, Sequence

import libcst as cst

from loopcheck.lint.fixes.base import SourceIndex, calls_in, dotted, method_call
from loopcheck.lint.syntax import child_nodes

_STEP_KINDS = ("step", "scaler_step")


def _step_events(index: SourceIndex) -> list:
    """The model's optimizer-step events (STEP / SCALER_STEP), of any file."""
    model = index.model
    if model is None:
        return []
    return [e for e in getattr(model, "events", ()) if getattr(e.kind, "value", e.kind) in _STEP_KINDS]


def event_inside(index: SourceIndex, event, stmt: cst.CSTNode) -> bool:
    """Whether an event of this file lies inside stmt: by the tree when the event's node is a
    node of this module (no position needed), else by its position."""
    inside = index.within(event.node, stmt)
    return index.contains(stmt, event.line, event.column) if inside is None else inside


def _site_inside(index: SourceIndex, site, stmt: cst.CSTNode) -> bool:
    """Whether a call site of this file (through which a step was reached) lies on stmt's lines."""
    node = getattr(site, "node", None)
    inside = index.within(node, stmt) if node is not None else None
    if inside is not None:
        return inside
    span = index.span(stmt)
    return span[0] <= site.line <= span[2]


def _role(index: SourceIndex, name: str | None) -> str | None:
    model = index.model
    if model is None or name is None:
        return None
    role = model.role(name)
    return getattr(role, "value", role)


def _written_step(index: SourceIndex, stmt: cst.CSTNode) -> bool:
    for call in calls_in(stmt):
        if isinstance(call.func, cst.Attribute) and call.func.attr.value == "step":
            role = _role(index, dotted(call.func.value))
            if role == "optimizer" or (role == "scaler" and call.args):
                return True
    return False


def steps_in(index: SourceIndex, stmt: cst.BaseStatement) -> bool:
    """Whether running stmt steps an optimizer (nested function and class bodies excluded)."""
    if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
        return False
    for event in _step_events(index):
        if event.path == index.path and event_inside(index, event, stmt):
            return True
        if any(site.path == index.path and _site_inside(index, site, stmt) for site in event.via):
            return True
    return _written_step(index, stmt)


def is_step_statement(index: SourceIndex, stmt: cst.BaseStatement) -> bool:
    """A statement line that is just `opt.step(...)` or `scaler.step(opt)`."""
    return method_call(stmt, "step") is not None and steps_in(index, stmt)


def with_update(block: Sequence[cst.BaseStatement], at: int) -> int:
    """Index of the statement that ends the step at block[at]: a `scaler.update()` right after
    `scaler.step(opt)` belongs to it."""
    found = method_call(block[at], "step")
    if found is None or at + 1 >= len(block):
        return at
    update = method_call(block[at + 1], "update")
    if update is not None and dotted(update[1]) == dotted(found[1]) and not update[0].args:
        return at + 1
    return at


def step_statements(index: SourceIndex, stmt: cst.CSTNode) -> Iterator[cst.SimpleStatementLine]:
    """Statement lines inside stmt (not in nested functions) that are a written step."""
    if isinstance(stmt, cst.SimpleStatementLine):
        if is_step_statement(index, stmt):
            yield stmt
        return
    if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
        return
    for child in child_nodes(stmt):
        yield from step_statements(index, child)
