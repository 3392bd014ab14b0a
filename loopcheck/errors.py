"""Exceptions of the public API (importable without torch)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from loopcheck.findings import Finding


class LoopcheckError(Exception):
    """Base class of loopcheck's own errors."""


class ProbeError(LoopcheckError):
    """Raised by a probe with on_finding="raise" the moment a finding is made."""

    def __init__(self, finding: "Finding") -> None:
        super().__init__(str(finding))
        self.finding = finding


class ProbeUsageError(LoopcheckError, ValueError):
    """The probe was given something it cannot work with (bad argument, unknown option, misuse)."""


class ConfigError(LoopcheckError):
    """A configuration file or option is invalid; the message names the key and the file."""
