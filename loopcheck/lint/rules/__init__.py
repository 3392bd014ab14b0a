"""Rule families, one module each; importing this package registers every rule."""

import importlib

FAMILIES = ("zero_grad", "scheduler", "eval_mode", "amp", "checkpoint", "resume", "memory", "data", "ema")

for _family in FAMILIES:
    try:
        importlib.import_module(f"{__name__}.{_family}")
    except ModuleNotFoundError as exc:  # a family not written yet
        if exc.name != f"{__name__}.{_family}":
            raise
