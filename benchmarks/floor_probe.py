"""The overhead floor: the per-step work no probe with loopcheck's defaults can skip, and nothing else.

`FloorProbe` watches a loop the way the default configuration must at the least, with plain
closures and no detectors: it holds each probed model's inputs and output until the optimizer
step (what a NaN/Inf is localised with at the step where it appears), keeps each backward's loss,
and at each optimizer step reads the losses and the sum of the earliest small gradient (under 4096
values) and tests them for NaN/Inf (the per-step sentinel). On the steps the default `check_every`
picks (each optimizer's first 8, then one in 4 to 16 as the norms' measured cost asks, see
`loopcheck.probe.cadence`) it queues exact per-parameter gradient norms in one fused call, read
with everything else every `every` steps. It reports nothing and changes nothing.

`probe_overhead.py --floor` times it next to the real probe, in the same rounds: the probe's
ratio less the floor's is what the probe's design costs beyond its defaults' necessary work.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch
from torch import nn

from loopcheck.probe.cadence import FIRST_WATCHED, Cadence, watched_step
from loopcheck.probe.config import ProbeConfig
from loopcheck.probe.probe import _SMALL


class FloorProbe:
    """A context manager: hooks in on enter, all of them out on exit."""

    def __init__(self, models: Sequence[nn.Module], optimizers: Sequence[torch.optim.Optimizer],
                 check_every: int | None = None) -> None:
        defaults = ProbeConfig()
        # `check_every` fixes the interval as the probe's option does (`probe_work.py` counts with it fixed)
        self.every, self.cadence = defaults.every, Cadence(check_every or defaults.check_every)
        self.models, self.optimizers = list(models), list(optimizers)
        self.params = [[p for group in opt.param_groups for p in group["params"]] for opt in self.optimizers]
        self.small = [[p for p in params if p.numel() < _SMALL] for params in self.params]
        self.applied = [0] * len(self.optimizers)
        self.held: list[Any] = []
        self.losses: list[torch.Tensor] = []
        self.queued: list[torch.Tensor] = []
        self.tripped = 0  # steps whose sentinel saw a NaN/Inf
        self._handles: list[Any] = []
        self._backward = torch.autograd.backward

    def __enter__(self) -> "FloorProbe":
        for model in self.models:
            self._handles.append(model.register_forward_pre_hook(self._hold_inputs))
            self._handles.append(model.register_forward_hook(self._hold_output))
        for i, opt in enumerate(self.optimizers):
            self._handles.append(opt.register_step_pre_hook(self._step_pre(i)))
            self._handles.append(opt.register_step_post_hook(self._step_post(i)))
        original, losses = self._backward, self.losses

        def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
            if type(tensors) is torch.Tensor and tensors.numel() == 1:
                losses.append(tensors)
            return original(tensors, *args, **kwargs)
        torch.autograd.backward = backward
        return self

    def __exit__(self, *exc: Any) -> None:
        torch.autograd.backward = self._backward
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self.held.clear()
        self.losses.clear()
        self._read()

    def _hold_inputs(self, module: nn.Module, args: Any) -> None:
        self.held.append(args)

    def _hold_output(self, module: nn.Module, args: Any, output: Any) -> None:
        self.held.append(output)

    def _step_pre(self, i: int) -> Any:
        def hook(optimizer: Any, args: Any, kwargs: Any) -> None:
            with torch.no_grad():
                values = [loss.item() for loss in self.losses]
                if watched_step(self.applied[i] + 1, self.cadence.check_every):
                    grads = [p.grad for p in self.params[i] if p.grad is not None]
                    if grads:
                        norms = self.cadence.norms(grads)
                        self.queued.extend(norms)
                        values.append(torch.stack(norms).sum().item())  # the sentinel reads them too
                else:  # the earliest small gradient there is, as `Probe.grad_checks` reads it
                    grad = next((p.grad for p in self.small[i] if p.grad is not None), None)
                    if grad is not None:
                        values.append(grad.sum().item())
            self.losses.clear()
            self.held.clear()
            if not math.isfinite(sum(values)):
                self.tripped += 1
        return hook

    def _step_post(self, i: int) -> Any:
        def hook(optimizer: Any, args: Any, kwargs: Any) -> None:
            self.applied[i] += 1
            if i == 0 and self.applied[0] == FIRST_WATCHED:  # the interval is measured from here, as the probe's
                self.cadence.start(sum(self.applied))
            if i == 0 and self.applied[0] % self.every == 0:
                self.cadence.retune(sum(self.applied))
                self._read()
        return hook

    def _read(self) -> None:
        """The periodic read of the queued norms (one stack and one host read)."""
        if self.queued:
            torch.stack(self.queued).tolist()
            self.queued.clear()
