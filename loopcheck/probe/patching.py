"""Class-level method wrappers that live exactly as long as a probe, and the mark of the probe's hooks.

Wrapping on the class (not the instance) keeps the wrapped objects picklable: an instance
attribute would end up in `scheduler.state_dict()` and break checkpoint saving. Each wrapper
checks whether its instance is watched and is a plain pass-through otherwise; `restore()` puts
back exactly what the class had (its own attribute, or nothing when the method was inherited).
"""

from __future__ import annotations

import functools
from typing import Any, Callable

_MISSING = object()
_OWN = "__loopcheck_hook__"
# The dicts of module hooks, and the flag dicts keyed by the same handle ids.
_HOOK_DICTS = {
    "_forward_hooks": ("_forward_hooks_with_kwargs", "_forward_hooks_always_called"),
    "_forward_pre_hooks": ("_forward_pre_hooks_with_kwargs",),
}


def own(hook: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a hook function as the probe's: copies and pickles of its module leave it out."""
    setattr(hook, _OWN, True)
    return hook


def foreign_hooks(hooks: dict[int, Any]) -> bool:
    """Whether a module's hook dict holds a hook that is not the probe's."""
    return any(not getattr(h, _OWN, False) for h in hooks.values())


def without_own_hooks(state: dict[str, Any]) -> dict[str, Any]:
    """A module's pickled state (`__getstate__`) without the probe's hooks.

    `torch.save(model)` and `copy.deepcopy(model)` inside the block would otherwise copy the
    probe's closures: the first cannot pickle them, the second gives an EMA copy the hooks of
    the watched model.
    """
    for name, flags in _HOOK_DICTS.items():
        hooks = state.get(name)
        if not hooks or not any(getattr(h, _OWN, False) for h in hooks.values()):
            continue
        state = dict(state)
        dropped = [k for k, h in hooks.items() if getattr(h, _OWN, False)]
        state[name] = type(hooks)((k, h) for k, h in hooks.items() if k not in dropped)
        for flag in flags:
            values = state.get(flag)
            if values:
                state[flag] = type(values)((k, v) for k, v in values.items() if k not in dropped)
    return state


class MethodPatch:
    def __init__(self, cls: Any, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
        """Wrap `cls.name` (a class, or a module such as `torch.autograd`) with `make(original)`."""
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
