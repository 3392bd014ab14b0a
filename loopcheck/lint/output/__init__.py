"""Rendering a lint report: text (rich), concise, json, sarif, github; statistics.

Machine formats (json, sarif, github) are plain text: never colour, never rich markup.
"""

from __future__ import annotations

from enum import Enum

from loopcheck.lint.output.report import FileError, Report, fix_edits


class Format(str, Enum):
    TEXT = "text"
    CONCISE = "concise"
    JSON = "json"
    SARIF = "sarif"
    GITHUB = "github"

    @classmethod
    def parse(cls, value: str) -> "Format":
        try:
            return cls(value.strip().lower())
        except ValueError:
            choices = ", ".join(f.value for f in cls)
            raise ValueError(f"unknown format {value!r} (choose {choices})") from None

    @property
    def machine(self) -> bool:
        return self in (Format.JSON, Format.SARIF, Format.GITHUB)


__all__ = ["FileError", "Format", "Report", "fix_edits"]
