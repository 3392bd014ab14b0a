"""LP101 / LP102 gradient norm spikes and vanishing; LP106 updates far larger than the weights;
LP403 gradients not reset; LP404 unused parameters.

Gradient norms come from `Probe.grad_norms` (fused per-parameter norms, kept on the device, on
the steps `Probe.watched` names) and are read with the probe's other queued values every `every`
steps. Gradient resets are tracked by
identity and version counter of the `.grad` tensors (weak references, no reads of their values).
"""

from __future__ import annotations

import math
import weakref
from collections import defaultdict
from typing import Any

import torch

from loopcheck.probe.detectors.base import Detector
from loopcheck.probe.stats import RobustLevel, fused_norms, no_grad

_TOP = 3  # layers named in a spike / vanishing finding
_TRACKED = 2  # parameters per optimizer whose .grad resets are followed (LP403)
_OWNER_SETS = 64  # distinct sets of parameters with gradients whose owners are remembered
# LP106: the weight matrices measured (at most this many tensors and values), the ratio of a
# matrix's update norm to its norm that is far too large, the samples in a row it must last, the
# growth of a matrix's norm by one of the first samples that is a blow-up, and the rms under which a matrix starts near zero.
_RATIO_TENSORS = 16
_RATIO_VALUES = 4 * 1024 * 1024
_RATIO_ROWS_VALUES = 8 * 1024  # values measured per matrix: a larger one is measured on every k-th row
_RATIO_HIGH = 0.1
_RATIO_SAMPLES = 2
_GROWTH = 4.0  # one matrix's norm this many times its start ...
_ALSO = 2.0  # ... and another's this many: the whole model, not one small new layer
_EARLY = 3
_FIRST_STEPS = 3  # the first steps of each optimizer, all measured: ...
_FIRST_HIGH = 0.2  # ... each moving some matrix by this share of its norm is a learning rate far too high
_SMALL_RMS = 1e-3


class GradNormDetector(Detector):
    codes = ("LP101", "LP102")
    wants_norms = True

    def __init__(self, probe: Any) -> None:
        super().__init__(probe)
        c = self.config
        # norms are measured on watched steps: the window and the warm-up count measurements (fewer
        # would judge a heavy-tailed series, such as policy-gradient norms, on too small a sample)
        self._levels: dict[int, RobustLevel] = defaultdict(lambda: RobustLevel(c.window, c.warmup, c.spike_z, c.spike_ratio))
        # the first step of each low-norm streak (-1 once reported), by optimizer and by module
        self._low_total: dict[int, int] = {}
        self._low_module: dict[tuple[int, str], int] = {}
        self._totals: list[float] = []
        self._owners: dict[tuple[int, tuple[int, ...]], list[str]] = {}

    def on_sample(self, step: int, final: bool) -> None:
        """Judge the watched steps since the last sample; per step the total norm (one C call) feeds
        the spike test, and the norms by module are only added up when something is near zero."""
        self._totals = []
        records = [r for r in self.probe.steps if r.norms is not None and r.norms.values]
        if not records:
            return
        host = self.probe.readings.host()
        c = self.config
        for at, index, _, norms in records:
            values = host[norms.read]
            total = math.hypot(*values)
            if not math.isfinite(total):
                continue  # the non-finite detector owns these steps
            if index == 0:
                self._totals.append(total)
            level = self._levels[index].push(total)
            if level is not None or total < c.vanish_norm or min(values) < c.vanish_ratio * total:
                modules = self._by_module(index, norms.positions, values)
                if level is not None:
                    self._spike(at, index, total, level, modules)
                self._vanishing(at, index, total, modules)
            else:  # every parameter, so every module, is far from zero: the counters restart
                self._low_total.pop(index, None)
                if self._low_module:
                    for key in [key for key in self._low_module if key[0] == index]:
                        del self._low_module[key]

    def _by_module(self, index: int, positions: list[int], norms: list[float]) -> dict[str, float]:
        key = (index, tuple(positions))
        owners = self._owners.get(key)
        if owners is None:  # the same parameters have gradients step after step: name them once
            if len(self._owners) >= _OWNER_SETS:
                self._owners.clear()
            params = self.probe.opt_params[index]
            owners = self._owners[key] = [self.probe.owner(params[j]) for j in positions]
        squares: dict[str, float] = dict.fromkeys(owners, 0.0)
        for name, n in zip(owners, norms):
            squares[name] += n * n
        return {name: math.sqrt(v) for name, v in squares.items()}

    def _spike(self, at: int, index: int, total: float, level: float, modules: dict[str, float]) -> None:
        top = sorted(modules.items(), key=lambda kv: -kv[1])[:_TOP]
        layers = ", ".join(f"{name} {norm:.3g}" for name, norm in top)
        self.report(
            "LP101",
            f"total gradient norm {total:.3g} at step {at} is {total / level:.0f}x its recent median "
            f"{level:.3g}; largest layer norms: {layers}",
            where=self._optimizer_name(index), step=at, norm=total, median=level,
            layers=[name for name, _ in top],
        )

    def _vanishing(self, at: int, index: int, total: float, modules: dict[str, float]) -> None:
        c = self.config
        if total < c.vanish_norm:
            if self._lasted(self._low_total, index, at):
                self.report(
                    "LP102",
                    f"total gradient norm has stayed below {c.vanish_norm:g} for {c.vanish_steps} steps "
                    f"(now {total:.3g}): the model has stopped learning",
                    where=self._optimizer_name(index), step=at,
                )
            return
        self._low_total.pop(index, None)
        vanished = []
        for name, norm in modules.items():
            key = (index, name)
            if norm < c.vanish_ratio * total:
                if self._lasted(self._low_module, key, at):
                    vanished.append(name)
            else:
                self._low_module.pop(key, None)
        if vanished:
            smallest = sorted(modules.items(), key=lambda kv: kv[1])[:_TOP]
            self.report(
                "LP102",
                f"the gradient of {', '.join(vanished)} has stayed below {c.vanish_ratio:g} of the total norm "
                f"({total:.3g}) for {c.vanish_steps} steps: these layers no longer learn (saturated "
                f"activations, dead units); smallest layer norms: "
                + ", ".join(f"{n} {v:.3g}" for n, v in smallest),
                where=vanished[0], step=at, layers=vanished,
            )

    def _lasted(self, since: dict[Any, int], key: Any, at: int) -> bool:
        """Whether a low norm measured at step `at` makes `vanish_steps` steps in a row, counted from the
        first step of the streak (norms are measured on watched steps only); true once per streak."""
        start = since.setdefault(key, at)
        if start < 0 or at - start + 1 < self.config.vanish_steps:
            return False
        since[key] = -1
        return True

    def _optimizer_name(self, index: int) -> str | None:
        return None if len(self.probe.optimizers) == 1 else f"optimizer{index}"

    def metrics(self) -> dict[str, Any]:
        if not self._totals:
            return {}
        return {"grad_norm": sum(self._totals) / len(self._totals), "grad_norm_max": max(self._totals)}


class GradResetDetector(Detector):
    """LP403: a step whose gradients still held the previous step's values before its backward.

    After optimizer i steps, a few of its parameters' `.grad` tensors are remembered (weakly) with
    their version counters. A reset shows as a new or missing tensor (`zero_grad()`, `p.grad = None`)
    or a bumped version between backward passes (`zero_grad(set_to_none=False)`, `p.grad.zero_()`):
    zero_grad() itself is not watched. A backward that starts while a gradient is untouched
    since the last step accumulates into it; if no reset comes before the optimizer steps again,
    that step used stale gradients. Only the steps `Probe.watched` names are followed: a missing
    reset misses every step.
    """

    codes = ("LP403",)
    # resets are followed into watched steps; `on_step` before one of them starts following (the step
    # before a lean one stops it, and none of these runs between them)
    watched_only = frozenset({"on_backward", "on_step_pre", "on_step"})

    def __init__(self, probe: Any) -> None:
        super().__init__(probe)
        self._tracked: dict[int, tuple[torch.Tensor, weakref.ref, int]] = {}
        self._at_risk: dict[int, int] = {}  # id(param) -> optimizer index
        self._following: dict[int, list[int]] = {}  # optimizer index -> the ids in `_tracked` it set

    def on_step(self, index: int, optimizer: Any) -> None:
        """Follow the first `_TRACKED` dense gradients of this optimizer up to its next step, when that
        step is a watched one (a missing reset repeats at every step); else stop following them."""
        tracked, at_risk = self._tracked, self._at_risk
        if not self.probe.watched(index):
            for key in self._following.pop(index, ()):
                tracked.pop(key, None)
                at_risk.pop(key, None)
            return
        following = self._following[index] = []
        chosen = 0
        for p in self.probe.opt_params[index]:
            g = p.grad
            if g is None or g.is_sparse:
                continue
            tracked[id(p)] = (p, weakref.ref(g), g._version)
            following.append(id(p))
            if at_risk:
                at_risk.pop(id(p), None)
            chosen += 1
            if chosen == _TRACKED:
                break

    def on_closure(self, index: int, optimizer: Any, first: bool) -> None:
        """Each evaluation of a step's closure must start from reset gradients, like each step."""
        if not first:
            self.on_step_pre(index, optimizer)
        self.on_step(index, optimizer)

    def on_backward(self, tensor: torch.Tensor) -> bool:
        if not self._tracked:
            return False
        for key, (p, ref, version) in list(self._tracked.items()):
            g = p.grad
            if g is None or ref() is not g or g._version != version:
                del self._tracked[key]
                self._at_risk.pop(key, None)
            else:
                self._at_risk[key] = 1
        return bool(self._at_risk)  # their versions move with this backward: follow them after it

    def after_backward(self, tensor: torch.Tensor) -> None:
        for key in self._at_risk:
            p = self._tracked[key][0]
            g = p.grad
            if g is not None:
                self._tracked[key] = (p, weakref.ref(g), g._version)

    def on_step_pre(self, index: int, optimizer: Any) -> None:
        if not self._at_risk:
            return
        ids = {id(p) for p in self.probe.opt_params[index]}
        stale = [self._tracked[k][0] for k in self._at_risk if k in ids]
        if not stale:
            return
        names = ", ".join(self.probe.param_name(p) for p in stale[:3])
        self.report(
            "LP403",
            f"step {self.probe.step + 1} applied gradients that still held the previous step's values "
            f"({names}): backward added to them without a zero_grad() in between, so every step "
            f"uses the sum of all earlier gradients",
            where=None if len(self.probe.optimizers) == 1 else f"optimizer{index}",
        )
        for p in stale:
            self._at_risk.pop(id(p), None)


class UnusedParamsDetector(Detector):
    """LP404: trainable parameters of an optimizer that never had a gradient at any step."""

    codes = ("LP404",)
    first_optimizer_steps = True

    def __init__(self, probe: Any) -> None:
        super().__init__(probe)
        self._waiting: list[dict[int, torch.Tensor]] = []
        self._checked = False

    def attach(self) -> None:
        self._waiting = [
            {id(p): p for p in params if p.requires_grad} for params in self.probe.opt_params
        ]

    def on_step_pre(self, index: int, optimizer: Any) -> None:
        waiting = self._waiting[index]
        if waiting:
            for key in [k for k, p in waiting.items() if p.grad is not None]:
                del waiting[key]
            if not any(self._waiting):  # every parameter had a gradient: nothing left to watch
                self.probe.listen(self, "on_step_pre", False)

    def on_step(self, index: int, optimizer: Any) -> None:
        if index == 0 and self.probe.step >= self.config.unused_after:
            self._check()
            self.probe.listen(self, "on_step", False)

    def on_close(self) -> None:
        if self.probe.step >= min(5, self.config.unused_after):
            self._check()

    def _check(self) -> None:
        if self._checked:
            return
        self._checked = True
        unused = {k: p for waiting in self._waiting for k, p in waiting.items() if p.requires_grad}
        if not unused:
            return
        steps = self.probe.step
        covered: set[int] = set()
        for qual, module in self.probe.modules:
            params = [p for p in module.parameters() if p.requires_grad]
            if not params or any(id(p) not in unused for p in params) or all(id(p) in covered for p in params):
                continue
            covered.update(id(p) for p in params)
            count = sum(p.numel() for p in params)
            self.report(
                "LP404",
                f"{qual} ({type(module).__name__}, {count:,} trainable values) never received a gradient "
                f"in {steps} steps: it is not connected to the loss, so the optimizer skips it and it "
                f"stays at its initial values",
                where=qual, step=steps,
            )
        for key, p in unused.items():
            if key not in covered:
                name = self.probe.param_name(p)
                self.report(
                    "LP404",
                    f"parameter {name} never received a gradient in {steps} steps",
                    where=name, step=steps,
                )


class UpdateRatioDetector(Detector):
    """LP106: optimizer updates far larger than the weights they change.

    Each optimizer's weight matrices (at most `_RATIO_TENSORS` tensors and `_RATIO_VALUES` values,
    chosen at its first step) are measured at the sample cadence only, with no sync of their own;
    a matrix of more than `_RATIO_ROWS_VALUES` values on evenly spaced rows only (ratios of norms
    hardly change on a sample of rows, and the copy before the step stays small):

    - *per step*: on the step before each sample they are copied before the optimizer step; after
      it the norms of the change and of the weights are queued. A healthy run moves each matrix by
      about a thousandth of its norm per step, an Adam warm start by a few hundredths; a tenth or
      more for some matrix at two samples in a row is a learning rate far too high;
    - *first steps*: the first `_FIRST_STEPS` steps of each optimizer are measured too; each of
      them moving some matrix by a fifth or more of its norm (an Adam step of about lr per value,
      against weights of rms 0.02 to 0.1) is a learning rate far too high from the start, even
      when the steps shrink afterwards (a GAN's two optimizers settle at a few hundredths);
    - *blow-up*: their norms before the first step are queued once; when by one of the first
      `_EARLY` samples one matrix's norm has grown `_GROWTH` times and another's `_ALSO` times,
      the model was blown up by huge steps from the start (a 100x learning rate), even when the
      steps have since shrunk and the loss sits at chance level. A single layer growing fast is
      not enough: a small new head (fine-tuning) does that while it learns; matrices that start
      near zero (rms under `_SMALL_RMS`) are left out. Later growth is left to the spike checks
      (LP101, LP501): one bad batch can blow the weights up too.

    LBFGS is left alone: its line-searched steps are large by design. Neither is reported for an
    optimizer whose gradients were found not reset (LP403): summed gradients make huge steps, and
    their cause is already named.
    """

    codes = ("LP106",)
    watched_only = frozenset({"on_step_pre"})  # the first steps and those a sample follows

    def __init__(self, probe: Any) -> None:
        super().__init__(probe)
        self._params: dict[int, list[torch.Tensor]] = {}  # the matrices measured, per optimizer
        self._rows: dict[int, list[torch.Tensor]] = {}  # ... the rows of them measured (views)
        self._start: dict[int, slice | list[float]] = {}  # their norms before the first step (queued, then read)
        self._grown: set[int] = set()
        self._before: dict[int, list[torch.Tensor]] = {}
        self._pending: list[tuple[int, int, slice]] = []  # (step, optimizer, read)
        self._high: dict[int, int] = defaultdict(int)
        self._first: dict[int, list[tuple[float, int]]] = defaultdict(list)  # (ratio, matrix) of the first steps

    def on_step_pre(self, index: int, optimizer: Any) -> None:
        if self._before:
            self._measure(index)  # the previous step's change, before this one moves the weights again
        if index not in self._params:
            self._choose(index, optimizer)
        applied = self.probe._applied[index]
        if applied >= _FIRST_STEPS and (applied + 1) % self.config.every:
            return
        rows = self._rows[index]
        if rows:
            with no_grad():
                self._before[index] = [r.clone() for r in rows]

    def _choose(self, index: int, optimizer: Any) -> None:
        """At the optimizer's first step: the matrices to measure, and their norms before it."""
        params: list[torch.Tensor] = []
        if not isinstance(optimizer, torch.optim.LBFGS):
            total = 0
            for p in self.probe.opt_params[index]:
                if p.dim() < 2 or p.grad is None or p.grad.is_sparse or total + p.numel() > _RATIO_VALUES:
                    continue
                params.append(p)
                total += p.numel()
                if len(params) == _RATIO_TENSORS:
                    break
        self._params[index] = params
        self._rows[index] = rows = [_rows(p) for p in params]
        if rows:
            self._start[index] = self.probe.readings.add(fused_norms([r.contiguous() for r in rows]))

    def on_step_skipped(self, index: int, optimizer: Any) -> None:
        self._measure(index)  # a skipped step leaves the weights as the last applied one did

    def on_step(self, index: int, optimizer: Any) -> None:
        # right after the step (a sample may follow): a dict test at other steps, where switching
        # this call on and off around each sample cost more
        if self._before:
            self._measure(index)

    def _measure(self, index: int) -> None:
        """The change made by optimizer `index`'s last step, read right after it (`on_step`), or at the
        next step when something stepped it without the probe's step hooks (the weights are still
        those the step left)."""
        before = self._before.pop(index, None)
        if before is None:
            return
        with no_grad():
            # a strided view of every k-th row is reduced far more slowly than a contiguous copy of it
            after = [r.contiguous() for r in self._rows[index]]
            torch._foreach_sub_(before, after)
            values = fused_norms(before) + fused_norms(after)
        self._pending.append((self.probe._applied[index], index, self.probe.readings.add(values)))

    def on_sample(self, step: int, final: bool) -> None:
        for index in list(self._before):
            self._measure(index)
        pending, self._pending = self._pending, []
        if not pending and not any(isinstance(v, slice) for v in self._start.values()):
            return
        host = self.probe.readings.host()
        for index, start in list(self._start.items()):
            if isinstance(start, slice):
                self._start[index] = host[start]
        for at, index, read in pending:
            values = host[read]
            if not all(map(math.isfinite, values)):
                continue  # the non-finite detector's
            n = len(values) // 2
            change, weights = values[:n], values[n:]
            if at <= _FIRST_STEPS:
                self._first_steps(at, index, change, weights)
                continue
            self._blown_up(at, index, weights)
            ratio, j = max((c / w if w > 0 else 0.0, j) for j, (c, w) in enumerate(zip(change, weights)))
            if ratio < _RATIO_HIGH:
                self._high[index] = 0
                continue
            self._high[index] += 1
            if self._high[index] == _RATIO_SAMPLES:
                name = self.probe.param_name(self._params[index][j])
                self.report(
                    "LP106",
                    f"the optimizer step changed {name} by {ratio:.2g} of its norm at step {at}, and some weight "
                    f"matrix by a tenth or more at the sample before (a healthy step changes them by about "
                    f"0.001): the learning rate ({self._lrs(index)}) is far too high for this model",
                    where=self._where(index), step=at, ratio=ratio, parameter=name,
                )

    def _first_steps(self, at: int, index: int, change: list[float], weights: list[float]) -> None:
        start = self._start.get(index)
        if not isinstance(start, list):
            return
        rows = self._rows[index]
        first = self._first[index]
        first.append(max(((c / w, j) for j, (r, c, w, w0) in enumerate(zip(rows, change, weights, start))
                          if w > 0 and w0 > _SMALL_RMS * math.sqrt(r.numel())), default=(0.0, -1)))
        if len(first) != _FIRST_STEPS or min(ratio for ratio, _ in first) < _FIRST_HIGH:
            return
        ratio, j = max(first)
        name = self.probe.param_name(self._params[index][j])
        self.report(
            "LP106",
            f"each of the first {_FIRST_STEPS} optimizer steps changed a weight matrix by a fifth or more of its "
            f"norm ({', '.join(f'{r:.2g}' for r, _ in first)}; {name} by {ratio:.2g}), where a healthy step "
            f"changes it by about 0.001 and an Adam warm start by a few hundredths: the learning rate "
            f"({self._lrs(index)}) is far too high for this model",
            where=self._where(index), step=at, ratio=ratio, parameter=name,
        )

    def _blown_up(self, at: int, index: int, weights: list[float]) -> None:
        start = self._start.get(index)
        if index in self._grown or at > _EARLY * self.config.every or not isinstance(start, list):
            return
        params = self._params[index]
        grown = sorted(((w / w0, j) for j, (p, w0, w) in enumerate(zip(self._rows[index], start, weights))
                        if w0 > _SMALL_RMS * math.sqrt(p.numel())), reverse=True)
        if len(grown) < 2 or grown[0][0] < _GROWTH or grown[1][0] < _ALSO:
            return
        self._grown.add(index)
        (growth, j), (other, k) = grown[0], grown[1]
        name = self.probe.param_name(params[j])
        self.report(
            "LP106",
            f"the norm of {name} grew from {start[j]:.3g} to {weights[j]:.3g} ({growth:.0f}x) in the first {at} "
            f"steps, and that of {self.probe.param_name(params[k])} {other:.1f}x (a healthy run changes them by "
            f"a few percent): steps far larger than the weights blew them up; the learning rate "
            f"({self._lrs(index)}) is far too high for this model",
            where=self._where(index), step=at, growth=growth, parameter=name,
        )

    def _where(self, index: int) -> str | None:
        return None if len(self.probe.optimizers) == 1 else f"optimizer{index}"

    def report(self, code: str, message: str, *, where: str | None = None, step: int | None = None,
               **extra: Any) -> None:
        if not any(f.code == "LP403" and f.where == where for f in self.probe.findings):
            super().report(code, message, where=where, step=step, **extra)

    def _lrs(self, index: int) -> str:
        return ", ".join(f"{g['lr']:.3g}" for g in self.probe.optimizers[index].param_groups
                         if isinstance(g.get("lr"), (int, float)))


def _rows(p: torch.Tensor) -> torch.Tensor:
    """The rows of matrix `p` that LP106 measures: all of them, or every k-th of a large one (a view)."""
    rows = p.detach()
    step = -(-p.numel() // _RATIO_ROWS_VALUES)
    return rows[::step] if step > 1 else rows
