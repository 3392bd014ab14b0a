"""The report every output format renders: findings, files that could not be checked, counts."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from loopcheck.findings import Finding, Severity


@dataclass(frozen=True)
class FileError:
    """A file that could not be read or parsed (or a rule that crashed on it)."""

    path: str
    line: int | None
    message: str
    code: str | None = None
    column: int | None = None
    cell: int | None = None  # a notebook's cell (line and column are inside it)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"path": self.path, "line": self.line, "message": self.message}
        if self.column is not None:
            data["column"] = self.column
        if self.cell is not None:
            data["cell"] = self.cell
        return data

    @property
    def location(self) -> str:
        parts = [self.path] + ([f"cell {self.cell}"] if self.cell is not None else [])
        if self.line:
            parts.append(str(self.line))
            if self.column:
                parts.append(str(self.column))
        return ":".join(parts)


@dataclass
class Report:
    findings: list[Finding]
    errors: list[FileError] = field(default_factory=list)
    files_checked: int = 0
    fixed: int = 0  # findings removed by --fix
    notes: list[str] = field(default_factory=list)  # what --fix did and did not do, and why

    def __post_init__(self) -> None:
        self.findings = sorted(self.findings, key=_order)
        self.errors = sorted(self.errors, key=lambda e: (e.path, e.line or 0))

    def counts(self) -> dict[Severity, int]:
        by = Counter(f.severity for f in self.findings)
        return {sev: by.get(sev, 0) for sev in (Severity.ERROR, Severity.WARNING, Severity.INFO)}

    def summary(self) -> dict[str, Any]:
        counts = self.counts()
        return {
            "findings": len(self.findings),
            "error": counts[Severity.ERROR],
            "warning": counts[Severity.WARNING],
            "info": counts[Severity.INFO],
            "fixable": sum(1 for f in self.findings if fix_edits(f)),
            "fixed": self.fixed,
            "files_checked": self.files_checked,
            "errors": len(self.errors),
        }

    def statistics(self) -> list[dict[str, Any]]:
        """Counts per code, most frequent first."""
        rows: dict[str, dict[str, Any]] = {}
        for f in self.findings:
            row = rows.setdefault(
                f.code, {"code": f.code, "name": f.name, "severity": f.severity.value, "count": 0, "fixable": 0}
            )
            row["count"] += 1
            row["fixable"] += 1 if fix_edits(f) else 0
        return sorted(rows.values(), key=lambda r: (-r["count"], r["code"]))

    def error_rows(self) -> list[dict[str, Any]]:
        """The files that could not be checked, as one statistics row (none when every file was)."""
        if not self.errors:
            return []
        return [{"code": None, "name": "not-checked", "severity": "error", "count": len(self.errors),
                 "fixable": 0, "errors": [e.to_dict() for e in self.errors]}]


def _order(f: Finding) -> tuple:
    return (f.path or "", f.line or 0, f.column or 0, f.code)


def cell_of(f: Finding) -> int | None:
    """The notebook cell of a finding (None outside notebooks)."""
    cell = f.extra.get("cell") if f.extra else None
    return cell if isinstance(cell, int) else None


def fix_kind(f: Finding) -> str | None:
    """"safe" or "unsafe" when the finding carries a fix `--fix` will apply, else None."""
    if not fix_edits(f):
        return None
    return "unsafe" if (f.fix or {}).get("applicability") == "unsafe" else "safe"


def fix_edits(f: Finding) -> list[dict[str, Any]]:
    """The edits of a finding's fix (empty when it has none)."""
    if not isinstance(f.fix, dict):
        return []
    edits = f.fix.get("edits")
    return list(edits) if isinstance(edits, list) else []


def plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n} {word if n == 1 else (many or word + 's')}"
