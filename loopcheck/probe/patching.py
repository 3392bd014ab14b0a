"""Class-level method wrappers that live exactly as long as a probe.

Wrapping on the class (not the instance) keeps the wrapped objects picklable: an instance
attribute would end up in `scheduler.state_dict()` and break checkpoint saving. Each wrapper
checks whether its instance is watched and is a plain pass-through otherwise; `restore()` puts
back exactly what the class had (its own attribute, or nothing when the method was inherited).
"""

from __future__ import annotations

import functools
from typing import Any, Callable

_MISSING = object()


class MethodPatch:
    def __init__(self, cls: type, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
        self.cls = cls
        self.name = name
        self.saved = cls.__dict__.get(name, _MISSING)
        original = getattr(cls, name)
        wrapper = make(original)
        functools.update_wrapper(wrapper, original)
        wrapper.__loopcheck_wrapped__ = True  # type: ignore[attr-defined]
        self.wrapper = wrapper
        setattr(cls, name, wrapper)

    def restore(self) -> None:
        if self.cls.__dict__.get(self.name) is not self.wrapper:
            # Something wrapped the method again after us; removing ours would drop theirs.
            # Our wrapper stays in the chain as a pass-through (the probe is no longer live).
            return
        if self.saved is _MISSING:
            delattr(self.cls, self.name)
        else:
            setattr(self.cls, self.name, self.saved)
