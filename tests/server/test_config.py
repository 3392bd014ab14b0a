"""Configuration in the server: pyproject.toml as on the command line, and the editor's settings."""

from __future__ import annotations

import textwrap

from .conftest import BUGGY, expected, found, write


def _codes(diagnostics: list[dict]) -> list[str]:
    return [code for code, _ in found(diagnostics)]


def _pyproject(body: str) -> str:
    return "[project]\nname = \"demo\"\n\n[tool.loopcheck]\n" + textwrap.dedent(body)


def test_pyproject_selection_and_severity_apply_as_on_the_command_line(start, project):
    write(project / "pyproject.toml", _pyproject("""\
        ignore = ["LC5"]
        [tool.loopcheck.severity]
        LC102 = "warning"
        """))
    path = write(project / "train.py", BUGGY)
    server = start()
    server.open(path, BUGGY)
    [lc102] = server.diagnostics(path, version=1)
    assert lc102["code"] == "LC102" and lc102["severity"] == 2
    assert server.close() == 0


def test_per_file_ignores_and_exclude_apply_to_open_files(start, project):
    write(project / "pyproject.toml", _pyproject("""\
        exclude = ["generated"]
        [tool.loopcheck.per-file-ignores]
        "scripts/*.py" = ["LC102"]
        """))
    script = write(project / "scripts" / "quick.py", BUGGY)
    generated = write(project / "generated" / "train.py", BUGGY)
    server = start()
    server.open(script, BUGGY)
    assert _codes(server.diagnostics(script, version=1)) == ["LC508"]
    server.open(generated, BUGGY)
    assert server.diagnostics(generated, version=1) == []  # excluded, as with --force-exclude
    assert server.close() == 0


def test_a_changed_configuration_takes_effect_when_saved_or_changed_on_disk(start, project):
    config = write(project / "pyproject.toml", _pyproject('ignore = ["LC102"]\n'))
    path = write(project / "train.py", BUGGY)
    server = start()
    server.open(path, BUGGY)
    assert _codes(server.diagnostics(path, version=1)) == ["LC508"]
    # saved in the editor
    config.write_text(_pyproject('ignore = ["LC508"]\n'), encoding="utf-8")
    server.notify("textDocument/didSave", {"textDocument": {"uri": config.as_uri()}})
    assert _codes(server.diagnostics(path, version=1)) == ["LC102"]
    # changed outside it: the editor was asked to watch the files and reports the change
    [registration] = server.requests[0]["params"]["registrations"]
    assert registration["method"] == "workspace/didChangeWatchedFiles"
    globs = [w["globPattern"] for w in registration["registerOptions"]["watchers"]]
    assert globs == ["**/loopcheck.toml", "**/pyproject.toml", "**/*.py"]
    config.unlink()  # e.g. a branch without the configuration
    server.notify("workspace/didChangeWatchedFiles", {"changes": [{"uri": config.as_uri(), "type": 3}]})
    assert _codes(server.diagnostics(path, version=1)) == ["LC102", "LC508"]
    assert server.close() == 0


def test_a_broken_pyproject_is_reported_on_the_file_it_stops(start, project):
    write(project / "pyproject.toml", _pyproject('selekt = ["LC1"]\n'))
    path = write(project / "train.py", BUGGY)
    server = start()
    server.open(path, BUGGY)
    [problem] = server.diagnostics(path, version=1)
    assert problem["severity"] == 1 and problem["range"]["start"] == {"line": 0, "character": 0}
    assert "[tool.loopcheck]: unknown key 'selekt'; did you mean 'select'?" in problem["message"]
    assert str(project / "pyproject.toml") in problem["message"]
    assert server.close() == 0


def test_settings_work_like_the_command_line_flags(start, project):
    write(project / "pyproject.toml", _pyproject('ignore = ["LC102"]\n'))
    write(project / "ci" / "loopcheck.toml", 'ignore = ["LC508"]\n')
    path = write(project / "train.py", BUGGY)
    server = start({"select": ["LC1", "LC5"]})  # --select replaces the file's selection
    server.open(path, BUGGY)
    assert _codes(server.diagnostics(path, version=1)) == ["LC102", "LC508"]

    def settings(**values) -> list[str]:  # the editor's settings change; open files are checked again
        server.notify("workspace/didChangeConfiguration", {"settings": {"loopcheck": {"debounce": 20, **values}}})
        return _codes(server.diagnostics(path, version=1))

    assert settings() == ["LC508"]  # pyproject.toml's ignore
    assert settings(extendSelect="LC102") == ["LC102", "LC508"]
    assert settings(configuration="ci/loopcheck.toml") == ["LC102"]  # --config: no search
    assert settings(isolated=True) == ["LC102", "LC508"]  # --isolated
    assert server.close() == 0


def test_bad_settings_are_shown_and_named(start, project):
    path = write(project / "train.py", BUGGY)
    server = start({"selct": ["LC1"]})
    shown = server.wait_for("window/showMessage")
    assert shown["type"] == 1 and "unknown key 'selct'; did you mean 'select'?" in shown["message"]
    server.open(path, BUGGY)
    [problem] = server.diagnostics(path, version=1)
    assert "server settings: unknown key 'selct'" in problem["message"]
    server.notify("workspace/didChangeConfiguration", {"settings": {"loopcheck": {"ignore": ["LC1O2"]}}})
    [problem] = server.diagnostics(path, version=1)
    assert "server settings: ignore: unknown rule code 'LC1O2' (did you mean LC102?)" in problem["message"]
    server.notify("workspace/didChangeConfiguration", {"settings": {"loopcheck": {"debounce": -1}}})
    [problem] = server.diagnostics(path, version=1)
    assert "server settings: debounce: expected milliseconds" in problem["message"]
    server.notify("workspace/didChangeConfiguration", {"settings": {"loopcheck": {}}})
    assert found(server.diagnostics(path, version=1)) == expected(BUGGY)
    assert server.close() == 0
