"""A warm run after edits gives exactly what a run without the cache gives.

The cache keeps each file's analysis with what it read of the project and reuses it while that
is unchanged; a dependency it failed to record would show here as a stale finding. Every
multi-file fixture project is copied, linted once, then edited file by file the way people edit
(a statement of the loop removed, a line inserted above everything, a helper added at the end),
and after each edit the warm result is compared with a cold one.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROJECTS = sorted(p for p in (REPO / "fixtures").iterdir() if p.is_dir())
_LOOP_WORDS = (".step()", "zero_grad", ".eval()", ".train()", "backward(", "state_dict", "set_epoch")


def _drop_a_loop_statement(text: str) -> str | None:
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        stripped = line.strip()
        if any(word in stripped for word in _LOOP_WORDS) and not stripped.startswith(("def ", "class ", "#")):
            indent = line[: len(line) - len(line.lstrip())]
            return "".join(lines[:i] + [f"{indent}pass\n"] + lines[i + 1:])
    return None


def _edits(text: str) -> list[tuple[str, str]]:
    found = [
        ("line inserted above everything", "# reviewed\n" + text),
        ("helper added at the end", text + "\n\ndef _added_helper(x):\n    return x\n"),
    ]
    dropped = _drop_a_loop_statement(text)
    if dropped is not None:
        found.insert(0, ("a loop statement removed", dropped))
    return found


def _findings(lint, *args: str) -> list[dict]:
    result = lint(".", "-f", "json", "--jobs", "1", *args)
    assert result.stderr == ""
    return json.loads(result.stdout)["findings"]


@pytest.mark.parametrize("fixture", PROJECTS, ids=[p.name for p in PROJECTS])
def test_warm_runs_after_edits_match_cold_runs(lint, project, fixture):
    shutil.copytree(fixture, project, dirs_exist_ok=True)
    files = sorted(p for p in project.rglob("*.py") if ".loopcheck_cache" not in p.parts)
    assert _findings(lint) == _findings(lint, "--no-cache")
    for path in files:
        original = path.read_text(encoding="utf-8")
        for what, edited in _edits(original):
            path.write_text(edited, encoding="utf-8")
            warm = _findings(lint)
            assert warm == _findings(lint, "--no-cache"), f"{path.name}: {what}"
        path.write_text(original, encoding="utf-8")
        assert _findings(lint) == _findings(lint, "--no-cache"), f"{path.name}: restored"
