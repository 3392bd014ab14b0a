"""Which optimizer steps get the exact checks: each optimizer's first steps, then one in `check_every`.

The exact checks (every gradient's norm, gradient-reset tracking, graph marks) look for faults
that last for many steps, so one step in a few finds them. Their cost is one read of every
gradient, which is nothing next to a large model's step and a few percent of a small dense
model's step on the CPU. So unless the user fixes `check_every`, on the CPU (where the fused norm
call is synchronous, so timing it measures it) the interval follows the measured cost: at each
sample the share of the run's time the norms would take if every step had them gives the smallest
interval, a power of two from 4 to 16, that keeps them under `_BUDGET` of the run. The first
measurement runs from the end of the first optimizer's always-watched steps (`start`) to the first
sample, so a run pays the default interval for one sampling period, not two. On an
accelerator the norms are one kernel queued without a host sync, too cheap to time from the host:
the interval stays at 4.
"""

from __future__ import annotations

import time

import torch

from loopcheck.probe.stats import fused_norms

FIRST_WATCHED = 8  # each optimizer's steps that are always watched
DEFAULT = 4  # the interval on an accelerator, and on the CPU until the first measurement
_LONGEST = 16  # the longest interval chosen by measurement (LP101 then judges from about step 500)
_BUDGET = 0.0025  # the share of the run's time the exact norms may take when the interval is chosen


def watched_step(n: int, check_every: int) -> bool:
    """Whether an optimizer's `n`-th step is one the exact checks look at."""
    return n <= FIRST_WATCHED or n % check_every == 0


class Cadence:
    """`check_every` now: fixed when the user gave it, else tuned from the norms' measured cost."""

    def __init__(self, fixed: int | None) -> None:
        self.check_every = fixed or DEFAULT
        self.tuned = fixed is None  # whether the norm calls are timed and `retune` moves the interval
        self._spent = 0.0  # seconds in exact norm calls since the last retune
        self._calls = 0  # exact norm calls since then
        self._since: float | None = None  # when the interval being measured began
        self._steps = 0  # optimizer steps (of any optimizer) counted at that point

    def on_accelerator(self) -> None:
        """A watched model is on an accelerator: the norms are queued kernels, the interval the default."""
        if self.tuned:
            self.tuned = False
            self.check_every = DEFAULT

    def norms(self, grads: list[torch.Tensor]) -> list[torch.Tensor]:
        """`fused_norms(grads)`, timed while the interval is tuned (on the CPU the fused call is
        synchronous: its time is its cost)."""
        if not self.tuned:
            return fused_norms(grads)
        start = time.perf_counter()
        values = fused_norms(grads)
        self.timed(time.perf_counter() - start)
        return values

    def start(self, steps: int) -> None:
        """The always-watched first steps are over, `steps` optimizer steps into the run: measure
        from here (their norm calls, the first of the run, are not the steady cost)."""
        if self.tuned and self._since is None:
            self._since, self._steps = time.perf_counter(), steps
            self._spent, self._calls = 0.0, 0

    def timed(self, seconds: float) -> None:
        """One exact norm call took `seconds`."""
        self._spent += seconds
        self._calls += 1

    def retune(self, steps: int) -> None:
        """At a sample, `steps` optimizer steps (of every optimizer) into the run: choose the interval
        from the norms' cost per call times the steps since the last sample (or `start`), against
        the time since. A fixed interval stays as it is."""
        if not self.tuned:
            return
        now = time.perf_counter()
        since, done = self._since, self._steps
        self._since, self._steps = now, steps
        spent, calls = self._spent, self._calls
        self._spent, self._calls = 0.0, 0
        if since is None or not calls or now <= since or steps <= done:
            return
        share = spent / calls * (steps - done) / (now - since)  # of the run, with norms at every step
        interval = DEFAULT
        while interval < _LONGEST and share / interval > _BUDGET:
            interval *= 2
        self.check_every = interval
