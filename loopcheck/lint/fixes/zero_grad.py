"""Gradient-reset fixes: LC102 (the reset sits between backward and step).

Two valid places for `x.zero_grad()`, tried in this order:

1. Directly after the step (and its `scaler.update()`): when the step is a later statement of
   the same block, or a statement of an accumulation `if` that is a later statement of that
   block. Gradients are then cleared once per optimizer step, which keeps accumulation intact.
2. At the top of the loop body, before the forward pass: when the reset is a statement of the
   loop body and the step is not guarded for accumulation (the iteration steps every time).

Nothing between the old and the new place may leave the block (return / break / continue):
otherwise the reset could be skipped, and there is no fix. Nor is the reset moved to the top of
an iteration that can end early with `continue` (the step would then run less often than it).
"""

from __future__ import annotations

import libcst as cst

from loopcheck.findings import Finding
from loopcheck.lint.fixes.base import Change, SourceIndex, fixer, leaves_block, method_call, move_statement
from loopcheck.lint.fixes.steps import event_inside, is_step_statement, step_statements, steps_in, with_update
from loopcheck.lint.syntax import child_nodes


def _is_reset(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "zero_grad"


def _accumulation_guard(index: SourceIndex, node: cst.If) -> bool:
    """`if (i + 1) % accum == 0:` and the like; the model's guard, when it has one, decides."""
    text = index.code(node.test)
    model = index.model
    if model is not None:
        for event in getattr(model, "events", ()):
            for guard in event.guards:
                if guard.text.strip() == text.strip():
                    return guard.accumulation
    return "%" in text


def _after_step(index: SourceIndex, stmt: cst.BaseStatement, body: list, at: int) -> Change | None:
    """Form 1: move the reset to just after the step that follows it."""
    later = [i for i in range(at + 1, len(body)) if steps_in(index, body[i])]
    if not later:
        return None
    first = later[0]
    target = body[first]
    if leaves_block(body[at + 1 : first]):
        return None
    if is_step_statement(index, target):
        end = with_update(body, first)
        if leaves_block(body[at + 1 : end + 1]):
            return None
        return Change(move_statement(index, stmt, body, body[end]), "reset the gradients right after the step")
    if isinstance(target, cst.If) and _accumulation_guard(index, target) and target.orelse is None:
        inner = target.body
        steps = [s for s in step_statements(index, inner) if index.parent(s) is inner]
        if len(steps) != 1:
            return None
        inner_body = list(inner.body)
        pos = inner_body.index(steps[0])
        if leaves_block(inner_body[:pos]):
            return None
        end = with_update(inner_body, pos)
        return Change(
            move_statement(index, stmt, body, inner_body[end]),
            "reset the gradients right after the accumulated step",
        )
    return None


def _loop_top(index: SourceIndex, stmt: cst.BaseStatement, block: cst.CSTNode) -> Change | None:
    """Form 2: move the reset to the top of the loop body it is a statement of."""
    loop = index.parent(block)
    if not isinstance(loop, (cst.For, cst.While)) or loop.body is not block:
        return None
    body = list(block.body)
    if body[0] is stmt or _skips_iterations(block):
        return None
    steps = list(step_statements(index, block))
    if not steps or any(_guarded(index, s, block) for s in steps) or _model_says_accumulation(index, loop):
        return None
    return Change(
        move_statement(index, stmt, body, body[0], first_in=block),
        "reset the gradients at the top of the iteration, before the forward pass",
    )


def _skips_iterations(block: cst.CSTNode) -> bool:
    """A `continue` of this loop: some iterations end early (accumulation written as
    `if (i + 1) % k: continue`), so a reset at the top would run more often than the step."""

    def visit(node: cst.CSTNode) -> bool:
        if isinstance(node, cst.Continue):
            return True
        if isinstance(node, (cst.For, cst.While, cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            return False
        return any(visit(child) for child in child_nodes(node))

    return any(visit(child) for child in child_nodes(block))


def _model_says_accumulation(index: SourceIndex, loop: cst.CSTNode) -> bool:
    model = index.model
    if model is None:
        return False
    for event in getattr(model, "events", ()):
        kind = getattr(event.kind, "value", event.kind)
        if kind in ("step", "scaler_step") and event.path == index.path and event_inside(index, event, loop):
            if event.accumulation_guarded:
                return True
    return False


def _guarded(index: SourceIndex, node: cst.CSTNode, block: cst.CSTNode) -> bool:
    """Whether the step runs only on some iterations for accumulation (or in a nested loop)."""
    for anc in index.ancestors(node):
        if anc is block:
            return False
        if isinstance(anc, (cst.For, cst.While)) or (isinstance(anc, cst.If) and _accumulation_guard(index, anc)):
            return True
    return False


@fixer("LC102")
def fix_reset_order(index: SourceIndex, finding: Finding) -> Change | None:
    call = index.locate(finding, cst.Call, _is_reset)
    stmt = index.statement_of(call) if call is not None else None
    found = method_call(stmt, "zero_grad") if stmt is not None else None
    if found is None or found[0] is not call:
        return None
    block = index.block_of(stmt)
    if block is None:
        return None
    body = list(block.body)
    at = body.index(stmt)
    return _after_step(index, stmt, body, at) or _loop_top(index, stmt, block)
