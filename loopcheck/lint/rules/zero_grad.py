"""LC1: gradients and zero_grad.

PyTorch adds every backward() into `.grad`; the loop must reset gradients once per optimizer
step, after the step and before the next backward. These rules read the batch loop's traces
(iteration i followed by iteration i + 1) and ask, for each optimizer stepped in the loop, where
its gradients are reset relative to backward() and step().

A reset "covers" an optimizer when it is that optimizer's `zero_grad()`, or a model's
`zero_grad()` / `p.grad = None` loop over a model whose parameters the optimizer updates. When
the optimizer's parameters are not known, a model-level reset covers it only if the loop steps
a single optimizer. Steps with a closure (LBFGS) are left alone: the closure owns the order.
"""

from __future__ import annotations

from typing import Iterator

from loopcheck.findings import Finding
from loopcheck.lint.loopmodel import Event, EventKind, Loop, ModuleModel, Role
from loopcheck.lint.rules.base import FileContext, Rule

_STEPS = (EventKind.STEP, EventKind.SCALER_STEP)


def stepped_optimizer(ev: Event) -> str | None:
    """The optimizer an event steps (`opt.step()` or `scaler.step(opt)`), else None."""
    if ev.kind is EventKind.STEP:
        return ev.target
    if ev.kind is EventKind.SCALER_STEP:
        return ev.detail.get("optimizer")
    return None


def _params_of(model: ModuleModel, opt: str) -> frozenset[str]:
    b = model.bindings.get(opt)
    return b.detail.get("params_of", frozenset()) if b is not None else frozenset()


def _related(a: str, b: str) -> bool:
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


class _LoopView:
    """The optimizers stepped directly in one loop and the resets that concern them."""

    def __init__(self, model: ModuleModel, loop: Loop) -> None:
        self.model = model
        self.loop = loop
        self.all_events = loop.all_events()
        self.steps: dict[str, list[Event]] = {}
        self.closure_steps: set[str] = set()
        for ev in loop.events:
            opt = stepped_optimizer(ev)
            if opt is None:
                continue
            if ev.kind is EventKind.STEP and ev.detail.get("closure"):
                self.closure_steps.add(opt)
            self.steps.setdefault(opt, []).append(ev)
        self.single = len(self.steps) == 1
        self.backwards = [e for e in self.all_events if e.kind is EventKind.BACKWARD]
        self.child_backward = any(
            e.kind is EventKind.BACKWARD for child in loop.children for e in child.all_events()
        )

    def covers(self, reset: Event, opt: str, *, definite: bool) -> bool:
        if reset.kind is not EventKind.ZERO_GRAD:
            return False
        form = reset.detail.get("form")
        target = reset.target
        if form == "optimizer" or target == opt:  # opt.zero_grad(), or p.grad = None over opt.param_groups
            return target == opt
        params = _params_of(self.model, opt)
        if target is None:
            return self.single or not definite
        if params:
            return any(_related(target, p) for p in params)
        if self.model.role(target) is Role.OPTIMIZER:
            return False
        return self.single or not definite

    def escaped(self, opt: str) -> bool:
        names = {opt} | set(_params_of(self.model, opt))
        return any(_related(n, e) for n in names for e in self.loop.escapes)


def _views(ctx: FileContext) -> list[_LoopView]:
    """The loops that step an optimizer and run backward, built once per file for the LC1 rules."""
    return ctx.derived(_build_views)


def _build_views(ctx: FileContext) -> list[_LoopView]:
    return [
        view for view in (_LoopView(ctx.model, loop) for loop in ctx.model.walk_loops())
        if view.steps and view.backwards
    ]


def _reset_text(ev: Event) -> str:
    form = ev.detail.get("form")
    if form in ("optimizer", "model"):
        return f"`{ev.target}.zero_grad()`"
    if form == "grad_none":
        return "`p.grad = None`"
    return "`p.grad.zero_()`"


def _scan(view: _LoopView, opt: str) -> Iterator[tuple[str, Event, Event, Event | None, bool]]:
    """(kind, reset, step, backward, from_previous_iteration) for each step a reset reaches first:
    kind "between" when a backward came before the reset, "nobackward" when none did."""
    for first, second in view.loop.cyclic_pairs():
        seq = first + second
        offset = len(first)
        for i in range(offset, len(seq)):
            step = seq[i]
            if stepped_optimizer(step) != opt:
                continue
            reset_at = None
            for j in range(i - 1, -1, -1):
                ev = seq[j]
                if ev.kind is EventKind.BACKWARD or stepped_optimizer(ev) == opt:
                    break
                if view.covers(ev, opt, definite=True):
                    reset_at = j
                    break
            if reset_at is None:
                continue
            reset = seq[reset_at]
            backward_at = None
            for k in range(reset_at - 1, -1, -1):
                ev = seq[k]
                if stepped_optimizer(ev) == opt:
                    break
                if ev.kind is EventKind.BACKWARD:
                    backward_at = k
                    break
            if backward_at is None:
                yield "nobackward", reset, step, None, False
            else:
                yield "between", reset, step, seq[backward_at], backward_at < offset


class ZeroGradMissing(Rule):
    code = "LC101"

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        for view in _views(ctx):
            for opt, steps in view.steps.items():
                if opt in view.closure_steps or view.escaped(opt):
                    continue
                if any(view.covers(e, opt, definite=False) for e in view.all_events):
                    continue
                step = steps[0]
                yield self.finding(
                    ctx, step,
                    f"`{opt}` is stepped in this loop but its gradients are never reset: every "
                    f"`backward()` adds to the gradients of all earlier iterations, so each step uses "
                    f"a running sum. Call `{opt}.zero_grad()` once per step (before the forward pass "
                    f"or right after `{opt}.step()`).",
                )


class ZeroGradBetweenBackwardAndStep(Rule):
    code = "LC102"

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        for view in _views(ctx):
            if view.child_backward:
                continue
            for opt in view.steps:
                if opt in view.closure_steps:
                    continue
                for kind, reset, step, backward, previous in _scan(view, opt):
                    if kind != "between" or backward is None:
                        continue
                    loss = backward.detail.get("loss_text") or "loss"
                    where = f"the previous iteration's `{loss}.backward()`" if previous else f"`{loss}.backward()`"
                    yield self.finding(
                        ctx, reset,
                        f"{_reset_text(reset)} runs after {where} and before `{opt}.step()`: "
                        f"the step sees zero gradients and the model never learns. Move the reset "
                        f"before the forward pass or after the step.",
                    )


class ZeroGradBreaksAccumulation(Rule):
    code = "LC103"

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        for view in _views(ctx):
            for opt, steps in view.steps.items():
                if opt in view.closure_steps:
                    continue
                if not any(s.accumulation_guarded for s in steps):
                    continue
                reported: set[int] = set()
                for trace in view.loop.traces:
                    if any(stepped_optimizer(e) == opt for e in trace):
                        continue
                    if not any(e.kind is EventKind.BACKWARD for e in trace) and not view.child_backward:
                        continue
                    for ev in trace:
                        if id(ev) in reported or ev.accumulation_guarded:
                            continue
                        if view.covers(ev, opt, definite=True):
                            reported.add(id(ev))
                            yield self.finding(
                                ctx, ev,
                                f"`{opt}.step()` only runs every few micro-batches (gradient "
                                f"accumulation), but {_reset_text(ev)} runs on every one: the "
                                f"accumulated gradients are thrown away and each step uses only the "
                                f"last micro-batch. Reset under the same condition as the step, right "
                                f"after `{opt}.step()`.",
                            )


class StepWithoutBackward(Rule):
    code = "LC104"

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        for view in _views(ctx):
            if view.child_backward:
                continue
            for opt in view.steps:
                if opt in view.closure_steps or view.escaped(opt):
                    continue
                reported: set[int] = set()
                for kind, reset, step, _, _ in _scan(view, opt):
                    if kind != "nobackward" or id(step) in reported:
                        continue
                    reported.add(id(step))
                    yield self.finding(
                        ctx, step,
                        f"on some path through the loop `{opt}.step()` runs after {_reset_text(reset)} "
                        f"with no `backward()` in between: the step uses empty gradients (momentum and "
                        f"weight decay still move the weights). Skip the step on that path too, or "
                        f"make sure backward() runs before it.",
                    )


class AccumulatedLossNotScaled(Rule):
    code = "LC105"

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        for view in _views(ctx):
            guarded = [s for steps in view.steps.values() for s in steps if s.accumulation_guarded]
            if not guarded:
                continue
            backwards = [e for e in view.loop.events if e.kind is EventKind.BACKWARD]
            if not backwards or any(b.accumulation_guarded for b in backwards):
                continue
            if any(b.detail.get("divided") is not False for b in backwards):
                continue  # divided, or computed by code the model cannot see
            for b in backwards:
                loss = b.detail.get("loss_text") or b.target or "loss"
                yield self.finding(
                    ctx, b,
                    f"gradients are accumulated over several micro-batches before each step, but "
                    f"`{loss}` is not divided by their number: the summed gradient is k times too "
                    f"large, as if the learning rate were multiplied by k. Divide the loss by the "
                    f"accumulation count before `backward()`.",
                )
