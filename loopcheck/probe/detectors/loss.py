"""LP501: a loss far above its recent robust level (rolling median / MAD on a log scale);
LP502: a loss that has trended far above its starting level (divergence).

The per-step loss is what `backward()` was called on (summed over accumulation micro-batches,
unscaled under a GradScaler), kept on the device and read with the probe's other queued values
every `every` steps.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict, deque
from typing import Any

from loopcheck.probe.detectors.base import Detector
from loopcheck.probe.stats import RobustLevel

_START = 5  # the starting level: the median of the first losses
_DIVERGED = 2.0  # the recent median this many times the starting level ...
_SAMPLES = 2  # ... at this many samples in a row is a divergence ...
_STEADY = 0.35  # ... when the recent losses lie within this of their median (log scale, MAD: about 40 %)


class LossSpikeDetector(Detector):
    codes = ("LP501", "LP502")

    def __init__(self, probe: Any) -> None:
        super().__init__(probe)
        c = self.config
        self._levels: dict[int, RobustLevel] = defaultdict(lambda: RobustLevel(c.window, c.warmup, c.spike_z, c.spike_ratio))
        self._values: list[float] = []
        self._start: list[float] = []
        self._recent: deque[float] = deque(maxlen=self.config.every)
        self._high = 0

    def on_sample(self, step: int, final: bool) -> None:
        self._values = []
        pending = [record for record in self.probe.steps if record.loss is not None]
        if not pending:
            return
        host = self.probe.readings.host()
        levels, values, start, recent = self._levels, self._values, self._start, self._recent
        for at, index, read, _ in pending:
            value = host[read.start]  # (one value)
            if not math.isfinite(value):
                continue  # LP105 is the non-finite detector's
            if index == 0:
                values.append(value)
                if len(start) < _START:
                    start.append(value)
                else:
                    recent.append(value)
            level = levels[index].push(value)
            if level is not None:
                self.report(
                    "LP501",
                    f"loss {value:.4g} at step {at} is {value / level:.0f}x its recent median {level:.4g}: "
                    f"a bad batch, a too-high learning rate or an instability",
                    where=None if len(self.probe.optimizers) == 1 else f"optimizer{index}",
                    step=at, loss=value, median=level,
                )

        if not final:
            self._trend(step)

    def _trend(self, step: int) -> None:
        """LP502, for a single optimizer (a GAN's losses rise and fall by design): the median of the
        last `every` losses stays `_DIVERGED` times above the lowest of the first few, on a level
        the losses hold. A loss that jumps by large factors from step to step is not judged: a
        policy-gradient surrogate (REINFORCE: -log p times the return) scales with the episode's
        returns, which grow as the policy learns."""
        if len(self.probe.optimizers) != 1 or len(self._recent) < (self._recent.maxlen or 0):
            return
        start, now = min(self._start), statistics.median(self._recent)
        if not (start > 0 and now >= _DIVERGED * start and self._steady(now)):
            self._high = 0
            return
        self._high += 1
        if self._high == _SAMPLES:
            self.report(
                "LP502",
                f"the loss has risen from {start:.4g} (the lowest of the first {_START} steps) to {now:.4g} (median "
                f"of the last {len(self._recent)} steps, {now / start:.1f}x) and stayed there: the run diverges "
                f"(a learning rate far too high, or a sign error in the loss)",
                step=step, start=start, now=now,
            )

    def _steady(self, level: float) -> bool:
        logs = [math.log(v / level) if v > 0 else -math.inf for v in self._recent]
        return statistics.median(abs(x) for x in logs) <= _STEADY

    def metrics(self) -> dict[str, Any]:
        if not self._values:
            return {}
        return {"loss": sum(self._values) / len(self._values), "loss_max": max(self._values)}
