"""Evaluation fixes: LC302 (wrap the evaluation loop in `with torch.no_grad():`).

Unsafe: code inside the loop that needs gradients on purpose (saliency maps, adversarial
examples, test-time adaptation) stops working under no_grad.
"""

from __future__ import annotations

import libcst as cst

from loopcheck.findings import Finding
from loopcheck.lint.fixes.base import Change, SourceIndex, calls_in, fixer, replace_nodes, walk

_TRAINING_CALLS = {"backward", "step", "zero_grad", "grad"}


def _no_grad(index: SourceIndex) -> str | None:
    """How this module spells torch.no_grad (`torch.no_grad`, `th.no_grad`, `no_grad`)."""
    # when several imports could serve, the last one in the file is used
    for node in reversed(index.ctx.nodes(cst.Import, cst.ImportFrom)):
        if isinstance(node, cst.Import):
            for alias in node.names:
                if alias.evaluated_name == "torch":
                    return f"{alias.evaluated_alias or 'torch'}.no_grad"
        elif isinstance(node, cst.ImportFrom) and not node.relative and node.module is not None:
            if index.code(node.module) == "torch" and not isinstance(node.names, cst.ImportStar):
                for alias in node.names:
                    if alias.evaluated_name == "no_grad":
                        return alias.evaluated_alias or "no_grad"
    return None


def _loops_around(index: SourceIndex, finding: Finding) -> list[cst.CSTNode]:
    """The loops around the finding's position, outermost first. The finding is made at the
    model's forward event: the loops around its node are those above it in the tree."""
    line, column = finding.line, finding.column or 1
    model = index.model
    for event in getattr(model, "events", ()) if model is not None else ():
        if (
            getattr(event.kind, "value", event.kind) == "forward"
            and event.path == index.path
            and isinstance(event.node, cst.BaseExpression)
            and index.within(event.node, index.module)
            and (event.line, event.column) == (line, column)
        ):
            return [n for n in reversed(list(index.ancestors(event.node))) if isinstance(n, (cst.For, cst.While))]
    loops = [n for n in index.ctx.nodes(cst.For, cst.While) if index.contains(n, line, column)]
    return sorted(loops, key=index.depth)


def _model_eval_loop(index: SourceIndex, around: list[cst.CSTNode]) -> cst.CSTNode | None:
    """The outermost evaluation loop of the loop model among the loops around the finding."""
    model = index.model
    if model is None:
        return None
    evals = {
        id(loop.node)
        for loop in model.walk_loops()
        if getattr(loop.kind, "value", loop.kind) == "eval" and loop.path == index.path
    }
    for node in around:
        if id(node) in evals:
            return node
    return None


def _trains(node: cst.CSTNode) -> bool:
    return any(isinstance(c.func, cst.Attribute) and c.func.attr.value in _TRAINING_CALLS for c in calls_in(node))


def _yields(node: cst.CSTNode) -> bool:
    """A generator loop: under `with no_grad()` the caller would run without grad between yields."""
    return any(isinstance(n, cst.Yield) for n in walk(node))


@fixer("LC302")
def fix_eval_no_grad(index: SourceIndex, finding: Finding) -> Change | None:
    if finding.path not in (None, index.path) or not finding.line:
        return None
    around = _loops_around(index, finding)
    if not around:
        return None
    loop = _model_eval_loop(index, around) or around[-1]
    if _trains(loop) or _yields(loop) or not isinstance(index.parent(loop), (cst.IndentedBlock, cst.Module)):
        return None
    spelled = _no_grad(index)
    if spelled is None:
        return None
    header = cst.parse_statement(f"with {spelled}():\n    pass\n", config=index.module.config_for_parsing)
    assert isinstance(header, cst.With)
    wrapped = header.with_changes(
        leading_lines=loop.leading_lines,
        body=cst.IndentedBlock(body=[loop.with_changes(leading_lines=())]),
    )
    return Change(
        replace_nodes(index, {loop: wrapped}),
        f"run the evaluation loop under `{spelled}()`",
    )
