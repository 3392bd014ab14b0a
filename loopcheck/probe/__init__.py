"""The runtime probe: `loopcheck.probe(model, optimizer, ...)` watches a running training loop.

This subpackage is itself callable, so all of these work:

    import loopcheck
    with loopcheck.probe(model, optimizer, scheduler=sched) as p: ...

    from loopcheck import probe
    with probe(model, optimizer): ...

    from loopcheck.probe import Probe
"""

from __future__ import annotations

import sys
import types
from typing import Any

from loopcheck.probe.config import ProbeConfig, ProbeUsageError
from loopcheck.probe.detectors.base import Detector
from loopcheck.probe.probe import Probe, ProbeWarning

__all__ = ["Detector", "Probe", "ProbeConfig", "ProbeUsageError", "ProbeWarning"]


class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Probe:
        return Probe(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
