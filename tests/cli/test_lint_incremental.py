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

from tests.projects import STEP_MODULE

from .conftest import DRIVER

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


# driver.py's loop calls a step that `from pkg.helpers import train_step` finds once created
_DRIVER = DRIVER.replace("from steps import", "from pkg.helpers import")


# (what, files before, the file created): `from pkg.helpers import ...` resolves to the new file
# (`pkg/helpers.py` is found before a package `pkg/helpers/`)
_NEW_MODULES = [
    ("resolved to nothing before", {"pkg/__init__.py": ""}, "pkg/helpers.py"),
    ("resolved to a package before", {"pkg/__init__.py": "", "pkg/helpers/__init__.py": "def train_step(*args):\n    pass\n"},
     "pkg/helpers.py"),
    ("resolved to nothing before, a package now", {"pkg/__init__.py": ""}, "pkg/helpers/__init__.py"),
    ("no folder pkg before", {}, "pkg/helpers.py"),
]


@pytest.mark.parametrize("what,before,created", _NEW_MODULES, ids=[c[0] for c in _NEW_MODULES])
def test_a_new_module_an_import_now_resolves_to_is_followed(lint, project, what, before, created):
    for name, text in {"driver.py": _DRIVER, **before}.items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(text, encoding="utf-8")
    assert _findings(lint) == _findings(lint, "--no-cache")
    (project / created).parent.mkdir(parents=True, exist_ok=True)
    (project / created).write_text(STEP_MODULE, encoding="utf-8")
    cold = _findings(lint, "--no-cache")
    assert any(f["code"] == "LC102" for f in cold)  # the step driver.py's model follows into it
    assert _findings(lint) == cold, what


@pytest.mark.parametrize("what,before,created", _NEW_MODULES, ids=[c[0] for c in _NEW_MODULES])
def test_a_module_an_import_resolved_to_is_deleted(lint, project, what, before, created):
    """The reverse of the test above: the file an import resolved to (in an earlier run, whose
    resolved imports the cache keeps) is gone."""
    for name, text in {"driver.py": _DRIVER, **before, created: STEP_MODULE}.items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(text, encoding="utf-8")
    assert any(f["code"] == "LC102" for f in _findings(lint))
    (project / created).unlink()
    assert _findings(lint) == _findings(lint, "--no-cache"), what


def test_a_new_module_a_file_now_reaches_makes_it_worth_analysing(lint, project):
    """driver.py names nothing of PyTorch: it is analysed once a module it imports does, and a
    module created where its import found nothing is one."""
    (project / "pkg").mkdir()
    (project / "pkg" / "__init__.py").write_text("")
    (project / "driver.py").write_text(
        "from pkg.helpers import train_step\n\n\ndef main(model, opt, criterion, loader):\n"
        "    for epoch in range(3):\n        for batch in loader:\n            train_step(model, batch, opt, criterion)\n",
        encoding="utf-8",
    )
    assert _findings(lint) == _findings(lint, "--no-cache") == []
    (project / "pkg" / "helpers.py").write_text(STEP_MODULE, encoding="utf-8")
    cold = _findings(lint, "--no-cache")
    assert [f["code"] for f in cold] == ["LC102"]
    assert _findings(lint) == cold


# driver.py's loop calls `helpers.train_step(...)` of the module `from pkg import helpers` names
_MODULE_DRIVER = DRIVER.replace("from steps import train_step", "from pkg import helpers").replace(
    "            train_step(", "            helpers.train_step(")

# (what, files before, the file written then, its text): what `from pkg import helpers` binds
# changes between the module `pkg/helpers.py` and something `pkg/__init__.py` binds to the name
_MODULE_OR_NOT = [
    ("the module created", {"pkg/__init__.py": ""}, "pkg/helpers.py", STEP_MODULE),
    ("__init__ stops binding the name", {"pkg/__init__.py": "helpers = None\n", "pkg/helpers.py": STEP_MODULE},
     "pkg/__init__.py", "VERSION = 1\n"),
    ("__init__ defines a function of the name", {"pkg/__init__.py": "VERSION = 1\n", "pkg/helpers.py": STEP_MODULE},
     "pkg/__init__.py", "VERSION = 1\n\n\ndef helpers():\n    return None\n"),
    ("__init__ re-exports another module under the name",
     {"pkg/__init__.py": "from . import impl\n", "pkg/helpers.py": "", "pkg/impl.py": STEP_MODULE},
     "pkg/__init__.py", "from . import impl as helpers\n"),
]


@pytest.mark.parametrize("what,before,written,text", _MODULE_OR_NOT, ids=[c[0] for c in _MODULE_OR_NOT])
def test_what_a_package_import_binds_is_followed_after_edits(lint, project, what, before, written, text):
    for name, body in {"driver.py": _MODULE_DRIVER, **before}.items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(body, encoding="utf-8")
    first = _findings(lint)
    assert first == _findings(lint, "--no-cache")
    (project / written).write_text(text, encoding="utf-8")
    cold = _findings(lint, "--no-cache")
    assert any(f["code"] == "LC102" for f in first + cold) and (first == []) != (cold == [])
    assert _findings(lint) == cold, what


def test_a_module_that_gains_an_importer_gets_the_findings_its_new_caller_reports_into_it(lint, project):
    """pkg/impl.py existed, imported by nothing; driver.py switches its import to it: the finding
    driver.py's loop model makes in the step of impl.py is located in impl.py, whose own stored
    result knew no importer."""
    (project / "pkg").mkdir()
    (project / "pkg" / "__init__.py").write_text("")
    (project / "pkg" / "helpers.py").write_text("def train_step(*args):\n    pass\n", encoding="utf-8")
    (project / "pkg" / "impl.py").write_text(STEP_MODULE, encoding="utf-8")
    (project / "driver.py").write_text(_DRIVER, encoding="utf-8")
    assert _findings(lint) == _findings(lint, "--no-cache")
    (project / "driver.py").write_text(_DRIVER.replace("pkg.helpers", "pkg.impl"), encoding="utf-8")
    cold = _findings(lint, "--no-cache")
    assert [(Path(f["path"]).name, f["code"]) for f in cold] == [("impl.py", "LC102")]
    assert _findings(lint) == cold
