"""The public lint API: `loopcheck.lint_source` and `loopcheck.lint_paths`.

`select` and `ignore` take codes or prefixes (`["LC1", "LC201"]`, or one comma-separated
string); by default every LC rule runs.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Iterable, Sequence

from loopcheck.findings import Finding
from loopcheck.lint.engine import LintReport, check_paths, check_source


class CodeFilter:
    """`enabled(code)` from select / ignore lists of codes or prefixes (picklable for workers)."""

    def __init__(self, select: Iterable[str] | str | None = None, ignore: Iterable[str] | str | None = None) -> None:
        self.select = _codes(select)
        self.ignore = _codes(ignore) or ()

    def __call__(self, code: str) -> bool:
        if self.select is not None and not any(code.startswith(s) for s in self.select):
            return False
        return not any(code.startswith(i) for i in self.ignore)


def _codes(value: Iterable[str] | str | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = value.split(",")
    codes = tuple(c.strip().upper() for c in value if c and c.strip())
    if any(c == "ALL" for c in codes):
        return None
    return codes


def lint_source(
    source: str | bytes,
    path: str = "<string>",
    *,
    select: Sequence[str] | str | None = None,
    ignore: Sequence[str] | str | None = None,
) -> list[Finding]:
    """Findings for one piece of source code.

    Raises ValueError when the source cannot be decoded or parsed (the message names the line).
    A rule that fails internally is reported as a RuntimeWarning; the other rules' findings are
    still returned.
    """
    result = check_source(source, path, enabled=CodeFilter(select, ignore))
    for error in result.errors:
        if error.code is None:
            where = f"{error.path}:{error.line}" if error.line else error.path
            raise ValueError(f"{where}: {error.message}")
        warnings.warn(f"{error.path}: {error.message}", RuntimeWarning, stacklevel=2)
    return result.findings


def lint_paths(
    paths: Iterable[str | Path] | str | Path,
    *,
    select: Sequence[str] | str | None = None,
    ignore: Sequence[str] | str | None = None,
    jobs: int | None = None,
    exclude: Sequence[str] = (),
) -> LintReport:
    """Lint files and folders; problems with files are in `report.errors`, never raised."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    return check_paths(list(paths), enabled=CodeFilter(select, ignore), exclude=exclude, jobs=jobs)
