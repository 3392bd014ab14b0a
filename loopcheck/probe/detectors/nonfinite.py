"""LP103 / LP104 / LP105: NaN and Inf in forward outputs, gradients and the loss.

The cheap path, every step and without a host sync: the output of each module that needs it is
reduced to one number whose finiteness is that of the whole tensor, and so is the input batch on
an accelerator (on the CPU, where the verdict comes at the same step's optimizer step, a training
batch is only held weakly and a probed model's training output held until then, both checked only
when localising: a NaN/Inf in the output reaches the loss or the gradients the sentinel reads);
torch's dense layers and normalisations are not reduced but judged by their parameters (see
`loopcheck.probe.layers`); with `backward_hooks`, a tensor hook on each output does the same for
its gradient. At the optimizer step these numbers join the probe's queue of device values
(`Probe.readings`), next to the loss and the gradients' values (`Probe.grad_checks`: every
gradient's norm on a watched step, the earliest small one's on the others), and the probe's sentinel
looks at the step's values at once on the CPU (two steps later on CUDA). Only when something is non-finite does the detector walk them, in execution order, to
name the module (forward), the module whose gradient became non-finite (backward) or the loss.
The dense layers' parameters are checked then, on the CPU before the step's update, so they still
hold the values the forward pass used; on an accelerator, where the verdict comes after updates,
their largest magnitudes are queued every step instead (one fused call). GradScaler skips are
normal overflow handling: their records are dropped, and only a persistent run of skips is
reported.

Lean until armed: on the CPU the dense layers and dense groups carry no hook at all (a hook costs
every call of its module, through torch's slow call path). A probed model's forward records that
it started and its output; when a step turns out non-finite, its covered layers are put into the
step's records in the order they complete in its forward (children before their parent, in
registration order) and judged by their parameters, and, for a normalisation in eval mode, by its
running statistics. The layers get their hooks (`_arm`) when that order cannot be relied on: a
step whose loss came without a probed model's forward (the loop calls the layers itself), a
float16 output (float16 layers overflow: their outputs are reduced), an accelerator or
`backward_hooks`.
"""

from __future__ import annotations

import math
import weakref
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import nn

from loopcheck.probe import layers
from loopcheck.probe.patching import own
from loopcheck.probe.detectors.base import Detector
from loopcheck.probe.stats import finite_probe_value, float_tensors, host_read, max_abs, stack_scalars

_UNJUDGED = torch.zeros(())  # the value of a held output written in place since: not judged
_FOLD_AT = 4096  # forward records kept before they are folded into a block (long eval loops)

# Kinds of forward records. OUTPUT and INPUT carry a reduced value; COVERED records that a dense
# layer ran (judged by its parameters); PASSED that a module returned such a layer's output unchanged.
_OUTPUT, _INPUT, _COVERED, _PASSED, _INPUT_HELD, _ENTER, _OUTPUT_HELD = 0, 1, 2, 3, 4, 5, 6
_REDUCED = (_OUTPUT, _INPUT)
_CHANGED = 7  # not a record: a held output found non-finite after it was written in place (a fault's kind)
# _ENTER: a probed model's forward starts (its covered layers run after it, see `_expand`).
# _INPUT_HELD (CPU, training forwards): a probed model's input batch, not reduced but held weakly
# with its version and checked only when localising, in the same step: the loop still holds its
# batch then.
# _OUTPUT_HELD (CPU, training forwards): a probed model's output, or that of a layer its parameters
# cannot vouch for, not reduced but held until the sentinel judged its step, and checked only when
# localising.
# float16 overflows easily: a dense layer's float16 output is reduced, not trusted
_TRUSTED_DTYPES = frozenset((torch.float32, torch.float64, torch.bfloat16))
_RUNNING = ("running_mean", "running_var")


@dataclass
class _Group:
    """A dense group (see `loopcheck.probe.layers`) and the hooks that watch it right now."""

    index: int  # module index of the Sequential
    module: nn.Module
    members: list[int]  # module indices of its covered layers, in execution order
    norms: list[nn.Module]  # its layers that may normalise with running statistics
    last_covered: bool  # its output is its last covered layer's output
    whole: bool = False  # one hook on the group (True) or one on each covered layer (False)
    split: bool = False  # seen where it cannot be trusted as a whole: keep the layers' own hooks
    handles: list[Any] = field(default_factory=list)


@dataclass
class _Block:
    """One step's records; `reads` are the slices of `Probe.readings` that hold, in this order: the
    reduced forward records, the loss, the output-gradient records, the largest magnitudes of the
    dense layers' parameters, the gradient norms."""

    step: int
    opt: int | None
    reads: list[slice]
    records: list[tuple[int, int]]  # (module index, kind) of each forward record, in completion order
    loss: bool
    backward: list[int]  # module index of each output-gradient record, in backward order
    ran: list[int]  # module indices of the covered layers that ran, judged by their parameters
    state: list[tuple[int, torch.Tensor]] | None  # (module index, parameter) of each queued parameter check
    norms: list[int]  # positions in opt_params[opt] of the gradient norm entries
    held: list[tuple[Any, int]] = field(default_factory=list)  # (weak reference, version) of each held input
    lean: bool = False  # recorded without the covered layers' hooks: `_expand` puts them in
    every_gradient: bool = True  # `norms` cover every gradient, not only the earliest small one (`Probe.grad_checks`)
    # (output, version) of each held output; None once let go (its step was judged)
    outputs: list[tuple[torch.Tensor, int]] | None = field(default_factory=list)

    # Split only when localising: a step keeps its records as they came.
    @property
    def kinds(self) -> list[int]:
        return [kind for _, kind in self.records]

    @property
    def forward(self) -> list[int]:
        return [index for index, _ in self.records]


class NonFiniteDetector(Detector):
    codes = ("LP103", "LP104", "LP105")
    first_optimizer_steps = True  # `on_step` counts the GradScaler's skips of the first optimizer

    def __init__(self, probe: Any) -> None:
        super().__init__(probe)
        self._fwd: list[torch.Tensor] = []
        # (output, its version) of the probed models' training outputs held since the last block (CPU)
        self._outputs: list[tuple[torch.Tensor, int]] = []
        self._holding: list[_Block] = []  # blocks whose outputs are held (until the next forward or fold)
        self._recs: list[tuple[int, int]] = []  # (module index, kind) of each forward record
        self._held: list[tuple[Any, int]] = []
        self._ran: dict[int, None] = {}  # covered modules that ran since the last block, in order
        self._bwd: list[torch.Tensor] = []
        self._bwd_idx: list[int] = []
        self._blocks: list[_Block] = []
        self._incident: tuple[str, str | None, str] | None = None
        self._streak = 0
        self._recent: deque[bool] = deque(maxlen=self.config.skip_window)
        self._persistent_reported = False
        self._module_by_name = {qual: i for i, (qual, _) in enumerate(probe.modules)}
        self._depth = 0  # probed models whose forward is running
        # The output recorded last, weakly: a strong reference would keep a large activation
        # alive past its use, and the next one could not reuse its memory.
        self._last: Callable[[], torch.Tensor | None] = _dead
        self._last_version = 0
        self._last_reduced = False
        self._groups: list[_Group] = []
        self._replan = False  # a train()/eval() call may have changed which groups are trusted whole
        self._root_index = [probe.module_index[id(m)] for m in probe.models]
        # each probed model's records of a forward's start, its held input and output, built once
        self._enter_recs = [(index, _ENTER) for index in self._root_index]
        self._input_recs = [(index, _INPUT_HELD) for index in self._root_index]
        self._output_recs = [(index, _OUTPUT_HELD) for index in self._root_index]
        # On the CPU the probe reads each step's values at its optimizer step (`Probe._sentinel`),
        # before the update: the parameters of the layers that ran are still those of the forward
        # pass, so they are checked only when localising. On an accelerator the values are read
        # later, after updates, so each step queues its parameter check (one fused kernel).
        self._eager_state = probe.off_cpu
        # a probed model's training output is held, not reduced (see `on_forward`)
        self._holds_outputs = not self._eager_state and not self.config.backward_hooks
        self._root_hooks: dict[int, Callable[..., None]] = {}
        # Lean until armed (see `_arm`): the covered layers and dense groups have no hooks; a step
        # that turns out non-finite is localised with each probed model's covered layers judged
        # by their parameters, in the order they complete in its forward.
        self._armed = False
        self._arm_next = False  # arm at the next step boundary
        self._entered = False  # a probed model's forward started since the last block
        self._folded = False  # a step was folded already (a model found by discovery came mid-step)
        self._covered_of: dict[int, list[int]] = {}  # root module index -> its covered layers, in completion order
        self._rank: dict[int, int] = {}  # module index -> its place in that order
        self._covered_alone: list[int] = []  # covered layers outside dense groups (hooked when armed)
        self._stack: Any = None
        idle = set() if self.config.localize else {"on_forward_pre", "on_forward"}
        if probe.scaler is None:
            idle.add("on_step")  # it counts the GradScaler's skips (a scaler found later makes a new detector)
        self.idle = frozenset(idle)

    def attach(self) -> None:
        if not self.config.localize:
            return
        probe = self.probe
        hooks = self._stack = probe.hooks
        roots = {id(m) for m in probe.models}
        grouped = self._find_groups(roots)
        for index, (_, module) in enumerate(probe.modules):
            root = id(module) in roots
            if not root and (index in grouped or layers.is_safe(module) or layers.is_pass_through(module)):
                continue
            if root:  # the probe's own hook on a probed model calls it (`on_forward`): one hook less per forward
                self._root_hooks[probe.root_index[id(module)]] = self._forward_hook(index, module, True, False)
                continue
            if layers.is_covered(module):
                self._covered_alone.append(index)
                continue
            hooks.enter_context(module.register_forward_hook(own(self._forward_hook(index, module, False, False))))
        self._order_covered(grouped)
        half = any(p.dtype is torch.float16 for index in [*grouped, *self._covered_alone]
                   for p in probe.modules[index][1].parameters(recurse=False))
        # Armed from the start: a gradient hook per layer output, values read after updates (an
        # accelerator: parameters are no longer those of the forward pass), float16 layers (which
        # overflow: their outputs are reduced).
        if self.config.backward_hooks or self._eager_state or half:
            self._arm()

    def _order_covered(self, grouped: set[int]) -> None:
        """Each probed model's covered layers in completion order: children before their parent,
        siblings in registration order (the order of a forward that calls them as declared)."""
        probe = self.probe
        covered = grouped | set(self._covered_alone)
        rank = self._rank
        for root in probe.models:
            order: list[int] = []

            def visit(module: nn.Module) -> None:
                for child in module._modules.values():
                    if child is not None and probe.module_index.get(id(child), -1) not in rank:
                        visit(child)
                index = probe.module_index[id(module)]
                if index not in rank:
                    rank[index] = len(rank)
                    if index in covered:
                        order.append(index)
            visit(root)
            self._covered_of[probe.module_index[id(root)]] = order

    def _arm(self) -> None:
        """Hook the covered layers and dense groups: each forward records which of them ran, in order."""
        if self._armed or self._stack is None:
            return
        self._armed = True
        modules = self.probe.modules
        for index in self._covered_alone:
            module = modules[index][1]
            self._stack.enter_context(module.register_forward_hook(own(self._forward_hook(index, module, False, True))))
        if self._groups:
            self._stack.callback(self._unhook_groups)
            for group in self._groups:
                self._plan(group)

    # Dense groups: one hook for a Sequential of dense layers while it can be trusted whole -----
    def _find_groups(self, roots: set[int]) -> set[int]:
        """Collect the outermost dense groups; return the module indices of their covered layers."""
        if self.config.backward_hooks:
            return set()  # every layer output needs its own gradient hook
        probe = self.probe
        parents: dict[int, int] = {}
        for _, module in probe.modules:
            for child in module._modules.values():
                if child is not None:
                    parents[id(child)] = parents.get(id(child), 0) + 1
        grouped: set[int] = set()
        for index, (_, module) in enumerate(probe.modules):
            if index in grouped:
                continue
            # A probed model can be a dense group too (a GAN's generator and discriminator often
            # are): its group hook runs before its own hook, which still reduces its output.
            members = layers.dense_group(module)
            if not members:
                continue
            inside = list(module.modules())[1:]
            if any(parents.get(id(m), 0) != 1 for m in inside):
                continue  # a layer also used elsewhere must report every call of its own
            last = module
            while layers.is_pass_through(last):
                last = last[-1]
            group = _Group(index, module, [probe.module_index[id(m)] for m in members],
                           [m for m in members if isinstance(m, layers.RUNNING_STATS)], layers.is_covered(last))
            self._groups.append(group)
            grouped.update(probe.module_index[id(m)] for m in inside)
        return {i for group in self._groups for i in group.members}

    def _plan(self, group: _Group) -> None:
        """Hook the group whole or its layers one by one, whichever it needs now."""
        whole = not group.split and not _running_stats_in_use(group.norms)
        if whole == group.whole and group.handles:
            return
        self._unhook(group)
        group.whole = whole
        if whole:
            group.handles.append(group.module.register_forward_hook(own(self._group_hook(group)), prepend=True))
        else:
            modules = self.probe.modules
            for index in group.members:
                module = modules[index][1]
                group.handles.append(module.register_forward_hook(own(self._forward_hook(index, module, False, True))))

    def _unhook(self, group: _Group) -> None:
        for handle in group.handles:
            handle.remove()
        group.handles = []

    def _unhook_groups(self) -> None:
        for group in self._groups:
            self._unhook(group)

    def on_mode_change(self, module: nn.Module) -> None:
        if self._groups and self._armed:
            self._replan = True

    def _group_hook(self, group: _Group) -> Callable[..., None]:
        ran = self._ran
        members = group.members
        ran_all = dict.fromkeys(members)
        records = [(index, _COVERED) for index in members]
        norms = group.norms
        probe = self.probe

        def hook(module: nn.Module, args: Any, output: Any) -> None:
            if not (self.enabled and probe.live):
                return
            try:
                if (self._depth > 0 and type(output) is torch.Tensor and output.dtype in _TRUSTED_DTYPES
                        and not (norms and _running_stats_in_use(norms))):
                    if len(self._recs) + len(members) < _FOLD_AT:
                        ran.update(ran_all)
                        self._recs.extend(records)
                    else:  # a fold comes within the group: note the layers one by one
                        for index in members:
                            ran[index] = None
                            self._note(index, _COVERED)
                    if group.last_covered:
                        self._remember(output, _version(output), reduced=False)
                    else:
                        self._last = _dead
                    return
                # This call is judged by the group's output; from now on each layer reports itself.
                group.split = self._depth == 0 or not (type(output) is torch.Tensor
                                                        and output.dtype in _TRUSTED_DTYPES)
                self._plan(group)
                for t in float_tensors(output):
                    self._record_forward(t, group.index, _OUTPUT)
                    self._remember(t, _version(t), reduced=True)
            except Exception as err:
                self.probe._fail(self, err)
        return hook

    # Recording (per forward / backward, no sync) --------------------------------------------
    def on_forward_pre(self, root: int, module: nn.Module, args: tuple[Any, ...]) -> None:
        if self._holding:
            self._let_go()
        self._depth += 1
        self._last = _dead  # a new forward pass: nothing before it is a child's output
        self._entered = True
        recs = self._recs
        recs.append(self._enter_recs[root])
        if self._replan:
            self._replan = False
            for group in self._groups:
                self._plan(group)
        if len(args) == 1 and type(t := args[0]) is torch.Tensor:  # the usual call: one batch
            if not t.is_floating_point():
                inputs: Any = ()
            elif not self._eager_state and torch.is_grad_enabled() and not t.is_inference():
                # kept short: this runs at every training forward on the CPU (see below)
                self._held.append((weakref.ref(t), t._version))
                recs.append(self._input_recs[root])
                if len(recs) >= _FOLD_AT:
                    self._note_fold()
                return
            else:
                inputs = args
        else:
            inputs = float_tensors(args)
        index = self._root_index[root]
        if inputs:
            # Held only in a training forward on the CPU, judged at its optimizer step; the verdict
            # of an evaluation pass, or on an accelerator, comes later: reduce it now.
            hold = not self._eager_state and torch.is_grad_enabled()
            for t in inputs:
                if hold and not t.is_inference():
                    self._held.append((weakref.ref(t), t._version))
                    recs.append(self._input_recs[root])
                else:
                    self._record_forward(t, index, _INPUT)
        if len(recs) >= _FOLD_AT:
            self._note_fold()

    def on_forward(self, root: int, module: nn.Module, output: Any) -> None:
        if self._holds_outputs and torch.is_grad_enabled():
            # A training forward on the CPU: its output is not reduced but held until the
            # sentinel judged its step (at the optimizer step). A NaN/Inf in it reaches the loss
            # or the gradients the sentinel reads, and is then localised.
            if type(output) is torch.Tensor:  # the usual model, kept short: this runs at every forward
                if output.dtype is torch.float32:
                    if self._depth > 0:
                        self._depth -= 1
                    self._outputs.append((output, _version(output)))
                    self._recs.append(self._output_recs[root])  # the next forward checks for a fold
                    return
                tensors: Any = ()
            else:
                tensors = float_tensors(output)
                if not all(t.dtype is torch.float32 for t in tensors):
                    tensors = ()
            if tensors:
                if self._depth > 0:
                    self._depth -= 1
                for t in tensors:
                    self._outputs.append((t, _version(t)))
                    self._recs.append(self._output_recs[root])  # the next forward checks for a fold
                return
        self._root_hooks[root](module, (), output)  # the rest, as a probed model's own hook

    def _forward_hook(self, index: int, module: nn.Module, root: bool, covered: bool) -> Callable[..., None]:
        grad_hook = self._grad_hook(index) if self.config.backward_hooks else None
        ran = self._ran
        stats = covered and isinstance(module, layers.RUNNING_STATS)

        def hook(module: nn.Module, args: Any, output: Any) -> None:
            if not (self.enabled and self.probe.live):
                return
            try:
                if root:
                    if self._depth > 0:
                        self._depth -= 1
                    # (a training output on the CPU was held by `on_forward`, which calls this)
                    if type(output) is torch.Tensor and grad_hook is None and output.dtype is torch.float32:
                        # the usual probed model: one output, always reduced (nothing outside
                        # a probed model returns it, so it need not be remembered)
                        if self._last is not _dead and self._repeat(output, _version(output), True) is not None:
                            self._fwd.append(self._fwd[-1])
                        else:
                            self._fwd.append(finite_probe_value(output))
                        self._note(index, _OUTPUT)
                        return
                trusted = covered and self._depth > 0 and not (stats and layers.uses_running_stats(module))
                if (trusted and grad_hook is None and type(output) is torch.Tensor
                        and output.dtype in _TRUSTED_DTYPES):
                    # the common case, kept short: a dense layer inside the model's forward
                    ran[index] = None
                    self._note(index, _COVERED)
                    self._remember(output, _version(output), reduced=False)
                    return
                # A layer's training output on the CPU is held like the model's own (see
                # `on_forward`): a NaN/Inf in it that matters reaches the loss or the gradients the
                # sentinel reads, and the output is reduced only when localising.
                hold = not root and self._holds_outputs and not self._armed and torch.is_grad_enabled()
                for t in float_tensors(output):
                    version = _version(t)
                    if root and t.dtype not in _TRUSTED_DTYPES and not self._armed:
                        self._arm_next = True  # float16 layers inside (autocast): check them one by one
                    if trusted and t.dtype is not torch.float16:  # float16 overflows: reduce it
                        ran[index] = None
                        self._note(index, _COVERED)
                        self._remember(t, version, reduced=False)
                    elif (kind := self._repeat(t, version, root)) is not None:
                        if kind == _OUTPUT:
                            self._fwd.append(self._fwd[-1])
                        self._note(index, kind)
                    elif hold and t.dtype is torch.float32:
                        self._outputs.append((t, version))
                        self._note(index, _OUTPUT_HELD)
                        self._remember(t, version, reduced=False)
                    else:
                        self._record_forward(t, index, _OUTPUT)
                        self._remember(t, version, reduced=True)
                    if grad_hook is not None and t.requires_grad and t.grad_fn is not None and torch.is_grad_enabled():
                        t.register_hook(grad_hook)
            except Exception as err:
                self.probe._fail(self, err)
        return hook

    def _remember(self, t: torch.Tensor, version: int, *, reduced: bool) -> None:
        """`t` is the output recorded last (see `_repeat`), with its version and whether it was reduced."""
        self._last, self._last_version, self._last_reduced = weakref.ref(t), version, reduced

    def _repeat(self, t: torch.Tensor, version: int, root: bool) -> int | None:
        """The record for `t` when it is the tensor just recorded, unchanged: a container returning its
        last child's output has the same verdict, and the child comes first in execution order."""
        if t is not self._last() or version < 0 or version != self._last_version:
            return None
        if self._last_reduced:
            return _OUTPUT if self._fwd else None
        return None if root else _PASSED  # a probed model's output is always reduced

    def _record_forward(self, t: torch.Tensor, index: int, kind: int) -> None:
        value = finite_probe_value(t)
        if value.dtype is not torch.float32:
            value = value.float()
        self._fwd.append(value)
        self._note(index, kind)

    def _note(self, index: int, kind: int) -> None:
        self._recs.append((index, kind))
        if len(self._recs) >= _FOLD_AT:
            self._note_fold()

    def _note_fold(self) -> None:
        block = self._fold(opt=None)
        if block is not None:
            self._blocks.append(block)

    def _grad_hook(self, index: int) -> Callable[[torch.Tensor], None]:
        def hook(grad: torch.Tensor) -> None:
            if not (self.enabled and self.probe.live) or grad is None:
                return
            try:
                value = finite_probe_value(grad)
                self._bwd.append(value if value.dtype == torch.float32 else value.float())
                self._bwd_idx.append(index)
            except Exception as err:
                self.probe._fail(self, err)
        return hook

    def _fold(self, opt: int | None) -> _Block | None:
        """Turn the pending records (and, at a step, the loss and gradient norms) into a block."""
        probe = self.probe
        readings = probe.readings
        reads = []
        if self._holding:  # the earlier steps were judged (a loop driving the layers runs no model forward)
            self._let_go()
        if opt is None and self._outputs:
            self._reduce_held()
        elif opt is not None and not (self._fwd or self._bwd or self._eager_state) and self._judged_finite(opt):
            self._arm_if_due(probe.loss_read.get(opt) is not None)
            self._clear()  # the held inputs and outputs are let go at once
            return None
        if self._fwd:
            reads.append(readings.add(self._fwd))
        loss = probe.loss_read.get(opt) if opt is not None else None
        if loss is not None:
            reads.append(loss)
        ran = list(self._ran)
        state = None
        rest = self._bwd
        if self._eager_state and ran:
            state = self._parameters_of(ran)
            rest = rest + max_abs([p for _, p in state]) if state else rest
        if rest:
            reads.append(readings.add(rest))
        positions: list[int] = []
        every_gradient = True
        if opt is not None:
            norms = probe.grad_checks(opt)
            every_gradient = norms.exact
            if norms.values:
                reads.append(norms.read)
                positions = norms.positions
        block = None
        if reads:
            block = _Block(probe.step + (1 if opt is not None else 0), opt, reads, self._recs,
                           loss is not None, self._bwd_idx, ran, state, positions, self._held, not self._armed,
                           every_gradient, self._outputs)
            if self._outputs:
                self._holding.append(block)
        if opt is not None:
            self._arm_if_due(loss is not None)
        self._clear()
        return block

    def _arm_if_due(self, loss: bool) -> None:
        """At an optimizer step (`loss`: one was recorded): arm when the lean records cannot be relied on."""
        if not self._armed:
            # A step with a loss but no probed model's forward: the loop calls the models' layers
            # itself (`model.head(x)`), where only their own hooks see them.
            if self._arm_next or (loss and not self._entered and self._folded):
                self._arm()
            self._folded = True

    def _judged_finite(self, opt: int) -> bool:
        """A CPU step whose loss and gradient check were read as numbers, all finite: no block is
        needed (the sentinel, which judges them at this step, will not trip on them). Not after a
        first incident, whose later steps are counted from their blocks at the samples."""
        probe = self.probe
        if probe._tripped:
            return False
        loss = probe.step_loss.get(opt)
        if loss is not None and not (type(loss) is float and math.isfinite(loss)):
            return False
        for value in probe.grad_checks(opt).values:
            if not (type(value) is float and math.isfinite(value)):
                return False
        return True

    def _let_go(self) -> None:
        """The held outputs of the steps folded so far: those steps were judged, let them go."""
        for block in self._holding:
            block.outputs = None
        self._holding = []

    def _reduce_held(self) -> None:
        """Reduce the held outputs into the forward records, in record order: a block that no step's
        sentinel judges (the end of the run, a run that raised before its step, a long step folded
        early) is judged from its queued values."""
        fwd, outputs, recs = iter(self._fwd), iter(self._outputs), self._recs
        values = []
        for k, (index, kind) in enumerate(recs):
            if kind in _REDUCED:
                values.append(next(fwd))
            elif kind == _OUTPUT_HELD:
                t, version = next(outputs)
                values.append(finite_probe_value(t).float() if _version(t) == version else _UNJUDGED)
                recs[k] = (index, _OUTPUT)
        self._fwd, self._outputs = values, []

    def _parameters_of(self, ran: list[int]) -> list[tuple[int, torch.Tensor]]:
        """The parameters of the covered layers in `ran`, and the running statistics of those that
        normalise with them now (eval mode): what their output is finite with."""
        modules = self.probe.modules
        state = []
        for i in ran:
            module = modules[i][1]
            state.extend((i, p) for p in module._parameters.values() if p is not None and p.numel())
            if layers.uses_running_stats(module):
                state.extend((i, b) for name, b in module._buffers.items()
                             if name in _RUNNING and b is not None and b.is_floating_point())
        return state

    def _state_name(self, index: int, t: torch.Tensor) -> str:
        name = self.probe.param_names.get(id(t))
        if name is not None:
            return name
        qual, module = self.probe.modules[index]
        return next((f"{qual}.{key}" for key, b in module._buffers.items() if b is t), self.probe.param_name(t))

    def _expand(self, block: _Block) -> None:
        """Put the covered layers into a lean block's records: each probed model's covered layers
        in completion order, before the first record of a module that completes after them and
        all of them before the model's own output, as their hooks would have recorded them."""
        records: list[tuple[int, int]] = []
        ran: dict[int, None] = {}
        rank = self._rank
        covered: list[int] = []
        k = 0
        root = -1
        for index, kind in block.records:
            if kind == _ENTER:
                root, covered, k = index, self._covered_of.get(index, []), 0
            elif root >= 0 and kind in (_OUTPUT, _PASSED, _OUTPUT_HELD):
                at = rank.get(index, -1)
                while k < len(covered) and (index == root or rank[covered[k]] < at):
                    records.append((covered[k], _COVERED))
                    ran[covered[k]] = None
                    k += 1
                if index == root:
                    root = -1
            records.append((index, kind))
        block.records, block.ran, block.lean = records, list(ran), False

    def _clear(self) -> None:
        self._last = _dead
        self._entered = False
        self._fwd, self._recs, self._held, self._outputs = [], [], [], []
        self._ran.clear()
        self._bwd, self._bwd_idx = [], []

    # Step boundaries -------------------------------------------------------------------------
    def on_step_pre(self, index: int, optimizer: Any) -> None:
        self._depth = 0  # a forward that raised never ran its exit hook
        block = self._fold(index)
        if block is not None:
            self._blocks.append(block)

    def on_closure(self, index: int, optimizer: Any, first: bool) -> None:
        if not first:
            self._clear()  # a line search's evaluation: its records are not the step's

    def on_step(self, index: int, optimizer: Any) -> None:
        if index == 0:
            self._streak = 0
            self._recent.append(False)

    def on_step_skipped(self, index: int, optimizer: Any) -> None:
        if index != 0:
            self._clear()
            return
        self._streak += 1
        self._recent.append(True)
        rate = sum(self._recent) / len(self._recent)
        persistent = self._streak >= self.config.skip_streak or (
            len(self._recent) == self._recent.maxlen and rate >= self.config.skip_rate
        )
        if not persistent or self._persistent_reported:
            self._clear()
            return
        self._persistent_reported = True
        skipped = sum(self._recent)
        note = (f"the GradScaler skipped {self._streak} steps in a row ({skipped} of the last "
                f"{len(self._recent)}): not occasional overflow but a persistent non-finite value")
        block = self._fold(index)
        if block is not None and not self._localise(block, _flags(self.probe.readings.host(), block), note):
            block = None
        if block is None:
            self.report("LP104", f"{note}; training makes no progress while every step is skipped")

    def on_sample(self, step: int, final: bool) -> None:
        if final:
            block = self._fold(opt=None)
            if block is not None:
                self._blocks.append(block)
        blocks, self._blocks = self._blocks, []
        readings = self.probe.readings
        if not blocks or readings.all_finite():
            return
        host = readings.host()
        for block in blocks:
            part = _flags(host, block)
            if all(part):
                continue
            if self._incident is not None:
                # Once a value went non-finite every later step usually does too: count them
                # under the first incident instead of naming the consequences.
                code, where, message = self._incident
                self.report(code, message, where=where, step=block.step)
            else:
                self._localise(block, part, None)

    # Localisation (only when a non-finite value was seen) -----------------------------------
    def _localise(self, block: _Block, flags: list[bool], note: str | None) -> bool:
        names = self.probe.modules
        if block.lean:
            self._expand(block)
        nf = sum(kind in _REDUCED for kind in block.kinds)
        fwd, rest = flags[:nf], flags[nf:]
        loss_ok = rest[0] if block.loss else True
        rest = rest[1:] if block.loss else rest
        nb = len(block.backward)
        if block.state is not None:
            ns = len(block.state)
            checked, state = block.state, rest[nb:nb + ns]
        else:
            ns = 0
            checked = self._parameters_of(block.ran)
            state = _flags_now(checked)
        bwd, norms = rest[:nb], rest[nb + ns:]
        if not block.every_gradient and block.opt is not None and block.step == self.probe.step + 1:
            # the small gradient of the step being checked tripped: all of its gradients are still there
            params = self.probe.opt_params[block.opt]
            block.norms = [j for j, p in enumerate(params) if p.grad is not None and not p.grad.is_sparse]
            norms = _flags_now([(j, params[j].grad) for j in block.norms])
            block.every_gradient = True
        bad_state: dict[int, list[str]] = {}
        for (index, p), ok in zip(checked, state):
            if not ok:
                bad_state.setdefault(index, []).append(self._state_name(index, p))
        suffix = f" ({note})" if note else ""
        code, where, message = None, None, ""
        fault = self._first_forward_fault(block, fwd, bad_state)
        if fault is not None:
            index, kind, unchecked = fault
            name, module = names[index]
            code, where = "LP103", name
            if kind == _INPUT:
                message = (f"the input batch of {name} already contains NaN/Inf at step {block.step}: "
                           f"the data (or its preprocessing) is the source")
            elif kind == _CHANGED:
                message = (f"{name} ({type(module).__name__}) is the first module, in execution order, whose "
                           f"forward output is NaN/Inf (step {block.step}) as checked after the forward pass: "
                           f"the output was changed in place after it returned, so the NaN/Inf comes from "
                           f"{name} or from that change; everything after it inherits the value")
            else:
                message = (f"{name} ({type(module).__name__}) is the first module, in execution order, whose "
                           f"forward output is NaN/Inf (step {block.step}); everything after it inherits the value")
                if kind == _COVERED:
                    message += f": its parameters {', '.join(bad_state[index][:4])} hold NaN/Inf"
                elif unchecked and index in self._roots():
                    listed = ", ".join(names[i][0] for i in unchecked[-3:])
                    message += (f" (the layers that ran before it, e.g. {listed}, have finite parameters and were "
                                f"not checked one by one: a float overflow in one of them also shows here)")
        elif not loss_ok:
            code, where = "LP105", None
            message = (f"the loss is NaN/Inf at step {block.step} while every module output was finite: "
                       f"the loss computation itself (log of 0, division by 0, an empty batch) produced it")
        elif bwd and not all(bwd):
            k = bwd.index(False)
            params = self._bad_params(block, norms)
            if k == 0:
                code, where = "LP104", None
                message = (f"the gradient reaching the model output is already NaN/Inf at step {block.step}, "
                           f"with a finite loss: the loss computation's backward produced it")
            else:
                index = block.backward[k - 1]
                name, module = names[index]
                code, where = "LP104", name
                message = (f"backward through {name} ({type(module).__name__}) turned a finite output "
                           f"gradient into NaN/Inf at step {block.step}")
            if params:
                message += (f"; parameters with non-finite gradients include "
                            f"{', '.join(name for name, _ in params[:4])}")
        elif norms and not all(norms):
            code, where, message = "LP104", *self._from_parameters(block, norms)
            if self.probe.world_size > 1:
                message += (" (the gradients are averaged over the ranks: a NaN/Inf from another rank's "
                            "batch arrives this way; that rank's finding names its source)")
        if code is None:
            return False
        message += suffix
        self._incident = (code, where, message)
        self.report(code, message, where=where, step=block.step)
        return True

    def _first_forward_fault(self, block: _Block, fwd: list[bool],
                             bad_state: dict[int, list[str]]) -> tuple[int, int, list[int]] | None:
        """The first forward record, in completion order, that shows a non-finite value.

        Hooks fire when a module returns, so a child reports before its parent; a parent whose
        own code produced the NaN before calling a child shows up as the child's bad output. A
        covered layer shows one when it ran with non-finite parameters. A held output written in
        place after it returned is judged as it is now (kind `_CHANGED`). Returns (module index,
        kind, the covered layers that ran since the last reduced record).
        """
        k = h = o = 0
        unchecked: list[int] = []
        for index, kind in zip(block.forward, block.kinds):
            if kind == _OUTPUT_HELD:
                outputs = block.outputs
                if outputs is not None:
                    t, version = outputs[o]
                    o += 1
                    if not _finite_now(t):
                        # written in place since it returned (`h += skip`): judged as it is now
                        return index, _OUTPUT if _version(t) == version else _CHANGED, unchecked
                unchecked = []
            elif kind == _INPUT_HELD:
                ref, version = block.held[h]
                h += 1
                t = ref()
                # gone or changed since (the loop let it go, or wrote into it): not judged
                if t is not None and t._version == version and not _finite_now(t):
                    return index, _INPUT, unchecked
                unchecked = []
            elif kind in _REDUCED:
                ok = fwd[k]
                k += 1
                if not ok:
                    return index, kind, unchecked
                unchecked = []
            elif kind == _ENTER:
                unchecked = []
            elif kind == _COVERED:
                if index in bad_state:
                    return index, kind, unchecked
                unchecked.append(index)
        return None

    def _from_parameters(self, block: _Block, norms: list[bool]) -> tuple[str | None, str]:
        """Backward localisation from parameter gradients and the forward completion order.

        A NaN born in backward poisons the gradients of every parameter below it and none above.
        So the module at fault completed (in forward) after the nearest-to-loss owner of a
        non-finite gradient and before the next owner of finite ones: a parameter-free module
        in between (a custom op, an activation written by hand), or else that owner itself.
        """
        params = self._bad_params(block, norms)
        names = [name for name, _ in params]
        listed = f"{', '.join(names[:4])}{' and more' if len(names) > 4 else ''}"
        nearest = params[0][1]
        order = self._completion(block, nearest)
        index = self._module_by_name.get(nearest, -1)
        if index not in order:
            return nearest, f"non-finite gradients at step {block.step} in {listed}, with a finite loss and forward pass"
        finite_owners = {self._module_by_name.get(self.probe.owner(p), -2)
                         for p, ok in zip(self._norm_params(block), norms) if ok}
        after = order[len(order) - 1 - order[::-1].index(index) + 1:]
        between: list[int] = []
        upper = None
        for i in after:
            if i in finite_owners:
                upper = i
                break
            between.append(i)
        modules = self.probe.modules
        ancestors = {i for i in between if nearest.startswith(modules[i][0] + ".") or i in self._roots()}
        suspects = [i for i in between if i not in ancestors and not any(
            p.requires_grad for p in modules[i][1].parameters())]
        above = f" while those of {modules[upper][0]} are finite" if upper is not None else ""
        if suspects:
            name, module = modules[suspects[-1]]
            return name, (f"backward through {name} ({type(module).__name__}) produced NaN/Inf at step "
                          f"{block.step}: the parameters below it have non-finite gradients ({listed}){above}")
        return nearest, (f"non-finite gradients at step {block.step} from {nearest} down ({listed}){above}, "
                         f"with a finite loss and forward pass")

    def _completion(self, block: _Block, owner: str) -> list[int]:
        """Module indices in completion order of the last forward pass of the block that ran `owner`."""
        target = self._module_by_name.get(owner, -1)
        segments: list[list[int]] = [[]]
        for kind, index in zip(block.kinds, block.forward):
            if kind in (_INPUT, _INPUT_HELD, _ENTER):
                segments.append([])
            else:
                segments[-1].append(index)
        for segment in reversed(segments):
            if target in segment:
                return segment
        return []

    def _roots(self) -> set[int]:
        return {self.probe.module_index[id(m)] for m in self.probe.models}

    def _norm_params(self, block: _Block) -> list[Any]:
        params = self.probe.opt_params[block.opt or 0]
        return [params[j] for j in block.norms]

    def _bad_params(self, block: _Block, norms: list[bool]) -> list[tuple[str, str]]:
        """(parameter, owning module) with non-finite gradients, the ones nearest the loss first.

        "Nearest the loss" is the latest forward completion of the owner in this step, or, without
        forward records, the latest position in the model's module order.
        """
        if block.opt is None:
            return []
        completed = {index: k for k, index in enumerate(block.forward)}
        params = self.probe.opt_params[block.opt]
        bad = []
        for k, ok in enumerate(norms):
            if not ok:
                p = params[block.norms[k]]
                owner = self.probe.owner(p)
                index = self._module_by_name.get(owner, -1)
                bad.append((completed.get(index, -1) if completed else index, self.probe.param_name(p), owner))
        bad.sort(key=lambda item: -item[0])
        return [(name, owner) for _, name, owner in bad]


def _dead() -> None:
    return None


def _version(t: torch.Tensor) -> int:
    """The version counter of `t`; -1 for an inference tensor, which has none."""
    return -1 if t.is_inference() else t._version


def _running_stats_in_use(norms: list[nn.Module]) -> bool:
    for m in norms:
        if not m.training and layers.uses_running_stats(m):
            return True
    return False


def _finite_now(t: torch.Tensor) -> bool:
    """Whether every value of `t` is finite, read now (only when localising)."""
    return bool(torch.isfinite(t).all())


def _flags_now(state: list[tuple[int, torch.Tensor]]) -> list[bool]:
    """The finiteness of each parameter, read now (a host read: only when localising)."""
    if not state:
        return []
    values = host_read(stack_scalars(max_abs([p for _, p in state]))).double().tolist()
    return [math.isfinite(x) for x in values]


def _flags(host: list[float], block: _Block) -> list[bool]:
    """The finiteness of each of the block's values, in block order."""
    return [math.isfinite(x) for read in block.reads for x in host[read]]
