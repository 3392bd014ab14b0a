"""LP301 scheduler cadence, LP302 unexplained LR jumps, LP303 LR changed behind the scheduler.

Each param group's LR is read (a Python float, no device sync) when an optimizer steps. With a
scheduler attached, the expected LR is the value its last step() set (or the value at entry):
any other value at the next optimizer step was written by something else. Cadence comes from
counting optimizer step attempts (AMP-skipped ones included) between scheduler steps; whether a
schedule stepped once per epoch was sized in optimizer steps comes from its own shape, looked
ahead on a copy (`loopcheck.probe.schedule`), whatever its class. An LR that has collapsed to
almost nothing while training goes on, and a schedule stepped all run long that never changed the
LR, are LP301 too.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from typing import Any

import torch
from torch.optim import lr_scheduler

from loopcheck.probe.detectors.base import Detector
from loopcheck.probe.schedule import look_ahead

_PER_STEP = (lr_scheduler.OneCycleLR, lr_scheduler.CyclicLR)
# A schedule stepped once per epoch was sized in optimizer steps when reaching its peak takes this
# many scheduler steps (nobody warms up for 25 epochs), or reaching its end `_LONG_END`.
_LONG_WARMUP = 25
_LONG_END = 500
_COLLAPSED = 1e-6  # an LR below this share of its peak ...
_COLLAPSED_STEPS = 50  # ... for this many optimizer steps in a row has stopped training
_NEVER_MOVED = 5  # scheduler steps without any change of the LR, at the end of a run, that are reported


def _lr(group: dict[str, Any]) -> float | None:
    value = group.get("lr")
    if isinstance(value, torch.Tensor):
        return float(value) if value.device.type == "cpu" and value.numel() == 1 else None
    return float(value) if isinstance(value, (int, float)) else None


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-15)


def _optimizer_steps(optimizer: Any) -> int:
    """Steps recorded in the optimizer state (restored by load_state_dict), read on the host."""
    for state in optimizer.state.values():
        step = state.get("step") if isinstance(state, dict) else None
        if isinstance(step, torch.Tensor):
            return int(step.item()) if step.device.type == "cpu" else 0
        if isinstance(step, (int, float)):
            return int(step)
    return 0


class LRDetector(Detector):
    codes = ("LP301", "LP302", "LP303")

    def __init__(self, probe: Any) -> None:
        super().__init__(probe)
        n = len(probe.optimizers)
        self._opt_of = [probe.opt_index.get(id(s.optimizer)) for s in probe.schedulers]
        self._owned = [any(o == i for o in self._opt_of) for i in range(n)]
        self._expected: list[list[float | None]] = [[] for _ in range(n)]
        self._initial: list[list[float | None]] = [[] for _ in range(n)]
        self._expected_at_entry: list[list[float | None]] = [[] for _ in range(n)]
        self._entry_steps = [0] * n
        self._entry_state = [False] * n
        self._attempts = [0] * n
        self._last_lrs: list[list[float | None]] = [[] for _ in range(n)]
        m = len(probe.schedulers)
        self._entry_epoch: list[int | None] = [getattr(s, "last_epoch", None) for s in probe.schedulers]
        self._epoch: list[int | None] = list(self._entry_epoch)
        self._since = [0] * m
        self._in_interval = [0] * m
        self._intervals: list[list[int]] = [[] for _ in range(m)]
        self._doubles = defaultdict(int)
        self._slow = defaultdict(int)
        self._resume_checked = [False] * m
        self._shapes: dict[int, Any] = {}
        self._sched_steps = [0] * m
        self._moved: set[int] = set()  # schedulers that changed an LR at least once
        self._peak: list[list[float]] = [[] for _ in range(n)]
        self._low: list[list[int]] = [[] for _ in range(n)]
        self._low_any = [False] * n  # whether some group's LR is collapsed (counting steps)
        self._scheds_of = [[j for j, o in enumerate(self._opt_of) if o == i] for i in range(n)]

    def attach(self) -> None:
        for i, opt in enumerate(self.probe.optimizers):
            lrs = [_lr(g) for g in opt.param_groups]
            self._expected[i] = list(lrs)
            self._expected_at_entry[i] = list(lrs)
            self._last_lrs[i] = list(lrs)
            self._peak[i] = [lr if lr is not None and lr > 0 else 0.0 for lr in lrs]
            self._low[i] = [0] * len(lrs)
            self._initial[i] = [
                float(g["initial_lr"]) if isinstance(g.get("initial_lr"), (int, float)) else lr
                for g, lr in zip(opt.param_groups, lrs)
            ]
            self._entry_steps[i] = _optimizer_steps(opt)
            self._entry_state[i] = bool(opt.state)

    # Names --------------------------------------------------------------------------------
    def _group(self, i: int, g: int) -> str:
        prefix = "" if len(self.probe.optimizers) == 1 else f"optimizer{i}."
        return f"{prefix}param_groups[{g}]"

    def _sched(self, j: int) -> str:
        name = type(self.probe.schedulers[j]).__name__
        return name if len(self.probe.schedulers) == 1 else f"scheduler{j} ({name})"

    # Optimizer side -----------------------------------------------------------------------
    def on_step_pre(self, index: int, optimizer: Any) -> None:
        groups = optimizer.param_groups
        lr = groups[0].get("lr") if len(groups) == 1 else None
        lrs = [lr] if type(lr) is float else [_lr(g) for g in groups]  # the usual optimizer, kept short
        unchanged = lrs == self._last_lrs[index]
        self._last_lrs[index] = lrs
        self._attempt(index)
        if not unchanged or self._low_any[index]:  # the same LRs as last step: peak and counters stay
            self._collapse(index, lrs)
        if not self._owned[index]:
            return
        expected = self._expected[index]
        if lrs != expected and len(expected) == len(lrs):
            for g, (now, want) in enumerate(zip(lrs, expected)):
                if now is None or want is None or _close(now, want):
                    continue
                initial = self._initial[index][g]
                if initial is not None and _close(now, initial) and not _close(want, initial):
                    self.report(
                        "LP302",
                        f"the LR of {self._group(index, g)} jumped from {want:.4g} back to its initial value "
                        f"{now:.4g} before step {self.probe.step + 1} without a scheduler step: the schedule "
                        f"restarted (an optimizer state or LR reloaded without the scheduler's state?)",
                        where=self._group(index, g),
                    )
                else:
                    self.report(
                        "LP303",
                        f"the LR of {self._group(index, g)} changed from {want:.4g} to {now:.4g} before step "
                        f"{self.probe.step + 1}, but not by the scheduler: the two fight over the LR (the "
                        f"scheduler's next value is computed from the one it set)",
                        where=self._group(index, g),
                    )
        self._expected[index] = list(lrs)

    def _collapse(self, index: int, lrs: list[float | None]) -> None:
        peak, low = self._peak[index], self._low[index]
        if len(peak) != len(lrs):
            peak[:], low[:] = [0.0] * len(lrs), [0] * len(lrs)
        self._low_any[index] = False
        for g, lr in enumerate(lrs):
            if lr is None:
                continue
            if lr > peak[g]:
                peak[g] = lr
            if not (peak[g] > 0 and lr < _COLLAPSED * peak[g]):
                low[g] = 0
                continue
            self._low_any[index] = True
            low[g] += 1
            if low[g] != _COLLAPSED_STEPS:
                continue
            owner = next((j for j, i in enumerate(self._opt_of) if i == index), None)
            cause = ""
            if owner is not None:
                steps = self._sched_steps[owner]
                cause = f"; {self._sched(owner)} was stepped {steps} times in {self._attempts[index]} optimizer steps"
                if steps >= self._attempts[index] * 0.8:
                    cause += " (every batch: a schedule sized in epochs, e.g. StepLR or ExponentialLR, stepped per step?)"
            self.report(
                "LP301",
                f"the LR of {self._group(index, g)} has been below {_COLLAPSED:g} of its peak {peak[g]:.3g} for "
                f"{_COLLAPSED_STEPS} optimizer steps (now {lr:.3g}) while training goes on: the parameters no "
                f"longer move{cause}",
                where=self._sched(owner) if owner is not None else self._group(index, g),
            )

    def on_step_skipped(self, index: int, optimizer: Any) -> None:
        self._attempt(index)

    def _attempt(self, index: int) -> None:
        self._attempts[index] += 1
        for j in self._scheds_of[index]:
            count, self._in_interval[j] = self._in_interval[j], 0
            if count >= 2:
                self._doubles[j] += 1
                if self._doubles[j] >= 2:
                    self.report(
                        "LP301",
                        f"{self._sched(j)} was stepped {count} times between two optimizer steps: the "
                        f"schedule runs {count}x too fast (stepped in two places, or per micro-batch)",
                        where=self._sched(j),
                    )

    # Scheduler side -----------------------------------------------------------------------
    def on_scheduler_step(self, index: int, scheduler: Any) -> None:
        i = self._opt_of[index]
        if i is None:
            return
        optimizer = self.probe.optimizers[i]
        self._in_interval[index] += 1
        self._sched_steps[index] += 1
        if self._attempts[i] == 0 and not optimizer.state and not getattr(optimizer, "_opt_called", False):
            self.report(
                "LP301",
                f"{self._sched(index)} stepped before the first optimizer step: the first value of the "
                f"schedule is skipped (step the scheduler after optimizer.step())",
                where=self._sched(index),
            )
        interval = self._attempts[i] - self._since[index]
        self._since[index] = self._attempts[i]
        if self._attempts[i] > 0:
            self._intervals[index].append(interval)
            self._cadence(index, scheduler, interval)
            self._resume(index, i)
        epoch = getattr(scheduler, "last_epoch", None)
        before = self._epoch[index]
        if isinstance(epoch, int) and isinstance(before, int) and epoch < before:
            self.report(
                "LP302",
                f"{self._sched(index)} went back from position {before} to {epoch} at step {self.probe.step}: "
                f"its state was reset or reloaded, and the LR restarts from an earlier point of the schedule",
                where=self._sched(index),
            )
        self._epoch[index] = epoch if isinstance(epoch, int) else before
        self._expected[i] = [_lr(g) for g in optimizer.param_groups]
        if self._expected[i] != self._expected_at_entry[i]:
            self._moved.add(index)

    def _cadence(self, index: int, scheduler: Any, interval: int) -> None:
        if interval < self.config.cadence_ratio:
            return
        self._slow[index] += 1
        if self._slow[index] < 2 or index in self._shapes:
            return
        factor = round(statistics.median(i for i in self._intervals[index] if i >= self.config.cadence_ratio))
        if isinstance(scheduler, _PER_STEP):
            self._shapes[index] = None
            self.report(
                "LP301",
                f"{self._sched(index)} is a per-step schedule but was stepped only once every {interval} "
                f"optimizer steps (per epoch?): it runs {factor}x slower than it was sized for, so after the "
                f"run it has covered about 1/{factor} of its cycle",
                where=self._sched(index),
            )
            return
        shape = self._shapes[index] = look_ahead(scheduler)
        position = getattr(scheduler, "last_epoch", None)
        if shape is None or not isinstance(position, int):
            return
        if shape.peak is not None:
            milestone, what = position + shape.peak, "reaches the peak of its warm-up"
            long = milestone >= _LONG_WARMUP
        elif shape.end is not None:
            milestone, what = position + shape.end, "reaches the end of its schedule"
            long = milestone >= _LONG_END
        else:
            return
        if long:
            self.report(
                "LP301",
                f"{self._sched(index)} is stepped once every {factor} optimizer steps (per epoch?) but "
                f"{what} only after {milestone} of its steps, a schedule sized in optimizer steps: it runs "
                f"{factor}x slower than it was sized for ({milestone * factor} optimizer steps instead of "
                f"{milestone}); step it after every optimizer step",
                where=self._sched(index),
            )

    def _resume(self, index: int, i: int) -> None:
        intervals = self._intervals[index]
        if self._resume_checked[index] or len(intervals) < 2:
            return
        self._resume_checked[index] = True
        cadence = max(statistics.median(intervals), 1)
        entry_epoch = self._entry_epoch[index]
        done = self._entry_steps[i]
        if not isinstance(entry_epoch, int) or entry_epoch > 0:
            return
        # Without a step count (SGD keeps only momentum buffers), any state of a per-step
        # schedule's optimizer proves steps were taken that the scheduler has not seen.
        resumed = done / cadence >= 2 if done else cadence == 1 and self._entry_state[i]
        if resumed:
            steps = f"with {done} steps of state" if done else "with its state (momentum buffers)"
            self.report(
                "LP302",
                f"the optimizer was resumed {steps} but {self._sched(index)} started from the beginning "
                f"of its schedule: the LR jumped back to its initial value (save and load "
                f"scheduler.state_dict() with the checkpoint)",
                where=self._sched(index),
            )

    def on_close(self) -> None:
        """A schedule stepped all run long that never changed the LR: its first change comes after the run."""
        if not self.probe._clean_exit:
            return
        for j, scheduler in enumerate(self.probe.schedulers):
            i = self._opt_of[j]
            steps = self._sched_steps[j]
            now = self._expected_at_entry[i][:1] if i is not None else []
            if i is None or steps < _NEVER_MOVED or j in self._moved or not now or now[0] is None:
                continue
            shape = look_ahead(scheduler)
            if shape is None:
                continue
            later = (f"its first change would come {shape.first} scheduler steps later" if shape.first
                     else "it would not change it within the next 20000 steps either")
            self.report(
                "LP301",
                f"{self._sched(j)} was stepped {steps} times in {self._attempts[i]} optimizer steps and never "
                f"changed the LR ({now[0]:.3g}): {later} (milestones or step_size sized in optimizer steps, "
                f"or for a longer run?)",
                where=self._sched(j),
            )

    def metrics(self) -> dict[str, Any]:
        out: dict[str, Any] = {"lr": self._last_lrs[0]}
        for i in range(1, len(self._last_lrs)):
            out[f"lr_optimizer{i}"] = self._last_lrs[i]
        return out
