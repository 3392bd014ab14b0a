"""Where the optimizer steps: which statements of a block run `optimizer.step()` or
`scaler.step(optimizer)`, directly or through a helper call. Shared by the fixes that move a
statement relative to the step (LC201, LC102).

The loop model's STEP / SCALER_STEP events are the evidence (their positions, and the call
sites they were inlined through); without a model, only a written `x.step(...)` on a name the
model's roles know counts.
"""

from __future__ import annotations

from typing import Iterator, Sequence

import libcst as cst

from loopcheck.lint.fixes.base import SourceIndex, calls_in, dotted, method_call

_STEP_KINDS = ("step", "scaler_step")


def _step_points(index: SourceIndex) -> list[tuple[int, int]]:
    """(line, 1-based column) of every optimizer step of this file, and (line, 0) of every
    call site in this file through which a step was reached."""
    model = index.model
    points: list[tuple[int, int]] = []
    if model is None:
        return points
    for event in getattr(model, "events", ()):
        kind = getattr(event.kind, "value", event.kind)
        if kind not in _STEP_KINDS:
            continue
        if event.path == index.path:
            points.append((event.line, event.column))
        for site in event.via:
            if site.path == index.path:
                points.append((site.line, 0))
    return points


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
    span = index.span(stmt)
    for line, column in _step_points(index):
        if column == 0:
            if span[0] <= line <= span[2]:
                return True
        elif index.contains(stmt, line, column):
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
    for child in stmt.children:
        yield from step_statements(index, child)
