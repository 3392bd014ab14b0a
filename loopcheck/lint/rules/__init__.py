"""Rule families, one module each; importing this package registers every rule."""

import importlib

FAMILIES = ("zero_grad", "scheduler", "eval_mode", "amp", "checkpoint", "resume", "memory", "data", "ema")

for _family in FAMILIES:
    importlib.import_module(f"{__name__}.{_family}")
