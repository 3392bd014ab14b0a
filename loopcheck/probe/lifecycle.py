"""The other ways to run a probe than a `with` block: `start()` / `stop()` and a decorator.

Both keep the guarantees of the block. `start()` registers an interpreter-exit handler, so a
script that never reaches `stop()` (it returned early, crashed, or was interrupted) still gets its
hooks removed, the end record written and the summary printed. The decorator builds a fresh
probe with the same arguments for each call of the function (a probe watches one run).
"""

from __future__ import annotations

import atexit
import functools
import sys
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from loopcheck.probe.probe import Probe


def start(probe: "Probe") -> "Probe":
    probe.__enter__()
    atexit.register(_at_exit, probe)
    return probe


def stop(probe: "Probe") -> "Probe":
    atexit.unregister(_at_exit)
    if probe.live:
        probe.__exit__(None, None, None)
    return probe


def _at_exit(probe: "Probe") -> None:
    if probe.live:
        # The interpreter sets sys.last_value when an uncaught exception ended the script.
        error = getattr(sys, "last_value", None)
        probe.__exit__(type(error) if error is not None else None, error, None)


def decorate(probe: "Probe", fn: Callable[..., Any]) -> Callable[..., Any]:
    """`@loopcheck.probe(...)` on a training function: each call runs inside a new probe."""
    from loopcheck.probe.probe import Probe

    arguments = probe._arguments

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        current = Probe(**arguments)
        run.probe = current  # type: ignore[attr-defined]
        with current:
            return fn(*args, **kwargs)

    run.probe = None  # type: ignore[attr-defined]
    return run
