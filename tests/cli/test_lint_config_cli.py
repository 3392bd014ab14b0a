"""`loopcheck lint` with configuration files: discovery, overrides, exclude, per-file settings, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import OLD_AMP, SOFTMAX_CE, UNSAFE_LOAD, write


def codes(result) -> list[tuple[str, str, str]]:
    return sorted((f["path"], f["code"], f["severity"]) for f in json.loads(result.stdout)["findings"])


@pytest.fixture
def repo(project: Path) -> Path:
    write(project / "train.py", SOFTMAX_CE)
    write(project / "scripts" / "resume.py", UNSAFE_LOAD)
    write(project / "fixtures" / "buggy.py", SOFTMAX_CE)
    write(project / "legacy" / "amp_setup.py", OLD_AMP)
    write(project / "legacy" / "ckpt.py", UNSAFE_LOAD)
    return project


def test_pyproject_settings_apply_and_cli_flags_override_them(lint, repo):
    write(
        repo / "pyproject.toml",
        '[project]\nname = "demo"\n\n[tool.loopcheck]\nexclude = ["fixtures"]\nfail-on = "error"\n'
        '[tool.loopcheck.per-file-ignores]\n"scripts/*" = ["LC5"]\n'
        '[tool.loopcheck.severity]\nLC405 = "warning"\n',
    )
    result = lint(".", "-f", "json")
    assert codes(result) == [
        ("legacy/amp_setup.py", "LC405", "warning"),
        ("legacy/ckpt.py", "LC508", "warning"),
        ("train.py", "LC602", "error"),
    ]
    assert result.exit_code == 1
    # fail-on = "error" in the file: warnings alone pass ...
    assert lint("legacy", "scripts").exit_code == 0
    # ... unless the command line says otherwise
    assert lint("legacy", "--fail-on", "warning").exit_code == 1
    assert codes(lint(".", "-f", "json", "--select", "LC4")) == [("legacy/amp_setup.py", "LC405", "warning")]


def test_a_nested_loopcheck_toml_governs_its_folder(lint, repo):
    write(repo / "pyproject.toml", '[tool.loopcheck]\nexclude = ["fixtures"]\n')
    write(repo / "legacy" / "loopcheck.toml", 'ignore = ["LC5"]\n[severity]\nLC4 = "error"\n')
    assert codes(lint(".", "-f", "json")) == [
        ("legacy/amp_setup.py", "LC405", "error"),
        ("scripts/resume.py", "LC508", "warning"),
        ("train.py", "LC602", "error"),
    ]


def test_isolated_and_explicit_config(lint, repo):
    write(repo / "pyproject.toml", '[tool.loopcheck]\nselect = ["LC6"]\nexclude = ["fixtures"]\n')
    write(repo / "ci.toml", 'select = ["LC5"]\n')
    assert {c for _, c, _ in codes(lint(".", "-f", "json"))} == {"LC602"}
    isolated = codes(lint(".", "-f", "json", "--isolated"))
    assert ("fixtures/buggy.py", "LC602", "error") in isolated and len(isolated) == 5
    assert {c for _, c, _ in codes(lint(".", "-f", "json", "--config", "ci.toml"))} == {"LC508"}
    missing = lint(".", "--config", "nope.toml")
    assert missing.exit_code == 2 and "nope.toml: no such configuration file" in missing.stderr


def test_exclude_skips_found_files_but_not_named_ones_unless_forced(lint, repo):
    write(repo / "pyproject.toml", '[tool.loopcheck]\nexclude = ["fixtures", "legacy/amp_*.py"]\n')
    found = {p for p, _, _ in codes(lint(".", "-f", "json"))}
    assert found == {"train.py", "scripts/resume.py", "legacy/ckpt.py"}
    named = lint("fixtures/buggy.py", "legacy/amp_setup.py", "-f", "json")
    assert {p for p, _, _ in codes(named)} == {"fixtures/buggy.py", "legacy/amp_setup.py"}
    # naming an excluded folder checks it; the patterns still apply below the named folder
    assert {p for p, _, _ in codes(lint("fixtures", "legacy", "-f", "json"))} == {"fixtures/buggy.py", "legacy/ckpt.py"}
    forced = lint("fixtures/buggy.py", "legacy/amp_setup.py", "train.py", "--force-exclude", "-f", "json")
    assert {p for p, _, _ in codes(forced)} == {"train.py"}
    assert json.loads(forced.stdout)["summary"]["files_checked"] == 1


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('[tool.loopcheck]\nselct = ["LC1"]\n', "pyproject.toml: [tool.loopcheck]: unknown key 'selct'; did you mean 'select'?"),
        ('[tool.loopcheck]\nignore = ["LC9"]\n', "pyproject.toml: [tool.loopcheck]: ignore: unknown rule code 'LC9'"),
        ('[tool.loopcheck]\nfail-on = 2\n', "pyproject.toml: [tool.loopcheck]: fail-on: expected one of error, warning, info, got int 2"),
        ('[tool.loopcheck.severity]\nLC102 = "fatal"\n', "pyproject.toml: [tool.loopcheck]: severity.LC102: expected one of"),
        ('[tool.loopcheck\n', "pyproject.toml: invalid TOML: "),
    ],
)
def test_a_bad_configuration_exits_2_naming_file_and_key(lint, repo, text, expected):
    write(repo / "pyproject.toml", text)
    result = lint(".")
    assert result.exit_code == 2
    assert result.stdout == ""
    line = result.stderr.strip()
    assert line.startswith("error: ") and str(repo / expected.split(":")[0]) in line
    assert expected.split(": ", 1)[1] in line
