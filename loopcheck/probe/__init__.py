"""The runtime probe: `loopcheck.probe(model, optimizer, ...)` watches a running training loop.

This subpackage is itself callable, so all of these work:

    import loopcheck
    with loopcheck.probe(model, optimizer, scheduler=sched) as p: ...

    with loopcheck.probe(): ...        # finds models, optimizers, schedulers and scaler itself

    p = loopcheck.probe().start(); ...; p.stop()

    @loopcheck.probe                   # or @loopcheck.probe(log="run.jsonl")
    def train(): ...

    from loopcheck.probe import Probe

torch is imported on first use of the probe, so `loopcheck report` reads run logs without it.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import types
from typing import Any

from loopcheck.errors import ProbeUsageError
from loopcheck.probe.config import ProbeConfig

__all__ = ["Detector", "Probe", "ProbeConfig", "ProbeUsageError", "ProbeWarning"]

_LAZY = {
    "Probe": "loopcheck.probe.probe",
    "ProbeWarning": "loopcheck.probe.probe",
    "Detector": "loopcheck.probe.detectors.base",
}


class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from loopcheck.probe.probe import Probe

        if len(args) == 1 and not kwargs and inspect.isroutine(args[0]):  # bare @loopcheck.probe
            return Probe()(args[0])
        return Probe(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name in _LAZY:
            return getattr(importlib.import_module(_LAZY[name]), name)
        raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")


sys.modules[__name__].__class__ = _CallableModule
