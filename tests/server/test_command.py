"""`loopcheck server` on the command line."""

from __future__ import annotations

import sys

import pytest
from typer.testing import CliRunner

from loopcheck.cli import app


def test_without_pygls_the_command_says_what_to_install(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(sys.modules, "pygls", None)  # `import pygls` fails as if not installed
    result = CliRunner().invoke(app, ["server"])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == (
        "error: `loopcheck server` needs the pygls package (pygls is missing): pip install 'loopcheck[server]'\n"
    )


def test_the_command_is_listed_in_the_help():
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0 and "server" in result.stdout
