"""`loopcheck server` on the command line."""

from __future__ import annotations

import os
import socket
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


def test_the_readme_setup_blocks_are_valid_and_list_every_setting(repo_root):
    import json
    import re

    from loopcheck.lint.config import tomllib  # tomli before Python 3.11
    from loopcheck.server.settings import _KEYS, Settings

    readme = (repo_root / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Editors: `loopcheck server`", 1)[1].split("\n## ", 1)[0]
    table = [line for line in section.splitlines() if line.startswith("| `")]
    documented = {name for line in table for name in re.findall(r"`(\w+)`", line.split("|")[1])}
    assert documented == set(_KEYS)

    vscode = json.loads(re.search(r"```json\n(.*?)```", section, re.S).group(1))
    assert [vscode["glspc.server.command"], *vscode["glspc.server.commandArguments"]] == ["loopcheck", "server"]
    Settings.from_client(vscode["glspc.server.initializationOptions"], repo_root)
    assert "source.fixAll.loopcheck" in vscode["editor.codeActionsOnSave"]

    helix = tomllib.loads(re.search(r"```toml\n(.*?)```", section, re.S).group(1))
    server = helix["language-server"]["loopcheck"]
    assert [server["command"], *server["args"]] == ["loopcheck", "server"]
    Settings.from_client(server["config"], repo_root)
    assert "loopcheck" in helix["language"][0]["language-servers"]

    lua = re.search(r"```lua\n(.*?)```", section, re.S).group(1)
    assert 'cmd = { "loopcheck", "server" }' in lua


def test_the_server_runs_without_torch(tmp_path):
    from ..lint.test_no_torch import BLOCKER
    from .conftest import BUGGY, expected, found, opened
    from .lsp import LspClient

    (tmp_path / "sitecustomize.py").write_text(BLOCKER)  # `import torch` fails in the server process
    project = tmp_path / "proj"
    project.mkdir()
    client = LspClient(project, path=[tmp_path])
    try:
        client.initialize(project)
        assert found(opened(client, project / "train.py", BUGGY)) == expected(BUGGY)
        assert client.close() == 0
    finally:
        if client.proc.poll() is None:
            client.proc.kill()


def test_the_event_loop_reads_stdin_itself_only_from_a_pipe_or_socket(tmp_path):
    from loopcheck.server.stdio import watchable  # needs pygls, like the server

    read, write = os.pipe()
    try:
        with open(read, "rb", closefd=False) as pipe:
            assert watchable(pipe) is (os.name == "posix")
    finally:
        os.close(read)
        os.close(write)
    left, right = socket.socketpair()
    with left, right, left.makefile("rb") as stream:
        assert watchable(stream) is (os.name == "posix")
    with open(tmp_path / "messages.txt", "wb") as file:
        assert not watchable(file)  # a file: pygls's own reader
