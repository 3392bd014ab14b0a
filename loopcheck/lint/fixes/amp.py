"""Mixed-precision fixes: LC405 (deprecated `torch.cuda.amp` / `torch.cpu.amp` API -> `torch.amp`
with an explicit device) and LC401 (unscale the gradients before clipping them)."""

from __future__ import annotations

from typing import Callable

import libcst as cst
from libcst.metadata import ImportAssignment

from loopcheck.findings import Finding
from loopcheck.lint.fixes.base import (
    Change,
    SourceIndex,
    calls_in,
    dotted,
    fixer,
    replace_nodes,
    split_leading,
)

# old module -> device string of torch.amp
_DEVICES = {"cuda": "cuda", "cpu": "cpu"}
_NAMES = ("autocast", "GradScaler")
# positional parameters of the old autocast classes; torch.amp.autocast takes the device first
# and then dtype, so positional arguments must become keywords
_AUTOCAST_POSITIONAL = ("enabled", "dtype", "cache_enabled")


def _old_api(func: cst.BaseExpression) -> tuple[str, str] | None:
    """(device, name) for `<torch>.cuda.amp.autocast` and friends (any alias of torch)."""
    if not isinstance(func, cst.Attribute) or func.attr.value not in _NAMES:
        return None
    amp = func.value
    if not (isinstance(amp, cst.Attribute) and amp.attr.value == "amp"):
        return None
    dev = amp.value
    if isinstance(dev, cst.Attribute) and dev.attr.value in _DEVICES and dotted(dev.value):
        return _DEVICES[dev.attr.value], func.attr.value
    return None


def _device_arg(call: cst.Call, device: str) -> cst.Arg:
    spacing = call.whitespace_before_args
    if isinstance(spacing, cst.ParenthesizedWhitespace) and call.args:
        comma = cst.Comma(whitespace_after=spacing)  # one argument per line: keep it that way
    elif call.args:
        comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    else:
        comma = cst.MaybeSentinel.DEFAULT
    return cst.Arg(value=cst.SimpleString(f'"{device}"'), comma=comma)


def _with_device(call: cst.Call, func: cst.BaseExpression, device: str, name: str) -> cst.Call | None:
    """The call with the new callee and the device as first argument, or None when the old
    arguments cannot be carried over with certainty."""
    args = list(call.args)
    if any(a.star == "*" for a in args):
        return None
    if any(a.keyword is not None and a.keyword.value in ("device", "device_type") for a in args):
        return None
    if name == "autocast":
        positional = [a for a in args if a.keyword is None and not a.star]
        if len(positional) > len(_AUTOCAST_POSITIONAL) or any(
            a.keyword is None and not a.star for a in args[len(positional):]
        ):
            return None
        args = [
            a.with_changes(
                keyword=cst.Name(_AUTOCAST_POSITIONAL[i]),
                equal=cst.AssignEqual(
                    whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")
                ),
            )
            if i < len(positional)
            else a
            for i, a in enumerate(args)
        ]
    return call.with_changes(func=func, args=[_device_arg(call, device), *args])


def _torch_amp(torch_expr: cst.BaseExpression, name: str) -> cst.Attribute:
    return cst.Attribute(value=cst.Attribute(value=torch_expr, attr=cst.Name("amp")), attr=cst.Name(name))


def _import_source(node: cst.Import | cst.ImportFrom) -> tuple[str, str] | None:
    """('cuda', 'names') for `from torch.cuda.amp import ...`, ('cuda', 'module') for
    `from torch.cuda import amp` and `import torch.cuda.amp as amp`."""
    if isinstance(node, cst.Import):
        if len(node.names) == 1 and node.names[0].asname is not None:
            for dev in _DEVICES:
                if node.names[0].evaluated_name == f"torch.{dev}.amp":
                    return _DEVICES[dev], "module"
        return None
    module = dotted(node.module) if node.module is not None and not node.relative else None
    for dev in _DEVICES:
        if module == f"torch.{dev}.amp":
            return _DEVICES[dev], "names"
        if module == f"torch.{dev}":
            return _DEVICES[dev], "module"
    return None


def _import_fix(index: SourceIndex, node: cst.Import | cst.ImportFrom) -> Change | None:
    """Rewrite the import to `torch.amp` and give every use the device argument. All or
    nothing: a use that is not a plain call (passed around, subclassed) means no fix."""
    found = _import_source(node)
    if found is None or isinstance(node.names, cst.ImportStar):
        return None
    device, form = found
    wanted = _NAMES if form == "names" else ("amp", f"torch.{device}.amp")
    mapping: dict[cst.CSTNode, object] = {}
    scope = index.scopes.get(node)
    if scope is None:
        return None
    for alias in node.names:
        if alias.evaluated_name not in wanted:
            return None
        local = alias.evaluated_alias or alias.evaluated_name
        if "." in local:
            return None
        assignments = [
            a for a in scope.assignments[local] if isinstance(a, ImportAssignment) and a.node is node
        ]
        if len(assignments) != 1:
            return None
        for access in assignments[0].references:
            use = access.node
            parent = index.parent(use)
            if form == "names":
                call, name = parent, alias.evaluated_name
                if not (isinstance(call, cst.Call) and call.func is use):
                    return None
            else:
                if not (isinstance(parent, cst.Attribute) and parent.value is use and parent.attr.value in _NAMES):
                    return None
                call, name = index.parent(parent), parent.attr.value
                if not (isinstance(call, cst.Call) and call.func is parent):
                    return None
            new_call = _with_device(call, call.func, device, name)
            if new_call is None:
                return None
            mapping[call] = new_call
    torch_amp = cst.Attribute(value=cst.Name("torch"), attr=cst.Name("amp"))
    if isinstance(node, cst.Import):
        mapping[node] = node.with_changes(names=[node.names[0].with_changes(name=torch_amp)])
        where = "torch.amp"
    else:
        mapping[node] = node.with_changes(module=torch_amp if form == "names" else cst.Name("torch"))
        where = "torch.amp" if form == "names" else "torch"
    return Change(
        replace_nodes(index, mapping),
        f'import from `{where}` and pass the device ("{device}") to each call',
    )


def _imported_from(index: SourceIndex, call: cst.Call) -> cst.Import | cst.ImportFrom | None:
    """The deprecated import a call's callee comes from (`autocast(...)`, `amp.GradScaler(...)`)."""
    head = call.func.value if isinstance(call.func, cst.Attribute) else call.func
    if not isinstance(head, cst.Name):
        return None
    scope = index.scopes.get(head)
    if scope is None:
        return None
    sources = {
        a.node
        for a in scope[head.value]
        if isinstance(a, ImportAssignment) and isinstance(a.node, (cst.Import, cst.ImportFrom))
    }
    if len(sources) != 1:
        return None
    node = sources.pop()
    return node if _import_source(node) else None


def _deprecated_names(index: SourceIndex) -> set[str]:
    """The local names the deprecated imports of the module bind."""
    names: set[str] = set()
    for node in index.ctx.nodes(cst.Import, cst.ImportFrom):
        if _import_source(node) is not None and not isinstance(node.names, cst.ImportStar):
            names.update(alias.evaluated_alias or alias.evaluated_name for alias in node.names)
    return names


def _may_be_fixed(index: SourceIndex) -> Callable[[cst.CSTNode], bool]:
    """The imports, and the calls this fixer can rewrite: of the old API written out, or whose
    callee starts with a name a deprecated import binds (other calls give no fix)."""
    names = _deprecated_names(index)

    def accept(node: cst.CSTNode) -> bool:
        if not isinstance(node, cst.Call):
            return True
        if _old_api(node.func) is not None:
            return True
        head = node.func.value if isinstance(node.func, cst.Attribute) else node.func
        return isinstance(head, cst.Name) and head.value in names

    return accept


@fixer("LC405")
def fix_deprecated_amp(index: SourceIndex, finding: Finding) -> Change | None:
    node = index.locate(finding, (cst.Call, cst.Import, cst.ImportFrom), _may_be_fixed(index))
    if isinstance(node, (cst.Import, cst.ImportFrom)):
        return _import_fix(index, node)
    if not isinstance(node, cst.Call):
        return None
    old = _old_api(node.func)
    if old is not None:
        device, name = old
        torch_expr = node.func.value.value.value  # type: ignore[attr-defined]
        new_call = _with_device(node, _torch_amp(torch_expr, name), device, name)
        if new_call is None:
            return None
        return Change(
            replace_nodes(index, {node: new_call}),
            f'use `{dotted(torch_expr)}.amp.{name}("{device}", ...)`',
        )
    source = _imported_from(index, node)
    return _import_fix(index, source) if source is not None else None


# --- LC401 -----------------------------------------------------------------------------------


def _is_clip(call: cst.CSTNode) -> bool:
    return isinstance(call, cst.Call) and (dotted(call.func) or "").rsplit(".", 1)[-1].startswith("clip_grad")


def _scaler_steps(index: SourceIndex, scope: cst.CSTNode) -> list[tuple[cst.Call, str, str]]:
    """`S.step(O)` calls in scope where S is also used as a scaler (S.scale / S.update / S.unscale_),
    as (call, scaler source, optimizer source)."""
    receivers: set[str] = set()
    steps = []
    for call in calls_in(scope):
        if not isinstance(call.func, cst.Attribute):
            continue
        receiver = dotted(call.func.value)
        if receiver is None:
            continue
        method = call.func.attr.value
        if method in ("scale", "update", "unscale_"):
            receivers.add(receiver)
        elif method == "step" and len(call.args) == 1 and call.args[0].keyword is None and not call.args[0].star:
            steps.append((call, receiver, index.code(call.args[0].value)))
    return [s for s in steps if s[1] in receivers]


@fixer("LC401")
def fix_clip_before_unscale(index: SourceIndex, finding: Finding) -> Change | None:
    clip = index.locate(finding, cst.Call, _is_clip)
    if clip is None or index.statement_of(clip) is None:
        return None
    function = index.enclosing_function(clip)
    steps = _scaler_steps(index, function)
    later = [s for s in steps if index.start(s[0]) > index.start(clip)]
    if not later:
        return None
    step, scaler, optimizer = min(later, key=lambda s: index.start(s[0]))
    # every clip of this step gets one unscale_, before the first of them: unscale_ twice
    # between two updates raises
    previous = [index.start(s[0]) for s in steps if index.start(s[0]) < index.start(clip) and s[1] == scaler]
    since = max(previous, default=(0, 0))
    clips = [c for c in calls_in(function) if _is_clip(c) and since < index.start(c) < index.start(step)]
    statements = [index.statement_of(c) for c in clips]
    if any(s is None for s in statements) or len({id(index.block_of(s)) for s in statements}) != 1:
        return None
    stmt = min(statements, key=index.start)
    if any(
        isinstance(c.func, cst.Attribute) and c.func.attr.value == "unscale_" and dotted(c.func.value) == scaler
        and since < index.start(c) < index.start(step)
        for c in calls_in(function)
    ):
        return None
    stay, travel = split_leading(stmt)
    unscale = cst.parse_statement(f"{scaler}.unscale_({optimizer})\n", config=index.module.config_for_parsing)
    unscale = unscale.with_changes(leading_lines=(*stay, *travel))
    clipped = stmt.with_changes(leading_lines=())
    new = replace_nodes(index, {stmt: cst.FlattenSentinel([unscale, clipped])})
    return Change(new, f"call `{scaler}.unscale_({optimizer})` before clipping, so the clip sees true gradients")
