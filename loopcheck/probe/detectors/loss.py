"""LP501: a loss far above its recent robust level (rolling median / MAD on a log scale).

The per-step loss is what `backward()` was called on (summed over accumulation micro-batches,
unscaled under a GradScaler), kept on the device and read with the probe's other queued values
every `every` steps.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from loopcheck.probe.detectors.base import Detector
from loopcheck.probe.stats import RobustLevel


class LossSpikeDetector(Detector):
    codes = ("LP501",)

    def __init__(self, probe: Any) -> None:
        super().__init__(probe)
        c = self.config
        self._levels: dict[int, RobustLevel] = defaultdict(lambda: RobustLevel(c.window, c.warmup, c.spike_z, c.spike_ratio))
        self._pending: list[tuple[int, int, slice]] = []  # (step, optimizer, read)
        self._values: list[float] = []

    def on_step_pre(self, index: int, optimizer: Any) -> None:
        read = self.probe.loss_read.get(index)
        if read is not None:
            self._pending.append((self.probe.step + 1, index, read))

    def on_sample(self, step: int, final: bool) -> None:
        pending, self._pending = self._pending, []
        self._values = []
        if not pending:
            return
        host = self.probe.readings.host()
        for at, index, read in pending:
            (value,) = host[read]
            if not math.isfinite(value):
                continue  # LP105 is the non-finite detector's
            if index == 0:
                self._values.append(value)
            level = self._levels[index].push(value)
            if level is not None:
                self.report(
                    "LP501",
                    f"loss {value:.4g} at step {at} is {value / level:.0f}x its recent median {level:.4g}: "
                    f"a bad batch, a too-high learning rate or an instability",
                    where=None if len(self.probe.optimizers) == 1 else f"optimizer{index}",
                    step=at, loss=value, median=level,
                )

    def metrics(self) -> dict[str, Any]:
        if not self._values:
            return {}
        return {"loss": sum(self._values) / len(self._values), "loss_max": max(self._values)}
