"""Finds what a probe was not given: trained models, optimizers, LR schedulers and GradScalers.

A `Discovery` is created by `Probe.__enter__` (unless `discover=False`) and puts its hooks on the
probe's own ExitStack, so leaving the block removes them with the rest. An object is watched from
the moment it proves to be part of the training run, never because it merely exists:

- optimizers: at their first step (a global step pre-hook), at `scaler.step(opt)`, or when one of
  their schedulers steps; constructing one proves nothing (some are never stepped);
- LR schedulers: with their optimizer (those constructed inside the block, and those made before
  it, found through the optimizer they hold), or at their own first step; composite schedulers
  (SequentialLR, ChainedScheduler) are watched instead of their children;
- a GradScaler: at its first `scale`, `unscale_` or `step`;
- models: the outermost modules that ran a forward pass with gradients enabled and have trainable
  parameters, found at the next backward or optimizer step. This needs a global forward pre-hook,
  which costs every module call, so it is removed as soon as the watched models hold every
  parameter the watched optimizers update (or after `_MODULE_STEPS` steps);
- hand-written updates (`p.data -= lr * p.grad`): a second backward with models watched and still
  no optimizer stepped, and no optimizer anywhere holds their parameters (one pass over the heap,
  made only then): a `HandWrittenUpdates` stand-in is stepped after that and each later backward,
  so the gradient, non-finite, mode and memory checks run on a per-backward clock.

What the user passes limits the search: given optimizers are the only ones watched (only their
schedulers and a scaler are added); given models restrict optimizers to those that update them,
and end the search for models. Anything added next to explicit arguments is named in a warning.
"""

from __future__ import annotations

import gc
import os
import sys
import warnings
from typing import Any, Callable, Iterable

import torch
from torch import nn
from torch.optim import Optimizer, lr_scheduler
from torch.optim.optimizer import register_optimizer_step_pre_hook

from loopcheck.errors import ProbeError

_MODULE_STEPS = 20  # optimizer steps after which models are no longer looked for
# Classes whose own __init__ / step a scheduler goes through (the others inherit them).
_SCHEDULER_INITS = (lr_scheduler.LRScheduler, lr_scheduler.SequentialLR, lr_scheduler.ChainedScheduler,
                    lr_scheduler.ReduceLROnPlateau)
_SCHEDULER_STEPS = _SCHEDULER_INITS + (lr_scheduler.CosineAnnealingWarmRestarts,)
_SCALER_USES = ("scale", "unscale_", "step")


class HandWrittenUpdates(Optimizer):
    """Stands for parameter updates written by hand: its `step()` changes nothing.

    The probe steps it after each backward pass, so its detectors see one step per backward.
    """

    def __init__(self, params: Iterable[torch.Tensor]) -> None:
        super().__init__(list(params), {"lr": None})

    def step(self, closure: Any = None) -> None:  # type: ignore[override]
        return None


def is_scheduler(obj: Any) -> bool:
    return isinstance(obj, (lr_scheduler.LRScheduler, lr_scheduler.ReduceLROnPlateau))


class Discovery:
    def __init__(self, probe: Any) -> None:
        self.probe = probe
        self.models_given = bool(probe.models)
        self.optimizers_given = bool(probe.optimizers)
        self.explicit = self.models_given or self.optimizers_given or bool(probe.schedulers) or probe.scaler is not None
        self.stand_in: HandWrittenUpdates | None = None
        self._building = 0  # scheduler constructors running (their first step is not a use)
        self._schedulers: list[Any] = []  # constructed inside the block, not watched yet
        self._seen: dict[int, nn.Module] = {}  # modules that ran forward with grad enabled
        self._fresh: list[nn.Module] = []  # ... not looked at yet
        self._held_elsewhere: bool | None = None
        self._backwards = 0  # backward passes with models watched and no optimizer stepped yet
        self._told: set[int] = set()
        self.failed = False
        hooks = probe.hooks
        # With models and optimizers given, a step or a backward has nothing left to find (new
        # optimizers are not adopted, models are not looked for): neither is watched.
        searching = not (self.models_given and self.optimizers_given)
        if searching:
            hooks.enter_context(register_optimizer_step_pre_hook(self._on_optimizer_step))
        for cls in _SCHEDULER_INITS:
            probe._patch(cls, "__init__", self._wrap_scheduler_init)
        for cls in _SCHEDULER_STEPS:
            probe._patch(cls, "step", self._wrap_scheduler_step)
        for name in _SCALER_USES:
            probe._patch(torch.amp.GradScaler, name, self._wrap_scaler(name))
        if searching:
            # On top of the probe's own wrapper: new models are watched before it dispatches.
            probe._patch(torch.Tensor, "backward", self._wrap_backward)
        self._module_hook = None
        if not self.models_given:
            self._module_hook = nn.modules.module.register_module_forward_pre_hook(self._on_forward)
            hooks.callback(self._stop_looking_for_models)
        if probe.optimizers:
            self._contained(lambda: self._refresh(schedulers=self._schedulers_of(probe.optimizers)))

    # Hooks -----------------------------------------------------------------------------------
    def _on_forward(self, module: nn.Module, args: Any) -> None:
        if torch.is_grad_enabled() and id(module) not in self._seen:
            self._seen[id(module)] = module
            self._fresh.append(module)

    def _on_optimizer_step(self, optimizer: Optimizer, args: Any, kwargs: Any) -> None:
        # Every step passes here: a watched optimizer with every model found costs one look-up.
        if (id(optimizer) not in self.probe.opt_index or self._module_hook is not None) and self._on():
            self._contained(self._step_starts, optimizer)
        return None

    def _step_starts(self, optimizer: Optimizer) -> None:
        probe = self.probe
        if id(optimizer) not in probe.opt_index:
            self._adopt_optimizer(optimizer)
        elif self._module_hook is not None:
            self._refresh()
            if probe.step >= _MODULE_STEPS or (probe.step and self._models_cover_optimizers()):
                self._stop_looking_for_models()

    def _wrap_backward(self, original: Callable[..., Any]) -> Callable[..., Any]:
        discovery = self

        def backward(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            if not discovery._on():
                return original(tensor, *args, **kwargs)
            if discovery._fresh or not discovery.probe.optimizers:  # what `_backward_starts` acts on
                discovery._contained(discovery._backward_starts)
            result = original(tensor, *args, **kwargs)
            stand_in, probe = discovery.stand_in, discovery.probe
            if stand_in is not None and probe.live and id(stand_in) in probe.opt_index:
                stand_in.step()
            return result
        return backward

    def _backward_starts(self) -> None:
        probe = self.probe
        if self._fresh:
            self._refresh()
        if probe.models and not probe.optimizers and not self.optimizers_given:
            self._backwards += 1
            if self._backwards > 1:  # the first may well be followed by an optimizer step
                self._stand_in()

    def _wrap_scheduler_init(self, original: Callable[..., Any]) -> Callable[..., Any]:
        discovery = self

        def __init__(scheduler: Any, *args: Any, **kwargs: Any) -> None:
            discovery._building += 1
            try:
                original(scheduler, *args, **kwargs)
            finally:
                discovery._building -= 1
            if discovery._on() and discovery._building == 0:
                discovery._contained(discovery._constructed, scheduler)
        return __init__

    def _constructed(self, scheduler: Any) -> None:
        self._schedulers.append(scheduler)
        if id(getattr(scheduler, "optimizer", None)) in self.probe.opt_index:
            self._refresh(schedulers=self._schedulers_of([scheduler.optimizer]))

    def _wrap_scheduler_step(self, original: Callable[..., Any]) -> Callable[..., Any]:
        discovery = self

        def step(scheduler: Any, *args: Any, **kwargs: Any) -> Any:
            if discovery._building or not discovery._on() or id(scheduler) in discovery.probe.sched_index:
                return original(scheduler, *args, **kwargs)
            if discovery._contained(discovery._adopt_scheduler, scheduler):
                return type(scheduler).step(scheduler, *args, **kwargs)  # now through the probe's wrapper
            return original(scheduler, *args, **kwargs)
        return step

    def _wrap_scaler(self, name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        discovery = self

        def make(original: Callable[..., Any]) -> Callable[..., Any]:
            def use(scaler: Any, *args: Any, **kwargs: Any) -> Any:
                if discovery._on() and scaler is not discovery.probe.scaler:
                    optimizer = args[0] if name != "scale" and args else None
                    if discovery._contained(discovery._adopt_scaler, scaler, optimizer):
                        return getattr(type(scaler), name)(scaler, *args, **kwargs)
                return original(scaler, *args, **kwargs)
            return use
        return make

    # Containment -----------------------------------------------------------------------------
    def _on(self) -> bool:
        return self.probe.live and not self.failed

    def _contained(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run a step of the search; if it fails, say so once and search no more (training goes on)."""
        try:
            return fn(*args)
        except ProbeError:
            raise
        except Exception as err:
            self.failed = True
            self._stop_looking_for_models()
            _warn(f"finding the run's objects failed ({type(err).__name__}: {err}) and was switched off: "
                  f"what was not passed to the probe and not found yet is not watched")
            return None

    # Adoption --------------------------------------------------------------------------------
    def _adopt_optimizer(self, optimizer: Any) -> bool:
        probe = self.probe
        if id(optimizer) in probe.opt_index:
            return True
        if not isinstance(optimizer, Optimizer) or self.optimizers_given:
            return False
        if self.models_given and not _shares_parameters(optimizer, probe.models):
            return False
        retire = [self.stand_in] if self.stand_in is not None else []
        self.stand_in = None
        self._refresh(optimizers=[optimizer], schedulers=self._schedulers_of([optimizer]), retire=retire)
        return id(optimizer) in probe.opt_index

    def _adopt_scheduler(self, scheduler: Any) -> bool:
        probe = self.probe
        optimizer = getattr(scheduler, "optimizer", None)
        if any(scheduler in getattr(s, "_schedulers", ()) for s in probe.schedulers):
            return False  # a child of a watched SequentialLR / ChainedScheduler
        if id(optimizer) not in probe.opt_index:
            if not self._adopt_optimizer(optimizer):
                return False
            if id(scheduler) in probe.sched_index:
                return True
        self._refresh(schedulers=[scheduler])
        return id(scheduler) in probe.sched_index

    def _adopt_scaler(self, scaler: Any, optimizer: Any) -> bool:
        probe = self.probe
        if probe.scaler is not None:
            if id(scaler) not in self._told:
                self._told.add(id(scaler))
                _warn("a second GradScaler is in use; the probe watches only the first "
                      "(pass scaler= to choose): AMP checks of the second are off")
            return False
        if optimizer is not None and id(optimizer) not in probe.opt_index:
            self._adopt_optimizer(optimizer)
        self._refresh(scaler=scaler)
        return probe.scaler is scaler

    def _told_about(self, obj: Any, what: str) -> None:
        if self.explicit and id(obj) not in self._told:
            self._told.add(id(obj))
            _warn(f"found {type(obj).__name__}, not passed to the probe as {what}=: it is watched too")

    def _schedulers_of(self, optimizers: Iterable[Any]) -> list[Any]:
        """The unwatched schedulers of `optimizers`: made inside the block, else found through them."""
        probe = self.probe
        wanted = {id(o) for o in optimizers}
        found = [s for s in self._schedulers
                 if id(getattr(s, "optimizer", None)) in wanted and id(s) not in probe.sched_index]
        for optimizer in optimizers:
            has = any(getattr(s, "optimizer", None) is optimizer for s in [*found, *probe.schedulers])
            if not has and getattr(vars(optimizer).get("step"), "_wrapped_by_lr_sched", False):
                made_before = _schedulers_holding(optimizer)
                if not made_before:
                    _warn(f"{type(optimizer).__name__} has an LR scheduler that was not passed to the probe "
                          f"and could not be found: it is watched from its first step() on (pass "
                          f"scheduler= to have the LR checks from the start)")
                found += made_before
        children = {id(c) for s in [*found, *probe.schedulers] for c in getattr(s, "_schedulers", ())}
        return [s for s in dict.fromkeys(found) if id(s) not in children]

    def _refresh(self, *, optimizers: list[Any] = (), schedulers: list[Any] = (),  # type: ignore[assignment]
                 scaler: Any = None, retire: list[Any] = ()) -> None:  # type: ignore[assignment]
        """Watch new roots among the modules seen, and the given objects, in one `Probe.watch`."""
        probe = self.probe
        models = self._new_roots()
        schedulers = [s for s in schedulers if id(s) not in probe.sched_index]
        if scaler is not None and probe.scaler is not None:
            scaler = None
        if models or optimizers or schedulers or scaler is not None or retire:
            for s in schedulers:
                self._told_about(s, "scheduler")
            if scaler is not None:
                self._told_about(scaler, "scaler")
            self._schedulers = [s for s in self._schedulers if all(s is not t for t in schedulers)]
            probe.watch(models=models, optimizers=optimizers, schedulers=schedulers, scaler=scaler,
                        retire=retire)

    def _new_roots(self) -> list[nn.Module]:
        fresh, self._fresh = self._fresh, []
        known = self.probe.module_index
        candidates = [m for m in fresh if id(m) not in known
                      and any(p.requires_grad for p in m.parameters())
                      and not any(id(sub) in known for sub in m.modules())]
        inner = {id(sub) for m in candidates for sub in m.modules() if sub is not m}
        return [m for m in candidates if id(m) not in inner]

    def _stand_in(self) -> None:
        """No optimizer updates the watched models: watch their hand-written updates instead."""
        if self.stand_in is not None:
            return
        probe = self.probe
        if self._held_elsewhere is None:
            self._held_elsewhere = _optimizer_holding(probe.models)
        if self._held_elsewhere:
            return  # an optimizer exists: it is watched at its first step
        params = list({id(p): p for m in probe.models for p in m.parameters() if p.requires_grad}.values())
        if params:
            self.stand_in = HandWrittenUpdates(params)
            probe.watch(optimizers=[self.stand_in])

    def _models_cover_optimizers(self) -> bool:
        held = {id(p) for m in self.probe.models for p in m.parameters()}
        return all(id(p) in held for params in self.probe.opt_params for p in params if p.requires_grad)

    def _stop_looking_for_models(self) -> None:
        if self._module_hook is not None:
            self._module_hook.remove()
            self._module_hook = None
        self._seen.clear()
        self._fresh.clear()


def _warn(message: str) -> None:
    from loopcheck.probe.probe import ProbeWarning

    warnings.warn(f"loopcheck probe: {message}", ProbeWarning, stacklevel=_user_stacklevel())


_OWN_DIRS = (os.path.dirname(os.path.dirname(os.path.abspath(__file__))), os.path.dirname(os.path.abspath(torch.__file__)))


def _user_stacklevel() -> int:
    """The stacklevel that points a warning at the caller's line, past loopcheck's and torch's frames."""
    frame, level = sys._getframe(2), 2
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_OWN_DIRS):
        frame, level = frame.f_back, level + 1
    return level


def _shares_parameters(optimizer: Optimizer, models: list[nn.Module]) -> bool:
    held = {id(p) for m in models for p in m.parameters()}
    return any(id(p) in held for g in optimizer.param_groups for p in g["params"])


def _optimizer_holding(models: list[nn.Module]) -> bool:
    """Whether any optimizer in the process holds parameters of `models` (one pass over the heap)."""
    return any(issubclass(type(o), Optimizer) and not isinstance(o, HandWrittenUpdates)
               and _shares_parameters(o, models) for o in gc.get_objects())


def _schedulers_holding(optimizer: Optimizer) -> list[Any]:
    """Schedulers made before the block for `optimizer`, found through the references to it."""
    owners: list[Any] = []
    for ref in gc.get_referrers(optimizer):
        if isinstance(ref, dict):
            if ref.get("optimizer") is optimizer:  # a scheduler's materialised __dict__
                owners += [o for o in gc.get_referrers(ref) if getattr(o, "__dict__", None) is ref]
        else:
            owners.append(ref)
    return [o for o in owners if is_scheduler(o) and o.optimizer is optimizer]
