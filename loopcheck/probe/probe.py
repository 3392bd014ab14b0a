"""The Probe context manager: hooks in on enter, a step clock, detector dispatch, hooks out on exit.

The Probe owns everything shared by the detectors (module and parameter names, the step clock,
the per-step loss and gradient values, kept on the device, which steps the sampled checks look
at (`watched`), and the queue of device values read at the next sample in one go) and nothing else; each check lives in a detector
(`loopcheck.probe.detectors`). Every hook and wrapper is registered on one ExitStack,
so leaving the context, by an exception or KeyboardInterrupt too, removes all of them.
"""

from __future__ import annotations

import contextlib
import math
import threading
import warnings
import weakref
from pathlib import Path
from typing import Any, Callable, NamedTuple, Sequence

import torch
from torch import nn
from torch.optim import Optimizer

from loopcheck.catalog import page
from loopcheck.errors import ProbeError, ProbeUsageError
from loopcheck.findings import Finding
from loopcheck.probe import distributed, lifecycle
from loopcheck.probe.adapters.accelerate import inner_optimizer, inner_scheduler
from loopcheck.probe.cadence import FIRST_WATCHED, Cadence, watched_step
from loopcheck.probe.config import ProbeConfig
from loopcheck.probe.detectors import default_detectors
from loopcheck.probe.detectors.base import Detector
from loopcheck.probe.patching import MethodPatch, own, without_own_hooks
from loopcheck.probe.sink import RunLog, print_summary
from loopcheck.probe.stats import Readings, finite_probe_value, fused_norms, no_grad

_LOCK = threading.Lock()
_ACTIVE: "Probe | None" = None
_ON_FINDING = ("warn", "raise", "ignore")
# Dispatched to every detector that overrides them; `after_backward` only to those that ask for it.
_HOOKS = (
    "on_forward_pre", "on_forward", "on_backward", "on_zero_grad", "on_step_pre",
    "on_step", "on_step_skipped", "on_closure", "on_scheduler_step", "on_mode_change", "on_sample", "on_close",
)


class ProbeWarning(UserWarning):
    """A probe finding (on_finding="warn") or a switched-off detector."""


class Probe:
    """Watches a training loop for silent bugs; use as `with loopcheck.probe(model, optimizer):`.

    `model`, `optimizer` and `scheduler` take one object or a sequence; keyword options tune
    windows and thresholds (see `ProbeConfig` and the README). What is not given is found while
    the block runs (`discovery`; `discover=False` turns that off). After the block, `findings`
    holds one `Finding` per (code, where, rank) with the number of times it was seen.
    """

    def __init__(
        self,
        model: nn.Module | Sequence[nn.Module] | None = None,
        optimizer: Optimizer | Sequence[Optimizer] | None = None,
        *,
        scheduler: Any = None,
        scaler: Any = None,
        log: str | Path | None = None,
        on_finding: str = "warn",
        detectors: Sequence[type[Detector]] | None = None,
        discover: bool = True,
        **options: Any,
    ) -> None:
        self._arguments = dict(model=model, optimizer=optimizer, scheduler=scheduler, scaler=scaler, log=log,
                               on_finding=on_finding, detectors=detectors, discover=discover, **options)
        if on_finding not in _ON_FINDING:
            raise ProbeUsageError(f"on_finding must be one of {', '.join(_ON_FINDING)}, not {on_finding!r}")
        self.on_finding = on_finding
        self.config = ProbeConfig.from_options(options)
        self.cadence = Cadence(self.config.check_every)
        self.discover = bool(discover)
        self.readings = Readings()
        self._set_objects(
            _as_list(model, "model", nn.Module),
            [inner_optimizer(o) for o in _as_list(optimizer, "optimizer", Optimizer)],
            [inner_scheduler(s) for s in _as_list(scheduler, "scheduler", None)], scaler,
        )
        if not self.discover and not (self.models and self.optimizers):
            raise ProbeUsageError("with discover=False, probe needs at least one model and one optimizer")
        self.log_path = Path(log) if log is not None else None

        self.findings: list[Finding] = []
        self.step = 0  # optimizer steps applied (of the first optimizer)
        self.skipped = 0  # steps the GradScaler skipped (first optimizer)
        self.step_loss: dict[int, torch.Tensor | float | None] = {}  # a float on the CPU
        self.loss_read: dict[int, slice | None] = {}  # where each step_loss sits in `readings`
        # Each optimizer step since the last sample: what the sample-time detectors judge.
        self.steps: list[StepRecord] = []
        self.hooks = contextlib.ExitStack()
        self._detector_hooks = contextlib.ExitStack()
        self.rank, self.world_size = distributed.rank_and_size()
        # under torch.distributed with on_finding="raise" the sentinel's verdict is all-reduced
        self._raise_together = self.world_size > 1 and on_finding == "raise"
        self.is_main = self.rank == 0
        self._found: dict[tuple[str, str | None, int | None], int] = {}
        self._unsent: list[Finding] = []
        self._pending_losses: list[torch.Tensor] = []
        self._scaled: tuple[Any, torch.Tensor | None] | None = None
        self._applied = [0] * len(self.optimizers)
        self._norms: dict[int, tuple[int, StepNorms]] = {}
        self._serial = 0
        self._last_sample = 0
        self._tripped = False
        self._in_backward = False
        self._stop: Finding | None = None  # under torch.distributed: the finding every rank raises on
        self._entered = False
        self.live = False
        self._log: RunLog | None = None
        self._hooked: set[Any] = set()  # the objects (by id) and class methods with hooks in place
        self._before_step: list[Callable[[], None]] = []  # deferred until step(closure) ran the closure
        self._discovery: Any = None
        self._detector_classes = list(detectors) if detectors is not None else default_detectors()
        self._lean = False  # see `_set_lean`
        self._full: list[bool] = []  # per optimizer: whether its coming step is a full one, not lean
        self._watching: list[bool] = []  # per optimizer: whether its coming step is watched (`watched`)
        self._new_detectors()
        self._set_lean()

    def _set_objects(self, wrappers: list[nn.Module], optimizers: list[Optimizer], schedulers: list[Any],
                     scaler: Any) -> None:
        for s in schedulers:
            if not callable(getattr(s, "step", None)) or not isinstance(getattr(s, "optimizer", None), Optimizer):
                raise ProbeUsageError(
                    f"scheduler must be a torch.optim.lr_scheduler scheduler, not {type(s).__name__}"
                )
        if scaler is not None and not isinstance(scaler, torch.amp.GradScaler):
            raise ProbeUsageError(f"scaler must be a torch.amp.GradScaler, not {type(scaler).__name__}")
        models = [_unwrap(m) for m in wrappers]
        _check_distinct(models, "model")
        _check_distinct(optimizers, "optimizer")
        _check_distinct(schedulers, "scheduler")
        self.wrappers, self.models, self.optimizers, self.schedulers = wrappers, models, optimizers, schedulers
        self.scaler = scaler
        self._index_model()

    def _new_detectors(self) -> None:
        self.detectors: list[Detector] = [
            cls(self) for cls in self._detector_classes
            if not cls.codes or any(self.config.wants(c) for c in cls.codes)
        ]
        self._calls: dict[str, tuple[tuple[Detector, Callable[..., Any]], ...]] = {}
        self._methods: dict[str, list[tuple[Detector, Callable[..., Any]]]] = {}  # see `_rebuild_calls`
        self._rebuild_calls()

    def watch(self, *, models: Sequence[nn.Module] = (), optimizers: Sequence[Optimizer] = (),
              schedulers: Sequence[Any] = (), scaler: Any = None, retire: Sequence[Any] = ()) -> None:
        """Watch more objects from now on (found while the run goes, see `discovery`); drop `retire`.

        Findings, the step clock and the log stay; the detectors are built again for the new set
        and start their windows afresh, which costs nothing before the first step, where discovery
        finds nearly everything.
        """
        gone = {id(x) for x in retire}
        keep = [o for o in self.optimizers if id(o) not in gone]
        applied = {id(o): n for o, n in zip(self.optimizers, self._applied)}
        self._set_objects(
            [m for m in self.wrappers if id(m) not in gone] + list(models), keep + list(optimizers),
            [s for s in self.schedulers if id(s) not in gone] + list(schedulers),
            scaler if scaler is not None else self.scaler,
        )
        self._applied = [applied.get(id(o), 0) for o in self.optimizers]
        self._set_lean()
        self._norms.clear()
        self.step_loss.clear()
        self.loss_read.clear()
        self.steps.clear()
        self.readings.clear()
        for det in self.detectors:
            det.enabled = False
        self._detector_hooks.close()
        self._new_detectors()
        if not self.live:
            return
        self._install_objects()
        if self._log is not None and self.is_main:
            self._log.watched(self)
        self._attach_detectors()

    def _attach_detectors(self) -> None:
        """Attach the detectors; the hooks they add go on a stack of their own, which `watch` closes."""
        outer, self.hooks = self.hooks, contextlib.ExitStack()
        try:
            for det in list(self.detectors):
                self._guard(det, det.attach)
        finally:
            self._detector_hooks, self.hooks = self.hooks, outer
            outer.callback(self._detector_hooks.close)

    # Names ------------------------------------------------------------------------------
    def _index_model(self) -> None:
        multi = len(self.models) > 1
        self.root_names = [type(m).__name__ if multi else "" for m in self.models]
        if multi and len(set(self.root_names)) < len(self.root_names):
            self.root_names = [f"model{i}" for i in range(len(self.models))]
        self.modules: list[tuple[str, nn.Module]] = []
        self.module_index: dict[int, int] = {}
        self.param_names: dict[int, str] = {}
        self.param_module: dict[int, str] = {}
        self.off_cpu = False  # whether a watched model has parameters on an accelerator
        for root, prefix in zip(self.models, self.root_names):
            for name, module in root.named_modules():
                if id(module) in self.module_index:
                    continue
                qual = ".".join(x for x in (prefix, name) if x) or type(root).__name__
                self.module_index[id(module)] = len(self.modules)
                self.modules.append((qual, module))
                for pname, p in module.named_parameters(recurse=False):
                    if p.device.type != "cpu":
                        self.off_cpu = True
                    if id(p) not in self.param_names:
                        self.param_names[id(p)] = ".".join(x for x in (prefix, name, pname) if x)
                        self.param_module[id(p)] = qual
        self.readings.on_cpu = not self.off_cpu
        if self.off_cpu:
            self.cadence.on_accelerator()
        self.root_index = {id(m): i for i, m in enumerate(self.models)}
        self.opt_index = {id(o): i for i, o in enumerate(self.optimizers)}
        self.opt_params: list[list[torch.Tensor]] = []
        for i, opt in enumerate(self.optimizers):
            params: list[torch.Tensor] = []
            for g, group in enumerate(opt.param_groups):
                for j, p in enumerate(group["params"]):
                    params.append(p)
                    self.param_names.setdefault(id(p), f"optimizer{i}.group{g}.param{j}")
            self.opt_params.append(params)
        self._all_positions = [list(range(len(params))) for params in self.opt_params]
        self._small_positions = [[j for j, p in enumerate(params) if p.numel() < _SMALL] for params in self.opt_params]
        self.sched_index = {id(s): i for i, s in enumerate(self.schedulers)}

    def param_name(self, p: torch.Tensor) -> str:
        return self.param_names.get(id(p), "<unnamed parameter>")

    def owner(self, p: torch.Tensor) -> str:
        return self.param_module.get(id(p), self.param_name(p))

    # Context ----------------------------------------------------------------------------
    def __enter__(self) -> "Probe":
        global _ACTIVE
        if self._entered:
            raise ProbeUsageError("this probe was already used; create a new probe for another run")
        with _LOCK:
            if _ACTIVE is not None:
                raise ProbeUsageError(
                    "another loopcheck probe is already active in this process; one probe watches a "
                    "whole run: pass several models, optimizers and schedulers to it as sequences"
                )
            _ACTIVE = self
        self._entered = True
        try:
            if self.log_path is not None and self.is_main:
                self._log = RunLog.open(self.log_path)
                self._log.header(self)
            self._install()
            self.live = True
            self._attach_detectors()
            if self.discover:
                from loopcheck.probe.discovery import Discovery

                self._discovery = Discovery(self)
        except BaseException:
            self.live = False
            self.hooks.close()
            if self._log is not None:
                self._log.close()
            _release(self)
            raise
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        self.live = False
        try:
            self.hooks.close()
        finally:
            self._discovery = None
            _release(self)
        try:
            self._finish(clean=exc_type is None)
        except ProbeError:
            if exc_type is None:
                raise
        except Exception as err:  # never let the probe's own bookkeeping mask the run's outcome
            warnings.warn(f"loopcheck probe: could not finish its report: {err!r}", ProbeWarning, stacklevel=2)
        return False

    def start(self) -> "Probe":
        """Begin watching without a `with` block; summary and end record come at `stop()` or exit."""
        return lifecycle.start(self)

    def stop(self) -> "Probe":
        """End what `start()` began: hooks out, end record written, summary printed."""
        return lifecycle.stop(self)

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Use as a decorator: each call of `fn` runs inside a new probe with these arguments."""
        return lifecycle.decorate(self, fn)

    def _install(self) -> None:
        self._patch(torch.autograd, "backward", self._wrap_backward)
        self._patch(nn.Module, "train", self._wrap_train)
        if self._full_calls["on_zero_grad"]:  # no default detector needs it: a reset shows in `.grad` itself
            self._patch(nn.Module, "zero_grad", self._wrap_module_zero_grad)
        self._patch(nn.Module, "__getstate__", _wrap_getstate)
        self._install_objects()

    def _install_objects(self) -> None:
        """Hooks on the watched objects that have none yet (all of them on enter, new ones later)."""
        hooks, done = self.hooks, self._hooked
        for root in self.models:
            if id(root) in done:
                continue
            done.add(id(root))
            # A hook nobody listens to still costs every forward pass. Hooks find their model's
            # index at call time: `watch` may renumber the models.
            if self._full_calls["on_forward_pre"]:
                hooks.enter_context(root.register_forward_pre_hook(self._root_hook(root, "on_forward_pre")))
            if self._full_calls["on_forward"]:
                hooks.enter_context(root.register_forward_hook(self._root_hook(root, "on_forward")))
        for opt in self.optimizers:
            if id(opt) in done:
                continue
            done.add(id(opt))
            hooks.enter_context(opt.register_step_pre_hook(self._step_pre_hook(opt)))
            hooks.enter_context(opt.register_step_post_hook(self._step_post_hook(opt)))
        patches = [(type(o), "zero_grad", self._wrap_opt_zero_grad) for o in self.optimizers
                   if self._full_calls["on_zero_grad"]]
        patches += [(type(s), "step", self._wrap_sched_step) for s in self.schedulers]
        if self.scaler is not None:
            patches += [(type(self.scaler), "step", self._wrap_scaler_step),
                        (type(self.scaler), "scale", self._wrap_scaler_scale)]
        for cls, name, make in patches:
            key = (id(cls), name)
            if key not in done:
                done.add(key)
                self._patch(cls, name, make)

    def _patch(self, cls: Any, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
        self.hooks.callback(MethodPatch(cls, name, make).restore)

    # Hooks and wrappers -----------------------------------------------------------------
    def _root_hook(self, root: nn.Module, event: str) -> Callable[..., None]:
        """A probed model's forward pre-hook (`on_forward_pre`, given the arguments) or forward hook
        (`on_forward`, given the output)."""
        key, pre = id(root), event == "on_forward_pre"

        def hook(module: nn.Module, args: Any, output: Any = None) -> None:
            if self.live:
                i = self.root_index.get(key)
                if i is not None:
                    passed = args if pre else output
                    # `_dispatch` written out: this runs at every forward pass, where a call more shows
                    for det, fn in self._calls[event]:
                        try:
                            fn(i, module, passed)
                        except ProbeError:
                            raise
                        except Exception as err:
                            self._fail(det, err)
        return own(hook)

    def _step_pre_hook(self, opt: Optimizer) -> Callable[..., Any]:
        key = id(opt)

        def hook(optimizer: Optimizer, args: Any, kwargs: Any) -> Any:
            i = self.opt_index.get(key) if self.live else None
            if i is None:
                return None
            # args[0] is the optimizer itself
            closure = kwargs.get("closure", args[1] if len(args) > 1 else None)
            if callable(closure):
                # step(closure) runs forward and backward itself (LBFGS, Lightning): the step's
                # checks run after the closure's first evaluation, whose loss step() returns.
                pending = self._before_step = [lambda: self._step_checks(i, optimizer)]
                wrapped = self._closure(i, optimizer, closure, pending)
                if "closure" in kwargs:
                    return args, {**kwargs, "closure": wrapped}
                return (args[0], wrapped, *args[2:]), kwargs
            self._step_checks(i, optimizer)
            return None
        return hook

    def _closure(self, i: int, optimizer: Optimizer, closure: Callable[[], Any],
                 pending: list[Callable[[], None]]) -> Callable[[], Any]:
        calls = [0]

        def evaluate() -> Any:
            result = closure()
            if self.live:
                first = calls[0] == 0
                calls[0] += 1
                if pending:
                    pending.pop()()
                elif not first:
                    self._pending_losses = []  # the line search's evaluations are not the step's loss
                self._dispatch("on_closure", i, optimizer, first)
            return result
        return evaluate

    def _step_checks(self, i: int, optimizer: Optimizer) -> None:
        """Optimizer `i`'s gradients are final: take the step's loss, run the step checks, seal.

        The per-step path: one fused gradient norm call, one stack of the step's device values and
        the sentinel; what the detectors judge from the step's loss and norms waits in `steps`
        for the next sample. Grad mode is off meanwhile (nothing here is differentiated).
        """
        grad = torch.is_grad_enabled()
        if grad:
            torch._C._set_grad_enabled(False)
        try:
            self._serial += 1
            self._take_losses(i)
            norms = self.grad_norms(i) if self._norms_wanted and self.watched(i) else None
            self.steps.append(_new(StepRecord, (self.step + 1, i, self.loss_read[i], norms)))
            self._dispatch("on_step_pre", i, optimizer)
            self._sentinel()  # seals the step's values, then judges them
        finally:
            if grad:
                torch._C._set_grad_enabled(True)

    def _sentinel(self) -> None:
        together = self._raise_together
        tripped = (self.readings.tripped(distributed.all_ranks_max, self._main_device()) if together
                   else self.readings.tripped())
        if tripped and not self._tripped:
            # The first non-finite value: read and judge now, before this step updates the
            # parameters (the localisation checks them), instead of at the next sample. Later
            # ones are counted under that first incident at the regular samples.
            self._tripped = True
            if together:
                self._judge_together()
            else:
                self._sample(final=False, judge_only=True)

    def _main_device(self) -> torch.device:
        """Where the sentinel's all-reduce runs: the device of the first watched parameter."""
        return next((p.device for params in self.opt_params for p in params), torch.device("cpu"))

    def _judge_together(self) -> None:
        """Every rank tripped at this step (the sentinel is all-reduced): judge, tell each other, stop
        together. A rank whose own values are finite raises the finding of the rank that is not."""
        try:
            self._sample(final=False, judge_only=True)
        except ProbeError as err:
            self._stop = err.finding
        self._exchange({})

    def _step_post_hook(self, opt: Optimizer) -> Callable[..., None]:
        key = id(opt)

        def hook(optimizer: Optimizer, args: Any, kwargs: Any) -> None:
            if self._before_step:  # a step(closure) that never called its closure
                self._before_step.pop()()
            i = self.opt_index.get(key) if self.live else None
            if i is None:
                return
            self._applied[i] += 1
            if i == 0:
                self.step += 1
                if self.step == FIRST_WATCHED:
                    self.cadence.start(self._serial)
            self._set_lean(i)
            self._dispatch("on_step" if i == 0 else "on_step_others", i, optimizer)
            if i == 0 and self.step % self.config.every == 0:
                self.cadence.retune(self._serial)
                self._sample(final=False)
        return hook

    def _wrap_backward(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """`torch.autograd.backward`, which `Tensor.backward` calls too: both spellings are seen."""
        probe = self

        def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
            if not probe.live or probe._in_backward:
                # a backward inside a backward (reentrant checkpointing) is part of the outer one
                return original(tensors, *args, **kwargs)
            after: list[tuple[Detector, torch.Tensor]] = []
            if (type(tensors) is torch.Tensor and probe._scaled is None and probe.readings.on_cpu
                    and not probe._calls["on_backward"] and len(probe._pending_losses) < _PENDING_LOSSES):
                # the usual CPU step, `_record_loss` inline: the loss is kept, read at the step
                if tensors.numel() == 1 and tensors.is_floating_point():
                    probe._pending_losses.append(tensors)
            else:
                for tensor in _roots(tensors):
                    probe._record_loss(tensor)
                    after.extend((det, tensor) for det in probe._dispatch_backward(tensor) or ())
            probe._in_backward = True
            try:
                result = original(tensors, *args, **kwargs)
            finally:
                probe._in_backward = False
            if after and probe.live:
                for det, tensor in after:
                    probe._guard(det, det.after_backward, tensor)
            return result
        return backward

    def _take_losses(self, i: int) -> None:
        losses, self._pending_losses = self._pending_losses, []
        loss: Any
        if len(losses) == 1 and self.readings.on_cpu and losses[0].is_cpu:  # the usual CPU step
            loss = losses[0].item()
        elif losses and self.readings.on_cpu and all(v.is_cpu for v in losses):
            loss = _total(losses)  # read now (no synchronisation on the CPU), and the graphs let go
        else:
            loss = _fold(losses)
        self.step_loss[i] = loss
        self.loss_read[i] = self.readings.add((loss,)) if loss is not None else None

    def _record_loss(self, tensor: torch.Tensor) -> None:
        if tensor.numel() != 1 or not tensor.is_floating_point():
            return
        scaled = self._scaled
        if scaled is not None and scaled[0]() is tensor:
            value = scaled[1]
            self._scaled = None
        elif self.readings.on_cpu:
            value = tensor  # read as a number at the optimizer step (`_take_losses`)
            pending = self._pending_losses
            if len(pending) >= _PENDING_LOSSES:  # backward after backward without a step: numbers, not graphs
                self._pending_losses = [torch.tensor(_total(pending))]
        else:
            value = tensor.detach()
            if value.dim():
                value = value.reshape(())
        if value is not None:
            self._pending_losses.append(value)

    def _wrap_train(self, original: Callable[..., Any]) -> Callable[..., Any]:
        probe = self

        def train(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
            result = original(module, *args, **kwargs)
            if probe.live and id(module) in probe.module_index:
                probe._dispatch("on_mode_change", module)
            return result
        return train

    def _wrap_module_zero_grad(self, original: Callable[..., Any]) -> Callable[..., Any]:
        probe = self

        def zero_grad(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
            result = original(module, *args, **kwargs)
            if probe.live and id(module) in probe.module_index:
                probe._dispatch("on_zero_grad", list(module.parameters()))
            return result
        return zero_grad

    def _wrap_opt_zero_grad(self, original: Callable[..., Any]) -> Callable[..., Any]:
        probe = self

        def zero_grad(optimizer: Optimizer, *args: Any, **kwargs: Any) -> Any:
            result = original(optimizer, *args, **kwargs)
            i = probe.opt_index.get(id(optimizer)) if probe.live else None
            if i is not None:
                probe._dispatch("on_zero_grad", probe.opt_params[i])
            return result
        return zero_grad

    def _wrap_sched_step(self, original: Callable[..., Any]) -> Callable[..., Any]:
        probe = self

        def step(scheduler: Any, *args: Any, **kwargs: Any) -> Any:
            result = original(scheduler, *args, **kwargs)
            i = probe.sched_index.get(id(scheduler)) if probe.live else None
            if i is not None:
                probe._dispatch("on_scheduler_step", i, scheduler)
            return result
        return step

    def _wrap_scaler_step(self, original: Callable[..., Any]) -> Callable[..., Any]:
        probe = self

        def step(scaler: Any, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
            i = probe.opt_index.get(id(optimizer)) if probe.live and scaler is probe.scaler else None
            if i is None:
                return original(scaler, optimizer, *args, **kwargs)
            before = probe._applied[i]
            result = original(scaler, optimizer, *args, **kwargs)
            if probe.live and probe._applied[i] == before:
                probe._serial += 1
                probe._take_losses(i)
                if i == 0:
                    probe.skipped += 1
                probe._dispatch("on_step_skipped", i, optimizer)
            return result
        return step

    def _wrap_scaler_scale(self, original: Callable[..., Any]) -> Callable[..., Any]:
        probe = self

        def scale(scaler: Any, outputs: Any, *args: Any, **kwargs: Any) -> Any:
            result = original(scaler, outputs, *args, **kwargs)
            if (probe.live and scaler is probe.scaler and isinstance(outputs, torch.Tensor)
                    and isinstance(result, torch.Tensor) and result is not outputs):
                loss = outputs.detach().reshape(()) if outputs.numel() == 1 else None
                probe._scaled = (weakref.ref(result), loss)
            return result
        return scale

    # Shared per-step statistics ---------------------------------------------------------
    def watched(self, i: int) -> bool:
        """Whether optimizer `i`'s coming step is one the sampled checks look at (`check_every`).

        Exact gradient norms cost as much as reading every gradient once: on a model that is cheap
        to run (a dense network on the CPU) that alone is a few percent of the step. The faults
        those checks look for last for many steps (a missing reset, graphs kept alive, a norm
        level), so one step in a few finds them; the first steps of each optimizer are all looked at.
        """
        watching = self._watching  # judged after each step (`_set_lean`)
        return watching[i] if i < len(watching) else True  # no optimizer known yet (discovery): its first step

    def grad_norms(self, i: int) -> "StepNorms":
        """Per-parameter gradient norms of optimizer `i` at this step, on the device (no sync).

        Computed once per step with one fused call (on the watched steps: see `watched`), queued once
        in `readings` and shared by the detectors that need them; empty when no parameter has a gradient.
        """
        cached = self._norms.get(i)
        if cached is not None and cached[0] == self._serial and cached[1].exact:
            return cached[1]
        every = [p.grad for p in self.opt_params[i]]
        grads = [g for g in every if g is not None and not g.is_sparse]
        if len(grads) == len(every):  # the usual case: one list of positions serves every step
            positions = self._all_positions[i]
        else:
            positions = [j for j, g in enumerate(every) if g is not None and not g.is_sparse]
        if not grads:
            return self._queue_norms(i, [], positions, exact=True)
        return self._queue_norms(i, self.cadence.norms(grads), positions, exact=True)

    def grad_checks(self, i: int) -> "StepNorms":
        """Values of optimizer `i`'s gradients at this step that are NaN/Inf when a gradient is.

        On a watched step the norms of all of them. On the others a value of the earliest small one
        (in the optimizer's order, usually the model's first bias or normalisation weight): a NaN/Inf
        born anywhere in backward flows down to the layers that ran before it, so the first layer's
        small gradient sees it at this step for the cost of one call. One that does not reach it (a
        branch beside the first layer, a fault confined to one weight's gradient) is applied, and
        the next step finds the weight non-finite, or the next watched step reads the gradient.
        """
        if self.watched(i):
            return self.grad_norms(i)
        cached = self._norms.get(i)
        if cached is not None and cached[0] == self._serial:
            return cached[1]
        params = self.opt_params[i]
        for j in self._small_positions[i]:
            g = params[j].grad
            if g is not None and not g.is_sparse:
                if self.readings.on_cpu:  # only its finiteness counts: a sum is cheaper than a norm
                    # read now (no synchronisation on the CPU): the step's checks judge the number at once
                    value: Any = (g.sum() if g.dtype is torch.float32 else finite_probe_value(g)).item()
                else:
                    value = fused_norms([g])[0]
                return self._queue_norms(i, [value], [j], exact=False)
        return self._queue_norms(i, [], [], exact=False)

    def _queue_norms(self, i: int, values: list[torch.Tensor], positions: list[int], exact: bool) -> "StepNorms":
        """Queue optimizer `i`'s gradient values of this step in `readings`: this step's, until the next."""
        result = _new(StepNorms, (values, positions, self.readings.add(values), exact))
        self._norms[i] = (self._serial, result)
        return result

    # Findings ---------------------------------------------------------------------------
    def report(self, code: str, message: str, *, where: str | None = None, step: int | None = None,
               **extra: Any) -> None:
        """Record a finding; the same (code, where) again only raises its count."""
        if not self.config.wants(code):
            return
        rank = self.rank if self.world_size > 1 else None
        key = (code, where, rank)
        if key in self._found:
            k = self._found[key]
            self.findings[k] = self.findings[k].with_(count=self.findings[k].count + 1)
            return
        info = page(code)
        finding = Finding(
            code=code, name=info.name, severity=info.severity, message=message,
            step=self.step if step is None else step, where=where, rank=rank, extra=extra,
        )
        self._add(finding, local=True)

    def _add(self, finding: Finding, local: bool) -> None:
        self._found[(finding.code, finding.where, finding.rank)] = len(self.findings)
        self.findings.append(finding)
        if local and self.world_size > 1:
            self._unsent.append(finding)
        if self.is_main:
            if self._log is not None:
                self._log.finding(finding)
            if self.on_finding == "warn" or finding.code == "LP001":
                warnings.warn(f"loopcheck: {finding}", ProbeWarning, stacklevel=2)
        if local and self.on_finding == "raise" and finding.code != "LP001":
            if self.world_size == 1:
                raise ProbeError(finding)
            # Under torch.distributed a rank that stopped alone would leave the others waiting in
            # the next collective: every rank stops at the next exchange of findings.
            if self._stop is None:
                self._stop = finding

    # Dispatch ---------------------------------------------------------------------------
    def _rebuild_calls(self, hook: str | None = None) -> None:
        """Who gets each hook method, on every step and on lean ones (see `_set_lean`); only `hook`'s
        when given (`listen`, which runs often)."""
        names = _HOOKS if hook is None else (hook,)
        if hook is None:  # each detector's own hook methods, looked up here only
            self._methods = {name: [(det, getattr(det, name)) for det in self.detectors
                                    if getattr(type(det), name) is not getattr(Detector, name)] for name in _HOOKS}
        # New mappings, not updates: a dispatch running now keeps the tuple it started with.
        full = {} if hook is None else dict(self._full_calls)
        for name in names:
            full[name] = tuple([(det, fn) for det, fn in self._methods[name] if det.enabled and name not in det.idle])
        if "on_step" in names:  # the steps of the other optimizers go only to the detectors that count them too
            names = (*names, "on_step_others")
            full["on_step_others"] = tuple([(det, fn) for det, fn in full["on_step"] if not det.first_optimizer_steps])
        lean = {} if hook is None else dict(self._lean_calls)
        for name in names:
            base = "on_step" if name == "on_step_others" else name
            lean[name] = tuple([(det, fn) for det, fn in full[name] if base not in det.watched_only])
        self._full_calls, self._lean_calls = full, lean
        self._calls = lean if self._lean else full
        if hook is None:
            self._norms_wanted = any(det.enabled and det.wants_norms for det in self.detectors)

    def _set_lean(self, i: int | None = None) -> None:
        """Between two steps that neither the sampled checks look at nor precede a sample (see
        `watched`), the hook methods that matter only on those steps (`Detector.watched_only`) are
        not called at all: most steps then cost only the checks that look at every step.

        Each optimizer's coming step is judged once, when it stepped (`i`), or every one when the
        set of optimizers changed: this runs after every step, with the caches cold, where each
        further call costs microseconds."""
        applied, check_every, every = self._applied, self.cadence.check_every, self.config.every
        if i is None:
            self._full, self._watching = [False] * len(applied), [False] * len(applied)
            indices: Any = range(len(applied))
        else:
            indices = (i,)
        full, watching = self._full, self._watching
        for j in indices:
            coming = applied[j] + 1
            watching[j] = watched_step(coming, check_every)
            full[j] = watching[j] or coming % every == 0
        lean = bool(full) and True not in full
        if lean is not self._lean:
            self._lean = lean
            self._calls = self._lean_calls if lean else self._full_calls

    def listen(self, det: Detector, hook: str, on: bool) -> None:
        """Start or stop calling `det`'s `hook` (a detector that needs a hook point only for a while)."""
        idle = det.idle | {hook} if not on else det.idle - {hook}
        if idle != det.idle:
            det.idle = frozenset(idle)
            self._rebuild_calls(hook)

    def _dispatch(self, event: str, *args: Any) -> None:
        for det, fn in self._calls[event]:
            try:
                fn(*args)
            except ProbeError:
                raise
            except Exception as err:
                self._fail(det, err)

    def _dispatch_backward(self, tensor: torch.Tensor) -> list[Detector] | None:
        """`on_backward` to its listeners; return those that asked for `after_backward` this time."""
        return [det for det, fn in self._calls["on_backward"] if self._guard(det, fn, tensor)] or None

    def _guard(self, det: Detector, fn: Callable[..., Any], *args: Any) -> Any:
        if not det.enabled:
            return None
        try:
            return fn(*args)
        except ProbeError:
            raise
        except Exception as err:
            self._fail(det, err)
            return None

    def _fail(self, det: Detector, err: BaseException) -> None:
        """A detector raised: switch it off, say so once; the training run goes on."""
        if not det.enabled:
            return
        det.enabled = False
        self._rebuild_calls()
        name = type(det).__name__
        self.report(
            "LP001",
            f"the {name} detector failed ({type(err).__name__}: {err}) and was switched off; "
            f"its checks ({', '.join(det.codes)}) did not run from step {self.step} on",
            where=name,
        )

    # Sampling and the end ---------------------------------------------------------------
    def _sample(self, final: bool, *, judge_only: bool = False) -> None:
        """Read the queued device values and let the detectors judge them; then log the metrics and,
        under torch.distributed, exchange findings (every rank samples at the same steps). A
        `judge_only` read (the sentinel's, on one rank) does neither."""
        fresh = not final or self.step > self._last_sample or self.step == 0
        if not judge_only:
            self._last_sample = self.step
        self._dispatch("on_sample", self.step, final)
        # Not in a `finally`: after a ProbeError the detectors that did not get to read keep
        # their slices, which stay valid until the queue is cleared at a later sample.
        self.readings.clear()
        self.steps = []
        if not fresh or judge_only:
            return
        metrics: dict[str, Any] = {"step": self.step, "skipped": self.skipped}
        for det in self.detectors:
            if det.enabled:
                values = self._guard(det, det.metrics)
                if values:
                    metrics.update(values)
        if self.world_size > 1 and (not final or self._clean_exit):
            metrics = self._exchange(metrics)
        if self._log is not None and self.is_main:
            self._log.metrics(metrics)

    def _exchange(self, metrics: dict[str, Any]) -> dict[str, Any]:
        sent, self._unsent = self._unsent, []
        merged, remote, stops = distributed.exchange(metrics, sent, self.rank, self._stop)
        for finding in remote:
            key = (finding.code, finding.where, finding.rank)
            if key in self._found:
                k = self._found[key]
                self.findings[k] = self.findings[k].with_(count=max(self.findings[k].count, finding.count))
            else:
                self._add(finding, local=False)
        if stops and self.on_finding == "raise":
            raise ProbeError(self._stop or stops[0])
        return merged

    _clean_exit = True

    def _finish(self, clean: bool) -> None:
        self._clean_exit = clean
        try:
            if self.optimizers:  # discovery may have found nothing that steps
                self._sample(final=True)
                self._dispatch("on_close")
        finally:
            if self._log is not None:
                self._log.end(self)
                self._log.close()
            if self.config.summary and self.is_main:
                print_summary(self)


def _wrap_getstate(original: Callable[..., Any]) -> Callable[..., Any]:
    def __getstate__(module: nn.Module) -> Any:
        return without_own_hooks(original(module))
    return __getstate__


_PENDING_LOSSES = 64  # losses of backward calls kept (CPU: with their graphs) until a step reads them
_SMALL = 4096  # values of a parameter whose gradient `Probe.grad_checks` may read at every step


# Builds a NamedTuple from a tuple of its fields in one C call: its own __new__ is a Python function,
# a frame more on the per-step path.
_new = tuple.__new__


class StepRecord(NamedTuple):
    """One optimizer step since the last sample (see `Probe.steps`)."""

    step: int  # the step number findings give (steps of the first optimizer, this one included)
    opt: int  # the optimizer's index
    loss: slice | None  # where the step's loss sits in `Probe.readings`
    norms: "StepNorms | None"  # its gradient norms (on watched steps, when a detector wants them)


class StepNorms(NamedTuple):
    """One optimizer's per-parameter gradient norms at one step (see `Probe.grad_norms`), or those
    of its earliest small gradient only (`Probe.grad_checks`)."""

    # 0-d tensors on the device: float32 L2 norms when `exact`; else only their finiteness counts
    # (on the CPU a plain sum, read as a number: see `grad_checks`)
    values: list[torch.Tensor | float]
    positions: list[int]  # the positions in `opt_params[i]` they cover
    read: slice  # where they sit in `Probe.readings`
    exact: bool  # every gradient's norm (not only the earliest small gradient's)


def _total(losses: list[torch.Tensor]) -> float:
    """The sum of CPU losses as a number (reading one costs no synchronisation there)."""
    return losses[0].item() if len(losses) == 1 else math.fsum(v.item() for v in losses)


def _fold(losses: list[torch.Tensor]) -> torch.Tensor | None:
    if not losses:
        return None
    if len(losses) == 1:
        return losses[0]
    with no_grad():
        total = losses[0].float()
        for v in losses[1:]:
            total = total + v
        return total


def _roots(tensors: Any) -> list[torch.Tensor]:
    """The tensors a backward call starts from (one tensor or a sequence of them)."""
    if isinstance(tensors, torch.Tensor):
        return [tensors]
    if isinstance(tensors, (list, tuple)):
        return [t for t in tensors if isinstance(t, torch.Tensor)]
    return []


def _release(probe: Probe) -> None:
    global _ACTIVE
    with _LOCK:
        if _ACTIVE is probe:
            _ACTIVE = None


def _as_list(value: Any, what: str, kind: type | None) -> list[Any]:
    if value is None:
        return []
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    for item in items:
        if kind is not None and not isinstance(item, kind):
            raise ProbeUsageError(f"{what} must be a {kind.__module__}.{kind.__qualname__} or a sequence of them, "
                                  f"not {type(item).__name__}")
    return items


def _check_distinct(items: list[Any], what: str) -> None:
    if len({id(x) for x in items}) != len(items):
        raise ProbeUsageError(f"the same {what} was passed to the probe twice")
    if what == "model":
        for a in items:
            for b in items:
                if a is not b and any(m is a for m in b.modules()):
                    raise ProbeUsageError(
                        f"model {type(a).__name__} is a submodule of {type(b).__name__}; pass only the outer model"
                    )


def _unwrap(model: nn.Module) -> nn.Module:
    """The module that does the work inside DDP / DataParallel / torch.compile wrappers."""
    for _ in range(4):
        inner = getattr(model, "_orig_mod", None)
        if isinstance(inner, nn.Module):
            model = inner
            continue
        if type(model).__name__ in ("DistributedDataParallel", "DataParallel") and isinstance(
            getattr(model, "module", None), nn.Module
        ):
            model = model.module
            continue
        break
    return model
