"""LP401 training in eval mode; LP402 evaluation (no grad) in train mode.

Mode-dependent modules are dropout, batch norm (and instance norm with running statistics),
attention and RNN layers with dropout. The state of a model is computed again only after a
train()/eval() call on it, or at a sample when one of the flags it was computed from changed
(`requires_grad` when a backbone is unfrozen), so a forward pass costs one flag check.

LP402 has two shapes: two or more no-grad passes in a row in train mode (an evaluation loop), and
a single one between two optimizer steps when the steps before it had none (one validation batch
per epoch, or a forward every N steps). A no-grad pass in every step (pseudo-labels, targets
computed in train mode) is part of training and not reported. Messages describe only the layers
the model has: dropout, normalisation with running statistics.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.dropout import _DropoutNd
from torch.nn.modules.instancenorm import _InstanceNorm

from loopcheck.probe.detectors.base import Detector

_NORMS = (_BatchNorm, _InstanceNorm, nn.GroupNorm, nn.LayerNorm)


def mode_dependent(module: nn.Module) -> bool:
    if isinstance(module, (_DropoutNd, _BatchNorm)):
        return True
    if isinstance(module, _InstanceNorm):
        return bool(module.track_running_stats)
    if isinstance(module, (nn.MultiheadAttention, nn.RNNBase)):
        return float(getattr(module, "dropout", 0.0) or 0.0) > 0
    return False


def _behaviour(modules: list[nn.Module], training: bool) -> str:
    """What the model's mode-dependent layers do in the given mode, naming only the kinds it has."""
    dropout = any(isinstance(m, (_DropoutNd, nn.MultiheadAttention, nn.RNNBase)) for m in modules)
    norms = any(isinstance(m, (_BatchNorm, _InstanceNorm)) for m in modules)
    parts = []
    if training:
        if dropout:
            parts.append("dropout active")
        if norms:
            parts.append("normalisation with the batch's statistics, updating the running statistics "
                         "with evaluation data")
    else:
        if dropout:
            parts.append("no dropout")
        if norms:
            parts.append("normalisation with frozen running statistics")
    return ", ".join(parts) or "their other mode"


@dataclass
class _State:
    root_training: bool
    dependent: list[str] = field(default_factory=list)  # mode-dependent module names
    dependent_modules: list[nn.Module] = field(default_factory=list)
    eval_subtrees: list[str] = field(default_factory=list)  # trainable subtrees in eval under a training root
    train_dependent: list[str] = field(default_factory=list)  # mode-dependent modules in train mode
    train_modules: list[nn.Module] = field(default_factory=list)
    recalibrating: bool = False  # every batch norm averages cumulatively (swa_utils.update_bn)
    # what it was computed from that can change without a train()/eval() call, and its flags then
    # (a layer added or replaced later is seen at the next train()/eval() call)
    modules: list[nn.Module] = field(default_factory=list)
    params: list[nn.Parameter] = field(default_factory=list)
    norms: list[nn.Module] = field(default_factory=list)
    flags: tuple[bool, ...] = ()

    def current_flags(self) -> tuple[bool, ...]:
        """Training flags, requires_grad and cumulative averaging, read now (one pass, no module walk)."""
        return (*[m.training for m in self.modules], *[p.requires_grad for p in self.params],
                *[m.momentum is None for m in self.norms])


class ModeDetector(Detector):
    codes = ("LP401", "LP402")

    def __init__(self, probe: Any) -> None:
        super().__init__(probe)
        self._states: dict[int, _State] = {}
        # Roots whose backward would be trained in eval mode (LP401), found again after each
        # train()/eval() call and sample; None until then. Usually empty: a forward costs one test.
        self._alarm: set[int] | None = None
        self._trained: set[int] = set()  # such roots with a grad-enabled forward since the last backward
        self._no_grad_run: dict[int, int] = defaultdict(int)
        self._evaluated: set[int] = set()  # roots with a no-grad pass in train mode in this step
        self._intervals = 0  # steps ended so far
        self._last_eval: dict[int, int] = {}  # per root: the last step (interval) with such a pass
        self.idle = frozenset({"on_backward"})  # until a forward is made where training in eval mode is possible

    def _state(self, i: int) -> _State:
        state = self._states.get(i)
        if state is None:
            state = self._states[i] = self._compute(i)
        return state

    def _compute(self, i: int) -> _State:
        root = self.probe.models[i]
        prefix = self.probe.root_names[i]
        state = _State(root_training=root.training)
        norms = []
        parents: dict[int, nn.Module] = {}
        for name, module in root.named_modules():
            for child in module.children():
                parents.setdefault(id(child), module)
            qual = ".".join(x for x in (prefix, name) if x) or type(root).__name__
            if mode_dependent(module):
                state.dependent.append(qual)
                state.dependent_modules.append(module)
                if module.training:
                    state.train_dependent.append(qual)
                    state.train_modules.append(module)
            if isinstance(module, _BatchNorm):
                norms.append(module)
            parent = parents.get(id(module))
            if (root.training and not module.training and parent is not None and parent.training
                    and not isinstance(module, _NORMS)
                    and any(p.requires_grad for p in module.parameters())
                    and any(mode_dependent(m) for m in module.modules())):
                state.eval_subtrees.append(qual)
        state.recalibrating = bool(norms) and all(m.momentum is None for m in norms)
        state.modules, state.params, state.norms = list(root.modules()), list(root.parameters()), norms
        state.flags = state.current_flags()
        return state

    def on_mode_change(self, module: nn.Module) -> None:
        self._states.clear()
        self._alarm = None

    def on_sample(self, step: int, final: bool) -> None:
        # requires_grad may have changed (unfreezing), or a flag set without train()/eval()
        stale = [i for i, state in self._states.items() if state.current_flags() != state.flags]
        if stale:
            for i in stale:
                del self._states[i]
            self._alarm = None

    def _find_alarm(self) -> set[int]:
        self._alarm = {i for i in range(len(self.probe.models))
                       if (state := self._state(i)).eval_subtrees or (not state.root_training and state.dependent)}
        return self._alarm

    def on_forward_pre(self, root: int, module: nn.Module, args: tuple[Any, ...]) -> None:
        if torch.is_grad_enabled():
            alarm = self._alarm if self._alarm is not None else self._find_alarm()
            if alarm and root in alarm:
                if not self._trained:  # its backward is judged: listen to the next one
                    self.probe.listen(self, "on_backward", True)
                self._trained.add(root)
            if self._no_grad_run:
                self._no_grad_run.clear()  # training goes on: a teacher's pass before it is not evaluation
            return
        state = self._state(root)
        if not state.root_training or not state.train_dependent or state.recalibrating:
            self._no_grad_run[root] = 0
            return
        self._no_grad_run[root] += 1
        self._evaluated.add(root)
        if self._no_grad_run[root] >= 2:
            self._report_eval(root, state, "forward passes without gradients (evaluation) ran")

    def _report_eval(self, root: int, state: _State, what: str, step: int | None = None) -> None:
        name = self.probe.root_names[root] or type(self.probe.models[root]).__name__
        layers = ", ".join(state.train_dependent[:3])
        self.report(
            "LP402",
            f"{what} while {name} was in train mode: {layers}{' ...' if len(state.train_dependent) > 3 else ''} "
            f"behave as in training ({_behaviour(state.train_modules, True)}); call model.eval() before "
            f"evaluating and model.train() after",
            where=name, step=step,
        )

    def on_step(self, index: int, optimizer: Any) -> None:
        if self._no_grad_run:
            self._no_grad_run.clear()
        if index == 0:
            self._end_interval(self.probe.step - 1)

    def on_close(self) -> None:
        self._end_interval(self.probe.step)

    def _end_interval(self, step: int) -> None:
        """A single no-grad pass in train mode in this step, after steps without one: evaluation."""
        interval = self._intervals
        self._intervals += 1
        if not self._evaluated:
            return
        evaluated, self._evaluated = self._evaluated, set()
        for root in evaluated:
            if interval - self._last_eval.get(root, -1) - 1 >= 2:  # steps in a row without one
                state = self._state(root)
                if state.root_training and state.train_dependent and not state.recalibrating:
                    self._report_eval(root, state, "a forward pass without gradients (evaluation) ran "
                                                   "after steps without one", step)
            self._last_eval[root] = interval

    def on_backward(self, tensor: torch.Tensor) -> None:
        self.probe.listen(self, "on_backward", False)
        if not self._trained:
            return
        roots, self._trained = self._trained, set()
        for i in roots:
            state = self._state(i)
            if (state.root_training or not state.dependent) and not state.eval_subtrees:
                continue
            name = self.probe.root_names[i] or type(self.probe.models[i]).__name__
            if not state.root_training and state.dependent:
                layers = ", ".join(state.dependent[:3])
                self.report(
                    "LP401",
                    f"backward ran on a forward pass made in eval mode: {layers}"
                    f"{' ...' if len(state.dependent) > 3 else ''} behave as at evaluation "
                    f"({_behaviour(state.dependent_modules, False)}); model.train() is missing after the last "
                    f"evaluation",
                    where=name,
                )
            for sub in state.eval_subtrees:
                self.report(
                    "LP401",
                    f"{sub} has trainable parameters but is in eval mode while {name} trains: it is "
                    f"trained with its evaluation behaviour (call .train() on it, or freeze it with "
                    f"requires_grad_(False))",
                    where=sub,
                )
