"""Every fixture script gives exactly the findings its `# expect: CODE` marks announce.

A single file `fixtures/<name>.py` is linted alone; a folder `fixtures/<project>/` is linted as a
project (all its files together), so imports between its modules resolve. Only error- and
warning-level findings are compared; info findings are advice and are not marked.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from loopcheck.findings import Severity
from loopcheck.lint.api import lint_paths

from ._support import expected

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "fixtures"


def _units() -> list[Path]:
    if not FIXTURES.is_dir():
        return []
    return sorted(p for p in FIXTURES.iterdir() if (p.is_dir() and any(p.rglob("*.py"))) or p.suffix == ".py")


def _files(unit: Path) -> list[Path]:
    return sorted(unit.rglob("*.py")) if unit.is_dir() else [unit]


def expected_marks(files: list[Path]) -> set[tuple[str, int, str]]:
    marks: set[tuple[str, int, str]] = set()
    for f in files:
        rel = f.relative_to(REPO).as_posix()
        marks |= {(rel, number, code) for number, code in expected(f.read_text(encoding="utf-8"))}
    return marks


def _describe(rows: set[tuple[str, int, str]], messages: dict[tuple[str, int, str], str]) -> str:
    return "\n".join(f"  {p}:{line} {code} {messages.get((p, line, code), '')}".rstrip() for p, line, code in sorted(rows))


@pytest.mark.parametrize("unit", _units(), ids=lambda p: p.relative_to(FIXTURES).as_posix())
def test_fixture_findings_match_marks(unit: Path) -> None:
    files = _files(unit)
    cwd = os.getcwd()
    os.chdir(REPO)  # findings are reported with paths relative to the repository
    try:
        report = lint_paths([f.relative_to(REPO).as_posix() for f in files], jobs=1)
    finally:
        os.chdir(cwd)
    assert not report.errors, "fixture could not be checked: " + "; ".join(str(e.to_dict()) for e in report.errors)
    got: set[tuple[str, int, str]] = set()
    messages: dict[tuple[str, int, str], str] = {}
    for f in report.findings:
        if f.severity < Severity.WARNING:
            continue
        path = Path(f.path or "")
        rel = (path.relative_to(REPO) if path.is_absolute() else path).as_posix()
        key = (rel, f.line or 0, f.code)
        got.add(key)
        messages[key] = f.message
    expected = expected_marks(files)
    missing, extra = expected - got, got - expected
    problems = []
    if missing:
        problems.append("marked but not found:\n" + _describe(missing, messages))
    if extra:
        problems.append("found but not marked:\n" + _describe(extra, messages))
    assert not problems, "\n".join(problems)


def test_there_are_fixtures_of_both_kinds() -> None:
    units = _units()
    marked = [u for u in units if expected_marks(_files(u))]
    clean = [u for u in units if not expected_marks(_files(u))]
    assert len(marked) >= 5 and len(clean) >= 5
