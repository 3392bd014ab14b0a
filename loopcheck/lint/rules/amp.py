"""Mixed-precision rules (LC401-LC405): the order of a GradScaler's scale, unscale_, step and
update in a training step, and the deprecated `torch.cuda.amp` / `torch.cpu.amp` spellings.

LC401-LC404 read the model's flat event trace: a clip, a step or a backward pass is compared with
the events before or after it in the same unit (the same top-level loop, or the same entry
function when no loop is around), skipping events that sit on the opposite branch of the same
condition. A loop with an AMP branch and a plain branch is therefore judged branch by branch.
"""

from __future__ import annotations

from typing import Iterator
from weakref import WeakKeyDictionary

import libcst as cst

from loopcheck.findings import Finding
from loopcheck.lint.loopmodel import Event, EventKind, Loop, LoopKind, Role
from loopcheck.lint.positions import node_code, node_span
from loopcheck.lint.rules._display import at, shown
from loopcheck.lint.rules._shared import Trace, item_names, iteration_loop, nodes_of, whole_word
from loopcheck.lint.rules.base import FileContext, Rule
from loopcheck.lint.values import ModuleIndex, dotted, index_for

K = EventKind

_SCALER_KINDS = frozenset({K.SCALER_SCALE, K.SCALER_STEP, K.SCALER_UPDATE, K.UNSCALE})
_OPAQUE: "WeakKeyDictionary[Trace, list[int]]" = WeakKeyDictionary()


def _next_scaler_optimizer(trace: Trace, i: int, scaler: str) -> str | None:
    for e in trace.after(i):
        if e.kind in (K.SCALER_STEP, K.UNSCALE) and e.target in (None, scaler):
            opt = e.detail.get("optimizer")
            if isinstance(opt, str):
                return opt
    return None


def _opaque_scaler_calls(trace: Trace) -> list[int]:
    """Lines of this file's calls that hand a scaler to a function the model did not follow:
    a library helper may unscale or update inside, so nothing is said around them."""
    lines = _OPAQUE.get(trace)
    if lines is not None:
        return lines
    followed = {(site.path, site.line) for e in trace.events for site in e.via}
    scalers = set(trace.model.names(Role.SCALER)) | {
        e.target for e in trace.events if e.kind in _SCALER_KINDS and e.target
    }
    found: list[int] = []

    for node in nodes_of(trace.module, cst.Call):
        func = dotted(node.func) or ""
        if func in scalers or func.rsplit(".", 1)[0] in scalers:
            continue
        if any(dotted(a.value) in scalers for a in node.args):
            line = node_span(trace.module, node)[0]
            if (trace.path, line) not in followed:
                found.append(line)
    _OPAQUE[trace] = found
    return found


def _opaque_between(trace: Trace, first: Event, last: Event) -> bool:
    """An opaque scaler call between two events written in this file."""
    if first.path != trace.path or last.path != trace.path:
        return False
    return any(first.line <= line <= last.line for line in _opaque_scaler_calls(trace))


def _scaled(event: Event) -> bool | None:
    """True / False when the model knows whether a backward pass was scaled, else None."""
    value = event.detail.get("scaled")
    return value if isinstance(value, bool) else None


def _scaler_step_nodes(trace: Trace) -> set[int]:
    return {id(e.node) for e in trace.events if e.kind is K.SCALER_STEP}


def _text(event: Event) -> str:
    module = event.module
    return node_code(event.node, module).strip() if module is not None else "p.grad.mul_(...)"


def _optimizer_of(event: Event) -> str | None:
    opt = event.detail.get("optimizer")
    return opt if isinstance(opt, str) else None


class ClipBeforeUnscale(Rule):
    code = "LC401"

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        trace = Trace.of(ctx)
        seen: set[tuple] = set()
        for i, clip in enumerate(trace.events):
            if clip.kind is not K.CLIP:
                continue
            scaled = None
            for prev in trace.before(i):
                if prev.kind in (K.STEP, K.SCALER_STEP, K.SCALER_UPDATE, K.ZERO_GRAD, K.UNSCALE):
                    break
                if prev.kind is K.BACKWARD and _scaled(prev):
                    scaled = prev
                    break
            if scaled is None or _opaque_between(trace, scaled, clip) or not trace.remember(seen, clip):
                continue
            scaler = scaled.detail.get("scaler") or "scaler"
            opt = shown(_next_scaler_optimizer(trace, i, scaler), "optimizer")
            scaler = shown(scaler)
            fn = clip.detail.get("fn") or "clip_grad_norm_"
            what = f"`{fn}` ({at(clip)})"
            if fn == "hand-written clipping":
                what = f"the hand-written clipping `{_text(clip)}` ({at(clip)})"
            yield self.finding(
                ctx,
                clip,
                f"{what} clips gradients that `{scaler}.scale(loss).backward()` ({at(scaled)}) "
                f"multiplied by the loss scale, so the threshold is off by that factor and the step is "
                f"shrunk; call `{scaler}.unscale_({opt})` before clipping",
            )


class OptimizerStepBypassesScaler(Rule):
    code = "LC402"

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        trace = Trace.of(ctx)
        scaler_steps = _scaler_step_nodes(trace)
        seen: set[tuple] = set()
        for i, step in enumerate(trace.events):
            if step.kind is not K.STEP or id(step.node) in scaler_steps or step.detail.get("closure"):
                continue
            opt = step.target
            if ctx.model.role(opt) not in (Role.OPTIMIZER, None):
                continue
            # a scaler.step() of this optimizer anywhere in the unit: the direct step belongs to a
            # plain (non-AMP) branch of the same loop
            if any(
                e.kind is K.SCALER_STEP and (_optimizer_of(e) in (None, opt) or opt is None)
                for e in trace.unit_events(i)
            ):
                continue
            scaled = None
            for prev in trace.before(i):
                if prev.kind in (K.SCALER_STEP, K.SCALER_UPDATE, K.ZERO_GRAD):
                    break
                if prev.kind is K.BACKWARD and _scaled(prev):
                    scaled = prev
                    break
            if scaled is None or not trace.remember(seen, step):
                continue
            scaler = scaled.detail.get("scaler") or "scaler"
            name = opt or "optimizer"
            yield self.finding(
                ctx,
                step,
                f"`{name}.step()` applies the gradients of `{scaler}.scale(loss).backward()` still "
                f"multiplied by the loss scale and without the inf/NaN check; call "
                f"`{scaler}.step({name})` and then `{scaler}.update()` instead",
            )


class ScalerUpdateMissing(Rule):
    code = "LC403"

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        trace = Trace.of(ctx)
        seen: set[tuple] = set()
        for step in trace.events:
            if step.kind is not K.SCALER_STEP or step.loop is None:
                continue
            loop = iteration_loop(step.loop)
            if _steps_each_item(step, loop):
                continue  # `for optimizer in self.optimizers: scaler.step(optimizer)`: the iteration is the caller's
            scaler = step.target
            inside = {id(inner) for inner in loop.walk()}
            if any(
                e.kind is K.SCALER_UPDATE and id(e.loop) in inside and (scaler is None or e.target in (None, scaler))
                for e in trace.events
            ):
                continue
            if _opaque_in(trace, loop) or not trace.remember(seen, step):
                continue
            name = scaler or "scaler"
            where = "in the loop" if not _has_update(trace, scaler) else "once per iteration of this loop"
            yield self.finding(
                ctx,
                step,
                f"`{name}.step(...)` runs every iteration but `{name}.update()` is not called {where}: "
                f"the next `{name}.step` raises 'step() has already been called since the last "
                f"update()'; call `{name}.update()` after the last `{name}.step` of the iteration",
            )


def _steps_each_item(step: Event, loop: Loop) -> bool:
    """The loop, no batch loop, walks a collection and steps each item once (`for optimizer in
    self.optimizers: self.scaler.step(optimizer)`, then one `update()` after it): each iteration
    steps another optimizer, so no step follows another without an update."""
    if loop.kind is LoopKind.BATCH:
        return False
    return step.detail.get("optimizer") in item_names(loop)


def _opaque_in(trace: Trace, loop: Loop) -> bool:
    """Whether the loop hands its scaler to a function the model did not follow."""
    if loop.path != trace.path:
        return False
    line, _, end_line, _ = node_span(trace.module, loop.node)
    return any(line <= at <= end_line for at in _opaque_scaler_calls(trace))


def _has_update(trace: Trace, scaler: str | None) -> bool:
    return any(e.kind is K.SCALER_UPDATE and e.target in (None, scaler) for e in trace.events)


class BackwardNotScaled(Rule):
    code = "LC404"

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        trace = Trace.of(ctx)
        seen: set[tuple] = set()
        for i, back in enumerate(trace.events):
            if back.kind is not K.BACKWARD or _scaled(back) is not False:
                continue
            # an AMP alternative on the other branch of the same condition: this is the plain path,
            # and a scaler.step() after both branches is right when the scaler is built disabled
            if any(e.kind is K.BACKWARD and _scaled(e) and trace.exclusive(e, back) for e in trace.unit_events(i)):
                continue
            target = None
            for nxt in trace.after(i):
                if nxt.kind in (K.STEP, K.ZERO_GRAD) or (nxt.kind is K.BACKWARD and _scaled(nxt)):
                    break
                if nxt.kind is K.SCALER_STEP:
                    target = nxt
                    break
            if target is None or not trace.remember(seen, back):
                continue
            scaler = target.target or "scaler"
            loss = back.target or "loss"
            yield self.finding(
                ctx,
                back,
                f"`{loss}.backward()` is not scaled but `{scaler}.step(...)` divides the gradients by "
                f"the loss scale (65536 at the start); write `{scaler}.scale({loss}).backward()`",
            )


# --- LC405 -------------------------------------------------------------------------------------

_DEPRECATED = {
    "torch.cuda.amp.autocast": 'torch.amp.autocast("cuda", ...)',
    "torch.cuda.amp.GradScaler": 'torch.amp.GradScaler("cuda", ...)',
    "torch.cpu.amp.autocast": 'torch.amp.autocast("cpu", ...)',
    "torch.cpu.amp.GradScaler": 'torch.amp.GradScaler("cpu", ...)',
}
_AMP_MODULES = {"torch.cuda.amp": "cuda", "torch.cpu.amp": "cpu"}


class DeprecatedAmpApi(Rule):
    code = "LC405"
    requires = (whole_word("amp"),)  # torch.cuda.amp / torch.cpu.amp, however imported, names `amp`

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        finder = _DeprecatedUses(index_for(ctx.path, ctx.module))
        finder.run(ctx.module)
        for node, old in finder.imports:
            new = _import_advice(old)
            yield self.finding(ctx, node, f"`{old}` is deprecated; {new}")
        for node, old in finder.uses:
            yield self.finding(ctx, node, f"`{old}` is deprecated; write `{_DEPRECATED[old]}`")


def _import_advice(old: str) -> str:
    """What to write instead of a deprecated import (`old` is the imported dotted name)."""
    if old in _DEPRECATED:
        return f"import from `torch.amp` and call `{_DEPRECATED[old]}`"
    device = _AMP_MODULES.get(old, "cuda")
    return (
        f'import `torch.amp` instead and pass the device: `amp.autocast("{device}", ...)`, '
        f'`amp.GradScaler("{device}", ...)`'
    )


class _DeprecatedUses:
    """Deprecated AMP imports and uses. A use is the call when the name is called (that is what a
    fix rewrites), otherwise the reference itself."""

    def run(self, module: cst.Module) -> None:
        """Look at the imports, calls and attributes of the module in source order. The names
        inside an import statement are not uses; the attributes inside a reported attribute or
        call are prefixes of a deprecated name, which none is."""
        parent = self.index.parent
        for node in nodes_of(module, (cst.Import, cst.ImportFrom, cst.Call, cst.Attribute)):
            kind = type(node)
            if kind is cst.ImportFrom:
                self.visit_ImportFrom(node)
            elif kind is cst.Import:
                self.visit_Import(node)
            elif kind is cst.Call:
                self.visit_Call(node)
            else:
                top = parent.get(id(node))
                while type(top) is cst.Attribute:
                    top = parent.get(id(top))
                if type(top) not in (cst.ImportAlias, cst.ImportFrom):
                    self.visit_Attribute(node)
        self.leave_Module(module)

    def __init__(self, index: ModuleIndex) -> None:
        self.index = index
        self.imports: list[tuple[cst.CSTNode, str]] = []
        self.uses: list[tuple[cst.CSTNode, str]] = []
        self._done: set[int] = set()
        self._module_aliases = {local for local, full in index.imported_names().items() if full in _AMP_MODULES}
        self._used_modules: set[str] = set()
        self._module_imports: list[tuple[cst.ImportFrom | cst.Import, str, str]] = []

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        if node.relative or node.module is None or isinstance(node.names, cst.ImportStar):
            return False
        module = dotted(node.module)
        if module in _AMP_MODULES:
            for alias in node.names:
                full = f"{module}.{alias.evaluated_name}"
                if full in _DEPRECATED:
                    self.imports.append((node, full))
                    break
        elif module in ("torch.cuda", "torch.cpu"):
            for alias in node.names:
                if alias.evaluated_name == "amp":
                    local = alias.evaluated_alias or "amp"
                    self._module_imports.append((node, local, f"{module}.amp"))
        return False

    def visit_Import(self, node: cst.Import) -> bool:
        for alias in node.names:
            full = dotted(alias.name)
            if full in _AMP_MODULES and alias.asname is not None:
                local = alias.evaluated_alias or full
                self._module_imports.append((node, local, full))
        return False

    def visit_Call(self, node: cst.Call) -> None:
        old = self._resolve(node.func)
        if old is not None:
            self.uses.append((node, old))
            self._done.add(id(node.func))

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        if id(node) in self._done:
            return False
        old = self._resolve(node)
        if old is not None:
            self.uses.append((node, old))
            return False
        return True

    def _resolve(self, expr: cst.BaseExpression) -> str | None:
        resolved = self.index.qualify(expr)
        if resolved in _DEPRECATED:
            head = (dotted(expr) or "").partition(".")[0]
            if head in self._module_aliases:
                self._used_modules.add(head)
            # a bare imported name (`autocast(...)`) is reported at its call only, the import
            # itself is reported once
            return resolved
        return None

    def leave_Module(self, original_node: cst.Module) -> None:
        # `from torch.cuda import amp` is only reported when `amp.autocast` / `amp.GradScaler`
        # is used through it (the module also holds custom_fwd and friends)
        for node, local, full in self._module_imports:
            if local in self._used_modules:
                self.imports.append((node, full))
