"""Deep recursion without paying, again and again, for new pieces of CPython's frame stack.

Since 3.11, CPython keeps Python frames on a per-thread stack that grows in 16 KiB chunks: a call
that does not fit in the current chunk maps a new one, and returning from the first frame of a
chunk unmaps it. The model builder recurses (statements, expressions, calls, the bodies it
follows) and goes back and forth across a chunk's end tens of thousands of times per project:
58,000 map/unmap pairs on stable-baselines3 (97 files), with a page fault for each page each new
chunk touches, about one second of system time in eight of the lint's CPU time.

`with_room(fn, ...)` calls `fn` from one frame so large that the chunk made for it has about
256 KiB free above it, room for more than a thousand ordinary frames: the recursion above stays in
that one chunk. The large frame costs one mapping and the writes that clear its slots, once per
call, so it belongs around a file's analysis, not inside it. Elsewhere (before 3.11, other
interpreters) it is a plain call.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, TypeVar

T = TypeVar("T")

# Slots of the large frame. CPython sizes a new chunk as the first power of two (from 16 KiB) that
# holds the frame and 1000 slots more: 32,768 + 1000 slots (270,000 bytes) ask for 512 KiB, and
# the frame itself takes 256 KiB (262,000 bytes) of it.
_SLOTS = 32_768


def _call(fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any]) -> T:
    return fn(*args, **kwargs)


def _with_slots(function: Callable[..., T], slots: int) -> Callable[..., T]:
    """`function` with `slots` more local variables, none of them used."""
    code = function.__code__
    extra = tuple(f"_slot{i}" for i in range(slots))
    grown = code.replace(co_varnames=code.co_varnames + extra, co_nlocals=code.co_nlocals + slots)
    return type(function)(grown, function.__globals__, function.__name__)


_roomy: Callable[..., Any] | None = None  # made at the first call: a run served by the cache needs none


def prepare() -> None:
    """Make the large frame's function now (about 15 ms): before worker processes are forked,
    so that they start with it."""
    global _roomy
    if _roomy is None:
        _roomy = _call
        if sys.implementation.name == "cpython" and sys.version_info >= (3, 11):
            try:
                _roomy = _with_slots(_call, _SLOTS)
            except (TypeError, ValueError):  # a code object this version will not grow: a plain call
                pass


def with_room(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`fn(*args, **kwargs)`, its recursion kept in one piece of the frame stack (see the module)."""
    if _roomy is None:
        prepare()
    return _roomy(fn, args, kwargs)  # type: ignore[misc]
