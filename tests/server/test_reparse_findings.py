"""The server's findings after edits it re-parses in part (`reparse`) are the findings of a
fresh check of the same text: same codes, lines, columns and messages, edit after edit."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from loopcheck.server import checks
from loopcheck.server.reparse import reparse
from loopcheck.server.settings import Configurations, Settings

REPO = Path(__file__).resolve().parents[2]
# fixtures with findings in functions, methods, nested loops and helpers
FIXTURES = sorted((REPO / "fixtures").glob("*.py"))[::9]


def _edited(text: str, rng: random.Random) -> str:
    """One line inside a function changed: a statement added above it, the line removed, or a
    comment appended to it (the lines below move, their findings must move with them)."""
    lines = text.splitlines(keepends=True)
    inside = [i for i, line in enumerate(lines)
              if line.startswith("    ") and line.strip() and not line.lstrip().startswith("#")]
    if not inside:
        return text
    i = rng.choice(inside)
    indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
    roll = rng.random()
    if roll < 0.4:
        lines.insert(i, f"{indent}seen = 1\n")
    elif roll < 0.7 and len(inside) > 3:
        del lines[i]
    else:
        lines[i] = lines[i].rstrip("\r\n") + "  # looked at\n"
    return "".join(lines)


def _key(diagnosis: checks.Diagnosis) -> list:
    return sorted((f.code, f.line, f.column, f.message) for f in diagnosis.findings) + sorted(
        (e.line, e.message) for e in diagnosis.errors)


def _session(fixture: Path, folder: Path) -> int:
    """Five edits of `fixture` as a buffer of a project in `folder`, each checked as the server
    checks it and again from scratch (the same text, saved in another project); how many of
    them the server re-parsed in part."""
    (folder / "pyproject.toml").write_text("[project]\nname = 'edited'\n")
    target = folder / "train.py"
    text = fixture.read_text(encoding="utf-8")
    target.write_text(text, encoding="utf-8")
    config = Configurations(Settings(), folder).for_path(target)
    scratch = folder / "fresh"  # another project: nothing of the edited buffer's checks is shared
    scratch.mkdir()
    (scratch / "pyproject.toml").write_text("[project]\nname = 'fresh'\n")
    copy = scratch / "train.py"
    rng = random.Random(fixture.name)
    checks._LAST.pop(target, None)
    checks.diagnose(target, text, config)
    spliced = 0
    try:
        for _ in range(5):
            text = _edited(text, rng)
            previous = checks._LAST.get(target)
            spliced += previous is not None and reparse(previous, text) is not None
            found = checks.diagnose(target, text, config)
            copy.write_text(text, encoding="utf-8")
            fresh = checks.diagnose(copy, text, Configurations(Settings(), scratch).for_path(copy))
            checks.closed(copy)
            assert _key(found) == _key(fresh), f"after an edit of {fixture.name}:\n{text}"
    finally:
        checks.closed(target)
    return spliced


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: p.name)
def test_findings_after_spliced_edits_are_those_of_a_fresh_check(fixture: Path, tmp_path: Path) -> None:
    _session(fixture, tmp_path)


def test_most_of_those_edits_are_spliced(tmp_path: Path) -> None:
    spliced = 0
    for i, fixture in enumerate(FIXTURES):
        folder = tmp_path / str(i)
        folder.mkdir()
        spliced += _session(fixture, folder)
    assert spliced > len(FIXTURES) * 5 // 2
