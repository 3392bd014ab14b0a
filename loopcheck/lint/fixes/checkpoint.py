"""Checkpoint fixes: LC508 (`torch.load` without `weights_only` -> `weights_only=True`).

Unsafe: a checkpoint holding more than tensors and plain containers (an argparse Namespace, a
NumPy array, a whole pickled model) no longer loads with `weights_only=True`.
"""

from __future__ import annotations

import libcst as cst

from loopcheck.findings import Finding
from loopcheck.lint.fixes.base import Change, SourceIndex, dotted, fixer, replace_nodes


def _is_load(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Call) and (dotted(node.func) or "").rsplit(".", 1)[-1] == "load"


def _keyword(call: cst.Call, spacing: cst.BaseParenthesizableWhitespace | None) -> cst.Call:
    args = list(call.args)
    last = args[-1]
    new = cst.Arg(
        keyword=cst.Name("weights_only"),
        value=cst.Name("True"),
        equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")),
        comma=last.comma,
    )
    if spacing is not None:  # arguments one per line, with a trailing comma: add one more line
        separator = cst.Comma(whitespace_after=spacing)
    else:
        separator = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    return call.with_changes(args=[*args[:-1], last.with_changes(comma=separator), new])


@fixer("LC508", local=True)
def fix_torch_load(index: SourceIndex, finding: Finding) -> Change | None:
    call = index.locate(finding, cst.Call, _is_load)
    if call is None or not call.args:
        return None
    # with a custom pickle_module, weights_only=True is refused by torch.load itself
    if any(a.star == "**" or (a.keyword is not None and a.keyword.value in ("weights_only", "pickle_module"))
           for a in call.args):
        return None
    last = call.args[-1]
    spacing = None
    if isinstance(last.comma, cst.Comma) and isinstance(last.comma.whitespace_after, cst.ParenthesizedWhitespace):
        before = call.whitespace_before_args
        if isinstance(before, cst.ParenthesizedWhitespace):
            spacing = before
        elif len(call.args) > 1 and isinstance(call.args[-2].comma, cst.Comma):
            spacing = call.args[-2].comma.whitespace_after
    new = _keyword(call, spacing)
    return Change(
        replace_nodes(index, {call: new}),
        "pass `weights_only=True` (a checkpoint with non-tensor objects then fails to load)",
    )
