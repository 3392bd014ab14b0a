"""After the walk: roles settled from all the evidence, events given their roles, loops classified."""

from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from loopcheck.lint.loopmodel.facts import (
    Binding,
    Event,
    EventKind,
    Loop,
    LoopKind,
    ModuleModel,
    Role,
    SchedulerCadence,
)
from loopcheck.lint.loopmodel.layers import generates, mode_free, stops_recording
from loopcheck.lint.loopmodel.nodes import FUNCTION_VALUE, _split_of, written
from loopcheck.lint.loopmodel.torch_api import FOREIGN_FRAMEWORKS, INFERENCE_PIPELINES, _NAME_ROLES, _named_as, is_lr_step_call
from loopcheck.lint.loopmodel.traces import _expand, feasible
from loopcheck.lint.syntax import walk_pruned


class BuilderResolution:
    """The builder's part for after the walk."""


    def finalize(self) -> ModuleModel:
        self._resolve_roles()
        for ev in self.pending:
            self._resolve_event(ev)
        for loop in self._all_loops():
            loop.events = [e for e in loop.events if id(e) not in self.dropped]
        events = [e for e in self.events if id(e) not in self.dropped]
        for loop in self._all_loops():
            block = self.loop_blocks.get(id(loop), [])
            expanded = _expand(block, self.dropped)
            expanded = [path for path in expanded if feasible(path[0])] or expanded
            loop.traces = [evs for evs, _ in expanded]
            loop.trace_ends = [end for _, end in expanded]
        self._classify_loops(events)
        # read only for the networks run or switched here (what a class's source shows is read whole)
        run = {e.target for e in events if e.kind is EventKind.FORWARD}
        switched = run | {e.target for e in events if e.kind in (EventKind.EVAL_MODE, EventKind.TRAIN_MODE)}
        free = frozenset(name for name, cls in self.networks.items() if name in switched and mode_free(cls))
        stopping = frozenset(name for name, cls in self.networks.items() if name in run and stops_recording(cls))
        generating = frozenset(name for name, cls in self.networks.items() if name in run and generates(cls))
        return ModuleModel(path=self.path, module=self.main.module, bindings=self.bindings, loops=self.loops,
                           events=events, mode_free=free, stops_recording=stopping, generating=generating)

    def _all_loops(self) -> Iterator[Loop]:
        for loop in self.loops:
            yield from loop.walk()

    def _resolve_roles(self) -> None:
        for name, uses in self.usage.items():
            if name in self.bindings or name in _NO_OBJECT:
                continue
            role = None
            if "scale" in uses or "unscale_" in uses:
                role = Role.SCALER
            elif "step" in uses and ("get_last_lr" in uses or "get_lr" in uses):
                role = Role.SCHEDULER
            elif "zero_grad" in uses and "step" in uses:
                role = Role.OPTIMIZER
            elif "update_parameters" in uses:
                role = Role.EMA
            elif "backward" in uses:
                role = Role.LOSS
            if role is not None:
                self.bindings[name] = Binding(name=name, role=role, evidence="usage", path=self.candidates.get(name, self.path))
        for opt in [b for b in self.bindings.values() if b.role is Role.OPTIMIZER]:
            for owner in opt.detail.get("params_of", ()):
                if owner not in self.bindings:
                    self.bindings[owner] = Binding(name=owner, role=Role.MODEL, evidence="usage", path=opt.path)
        for name, path in list(self.candidates.items()):
            if name in self.bindings or name in _NO_OBJECT:
                continue
            role = self.annotations.get(name)
            evidence = "name"
            if role is None and self._foreign(name):
                continue  # `model = load_model(...)` from Keras: named like a model, not a torch one
            if role is None:
                last = written(name).rsplit(".", 1)[-1].lower()
                for candidate, pattern in _NAME_ROLES:
                    if pattern.search(last):
                        role = candidate
                        break
            if role is None and self.usage.get(name, set()) & {"eval", "train", "forward"}:
                role, evidence = Role.MODEL, "usage"
            if role is not None:
                self.bindings[name] = Binding(name=name, role=role, evidence=evidence, path=path)
                if role is Role.LOADER:
                    self.bindings[name].detail["split"] = _split_of(name)
        for name, b in self.bindings.items():
            if b.role is Role.SCHEDULER and b.cadence is None:
                b.cadence = SchedulerCadence.UNKNOWN

    def _foreign(self, name: str) -> bool:
        """Whether `name` was bound to what another framework's call returns (TensorFlow / Keras,
        ONNX Runtime, JAX, scikit-learn...)."""
        return self._made_by(name).split(".", 1)[0] in FOREIGN_FRAMEWORKS

    def _made_by(self, name: str) -> str:
        """The dotted name of the call whose result was assigned to `name` ("" when none)."""
        found = self.assigned.get(name)
        if found is None or type(found[1]) is not cst.Call:
            return ""
        return found[0].qualify(found[1].func) or ""

    def _resolve_event(self, ev: Event) -> None:
        how = ev.detail.pop("_resolve", None)
        role = self.bindings[ev.target].role if ev.target in self.bindings else None
        if how == "forward":
            if role not in (Role.MODEL, Role.EMA):
                self.dropped.add(id(ev))
            elif INFERENCE_PIPELINES.match(self.bindings[ev.target].qualified or self._made_by(ev.target)):
                ev.detail["generate"] = True  # a library pipeline's `__call__` turns recording off itself
        elif how == "step":
            closure_events = ev.detail.pop("closure_events", [])
            if role is Role.OPTIMIZER:
                ev.kind = EventKind.STEP
                closure = bool(ev.detail.get("closure"))
                ev.detail = {"closure": closure, "closure_events": closure_events if closure else [], "fn": ev.detail.get("fn")}
            elif role is Role.SCHEDULER and is_lr_step_call(ev.detail.get("args", [])):
                ev.kind = EventKind.SCHED_STEP
                ev.detail = {"args": ev.detail.get("args", []), "metric": ev.detail.get("metric", False), "fn": ev.detail.get("fn")}
            elif role is Role.SCALER:
                ev.kind = EventKind.SCALER_STEP
                ev.detail = {"optimizer": ev.detail.get("optimizer")}
            elif role is Role.EMA:
                ev.kind = EventKind.EMA_UPDATE
                ev.detail = {"model": None}
            else:
                self.dropped.add(id(ev))
            for inner in closure_events:
                if ev.kind is not EventKind.STEP:
                    self.dropped.add(id(inner))
        elif how == "zero_grad":
            if role is Role.OPTIMIZER:
                ev.detail["form"] = "optimizer"
            elif role in (Role.MODEL, Role.EMA, Role.CRITERION, None):
                ev.detail["form"] = "model"
            else:
                self.dropped.add(id(ev))
        elif how == "scale":
            if role is not Role.SCALER:
                self.dropped.add(id(ev))
        elif how == "update":
            if role is Role.SCALER:
                ev.kind = EventKind.SCALER_UPDATE
            elif role is Role.EMA:
                ev.kind = EventKind.EMA_UPDATE
                ev.detail["model"] = None
            else:
                self.dropped.add(id(ev))
        elif how == "mode":
            if role not in (Role.MODEL, Role.EMA, Role.CRITERION, None):
                self.dropped.add(id(ev))
            else:
                ev.detail["frozen"] = ev.target in self.frozen
        elif how == "set_epoch":
            name = ev.target or ""
            if name.endswith((".sampler", ".batch_sampler")):
                loader, _, attr = name.rpartition(".")
                b = self.bindings.get(loader)
                if b is not None and isinstance(b.detail.get(attr), str):
                    ev.target = b.detail[attr]
        elif how == "save":
            whole = ev.detail.pop("_whole", None)
            if whole and whole in self.bindings and self.bindings[whole].role in (Role.MODEL, Role.EMA, Role.OPTIMIZER):
                ev.detail["whole_object"] = whole

    def _steps_through(self, name: str) -> bool:
        """A method the model does not know, called on `name` (`optim_wrapper.update_params(loss)`),
        may step an optimizer: `name` is one, or a scaler, by its binding or, unbound, by its name."""
        binding = self.bindings.get(name)
        return binding.role in _STEPPING_ROLES if binding is not None else _steps_through_name(name)

    def _classify_loops(self, events: list[Event]) -> None:
        has_backward: dict[int, bool] = {}
        has_forward: dict[int, bool] = {}
        has_step: dict[int, bool] = {}
        for loop in self._all_loops():
            kinds = {e.kind for e in loop.all_events()}
            has_backward[id(loop)] = EventKind.BACKWARD in kinds
            has_forward[id(loop)] = EventKind.FORWARD in kinds
            has_step[id(loop)] = bool(kinds & {EventKind.STEP, EventKind.SCALER_STEP})
        for loop in self._all_loops():
            if has_backward[id(loop)] and not any(has_backward[id(c)] for c in loop.children):
                loop.kind = LoopKind.BATCH
        for loop in self._all_loops():
            if loop.kind is LoopKind.BATCH:
                continue
            if any(c.kind is LoopKind.BATCH for c in loop.children):
                loop.kind = LoopKind.EPOCH
                continue
            trains = any(e.kind is EventKind.ZERO_GRAD for e in loop.all_events()) or any(
                self.bindings[n].role in (Role.OPTIMIZER, Role.SCALER, Role.LOSS)
                for sub in loop.walk() for n in sub.escapes if n in self.bindings
            ) or any(self._steps_through(n) for sub in loop.walk() for n in sub.drives)
            if has_forward[id(loop)] and not has_backward[id(loop)] and not has_step[id(loop)] and not trains:
                batch = _enclosing_batch(loop)
                if batch is not None and not _evaluates_within(loop, batch, self.bindings):
                    continue
                if not _runs_once(loop) and not _feeds_backward_after(loop, events):
                    loop.kind = LoopKind.EVAL


_STEPPING_ROLES = (Role.OPTIMIZER, Role.SCALER)


def _steps_through_name(name: str) -> bool:
    """An unbound name that says optimizer or scaler (`optim_wrapper`); not `opt`, most often the options."""
    return name.rsplit(".", 1)[-1] != "opt" and any(_named_as(name, role) for role in _STEPPING_ROLES)


def _enclosing_batch(loop: Loop) -> Loop | None:
    ancestor = loop.parent
    while ancestor is not None:
        if ancestor.kind is LoopKind.BATCH:
            return ancestor
        ancestor = ancestor.parent
    return None


_NO_OBJECT = frozenset(("None", FUNCTION_VALUE))  # names of no object a role could belong to
# an iterable of held-out data or a loader by its name (`val_loader`, `test_set`, `eval_iter`,
# `epoch_iterator = tqdm(loader)`)
_HELD_OUT_DATA = re.compile(r"loader|\bdl\b|_dl\b|val|test|eval|dataset|iterator", re.I)


def _evaluates_within(loop: Loop, batch: Loop, bindings: dict[str, Binding]) -> bool:
    """A forward-only loop inside a training step is evaluation when it iterates a loader of its
    own (`if step % eval_every == 0: for x, y in val_loader: ...`) or a loader from a helper the
    step calls (`evaluate(model, train_loader)` every N steps), or generates samples in a helper
    the step calls; a loop over the batch's parts
    (micro-batches, the networks of a GAN) is part of the step."""
    if type(loop.node) is not cst.For:
        return False
    called = len(loop.via) > len(batch.via)
    if loop.loader is None:
        return loop.generates and called  # `if step % 500 == 0: print(generate(model, prompt))`
    binding = bindings.get(loop.loader)
    if not (binding is not None and binding.role is Role.LOADER or _HELD_OUT_DATA.search(loop.iter_text)):
        return False  # `for crop in crops: student(crop)`: the views of one batch
    return loop.loader != batch.loader or called


def _runs_once(loop: Loop) -> bool:
    """Every path of the body ends in `break`: one forward (a lazy-module initialisation, a shape
    probe), not a pass over data."""
    return bool(loop.trace_ends) and all(end == "break" for end in loop.trace_ends)


def _feeds_backward_after(loop: Loop, events: list[Event]) -> bool:
    """A loss summed over the loop (`total += model(x)...`) and backpropagated once after it:
    the loop is training, not evaluation."""
    after = {
        e.target for e in events
        if e.kind is EventKind.BACKWARD and e.path == loop.path and e.line > loop.end_line and e.via == loop.via
    }
    if not after:
        return False
    return any(
        type(node) is cst.AugAssign and type(node.target) is cst.Name and node.target.value in after
        for node in walk_pruned(loop.node, (cst.FunctionDef, cst.ClassDef))
        if node is not loop.node
    )
