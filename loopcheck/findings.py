"""Finding and Severity: the one record both the linter and the probe report."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from enum import Enum
from typing import Any


class Severity(str, Enum):
    """How sure a finding is that something is wrong: error > warning > info."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        return _RANK[self]

    def __ge__(self, other: object) -> bool:  # type: ignore[override]
        if not isinstance(other, Severity):
            return NotImplemented
        return self.rank >= other.rank

    def __gt__(self, other: object) -> bool:  # type: ignore[override]
        if not isinstance(other, Severity):
            return NotImplemented
        return self.rank > other.rank

    def __le__(self, other: object) -> bool:  # type: ignore[override]
        if not isinstance(other, Severity):
            return NotImplemented
        return self.rank <= other.rank

    def __lt__(self, other: object) -> bool:  # type: ignore[override]
        if not isinstance(other, Severity):
            return NotImplemented
        return self.rank < other.rank

    def __str__(self) -> str:
        return self.value


_RANK = {Severity.INFO: 0, Severity.WARNING: 1, Severity.ERROR: 2}


@dataclass(frozen=True)
class Finding:
    """One problem, found either in source code (lint) or in a running loop (probe).

    Lint findings fill the location fields (path, line, column, end_line, end_column, fix);
    probe findings fill step, where, rank and count. Everything else is shared.
    """

    code: str
    name: str
    severity: Severity
    message: str
    path: str | None = None
    line: int | None = None
    column: int | None = None
    end_line: int | None = None
    end_column: int | None = None
    fix: dict[str, Any] | None = None
    step: int | None = None
    where: str | None = None
    rank: int | None = None
    count: int = 1
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def lint_twin(self) -> tuple[str, ...]:
        """For a probe finding: the lint codes that find the same bug in source, before the run."""
        from loopcheck.catalog import lint_twin

        return lint_twin(self.code)

    def with_(self, **changes: Any) -> "Finding":
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["severity"] = self.severity.value
        return data

    def lint_dict(self) -> dict[str, Any]:
        """The lint JSON contract: exactly these keys, in this order."""
        return {
            "code": self.code,
            "name": self.name,
            "severity": self.severity.value,
            "path": self.path,
            "line": self.line,
            "column": self.column,
            "end_line": self.end_line,
            "end_column": self.end_column,
            "message": self.message,
            "fix": self.fix,
        }

    def __str__(self) -> str:
        where = f" [{self.where}]" if self.where else ""
        step = f" at step {self.step}" if self.step is not None else ""
        if self.path:
            return f"{self.path}:{self.line}:{self.column}: {self.code} {self.message}"
        return f"{self.code} {self.name}{where}{step}: {self.message}"
