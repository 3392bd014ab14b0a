"""Looking ahead in an LR schedule: a copy of the scheduler, stepped on a stand-in optimizer.

The real scheduler and optimizer are never stepped or changed. The copy's optimizer is a stand-in
holding copies of the param groups without their parameters, so looking ahead neither copies the
model nor touches optimizer state. This makes the cadence checks independent of the scheduler's
class: LambdaLR warm-ups, CosineAnnealingLR or LinearLR sized in steps, SequentialLR and
ChainedScheduler parts and user subclasses all show their shape the same way.
"""

from __future__ import annotations

import copy
import math
import warnings
from typing import Any, NamedTuple

from torch.optim import Optimizer

_CAP = 20_000  # scheduler steps looked ahead at most
_SETTLED = 1e-3  # the schedule has ended once the LR is below this share of its peak


class Shape(NamedTuple):
    """Milestones in scheduler steps from now: the first change of the LR, the warm-up's peak (None
    when the LR does not rise first) and the end (the last change, or the LR below `_SETTLED` of
    its peak; `_CAP` when it still moves there). `first` and `end` are None when it never moves."""

    first: int | None
    peak: int | None
    end: int | None


class _StandIn:
    """What an LR scheduler reads and writes of its optimizer, without the parameters."""

    def __init__(self, optimizer: Optimizer) -> None:
        self.param_groups = [{**{k: v for k, v in g.items() if k != "params"}, "params": []}
                             for g in optimizer.param_groups]
        self.defaults = dict(optimizer.defaults)
        self.state: dict[Any, Any] = {}
        self._opt_called = True

    def step(self, *args: Any, **kwargs: Any) -> None:
        pass


def look_ahead(scheduler: Any, cap: int = _CAP) -> Shape | None:
    """The shape of the rest of `scheduler`'s schedule (its first param group); None if it cannot be
    copied or stepped without its optimizer (ReduceLROnPlateau needs a metric)."""
    optimizer = getattr(scheduler, "optimizer", None)
    if not isinstance(optimizer, Optimizer) or not callable(getattr(scheduler, "get_last_lr", None)):
        return None
    stand_in = _StandIn(optimizer)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            shadow = copy.deepcopy(scheduler, memo={id(optimizer): stand_in})
            lrs = [float(stand_in.param_groups[0]["lr"])]
            for _ in range(cap):
                try:
                    shadow.step()
                except (ValueError, ZeroDivisionError, OverflowError):  # past the end (OneCycleLR)
                    break
                lrs.append(float(stand_in.param_groups[0]["lr"]))
    except Exception:  # a schedule we cannot simulate is not judged
        return None
    return _milestones(lrs, cap)


def _milestones(lrs: list[float], cap: int) -> Shape:
    top = max(lrs)
    peak = None
    if len(lrs) > 1 and lrs[1] > lrs[0] * (1 + 1e-9):  # rising now: a warm-up, up to where it stops rising
        peak = next((k for k in range(1, len(lrs) - 1) if lrs[k + 1] <= lrs[k]), len(lrs) - 1)
    end = None
    for k in range(1, len(lrs)):
        if not math.isclose(lrs[k], lrs[k - 1], rel_tol=1e-6, abs_tol=0.0):
            end = k
        if top > 0 and lrs[k] < _SETTLED * top:
            end = k
            break
    if end is not None and end >= len(lrs) - 1 and len(lrs) > cap:
        end = cap
    first = next((k for k in range(1, len(lrs)) if not math.isclose(lrs[k], lrs[0], rel_tol=1e-6, abs_tol=0.0)), None)
    return Shape(first, peak, end)
