"""LP601: the share of each step spent waiting for the next batch (host wall clock only).

The wait of a step is the time from the end of the previous optimizer step to the start of the
next training forward pass (fetching the batch, collating it, moving it). Intervals that contain
an evaluation pass (a forward without gradients) are left out; the median share over a window
of steps is compared with `stall_share`.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from typing import Any

import torch

from loopcheck.probe.detectors.base import Detector


class DataStallDetector(Detector):
    codes = ("LP601",)
    first_optimizer_steps = True

    def __init__(self, probe: Any) -> None:
        super().__init__(probe)
        self._end: float | None = None
        self._wait: float | None = None
        self._eval = False
        self._shares: deque[float] = deque(maxlen=self.config.stall_window)
        self._interval: list[tuple[float, float]] = []

    def on_forward_pre(self, root: int, module: Any, args: tuple[Any, ...]) -> None:
        if not torch.is_grad_enabled():
            self._eval = True
        elif self._wait is None and self._end is not None:
            self._wait = time.perf_counter() - self._end

    def on_step(self, index: int, optimizer: Any) -> None:
        if index != 0:
            return
        now = time.perf_counter()
        if self._end is not None and self._wait is not None and not self._eval:
            total = now - self._end
            if total > 0:
                self._shares.append(self._wait / total)
                self._interval.append((self._wait, total))
        self._end, self._wait, self._eval = now, None, False

    def on_sample(self, step: int, final: bool) -> None:
        if final or len(self._shares) < (self._shares.maxlen or 0):
            return
        share = statistics.median(self._shares)
        if share >= self.config.stall_share:
            self.report(
                "LP601",
                f"in the median step {share:.0%} of the time is spent waiting for the next batch: the "
                f"data pipeline, not the model, sets the pace (more DataLoader workers, pin_memory, "
                f"persistent_workers, cheaper transforms)",
                share=share,
            )
            self._shares.clear()

    def metrics(self) -> dict[str, Any]:
        interval, self._interval = self._interval, []
        if not interval:
            return {}
        n = len(interval)
        return {"data_wait": sum(w for w, _ in interval) / n, "step_time": sum(t for _, t in interval) / n}
