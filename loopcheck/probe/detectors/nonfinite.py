"""LP103 / LP104 / LP105: NaN and Inf in forward outputs, gradients and the loss.

The cheap path, every step and without a host sync: each module's forward hook reduces its
output (and inputs) to one number whose finiteness is that of the whole tensor, and a tensor
hook on the output does the same for its gradient; at the optimizer step these numbers, the
loss and the per-parameter gradient norms become one boolean vector on the device. Every
`every` steps the vectors are read at once; only when one holds a False does the detector walk
it, in execution order, to name the module (forward), the module whose gradient became
non-finite (backward) or the loss. GradScaler skips are normal overflow handling: their
records are dropped, and only a persistent run of skips is reported.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn

from loopcheck.probe.detectors.base import Detector
from loopcheck.probe.stats import finite_probe_value, float_tensors, host_read

_FOLD_AT = 4096  # records kept before they are folded into a block (long eval loops)

# Modules that cannot turn finite inputs into NaN/Inf (nor finite output gradients into
# non-finite input gradients): their outputs are not checked, the module that fed them is.
_SAFE = (
    nn.ReLU, nn.ReLU6, nn.LeakyReLU, nn.GELU, nn.SiLU, nn.Tanh, nn.Sigmoid, nn.Hardtanh, nn.Hardswish,
    nn.Hardsigmoid, nn.Softsign, nn.Mish, nn.ELU, nn.CELU, nn.SELU, nn.Identity, nn.Flatten, nn.Unflatten,
    nn.modules.dropout._DropoutNd, nn.modules.pooling._MaxPoolNd, nn.modules.pooling._AdaptiveMaxPoolNd,
)


@dataclass
class _Block:
    """One step's finiteness vector and its layout: [inputs..., outputs..., loss, grads..., norms...]."""

    step: int
    opt: int | None
    finite: torch.Tensor
    inputs: list[int]  # forward record -> 1 when the record is a module input, 0 for an output
    forward: list[int]  # module index of each forward record, in completion order
    loss: bool
    backward: list[int]  # module index of each output-gradient record, in backward order
    norms: list[int]  # positions in opt_params[opt] of the norm entries


class NonFiniteDetector(Detector):
    codes = ("LP103", "LP104", "LP105")

    def __init__(self, probe: Any) -> None:
        super().__init__(probe)
        self._fwd: list[torch.Tensor] = []
        self._fwd_idx: list[int] = []
        self._fwd_kind: list[int] = []
        self._bwd: list[torch.Tensor] = []
        self._bwd_idx: list[int] = []
        self._blocks: list[_Block] = []
        self._incident: tuple[str, str | None, str] | None = None
        self._streak = 0
        self._recent: deque[bool] = deque(maxlen=self.config.skip_window)
        self._persistent_reported = False
        self._module_by_name = {qual: i for i, (qual, _) in enumerate(probe.modules)}
        self._last: torch.Tensor | None = None
        self._last_version = 0

    def attach(self) -> None:
        if not self.config.localize:
            return
        hooks = self.probe.hooks
        roots = {id(m) for m in self.probe.models}
        for root in self.probe.models:
            index = self.probe.module_index[id(root)]
            hooks.enter_context(root.register_forward_pre_hook(self._input_hook(index)))
        for index, (_, module) in enumerate(self.probe.modules):
            if isinstance(module, _SAFE) and id(module) not in roots:
                continue
            hooks.enter_context(module.register_forward_hook(self._forward_hook(index)))

    # Recording (per forward / backward, no sync) --------------------------------------------
    def _input_hook(self, index: int) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any) -> None:
            if not (self.enabled and self.probe.live):
                return
            try:
                for t in float_tensors(args):
                    self._record_forward(t, index, 1)
            except Exception as err:
                self.probe._fail(self, err)
        return hook

    def _forward_hook(self, index: int) -> Callable[..., None]:
        grad_hook = self._grad_hook(index) if self.config.backward_hooks else None

        def hook(module: nn.Module, args: Any, output: Any) -> None:
            if not (self.enabled and self.probe.live):
                return
            try:
                for t in float_tensors(output):
                    version = -1 if t.is_inference() else t._version  # inference tensors have no counter
                    if t is self._last and version >= 0 and version == self._last_version:
                        # A container returning its last child's output: the same tensor, the
                        # same verdict; record the container without a second reduction.
                        self._fwd.append(self._fwd[-1])
                        self._fwd_idx.append(index)
                        self._fwd_kind.append(0)
                    else:
                        self._record_forward(t, index, 0)
                        self._last, self._last_version = t, version
                    if grad_hook is not None and t.requires_grad and t.grad_fn is not None and torch.is_grad_enabled():
                        t.register_hook(grad_hook)
            except Exception as err:
                self.probe._fail(self, err)
        return hook

    def _record_forward(self, t: torch.Tensor, index: int, kind: int) -> None:
        value = finite_probe_value(t)
        if value.dtype != torch.float32:
            value = value.float()
        self._fwd.append(value)
        self._fwd_idx.append(index)
        self._fwd_kind.append(kind)
        if len(self._fwd) >= _FOLD_AT:
            self._fold(opt=None)

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
        scalars = self._fwd
        loss = self.probe.step_loss.get(opt) if opt is not None else None
        if loss is not None:
            scalars = scalars + [loss.float().reshape(())]
        scalars = scalars + self._bwd
        vec, positions = self.probe.grad_norms(opt) if opt is not None else (None, [])
        pieces = [torch.stack(_same_device(scalars))] if scalars else []
        if vec is not None:
            pieces.append(vec)
        block = None
        if pieces:
            with torch.no_grad():
                finite = torch.isfinite(torch.cat(_same_device(pieces)) if len(pieces) > 1 else pieces[0])
            block = _Block(self.probe.step + (1 if opt is not None else 0), opt, finite,
                           self._fwd_kind, self._fwd_idx, loss is not None, self._bwd_idx,
                           positions if vec is not None else [])
        self._clear()
        return block

    def _clear(self) -> None:
        self._last = None
        self._fwd, self._fwd_idx, self._fwd_kind = [], [], []
        self._bwd, self._bwd_idx = [], []

    # Step boundaries -------------------------------------------------------------------------
    def on_step_pre(self, index: int, optimizer: Any) -> None:
        block = self._fold(index)
        if block is not None:
            self._blocks.append(block)

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
        if block is not None and not self._localise(block, host_read(block.finite).tolist(), note):
            block = None
        if block is None:
            self.report("LP104", f"{note}; training makes no progress while every step is skipped")

    def on_sample(self, step: int, final: bool) -> None:
        if final:
            block = self._fold(opt=None)
            if block is not None:
                self._blocks.append(block)
        blocks, self._blocks = self._blocks, []
        if not blocks:
            return
        finite = torch.cat([b.finite for b in blocks]) if len(blocks) > 1 else blocks[0].finite
        if bool(host_read(finite.all())):
            return
        flags = host_read(finite).tolist()
        offset = 0
        for block in blocks:
            n = block.finite.numel()
            part = flags[offset:offset + n]
            offset += n
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
        nf = len(block.forward)
        fwd, rest = flags[:nf], flags[nf:]
        loss_ok = rest[0] if block.loss else True
        rest = rest[1:] if block.loss else rest
        nb = len(block.backward)
        bwd, norms = rest[:nb], rest[nb:]
        suffix = f" ({note})" if note else ""
        code, where, message = None, None, ""
        bad_fwd = [k for k, ok in enumerate(fwd) if not ok]
        if bad_fwd:
            k = bad_fwd[0]
            index = block.forward[k]
            name, module = names[index]
            if block.inputs[k]:
                code, where = "LP103", name
                message = (f"the input batch of {name} already contains NaN/Inf at step {block.step}: "
                           f"the data (or its preprocessing) is the source")
            else:
                culprit = self._first_bad_output(block, fwd)
                name, module = names[culprit]
                code, where = "LP103", name
                message = (f"{name} ({type(module).__name__}) is the first module, in execution order, whose "
                           f"forward output is NaN/Inf (step {block.step}); everything after it inherits the value")
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
        if code is None:
            return False
        message += suffix
        self._incident = (code, where, message)
        self.report(code, message, where=where, step=block.step)
        return True

    def _first_bad_output(self, block: _Block, fwd: list[bool]) -> int:
        """The first module, in completion order, whose output is non-finite.

        Hooks fire when a module returns, so a child reports before its parent; a parent whose
        own code produced the NaN before calling a child shows up as the child's bad output.
        """
        for k, ok in enumerate(fwd):
            if not ok and not block.inputs[k]:
                return block.forward[k]
        return block.forward[fwd.index(False)]

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
        for kind, index in zip(block.inputs, block.forward):
            if kind:
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


def _same_device(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    device = tensors[0].device
    if all(t.device == device for t in tensors):
        return tensors
    return [t.to(device, non_blocking=True) for t in tensors]
