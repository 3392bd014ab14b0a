"""The runtime detectors, one module per family; `default_detectors()` is what a probe installs."""

from __future__ import annotations

from loopcheck.probe.detectors.base import Detector


def default_detectors() -> list[type[Detector]]:
    from loopcheck.probe.detectors.data import DataStallDetector
    from loopcheck.probe.detectors.gradients import (
        GradNormDetector, GradResetDetector, UnusedParamsDetector, UpdateRatioDetector,
    )
    from loopcheck.probe.detectors.loss import LossSpikeDetector
    from loopcheck.probe.detectors.lr import LRDetector
    from loopcheck.probe.detectors.memory import MemoryGrowthDetector, RetainedGraphDetector
    from loopcheck.probe.detectors.modes import ModeDetector
    from loopcheck.probe.detectors.nonfinite import NonFiniteDetector

    return [
        NonFiniteDetector, GradNormDetector, GradResetDetector, UnusedParamsDetector, UpdateRatioDetector, LossSpikeDetector,
        LRDetector, ModeDetector, RetainedGraphDetector, MemoryGrowthDetector, DataStallDetector,
    ]


__all__ = ["Detector", "default_detectors"]
