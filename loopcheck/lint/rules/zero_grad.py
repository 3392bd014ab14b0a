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

import re
from functools import cached_property
from typing import Iterator

import libcst as cst

from loopcheck.findings import Finding
from loopcheck.lint.loopmodel import Event, EventKind, Loop, LoopKind, ModuleModel, Role
from loopcheck.lint.positions import node_code
from loopcheck.lint.rules._display import at, shown
from loopcheck.lint.rules.base import FileContext, Rule
from loopcheck.lint.syntax import walk
from loopcheck.lint.values import dotted

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


def _wrapper_receiver(ev: Event, method: str) -> str | None:
    """`opt.zero_grad()` / `opt.step()` of a project class followed into its body (a warm-up
    wrapper resetting or stepping the optimizer it holds): the receiver as written, else None."""
    for site in ev.via:
        call = site.node
        if site.callee.rsplit(".", 1)[-1] == method and isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute):
            return dotted(call.func.value)
    return None


class _LoopView:
    """The optimizers stepped directly in one loop and the resets that concern them."""

    def __init__(self, model: ModuleModel, loop: Loop) -> None:
        self.model = model
        self.loop = loop
        self.all_events = loop.all_events()
        self.steps: dict[str, list[Event]] = {}
        self.closure_steps: set[str] = set()
        self.aliases: dict[str, set[str]] = {}  # optimizer -> the wrapper objects stepping it
        for ev in loop.events:
            opt = stepped_optimizer(ev)
            if opt is None:
                continue
            if ev.kind is EventKind.STEP and ev.detail.get("closure"):
                self.closure_steps.add(opt)
            self.steps.setdefault(opt, []).append(ev)
            wrapper = _wrapper_receiver(ev, "step")
            if wrapper:
                self.aliases.setdefault(opt, set()).add(wrapper)
        self.single = len(self.steps) == 1
        self.backwards = [e for e in self.all_events if e.kind is EventKind.BACKWARD]
        self.writes = [e for e in self.all_events if e.kind is EventKind.GRAD_WRITE]
        self.child_backward = any(
            e.kind is EventKind.BACKWARD for child in loop.children for e in child.all_events()
        )

    def covers(self, reset: Event, opt: str, *, definite: bool) -> bool:
        if reset.kind is not EventKind.ZERO_GRAD:
            return False
        if reset.detail.get("subset"):
            # `p.grad = None` for some parameters only (`if "bias" in name:`): drops part of the
            # gradient on purpose; not a reset of the optimizer's gradients
            return not definite
        wrapper = _wrapper_receiver(reset, "zero_grad")
        if wrapper and any(_related(wrapper, name) for name in {opt} | self.aliases.get(opt, set())):
            return True
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

    @cached_property
    def _order(self) -> dict[int, int]:
        """id(event) -> its place in the order the model's entry points run the events."""
        return {id(e): i for i, e in enumerate(self.model.events)}

    def written_between(self, first: Event, last: Event) -> bool:
        """A gradient is written by hand (`p.grad = g`) in this loop after `first` and before
        `last` in the order the entry point runs them, nested loops and helpers included (`last`
        written before `first`: in the next iteration)."""
        if not self.writes:
            return False
        order = self._order
        start, end = order.get(id(first)), order.get(id(last))
        if start is None or end is None:
            return False
        if start < end:
            return any(start < order.get(id(w), -1) < end for w in self.writes)
        # `first` in one iteration, `last` in the next: after the one or before the other
        return any(not end <= order.get(id(w), end) <= start for w in self.writes)

    def reset_by_others(self, opt: str) -> bool:
        """Every network `opt` updates has its gradients reset in the loop by another optimizer's
        `zero_grad()` or its own `model.zero_grad()` (InfoGAN's information optimizer over the
        generator and the discriminator, each cleared by its own optimizer)."""
        params = _params_of(self.model, opt)
        cleared: set[str] = set()
        for e in self.all_events:
            if e.kind is not EventKind.ZERO_GRAD or e.target is None or e.detail.get("subset"):
                continue
            if self.model.role(e.target) is Role.OPTIMIZER:
                cleared |= _params_of(self.model, e.target)
            else:
                cleared.add(e.target)
        return bool(params) and all(any(p == c or p.startswith(c + ".") for c in cleared) for p in params)

    def built_inside(self, opt: str) -> bool:
        """The optimizer is built anew in each iteration of this loop (a guidance loop that
        optimises a fresh copy of its latents every step): whether gradients carry over depends on
        whether its parameters are fresh too, which the model does not follow."""
        binding = self.model.bindings.get(opt)
        call, node = (binding.call, self.loop.node) if binding is not None else (None, None)
        return call is not None and node is not None and any(n is call for n, _ in walk(node))

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
        return f"`{shown(ev.target)}.zero_grad()`"
    if form == "grad_none":
        return "`p.grad = None`"
    return "`p.grad.zero_()`"


def _scan(view: _LoopView, opt: str) -> Iterator[tuple[str, Event, Event, Event | None, bool]]:
    """(kind, reset, step, backward, from_previous_iteration) for each step a reset reaches first:
    kind "between" when a backward came before the reset, "nobackward" when none did."""
    marked: dict[int, str] = {}

    def marks(trace: list[Event]) -> str:
        """One letter per event of a trace: what the scan looks for (marked once per trace, not
        once per pair of traces): S a step of `opt`, B a backward pass, W a gradient written by
        hand (`p.grad = g`), R a reset covering it."""
        found = marked.get(id(trace))
        if found is None:
            found = marked[id(trace)] = "".join(
                "S" if stepped_optimizer(ev) == opt else "B" if ev.kind is EventKind.BACKWARD
                else "W" if ev.kind is EventKind.GRAD_WRITE
                else "R" if view.covers(ev, opt, definite=True) else "." for ev in trace)
        return found

    stepping: dict[int, list[int]] = {}  # id(trace) -> where its steps of `opt` are
    for first, second in view.loop.cyclic_pairs():
        later = marks(second)
        steps = stepping.get(id(second))
        if steps is None:
            steps = stepping[id(second)] = [i for i, sign in enumerate(later) if sign == "S"]
        if not steps:
            continue
        offset = len(first)
        signs = marks(first) + later  # iteration i, then iteration i + 1
        pair = (first, second)
        for i in steps:
            i += offset
            # the nearest reset, backward, write or step before the step: a reset only counts first
            reset_at = max(signs.rfind(sign, 0, i) for sign in "RBWS")
            if reset_at == -1 or signs[reset_at] != "R":
                continue
            backward_at = max(signs.rfind(sign, 0, reset_at) for sign in "BWS")
            if backward_at != -1 and signs[backward_at] == "W":
                continue  # gradients written by hand before the reset: what they were for is not known
            if view.written_between(_nth(pair, reset_at), _nth(pair, i)):
                continue  # a helper's loop over the parameters writes them (`alpha.grad = ...`)
            if backward_at == -1 or signs[backward_at] != "B":
                yield "nobackward", _nth(pair, reset_at), _nth(pair, i), None, False
            else:
                yield "between", _nth(pair, reset_at), _nth(pair, i), _nth(pair, backward_at), backward_at < offset


def _nth(pair: tuple[list[Event], list[Event]], k: int) -> Event:
    """Event `k` of two traces run one after the other."""
    first, second = pair
    return first[k] if k < len(first) else second[k - len(first)]


def _feeding_backwards(traces: list[list[Event]], opt: str) -> set[int]:
    """The backward passes that come before a step of `opt` on some path of one iteration."""
    out: set[int] = set()
    for trace in traces:
        for i, ev in enumerate(trace):
            if stepped_optimizer(ev) == opt:
                out.update(id(e) for e in trace[:i] if e.kind is EventKind.BACKWARD)
    return out


def _accumulation_test(step: Event) -> str:
    return next((g.text for g in step.guards if g.accumulation), "its condition")


def _wiping_resets(view: _LoopView, opt: str) -> Iterator[tuple[Event, Event, Event, Event]]:
    """(earlier backward, reset, later backward, step) on one path of one iteration: the reset
    throws away a backward pass that was meant for the same step. With several optimizers, only a
    backward that no other optimizer's step uses (a GAN's generator loss also fills the
    discriminator's gradients, which a reset before the discriminator's own backward drops on purpose)."""
    for trace in view.loop.traces:
        last_step = -1
        for i, ev in enumerate(trace):
            if stepped_optimizer(ev) != opt:
                continue
            window = trace[last_step + 1 : i]
            last_step = i
            resets = [j for j, e in enumerate(window) if view.covers(e, opt, definite=True)]
            if not resets:
                continue
            r = resets[-1]
            later = next((e for e in window[r + 1 :] if e.kind is EventKind.BACKWARD), None)
            earlier = next((e for e in reversed(window[:r]) if e.kind is EventKind.BACKWARD), None)
            if later is not None and earlier is not None and not _feeds_another(view, opt, trace, earlier):
                yield earlier, window[r], later, ev


def _feeds_another(view: _LoopView, opt: str, trace: list[Event], backward: Event) -> bool:
    """The first step after `backward` is another optimizer's, or another optimizer is stepped
    after it (later in the iteration, or in the next one up to the same point) with no reset of
    its own in between."""
    at = _index_of(trace, backward)
    after = trace[at + 1 :] + trace[:at]
    if next((stepped_optimizer(e) for e in after if stepped_optimizer(e)), opt) != opt:
        return True
    for other in view.steps:
        if other == opt:
            continue
        for e in after:
            if view.covers(e, other, definite=True):
                break
            if stepped_optimizer(e) == other:
                return True
    return False


def _inner_loops_with_backward(view: _LoopView, opt: str, first: Event | None, last: Event) -> list[Loop]:
    """Loops nested in the view's loop and written between two of its own events (from the top of
    the body when `first` is None) that run backward without stepping `opt` themselves
    (`for piece in batch.chunk(k): loss.backward()`)."""
    if last.via != view.loop.via or (first is not None and (first.path != last.path or first.via != last.via)):
        return []
    return [
        child for child in view.loop.children
        if child.path == last.path and child.via == last.via and child.end_line < last.line
        and (first is None or first.line < child.line)
        and any(e.kind is EventKind.BACKWARD for e in child.all_events())
        and not any(stepped_optimizer(e) == opt for e in child.all_events())
    ]


def _inner_backward_between(view: _LoopView, opt: str, reset: Event, step: Event) -> bool:
    return bool(_inner_loops_with_backward(view, opt, reset, step))


def _resets_after_inner_backward(view: _LoopView, opt: str) -> Iterator[tuple[Loop, Event, Event]]:
    """(nested loop, reset, step) in one iteration: a reset of `opt` after a nested loop that runs
    the backward passes of this step (since the previous step or reset), before the step, with no
    backward in between."""
    if not view.child_backward:
        return
    for trace in view.loop.traces:
        floor: Event | None = None  # the previous step of `opt` or reset, in this iteration
        for i, event in enumerate(trace):
            if stepped_optimizer(event) == opt:
                floor = event
            elif view.covers(event, opt, definite=True):
                reset, since = event, floor
                floor = event
                ahead = next((e for e in trace[i + 1 :] if e.kind is EventKind.BACKWARD or stepped_optimizer(e) == opt), None)
                if ahead is None or ahead.kind is EventKind.BACKWARD or _inner_backward_between(view, opt, reset, ahead):
                    continue
                inner = _inner_loops_with_backward(view, opt, since, reset)
                if inner:
                    yield inner[-1], reset, ahead


def _index_of(events: list[Event], event: Event) -> int:
    return next(i for i, e in enumerate(events) if e is event)


def _grad_read_between(ctx: FileContext, first: Event, last: Event) -> bool:
    """Code between two events of this file reads `.grad` (adversarial inputs, gradient logging):
    the earlier backward was run for that, not for the step."""
    if first.path != ctx.path or last.path != ctx.path or last.line < first.line:
        return True
    lines = ctx.source.splitlines()[first.line : last.line - 1]
    return any(re.search(r"\.grad\b(?!_)", line) for line in lines)


class ZeroGradMissing(Rule):
    code = "LC101"

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        for view in _views(ctx):
            for opt, steps in view.steps.items():
                if opt in view.closure_steps or view.escaped(opt):
                    continue
                if any(view.covers(e, opt, definite=False) for e in view.all_events) or view.built_inside(opt):
                    continue  # (the walk of the loop last: only for a step with no reset)
                if view.reset_by_others(opt):
                    continue
                step = steps[0]
                yield self.finding(
                    ctx, step,
                    f"`{shown(opt)}` is stepped in this loop ({at(step)}) but no `zero_grad()` or "
                    f"`p.grad = None` in the loop ({at(view.loop)}) resets its gradients: every "
                    f"`backward()` adds to the gradients of all earlier iterations, so each step uses "
                    f"a running sum. Call `{shown(opt)}.zero_grad()` once per step (before the forward "
                    f"pass or right after `{shown(opt)}.step()`).",
                )


class ZeroGradBetweenBackwardAndStep(Rule):
    code = "LC102"

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        for view in _views(ctx):
            for opt in view.steps:
                if opt in view.closure_steps:
                    continue
                reported: set[int] = set()
                for kind, reset, step, backward, previous in _scan(view, opt):
                    if kind != "between" or backward is None or id(reset) in reported:
                        continue
                    if view.child_backward and (previous or _inner_backward_between(view, opt, reset, step)):
                        continue  # a nested loop's backward passes may come after the reset
                    reported.add(id(reset))
                    loss = backward.detail.get("loss_text") or "loss"
                    where = f"the previous iteration's `{loss}.backward()`" if previous else f"`{loss}.backward()`"
                    yield self.finding(
                        ctx, reset,
                        f"{_reset_text(reset)} ({at(reset)}) runs after {where} ("
                        f"{at(backward)}) and before `{shown(opt)}.step()` ({at(step)}): the step "
                        f"sees zero gradients and the model never learns. Move the reset before the "
                        f"forward pass or after the step.",
                    )
                for inner, reset, step in _resets_after_inner_backward(view, opt):
                    if id(reset) in reported:
                        continue
                    reported.add(id(reset))
                    yield self.finding(
                        ctx, reset,
                        f"{_reset_text(reset)} ({at(reset)}) runs after the loop over "
                        f"`{inner.iter_text}` ({at(inner)}), whose backward passes fill the gradients, "
                        f"and before `{shown(opt)}.step()` ({at(step)}): the step sees zero gradients "
                        f"and the model never learns. Move the reset before that loop or after the step.",
                    )
                if view.child_backward or any(
                    n != opt and view.model.role(n) is Role.OPTIMIZER for n in view.loop.escapes
                ):
                    continue  # another optimizer may be stepped by a helper the model did not follow
                for earlier, reset, later, step in _wiping_resets(view, opt):
                    if id(reset) in reported or _grad_read_between(ctx, earlier, reset):
                        continue
                    if earlier.detail.get("retain_graph"):
                        # a first pass that keeps its graph for the second one was run for what
                        # it leaves behind (per-sample norms that rescale the second loss)
                        continue
                    reported.add(id(reset))
                    first = earlier.detail.get("loss_text") or "loss"
                    second = later.detail.get("loss_text") or "loss"
                    yield self.finding(
                        ctx, reset,
                        f"{_reset_text(reset)} ({at(reset)}) runs between `{first}.backward()` "
                        f"({at(earlier)}) and `{second}.backward()` ({at(later)}), before "
                        f"`{shown(opt)}.step()` ({at(step)}): the gradients of `{first}` are thrown "
                        f"away and the step only follows `{second}`. Reset once, before the first "
                        f"backward pass.",
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
                feeding = _feeding_backwards(view.loop.traces, opt)
                reported: set[int] = set()
                for trace in view.loop.traces:
                    if any(stepped_optimizer(e) == opt for e in trace):
                        continue
                    if not any(id(e) in feeding for e in trace) and not view.child_backward:
                        continue  # the backward feeding the step runs only with it: every-k-steps, not accumulation
                    for ev in trace:
                        if id(ev) in reported or ev.accumulation_guarded:
                            continue
                        if view.covers(ev, opt, definite=True):
                            reported.add(id(ev))
                            name = shown(opt)
                            yield self.finding(
                                ctx, ev,
                                f"`{name}.step()` ({at(steps[0])}) only runs under "
                                f"`{_accumulation_test(steps[0])}` (gradient accumulation), but "
                                f"{_reset_text(ev)} ({at(ev)}) runs on every micro-batch: the "
                                f"accumulated gradients are thrown away and each step uses only the "
                                f"last micro-batch. Reset under the same condition as the step, right "
                                f"after `{name}.step()`.",
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
                        f"on some path through the loop `{shown(opt)}.step()` ({at(step)}) runs after "
                        f"{_reset_text(reset)} ({at(reset)}) with no `backward()` in between: the step uses empty gradients (momentum and "
                        f"weight decay still move the weights). Skip the step on that path too, or "
                        f"make sure backward() runs before it.",
                    )


# gradients normalised after the backward passes, or losses scaled on purpose: the accumulated
# gradient is already the one the code means (shapes F and G of the precision issue)
_GRADS_NORMALISED = re.compile(
    r"\.grad(\.data)?\.(div_|mul_)\(|\.grad(\.data)?\s*[/*]=|"
    r"\b\w*(scale|normali[sz]e|average|avg|div|rescale)_?grads?\w*\(|\bgrads?_\w*(scale|normali[sz]e|div)\w*\(",
    re.I,
)
_SUM_BY_DESIGN = re.compile(r"reduction\s*=\s*['\"]sum['\"]|size_average\s*=\s*False", re.I)
_MICRO_BATCH_ITER = re.compile(r"chunk|split|micro|accum|range\(\s*0\s*,[^,]+,", re.I)


def _loop_text(ctx: FileContext, loop: Loop) -> str:
    return node_code(loop.node, ctx.module) if loop.path == ctx.path else ""


def _scaled_by_design(ctx: FileContext, view: _LoopView) -> bool:
    """The code scales the accumulated gradients itself, or sums its losses on purpose."""
    text = "\n".join(_loop_text(ctx, loop) for loop in view.loop.walk())
    if any(loop.path != ctx.path for loop in view.loop.walk()):
        return ctx.mentions(_GRADS_NORMALISED) or ctx.mentions(_SUM_BY_DESIGN)
    return bool(_GRADS_NORMALISED.search(text)) or ctx.mentions(_SUM_BY_DESIGN)


def _micro_batch_backwards(view: _LoopView) -> list[Event]:
    """Backward passes in a loop over the pieces of one batch, with the optimizer stepped once
    after that loop: `for chunk in batch.chunk(k): loss(chunk).backward()`."""
    out: list[Event] = []
    for child in view.loop.children:
        if not _MICRO_BATCH_ITER.search(child.iter_text) or child.kind is not LoopKind.BATCH:
            continue
        if any(stepped_optimizer(e) for e in child.all_events()):
            continue
        out.extend(e for e in child.events if e.kind is EventKind.BACKWARD)
    return out


class AccumulatedLossNotScaled(Rule):
    code = "LC105"

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        for view in _views(ctx):
            guarded = [s for steps in view.steps.values() for s in steps if s.accumulation_guarded]
            if guarded:
                backwards = [e for e in view.loop.events if e.kind is EventKind.BACKWARD]
                if not backwards or any(b.accumulation_guarded for b in backwards):
                    continue
                step_text = f"`{shown(stepped_optimizer(guarded[0]))}.step()`"
                if guarded[0].detail.get("fn") == "loss_scaler":
                    step_text = "the optimizer step of the loss scaler call"
                how = f"{step_text} ({at(guarded[0])}) only runs under `{_accumulation_test(guarded[0])}`"
            else:
                backwards = _micro_batch_backwards(view)
                if not backwards:
                    continue
                loop = backwards[0].loop
                how = f"the loop over `{loop.iter_text}` ({at(loop)}) runs backward on each piece of the batch"
            if any(b.detail.get("divided") is not False for b in backwards):
                continue  # divided, or computed by code the model cannot see
            if _scaled_by_design(ctx, view):
                continue
            for b in backwards:
                loss = b.detail.get("loss_text") or b.target or "loss"
                yield self.finding(
                    ctx, b,
                    f"gradients are accumulated over several micro-batches before each step ({how}), but `{loss}` ({at(b)}) is not divided by "
                    f"their number: the summed gradient is k times too large, as if the learning rate "
                    f"were multiplied by k. Divide the loss by the accumulation count before `backward()`.",
                )
