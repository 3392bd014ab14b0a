"""Scheduler fixes: LC201 (move `scheduler.step()` to just after the optimizer step).

The statement moves within its own block, to just after the later statement of that block
that steps the optimizer (the step itself, with a following `scaler.update()`, or the batch
loop / helper call that contains it). Staying in its block, it runs exactly as often as
before; only the order changes. No fix when the block has no such statement, when something
in between could leave the block (return / break / continue), steps the same scheduler, or
rebinds a name the call's arguments read.
"""

from __future__ import annotations

import libcst as cst

from loopcheck.findings import Finding
from loopcheck.lint.fixes.base import (
    Change,
    SourceIndex,
    assigned_names,
    calls_in,
    dotted,
    fixer,
    leaves_block,
    method_call,
    move_statement,
    used_names,
)
from loopcheck.lint.fixes.steps import steps_in, with_update


def _is_step_call(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "step"


@fixer("LC201")
def fix_scheduler_order(index: SourceIndex, finding: Finding) -> Change | None:
    call = index.locate(finding, cst.Call, _is_step_call)
    stmt = index.statement_of(call) if call is not None else None
    found = method_call(stmt, "step") if stmt is not None else None
    if found is None or found[0] is not call:
        return None
    scheduler = dotted(found[1])
    block = index.block_of(stmt)
    if scheduler is None or block is None:
        return None
    body = list(block.body)
    at = body.index(stmt)
    later = [i for i in range(at + 1, len(body)) if steps_in(index, body[i])]
    if not later:
        return None
    end = with_update(body, later[-1])
    between = body[at + 1 : end + 1]
    if leaves_block(between):
        return None
    args = set().union(*(used_names(a.value) for a in call.args)) if call.args else set()
    if args & assigned_names(between) or scheduler in assigned_names(between):
        return None
    if any(
        isinstance(c, cst.Call)
        and isinstance(c.func, cst.Attribute)
        and c.func.attr.value == "step"
        and dotted(c.func.value) == scheduler
        for other in between
        for c in calls_in(other)
    ):
        return None
    target = body[end]
    new = move_statement(index, stmt, body, target)
    return Change(new, f"move `{scheduler}.step()` after the optimizer step")
