"""loopcheck: finds the silent bugs of hand-written PyTorch training loops.

The public API:

- `lint_source(source, path=...)` and `lint_paths(paths, ...)`: the static analyzer (no torch needed);
- `probe(model, optimizer, ...)`: the runtime probe, a context manager (imports torch on first use);
- `Finding`, `Severity`, `ProbeError`, `ProbeUsageError`.
"""

from __future__ import annotations

from typing import Any

from loopcheck.errors import ProbeError, ProbeUsageError
from loopcheck.findings import Finding, Severity

__version__ = "0.1.0"

__all__ = ["Finding", "ProbeError", "ProbeUsageError", "Severity", "lint_paths", "lint_source", "probe", "__version__"]


def __getattr__(name: str) -> Any:
    # Lazy: `import loopcheck` must stay cheap and must never import torch.
    if name in ("lint_source", "lint_paths"):
        from loopcheck.lint import api

        return getattr(api, name)
    if name == "probe":
        # The subpackage loopcheck.probe is itself callable: loopcheck.probe(model, opt, ...).
        import importlib

        return importlib.import_module("loopcheck.probe")
    raise AttributeError(f"module 'loopcheck' has no attribute {name!r}")
