"""Learning-rate scheduler rules (LC201-LC205): where `scheduler.step()` runs relative to the
optimizer step and to the batch and epoch loops, given the cadence the schedule is sized for.

Each rule looks at the scheduler's SCHED_STEP events. "One iteration" of a loop is the part of the
model's flat event trace (calls followed into helpers and local modules) that lies inside the loop,
nested loops included; within a single loop level the branch-expanded traces are used so that steps
on the two sides of an `if` are not taken for a sequence.
"""

from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from loopcheck.findings import Finding
from loopcheck.lint.loopmodel import (
    Binding,
    Event,
    EventKind,
    Loop,
    LoopKind,
    ModuleModel,
    Role,
    SchedulerCadence,
)
from loopcheck.lint.positions import node_code
from loopcheck.lint.rules._display import at, shown
from loopcheck.lint.rules._shared import inside
from loopcheck.lint.rules.base import FileContext, Rule

K = EventKind
_OPT_STEPS = (K.STEP, K.SCALER_STEP)
_PLATEAU = frozenset({"ReduceLROnPlateau", "PlateauLRScheduler"})
_EPOCH_WORD = re.compile(r"epoch", re.I)
# a test on which schedule the configuration chose
_SCHEDULE_CHOICE = re.compile(r"sched|plateau|lr_policy|lr_decay_type|decay_type", re.I)
_STEP_WORD = re.compile(r"len\(|step|iter|batch|update", re.I)


# ---------------------------------------------------------------------------------------------
# helpers over the model
# ---------------------------------------------------------------------------------------------


def _loop_chain(loop: Loop | None) -> list[Loop]:
    out = []
    while loop is not None:
        out.append(loop)
        loop = loop.parent
    return out


# Events and loops are compared by identity throughout: their dataclass equality would compare
# whole subtrees (and a loop's parent and children).


def _iteration(model: ModuleModel, loop: Loop) -> list[Event]:
    """The events of one iteration of `loop` (nested loops included), in trace order."""
    return [e for e in model.events if inside(e, loop)]


def _in_batch_loop(event: Event) -> bool:
    return event.loop is not None and event.loop.kind is LoopKind.BATCH


def _scheduler(ctx: FileContext, event: Event) -> Binding | None:
    if event.kind is not K.SCHED_STEP or not event.target:
        return None
    binding = ctx.model.bindings.get(event.target)
    if binding is None or binding.role is not Role.SCHEDULER:
        return None
    return binding


def _cadence(binding: Binding) -> SchedulerCadence:
    if binding.cls in _PLATEAU:
        return SchedulerCadence.METRIC
    return binding.cadence or SchedulerCadence.UNKNOWN


def _optimizer_of(binding: Binding) -> str | None:
    """The canonical name of the optimizer a scheduler drives, when the model knows it."""
    opt = binding.detail.get("optimizer") if binding.detail else None
    return opt if isinstance(opt, str) else None


def _step_target(event: Event) -> str | None:
    if event.kind is K.SCALER_STEP:
        opt = event.detail.get("optimizer")
        return opt if isinstance(opt, str) else None
    return event.target


def _steps_optimizer(event: Event, opt: str | None) -> bool:
    if event.kind not in _OPT_STEPS:
        return False
    return opt is None or _step_target(event) in (opt, None)


def _args(event: Event) -> list[cst.Arg]:
    args = event.detail.get("args")
    if isinstance(args, (list, tuple)):
        return list(args)
    node = event.node
    if isinstance(node, cst.Expr):
        node = node.value
    return list(node.args) if isinstance(node, cst.Call) else []


def _sized_in_epochs_only(binding: Binding) -> bool:
    """`OneCycleLR(opt, max_lr, total_steps=args.epochs)`: a step schedule sized to be run per epoch."""
    if binding.call is None:
        return False
    values = " ".join(node_code(a.value) for a in binding.call.args[1:])
    return bool(_EPOCH_WORD.search(values)) and not _STEP_WORD.search(values)


def _name(event: Event) -> str:
    return shown(event.target, "scheduler")


def _skips_first(test: str, counters: set[str]) -> bool:
    """`if epoch > 0:` / `if i != start_epoch:` / `if not first:`: the guard leaves out the first
    iteration only, so a step at the top of the next one closes the previous iteration. A threshold
    (`if epoch >= warmup:`) is not that: the step still runs before that iteration's updates."""
    if re.search(r"\bfirst\b|_first\b|\bfirst_", test):
        return True
    for counter in counters:
        c = re.escape(counter)
        if re.search(rf"\b{c}\s*(>\s*0|!=\s*0|>=\s*1|>\s*[\w.]*start\w*|!=\s*[\w.]*start\w*)\b", test):
            return True
        if re.search(rf"(0\s*<|1\s*<=|[\w.]*start\w*\s*<)\s*{c}\b", test) or re.fullmatch(rf"\s*{c}\s*", test):
            return True
    return False


def _conditional(event: Event) -> bool:
    return any(not g.accumulation for g in event.guards)


def _maybe_exclusive(a: Event, b: Event) -> bool:
    """Both under their own condition (`if cfg.per_step:` / `if not cfg.per_step:`): perhaps never both;
    or two different calls of a timm scheduler (`step_update` per update, `step(epoch)` per epoch)."""
    return (_conditional(a) and _conditional(b)) or a.detail.get("fn") != b.detail.get("fn")


def _stepped_in_both_loops(events: list[Event]) -> tuple[Event, Event] | None:
    """A (batch-level, epoch-level) pair of steps of one scheduler, the second in a loop around the first."""
    for inner in events:
        if inner.loop is None or not _in_batch_loop(inner):
            continue
        outers = _loop_chain(inner.loop.parent)
        for outer in events:
            if outer is inner or _maybe_exclusive(inner, outer):
                continue
            if any(outer.loop is loop for loop in outers):
                return inner, outer
    return None


def _once_per_optimizer_step_broken(trace: list[Event], first: Event, second: Event, opt: str | None) -> bool:
    """Whether the iteration steps the optimizer (the scheduler's, or any when that is not known)
    and not between the scheduler's two steps. No optimizer step seen at all: it may be stepped
    through an object the model does not know (a framework's optimizer wrapper), so unsure. One
    between: the schedule follows the optimizer step for step (a test that steps twice)."""
    stepped = between = False
    for event in trace:
        if event is second:
            between = False
        elif event is first:
            between = True
        elif _steps_optimizer(event, opt):
            if between:
                return False
            stepped = True
    return stepped


def _steps_by_scheduler(ctx: FileContext) -> dict[str, list[Event]]:
    out: dict[str, list[Event]] = {}
    for event in ctx.model.events:
        if _scheduler(ctx, event) is not None:
            out.setdefault(event.target, []).append(event)
    return out


# ---------------------------------------------------------------------------------------------
# LC201
# ---------------------------------------------------------------------------------------------


def _first_step_after(loop: Loop, sched: Event, opt: str | None, iteration: list[Event]) -> Event | None:
    """The optimizer step that `sched` runs before in one iteration of `loop`, if it does."""
    before = True
    later: Event | None = None
    for event in iteration:
        if event is sched:
            before = False
            continue
        if _steps_optimizer(event, opt):
            if before:
                return None  # the optimizer already stepped earlier in this iteration
            later = later or event
    if later is None:
        return None
    if later.loop is loop and loop.traces:
        # same loop level: both must lie, in this order, on one branch-expanded path
        for trace in loop.traces:
            at = next((i for i, e in enumerate(trace) if e is sched), -1)
            if at < 0:
                continue
            if any(_steps_optimizer(e, opt) for e in trace[:at]):
                continue
            found = next((e for e in trace[at + 1 :] if _steps_optimizer(e, opt)), None)
            if found is not None:
                return found
        return None
    return later


class SchedulerBeforeOptimizer(Rule):
    code = "LC201"

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        model = ctx.model
        for event in model.events:
            binding = _scheduler(ctx, event)
            if binding is None or event.loop is None or _cadence(binding) is SchedulerCadence.METRIC:
                continue
            if event.detail.get("args"):
                continue  # `sched.step(epoch)`: the schedule is indexed by the argument, not by its count
            counters = _loop_counters(event.loop)
            if any(not g.accumulation and _skips_first(g.text, counters) for g in event.guards):
                continue  # `if epoch > 0: sched.step()`: runs after the previous iteration's step
            opt = _optimizer_of(binding)
            step = _first_step_after(event.loop, event, opt, _iteration(model, event.loop))
            if step is None:
                continue
            opt_name = shown(_step_target(step) or opt, "optimizer")
            where = "batch loop" if _in_batch_loop(event) else "epoch loop"
            step_text = f"scaler.step({opt_name})" if step.kind is K.SCALER_STEP else f"{opt_name}.step()"
            yield self.finding(
                ctx,
                event,
                f"`{_name(event)}.step()` ({at(event)}) runs before `{step_text}` ({at(step)}) "
                f"in the {where}: the first value of the schedule is skipped and every later one comes "
                f"one step early; call it after `{step_text}`",
            )


# ---------------------------------------------------------------------------------------------
# LC202 / LC203
# ---------------------------------------------------------------------------------------------


class PerStepSchedulerSteppedPerEpoch(Rule):
    code = "LC202"

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        model = ctx.model
        for name, events in _steps_by_scheduler(ctx).items():
            binding = model.bindings[name]
            if _cadence(binding) is not SchedulerCadence.PER_STEP or _sized_in_epochs_only(binding):
                continue
            if any(_in_batch_loop(e) for e in events):
                continue  # also stepped per batch: LC205, or per-step / per-epoch by a setting
            for event in events:
                loop = event.loop
                if loop is None or _in_batch_loop(event):
                    continue
                iteration = _iteration(model, loop)
                if not any(e.kind is K.BACKWARD and _in_batch_loop(e) for e in iteration):
                    continue  # not an epoch loop around a batch loop
                opt = _optimizer_of(binding)
                steps = [e for e in iteration if _steps_optimizer(e, opt)]
                if not steps or any(e.loop is loop for e in steps):
                    continue  # stepped with the optimizer (backward in a loop over micro-batches), or no step seen
                shown_name = shown(name)
                yield self.finding(
                    ctx,
                    event,
                    f"`{shown_name}` ({binding.cls or 'scheduler'}) is sized in optimizer steps but "
                    f"`{shown_name}.step()` ({at(event)}) runs once per pass of the loop at "
                    f"{at(loop)}, while `{_step_target(steps[0]) and shown(_step_target(steps[0])) or 'optimizer'}"
                    f".step()` ({at(steps[0])}) runs in the batch loop inside it: the schedule "
                    f"barely leaves its first values; step it after the optimizer step in the batch loop",
                )


class PerEpochSchedulerSteppedPerStep(Rule):
    code = "LC203"

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        model = ctx.model
        for name, events in _steps_by_scheduler(ctx).items():
            binding = model.bindings[name]
            if _cadence(binding) is not SchedulerCadence.PER_EPOCH:
                continue
            if any(e.loop is not None and not _in_batch_loop(e) for e in events):
                continue  # also stepped per epoch: LC205, or per-step / per-epoch by a setting
            for event in events:
                loop = event.loop
                if loop is None or not _in_batch_loop(event) or loop.parent is None:
                    continue  # a step-based loop with no epoch loop around sizes everything in steps
                if _args(event):
                    continue  # `step(epoch + i / n)`: the caller computes the position itself
                if _conditional(event):
                    continue  # `if i == len(loader) - 1:` and the like run once per epoch
                yield self.finding(
                    ctx,
                    event,
                    f"`{name}` ({binding.cls or 'scheduler'}) is sized in epochs but `{name}.step()` "
                    f"runs in the batch loop: the schedule advances once per batch and decays far too "
                    f"early; step it once per epoch, after the batch loop",
                )


# ---------------------------------------------------------------------------------------------
# LC204
# ---------------------------------------------------------------------------------------------


def _loop_counters(loop: Loop | None) -> set[str]:
    """Names bound by the `for` targets of the loops around an event (epoch, i, step, ...)."""
    names: set[str] = set()
    for current in _loop_chain(loop):
        if isinstance(current.node, cst.For):
            for node in _target_names(current.node.target):
                names.add(node)
    return names


def _target_names(target: cst.BaseExpression) -> Iterator[str]:
    if isinstance(target, cst.Name):
        yield target.value
    elif isinstance(target, (cst.Tuple, cst.List)):
        for element in target.elements:
            yield from _target_names(element.value)


def _metric_arg(event: Event) -> cst.Arg | None:
    """The argument that fills `metrics`: the first positional one or `metrics=`."""
    for arg in _args(event):
        if arg.keyword is None or arg.keyword.value == "metrics":
            return arg
    return None


class PlateauWithoutMetric(Rule):
    code = "LC204"

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        for event in ctx.model.events:
            binding = _scheduler(ctx, event)
            if binding is None or binding.cls != "ReduceLROnPlateau":
                continue  # timm's PlateauLRScheduler takes `step(epoch, metric)`: another signature
            if any(_SCHEDULE_CHOICE.search(g.text) for g in event.guards):
                continue  # `if cfg.scheduler in PER_STEP:`: on this path the schedule is another class
            name = _name(event)
            metric = _metric_arg(event)
            if metric is None:
                if _args(event):
                    continue  # only `epoch=`: a call we do not try to read
                yield self.finding(
                    ctx,
                    event,
                    f"`{name}.step()` is called without the monitored metric: ReduceLROnPlateau raises "
                    f"TypeError the first time it runs, after a whole epoch of training; pass the "
                    f"validation value, `{name}.step(val_loss)`",
                )
            elif isinstance(metric.value, cst.Name) and metric.value.value in _loop_counters(event.loop):
                counter = metric.value.value
                yield self.finding(
                    ctx,
                    event,
                    f"`{name}.step({counter})` passes the loop counter as the monitored metric: it never "
                    f"improves, so the learning rate is cut every `patience + 1` epochs (or never, in "
                    f"mode='max'); pass the validation value instead",
                )


# ---------------------------------------------------------------------------------------------
# LC205
# ---------------------------------------------------------------------------------------------


class SchedulerSteppedTwice(Rule):
    code = "LC205"

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        model = ctx.model
        reported: set[int] = set()
        for name, events in _steps_by_scheduler(ctx).items():
            binding = model.bindings[name]
            opt = _optimizer_of(binding)
            pair = _stepped_in_both_loops(events)
            if pair is not None:
                inner, outer = pair
                extra = inner if _cadence(binding) is SchedulerCadence.PER_EPOCH else outer
                reported.add(id(extra))
                yield self.finding(
                    ctx,
                    extra,
                    f"`{name}` is stepped both in the batch loop ({at(inner)}) and in the epoch "
                    f"loop ({at(outer)}): the schedule runs ahead of the optimizer; keep one "
                    f"`{name}.step()`",
                )
                continue
            for loop in {id(e.loop): e.loop for e in events if e.loop is not None}.values():
                for trace in loop.traces:
                    mine = [e for e in trace if e.kind is K.SCHED_STEP and e.target == name]
                    if len(mine) < 2 or id(mine[1]) in reported or _maybe_exclusive(mine[0], mine[1]):
                        continue
                    if not _once_per_optimizer_step_broken(trace, mine[0], mine[1], opt):
                        continue
                    reported.add(id(mine[1]))
                    yield self.finding(
                        ctx,
                        mine[1],
                        f"`{name}.step()` runs twice in one iteration ({at(mine[0])} and "
                        f"{at(mine[1])}): the schedule advances two steps per optimizer step; keep one",
                    )
