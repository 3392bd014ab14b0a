"""Helpers shared by the rule tests: the `# expect: LC102` marks of a snippet, and the findings of
snippets and small projects on disk. A rule that crashes (reported as a RuntimeWarning) fails the
test instead of passing silently with no findings."""

from __future__ import annotations

import re
import textwrap
import warnings
from pathlib import Path
from typing import Sequence

from loopcheck.findings import Finding
from loopcheck.lint.api import lint_paths, lint_source

MARK = re.compile(r"#\s*expect:\s*([A-Z0-9, ]+)")


def expected(source: str) -> set[tuple[int, str]]:
    """(line, code) for every code of every `# expect:` mark of the source."""
    out = set()
    for number, line in enumerate(source.splitlines(), start=1):
        match = MARK.search(line)
        if match:
            out |= {(number, code.strip()) for code in match.group(1).split(",") if code.strip()}
    return out


def findings(source: str, select: str | Sequence[str], path: str = "<string>") -> list[Finding]:
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        return lint_source(source, path=path, select=select)


def found(source: str, select: str | Sequence[str], path: str = "<string>") -> set[tuple[int, str]]:
    """(line, code) of the findings of the selected codes."""
    return {(f.line, f.code) for f in findings(source, select, path)}


def check(source: str, select: str | Sequence[str]) -> None:
    """The selected findings of the source are exactly its `# expect:` marks."""
    assert found(source, select) == expected(source)


def snippet(source: str) -> str:
    """A triple-quoted snippet as a file: dedented, its leading blank line dropped."""
    return textwrap.dedent(source).lstrip("\n")


def codes(source: str, select: str | Sequence[str], info: bool = True) -> list[tuple[int, str]]:
    """Sorted (line, code) of the selected findings of a snippet (info-level ones too unless `info`
    is False)."""
    found_here = findings(snippet(source), select)
    return sorted((f.line, f.code) for f in found_here if info or f.severity.value != "info")


def messages(source: str, code: str, path: str = "<string>") -> list[str]:
    """The messages of one code's findings, for a source used as it is."""
    return [f.message for f in findings(source, [code], path)]


def found_in_project(path: Path, select: str | Sequence[str]) -> set[tuple[str, int, str]]:
    """(file name, line, code) of linting the project on disk that holds `path` (its folder):
    findings are reported in the file where the defect is, with evidence from the others."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        report = lint_paths([path.parent], select=select)
    assert not report.errors
    return {(Path(f.path).name, f.line, f.code) for f in report.findings}
