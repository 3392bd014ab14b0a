"""How the non-finite check treats each module: skip it, judge it by its parameters, or reduce its output.

Reducing every module output to one number is exact but reads every activation once more, which
is most of the probe's cost on a convolutional network. Most modules do not need it:

- SAFE modules cannot turn finite inputs into NaN/Inf (nor finite output gradients into non-finite
  input gradients): activations, dropout, pooling, softmax. They get no hook at all.
- COVERED modules are torch's own dense layers and normalisations (linear, convolution, batch /
  layer / group / instance norm, with eps > 0). Given finite inputs their output is non-finite only
  when a parameter is (a NaN weight reaches every output channel it feeds) or through a float
  overflow. Their outputs are not reduced: the probe records when they ran and, once per step,
  the finiteness of their parameters, which is far less data than their outputs.
- PASS-THROUGH containers (a plain `nn.Sequential`) return their last child's output unchanged
  and get no hook.
- DENSE GROUPS are plain `nn.Sequential`s made only of covered and safe layers (and of such
  groups): a Sequential runs every child in order, so one hook on the group tells which covered
  layers ran and in which order, as their own hooks would, for a fraction of the cost. While a
  group cannot be trusted as a whole (a normalisation using running statistics, a call from
  outside a probed model's forward, a float16 output), its layers get their own hooks again.
- Everything else (custom modules, embeddings, attention, anything with hooks or parametrizations
  of its own) has its output reduced, as do the probed models themselves.

A covered module called outside a probed model's forward (e.g. `model.head(x)` from the loop) or
a normalisation that uses running statistics (eval mode) has its output reduced as well.

These hooks are what the non-finite detector puts in place once armed; until then covered layers
and dense groups have none (see `loopcheck.probe.detectors.nonfinite`).
"""

from __future__ import annotations

from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.instancenorm import _InstanceNorm
from torch.nn.modules.lazy import LazyModuleMixin

from loopcheck.probe.patching import foreign_hooks

SAFE = (
    nn.ReLU, nn.ReLU6, nn.LeakyReLU, nn.GELU, nn.SiLU, nn.Tanh, nn.Sigmoid, nn.Hardtanh, nn.Hardswish,
    nn.Hardsigmoid, nn.Softsign, nn.Mish, nn.ELU, nn.CELU, nn.SELU, nn.Identity, nn.Flatten, nn.Unflatten,
    nn.modules.dropout._DropoutNd, nn.modules.pooling._MaxPoolNd, nn.modules.pooling._AdaptiveMaxPoolNd,
    # a mean lies between the smallest and the largest of finite values; softmax of finite values
    # is in [0, 1] and its log is finite (both are computed shifted by the maximum)
    nn.modules.pooling._AvgPoolNd, nn.modules.pooling._AdaptiveAvgPoolNd,
    nn.Softmax, nn.Softmin, nn.LogSoftmax, nn.Softmax2d, nn.PixelShuffle, nn.PixelUnshuffle,
)

_DENSE = [
    nn.Linear, nn.Bilinear, nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d,
    nn.ConvTranspose3d, nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.InstanceNorm1d,
    nn.InstanceNorm2d, nn.InstanceNorm3d, nn.LayerNorm, nn.GroupNorm,
]
if hasattr(nn, "RMSNorm"):
    _DENSE.append(nn.RMSNorm)
# Subclasses that keep torch's forward are covered; one with a forward of its own is not.
_COVERED_FORWARDS = frozenset(cls.forward for cls in _DENSE)


RUNNING_STATS = (_BatchNorm, _InstanceNorm)


def is_safe(module: nn.Module) -> bool:
    return isinstance(module, SAFE)


def is_pass_through(module: nn.Module) -> bool:
    """A container whose output is its last child's output, with no code or hooks of its own (the
    probe's own hooks on a probed model do not count)."""
    return (type(module).forward is nn.Sequential.forward and len(module) > 0
            and not foreign_hooks(module._forward_hooks) and not foreign_hooks(module._forward_pre_hooks))


def is_covered(module: nn.Module) -> bool:
    """A torch dense layer or normalisation whose output is finite when its inputs and parameters are."""
    if type(module).forward not in _COVERED_FORWARDS or isinstance(module, LazyModuleMixin):
        return False
    if module._forward_hooks or module._forward_pre_hooks or getattr(module, "parametrizations", None):
        return False  # weight_norm / spectral_norm / user hooks compute or change things we would not see
    eps = getattr(module, "eps", 1.0)
    return eps is None or eps > 0


def dense_group(module: nn.Module) -> list[nn.Module] | None:
    """The covered layers of a dense group, in execution order; None if `module` is not one."""
    if not is_pass_through(module):
        return None
    members: list[nn.Module] = []
    for child in module:
        if is_covered(child):
            members.append(child)
        elif is_pass_through(child):
            inner = dense_group(child)
            if inner is None:
                return None
            members.extend(inner)
        elif not is_safe(child):
            return None
    return members


def uses_running_stats(module: nn.Module) -> bool:
    """A normalisation that normalises with its running statistics (buffers, not parameters) right now."""
    return (isinstance(module, RUNNING_STATS) and not module.training
            and getattr(module, "running_var", None) is not None)
