"""The Detector base: hook methods that do nothing; a detector overrides what it needs.

The Probe calls a hook method only on detectors that override it (and do not list it in
`idle`), so an unused hook point costs nothing. A detector keeps its own state and reports
through `self.report(...)`; an exception raised inside any of its methods switches it off (the
Probe reports that once).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from torch import nn
    from torch.optim import Optimizer

    from loopcheck.probe.probe import Probe


class Detector:
    """One family of runtime checks. Subclasses set `codes` and override hook methods."""

    codes: tuple[str, ...] = ()
    # Hook methods this instance overrides but does not need with its configuration.
    idle: frozenset[str] = frozenset()
    # Whether it reads the per-parameter gradient norms of each step (`Probe.grad_norms`): the
    # probe computes them at every optimizer step only when some detector does.
    wants_norms: bool = False
    # Whether `on_step` needs only the steps of the first optimizer (the probe's step clock).
    first_optimizer_steps: bool = False
    # Hook methods that only matter on the steps `Probe.watched` names and on those a sample
    # follows: on the other steps the probe does not call them (not `on_step`, which starts them).
    watched_only: frozenset[str] = frozenset()

    def __init__(self, probe: "Probe") -> None:
        self.probe = probe
        self.config = probe.config
        self.enabled = True

    # Life cycle -------------------------------------------------------------------------
    def attach(self) -> None:
        """Called once on enter, after the Probe's own hooks are in place."""

    def on_sample(self, step: int, final: bool) -> None:
        """Every `every` optimizer steps (and once at exit, final=True): read device statistics."""

    def on_close(self) -> None:
        """At exit, after the last sample: end-of-run checks."""

    def metrics(self) -> dict[str, Any]:
        """Values for the run log's metric record of this sample."""
        return {}

    # Hook points ------------------------------------------------------------------------
    def on_forward_pre(self, root: int, module: "nn.Module", args: tuple[Any, ...]) -> None:
        """A model passed to the probe starts a forward pass on the positional inputs `args`."""

    def on_forward(self, root: int, module: "nn.Module", output: Any) -> None:
        """A model passed to the probe finished a forward pass."""

    def on_backward(self, tensor: "torch.Tensor") -> bool | None:
        """`tensor.backward()` is about to run; return True to get `after_backward` when it returns."""

    def after_backward(self, tensor: "torch.Tensor") -> None:
        """`tensor.backward()` returned (only when this detector's `on_backward` asked for it)."""

    def on_zero_grad(self, params: list["torch.nn.Parameter"]) -> None:
        """zero_grad() of an optimizer or a model reset the gradients of `params`."""

    def on_step_pre(self, index: int, optimizer: "Optimizer") -> None:
        """Optimizer `index` is about to apply a step (gradients are final and unscaled)."""

    def on_step(self, index: int, optimizer: "Optimizer") -> None:
        """Optimizer `index` applied a step."""

    def on_step_skipped(self, index: int, optimizer: "Optimizer") -> None:
        """The GradScaler skipped optimizer `index`'s step (inf/NaN gradients)."""

    def on_closure(self, index: int, optimizer: "Optimizer", first: bool) -> None:
        """A closure evaluation inside `optimizer.step(closure)` returned; after the first one the
        step's `on_step_pre` has run, the later ones are the optimizer's own (a line search)."""

    def on_scheduler_step(self, index: int, scheduler: Any) -> None:
        """Scheduler `index` stepped."""

    def on_mode_change(self, module: "nn.Module") -> None:
        """train()/eval() was called on one of the probed models or their submodules."""

    # Reporting --------------------------------------------------------------------------
    def report(self, code: str, message: str, *, where: str | None = None, step: int | None = None,
               **extra: Any) -> None:
        self.probe.report(code, message, where=where, step=step, **extra)
