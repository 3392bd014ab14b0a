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
from loopcheck.lint.positions import node_span
from loopcheck.lint.rules.base import FileContext, Rule

K = EventKind


# --- shared helpers (the checkpoint family uses them too) --------------------------------------


def dotted(expr: cst.CSTNode | None) -> str | None:
    """`a.b.c` for a Name / Attribute chain, else None."""
    if isinstance(expr, cst.Name):
        return expr.value
    if isinstance(expr, cst.Attribute):
        head = dotted(expr.value)
        return f"{head}.{expr.attr.value}" if head else None
    return None


def import_map(module: cst.Module) -> dict[str, str]:
    """Local name -> dotted origin for every import of the module (`th` -> `torch`,
    `autocast` -> `torch.cuda.amp.autocast`). Relative imports are left out."""
    names: dict[str, str] = {}
    for stmt in _imports(module):
        if isinstance(stmt, cst.Import):
            for alias in stmt.names:
                full = dotted(alias.name)
                if full is None:
                    continue
                if alias.asname is not None:
                    names[alias.evaluated_alias or full] = full
                else:
                    head = full.split(".")[0]
                    names.setdefault(head, head)
        elif not stmt.relative and stmt.module is not None and not isinstance(stmt.names, cst.ImportStar):
            module_name = dotted(stmt.module)
            if module_name is None:
                continue
            for alias in stmt.names:
                names[alias.evaluated_alias or alias.evaluated_name] = f"{module_name}.{alias.evaluated_name}"
    return names


def _imports(module: cst.Module) -> Iterator[cst.Import | cst.ImportFrom]:
    found: list[cst.Import | cst.ImportFrom] = []

    class _Collect(cst.CSTVisitor):
        def visit_Import(self, node: cst.Import) -> bool:
            found.append(node)
            return False

        def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
            found.append(node)
            return False

    module.visit(_Collect())
    return iter(found)


def resolve_call(names: dict[str, str], func: cst.BaseExpression) -> str | None:
    """The dotted origin of a callee through the module's imports (`th.load` -> `torch.load`)."""
    text = dotted(func)
    if text is None:
        return None
    head, _, rest = text.partition(".")
    full = names.get(head, head)
    return f"{full}.{rest}" if rest else full


def _guard_key(text: str, negated: bool) -> tuple[str, bool]:
    """A condition's text and polarity with `not x`, `x is None`, `x is not None` normalised,
    so `if not amp:` and the `else` of `if amp:` are recognised as the same branch."""
    text = " ".join(text.split())
    while text.startswith("(") and text.endswith(")"):
        text = text[1:-1].strip()
    if text.startswith("not "):
        return _guard_key(text[4:], not negated)
    if text.endswith(" is not None"):
        return text[: -len(" is not None")].strip(), negated
    if text.endswith(" is None"):
        return text[: -len(" is None")].strip(), not negated
    return text, negated


_TRACES: "WeakKeyDictionary[FileContext, Trace]" = WeakKeyDictionary()
_SCALER_KINDS = frozenset({K.SCALER_SCALE, K.SCALER_STEP, K.SCALER_UPDATE, K.UNSCALE})


class Trace:
    """The model's events in trace order, grouped into units: one top-level loop, or one entry
    function for the events outside any loop. Walking before/after an event stays in its unit
    and skips the events that cannot be on the same path (the opposite branch of a condition)."""

    def __init__(self, ctx: FileContext) -> None:
        # no reference to ctx itself: traces are cached per ctx in a weak-keyed dict
        self.path = ctx.path
        self.module = ctx.module
        self.events: list[Event] = list(ctx.model.events)
        self._scalers = set(ctx.model.names(Role.SCALER)) | {
            e.target for e in self.events if e.kind in _SCALER_KINDS and e.target
        }
        self._opaque: list[int] | None = None
        self._functions: list[tuple[int, int]] | None = None
        self.units = [self._unit(e) for e in self.events]

    @classmethod
    def of(cls, ctx: FileContext) -> "Trace":
        trace = _TRACES.get(ctx)
        if trace is None:
            trace = _TRACES[ctx] = cls(ctx)
        return trace

    def _unit(self, event: Event) -> tuple:
        if event.loop is not None:
            root = event.loop
            while root.parent is not None:
                root = root.parent
            return ("loop", id(root))
        path, line = (event.via[0].path, event.via[0].line) if event.via else (event.path, event.line)
        if path != self.path:
            return ("file", path)
        return ("function", self._function_at(line))

    def _function_at(self, line: int) -> int:
        """Start line of the outermost function around `line` (0: module level)."""
        if self._functions is None:
            spans: list[tuple[int, int]] = []

            class _Defs(cst.CSTVisitor):
                def visit_FunctionDef(inner, node: cst.FunctionDef) -> bool:
                    line, _, end_line, _ = node_span(module, node)
                    spans.append((line, end_line))
                    return False

            module = self.module
            module.visit(_Defs())
            self._functions = spans
        for start, end in self._functions:
            if start <= line <= end:
                return start
        return 0

    @staticmethod
    def exclusive(a: Event, b: Event) -> bool:
        """True when a and b sit on opposite branches of one condition (never on one path)."""
        keys = {_guard_key(g.text, g.negated) for g in a.guards}
        for g in b.guards:
            text, negated = _guard_key(g.text, g.negated)
            if (text, not negated) in keys:
                return True
        return False

    def unit_events(self, i: int) -> list[Event]:
        unit = self.units[i]
        return [e for e, u in zip(self.events, self.units) if u == unit]

    def before(self, i: int) -> Iterator[Event]:
        """Events of i's unit that may precede it on one path, nearest first."""
        here, unit = self.events[i], self.units[i]
        for j in range(i - 1, -1, -1):
            if self.units[j] != unit:
                break
            if not self.exclusive(self.events[j], here):
                yield self.events[j]

    def after(self, i: int) -> Iterator[Event]:
        """Events of i's unit that may follow it on one path, nearest first."""
        here, unit = self.events[i], self.units[i]
        for j in range(i + 1, len(self.events)):
            if self.units[j] != unit:
                break
            if not self.exclusive(self.events[j], here):
                yield self.events[j]

    def next_scaler_optimizer(self, i: int, scaler: str) -> str | None:
        for e in self.after(i):
            if e.kind in (K.SCALER_STEP, K.UNSCALE) and e.target in (None, scaler):
                opt = e.detail.get("optimizer")
                if isinstance(opt, str):
                    return opt
        return None

    def opaque_scaler_calls(self) -> list[int]:
        """Lines of this file's calls that hand a scaler to a function the model did not follow:
        a library helper may unscale or update inside, so nothing is said around them."""
        if self._opaque is None:
            followed = {(site.path, site.line) for e in self.events for site in e.via}
            scalers = self._scalers
            lines: list[int] = []

            class _Calls(cst.CSTVisitor):
                def visit_Call(inner, node: cst.Call) -> None:
                    func = dotted(node.func) or ""
                    if func in scalers or func.rsplit(".", 1)[0] in scalers:
                        return
                    if any(dotted(a.value) in scalers for a in node.args):
                        line = node_span(self.module, node)[0]
                        if (self.path, line) not in followed:
                            lines.append(line)

            self.module.visit(_Calls())
            self._opaque = lines
        return self._opaque

    def opaque_between(self, first: Event, last: Event) -> bool:
        """An opaque scaler call between two events written in this file."""
        if first.path != self.path or last.path != self.path:
            return False
        return any(first.line <= line <= last.line for line in self.opaque_scaler_calls())

    @staticmethod
    def remember(seen: set[tuple], event: Event) -> bool:
        """False when a finding was already made at this event's position (an inlined helper
        reached from two call sites)."""
        key = (event.path, event.line, event.column)
        if key in seen:
            return False
        seen.add(key)
        return True


def _scaled(event: Event) -> bool | None:
    """True / False when the model knows whether a backward pass was scaled, else None."""
    value = event.detail.get("scaled")
    return value if isinstance(value, bool) else None


def _scaler_step_nodes(trace: Trace) -> set[int]:
    return {id(e.node) for e in trace.events if e.kind is K.SCALER_STEP}


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
            if scaled is None or trace.opaque_between(scaled, clip) or not trace.remember(seen, clip):
                continue
            scaler = scaled.detail.get("scaler") or "scaler"
            opt = trace.next_scaler_optimizer(i, scaler) or "optimizer"
            fn = clip.detail.get("fn") or "clip_grad_norm_"
            yield self.finding(
                ctx,
                clip,
                f"`{fn}` clips gradients that `{scaler}.scale(loss).backward()` multiplied by the loss "
                f"scale, so the threshold is off by that factor and the step is shrunk; call "
                f"`{scaler}.unscale_({opt})` before clipping",
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
            loop = _iteration_loop(step.loop)
            scaler = step.target
            inside = {id(l) for l in loop.walk()}
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


def _iteration_loop(loop: Loop) -> Loop:
    """The loop whose iteration is one training step: the batch loop around `loop` (a small
    `for opt in optimizers:` loop inside it does not count), else `loop` itself."""
    here: Loop | None = loop
    while here is not None:
        if here.kind is LoopKind.BATCH:
            return here
        here = here.parent
    return loop


def _opaque_in(trace: Trace, loop: Loop) -> bool:
    """Whether the loop hands its scaler to a function the model did not follow."""
    if loop.path != trace.path:
        return False
    line, _, end_line, _ = node_span(trace.module, loop.node)
    return any(line <= at <= end_line for at in trace.opaque_scaler_calls())


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

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        names = import_map(ctx.module)
        finder = _DeprecatedUses(names)
        ctx.module.visit(finder)
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


class _DeprecatedUses(cst.CSTVisitor):
    """Deprecated AMP imports and uses. A use is the call when the name is called (that is what a
    fix rewrites), otherwise the reference itself."""

    def __init__(self, names: dict[str, str]) -> None:
        self.names = names
        self.imports: list[tuple[cst.CSTNode, str]] = []
        self.uses: list[tuple[cst.CSTNode, str]] = []
        self._done: set[int] = set()
        self._module_aliases = {local for local, full in names.items() if full in _AMP_MODULES}
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
        text = dotted(expr)
        if text is None:
            return None
        head, _, rest = text.partition(".")
        full = self.names.get(head)
        if full is None:
            if head != "torch" or "torch" in self.names and self.names["torch"] != "torch":
                return None
            full = head
        resolved = f"{full}.{rest}" if rest else full
        if resolved in _DEPRECATED:
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
