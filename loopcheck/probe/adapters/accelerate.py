"""Objects prepared by Hugging Face Accelerate: the probe watches the torch objects inside them.

`accelerator.prepare(...)` returns an `AcceleratedOptimizer` around the torch optimizer and an
`AcceleratedScheduler` around the scheduler. The wrappers step the objects inside them, and only
those run the optimizer's step hooks, so the probe hooks the inner objects. A prepared model is
the model itself on one process, or a DDP wrapper that the probe unwraps anyway; the GradScaler
(`accelerator.scaler`) is found at its first use. The wrappers are recognised by their shape, so
accelerate is never imported here.
"""

from __future__ import annotations

from typing import Any

from torch.optim import Optimizer


def inner_optimizer(optimizer: Any) -> Any:
    """The torch optimizer inside an `AcceleratedOptimizer` (or any optimizer that wraps one)."""
    for _ in range(4):
        inner = getattr(optimizer, "optimizer", None)
        if not isinstance(optimizer, Optimizer) or not isinstance(inner, Optimizer) or inner is optimizer:
            break
        optimizer = inner
    return optimizer


def inner_scheduler(scheduler: Any) -> Any:
    """The torch scheduler inside an `AcceleratedScheduler`."""
    for _ in range(4):
        inner = getattr(scheduler, "scheduler", None)
        if getattr(scheduler, "optimizer", None) is not None or inner is None or not callable(getattr(inner, "step", None)):
            break
        scheduler = inner
    return scheduler
