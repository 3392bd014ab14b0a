"""`loopcheck lint` and Ruff's command-line conventions: stdin, exit and output switches, fix
marks, noqa comments, rule pages, watch mode, errors placed like findings, and scope."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest

from loopcheck import __version__
from loopcheck.catalog import page
from loopcheck.cli import app

from tests.projects import ENGINE, MAIN, ZERO_GRAD_LATE

from .conftest import CLEAN, OLD_AMP, SOFTMAX_CE, UNSAFE_LOAD, line_of, write

def stdin(lint, *args: str, data: str | bytes):
    return lint.runner.invoke(app, ["lint", *args], input=data, catch_exceptions=False)


# --- standard input -----------------------------------------------------------------------------


def test_dash_reads_standard_input(lint, project):
    result = stdin(lint, "-", "-f", "concise", data=ZERO_GRAD_LATE)
    assert result.exit_code == 1
    assert result.stdout.startswith("-:9:13: LC102 [*] ")


def test_stdin_filename_names_the_source_for_configuration_and_imports(lint, project):
    write(project / "pyproject.toml", '[tool.loopcheck.per-file-ignores]\n"scripts/*.py" = ["LC1"]\n')
    write(project / "engine.py", ZERO_GRAD_LATE)
    result = stdin(lint, "-", "--stdin-filename", "main.py", "-f", "json",
                   data="import engine\n\nengine.train(m, l, o, 3)\n")
    doc = json.loads(result.stdout)
    assert doc["findings"] == []  # engine.py's finding is evidence here: engine.py is not being linted
    ignored = stdin(lint, "-", "--stdin-filename", "scripts/run.py", data=ZERO_GRAD_LATE)
    assert ignored.exit_code == 0, ignored.stdout
    named = stdin(lint, "-", "--stdin-filename", "train.py", "-f", "concise", data=ZERO_GRAD_LATE)
    assert named.stdout.startswith("train.py:9:13: LC102")


def test_stdin_with_fix_prints_the_fixed_source(lint, project):
    result = stdin(lint, "-", "--fix", data=ZERO_GRAD_LATE)
    assert result.exit_code == 0
    assert "optimizer.step()\n            optimizer.zero_grad()\n" in result.stdout
    assert not (project / "-").exists()


def test_stdin_usage_errors(lint, project):
    assert "give `-` as the path" in lint("--stdin-filename", "x.py").stderr
    assert lint("--stdin-filename", "x.py").exit_code == 2


# --- exit and output switches -------------------------------------------------------------------


def test_exit_zero_keeps_the_report_but_not_the_failure(lint, project):
    write(project / "train.py", SOFTMAX_CE)
    result = lint("--exit-zero", "train.py")
    assert result.exit_code == 0 and "LC602" in result.stdout
    write(project / "broken.py", "import torch\ndef f(:\n")
    assert lint("--exit-zero", ".").exit_code == 2  # a file that cannot be checked is still an error


def test_quiet_prints_findings_only(lint, project):
    write(project / "train.py", SOFTMAX_CE)
    write(project / "clean.py", CLEAN)
    (project / "empty").mkdir()
    loud, quiet = lint("train.py"), lint("-q", "train.py")
    assert "Found 1 finding" in loud.stdout and "Found" not in quiet.stdout
    assert quiet.stdout.startswith("train.py:") and "LC602" in quiet.stdout
    assert lint("-q", "clean.py").stdout == ""
    assert lint("--quiet", "empty", "clean.py").stderr == ""


def test_output_format_is_an_alias_of_format(lint, project):
    write(project / "train.py", SOFTMAX_CE)
    assert lint("--output-format", "json", "train.py").stdout == lint("-f", "json", "train.py").stdout
    assert lint("--output-format", "concise", "train.py").stdout.startswith("train.py:")


def test_short_version_flag(lint):
    for flag in ("-V", "--version"):
        assert lint(flag, command="").stdout.strip() == f"loopcheck {__version__}"


def test_rule_prints_the_page(lint):
    result = lint("LC102", command="rule")
    assert result.exit_code == 0 and result.stdout == lint("LC102", command="explain").stdout
    assert page("LC102").name in result.stdout
    missing = lint("LC999", command="rule")
    assert missing.exit_code == 2 and "LC999" in missing.stderr


# --- errors ---------------------------------------------------------------------------------------


def test_a_missing_file_is_an_error_on_stderr_only(lint, project):
    for fmt in ("text", "concise"):
        result = lint("missing.py", "-f", fmt)
        assert result.exit_code == 2
        assert result.stdout == ""
        assert result.stderr == "error: missing.py: no such file or directory\n"


def test_a_syntax_error_is_reported_at_line_and_column(lint, project):
    write(project / "broken.py", "import torch\n\n\nx = torch.zeros(3) +* 2\n")
    result = lint("broken.py", "--no-cache")
    assert result.exit_code == 2
    assert re.match(r"^broken\.py:4:\d+: error: syntax error: ", result.stderr), result.stderr
    column = int(result.stderr.split(":")[2])
    assert column == 21  # the `*`, as Python itself reports it


def test_statistics_json_keeps_the_files_that_could_not_be_checked(lint, project):
    write(project / "train.py", SOFTMAX_CE)
    write(project / "broken.py", "import torch\ndef f(:\n")
    result = lint(".", "--statistics", "-f", "json")
    assert result.exit_code == 2
    rows = json.loads(result.stdout)
    assert [r["code"] for r in rows] == ["LC602", None]
    assert rows[1]["name"] == "not-checked" and rows[1]["count"] == 1
    assert [e["path"] for e in rows[1]["errors"]] == ["broken.py"]


# --- fix marks, fixes and noqa ----------------------------------------------------------------------


def test_fixable_findings_are_marked_safe_or_unsafe(lint, project):
    write(project / "amp_setup.py", OLD_AMP)  # LC405: safe fix
    write(project / "ckpt.py", UNSAFE_LOAD)  # LC508: unsafe fix
    write(project / "train.py", SOFTMAX_CE)  # LC602: no fix
    out = lint(".", "-f", "concise").stdout
    assert re.search(r"^amp_setup\.py:3:10: LC405 \[\*\] ", out, re.M)
    assert re.search(r"^ckpt\.py:\d+:\d+: LC508 \[~\] ", out, re.M)
    assert re.search(r"^train\.py:\d+:\d+: LC602 [^\[]", out, re.M)
    text = lint(".").stdout
    assert "[*] 1 fixable with `loopcheck lint --fix`." in text
    assert "[~] 1 fixable with `loopcheck lint --fix --unsafe-fixes`" in text


def test_show_fixes_lists_what_was_fixed(lint, project):
    write(project / "train.py", ZERO_GRAD_LATE)
    result = lint("--fix", "--show-fixes", "train.py")
    assert result.exit_code == 0
    assert "Fixed 1 finding:" in result.stdout
    assert "  train.py:9:13: LC102 " in result.stdout
    assert lint("--show-fixes", "train.py").exit_code == 2  # only with --fix or --diff


def test_add_noqa_silences_every_finding_in_place(lint, project):
    write(project / "train.py", SOFTMAX_CE)
    write(project / "amp_setup.py", OLD_AMP.replace("GradScaler()", "GradScaler()  # noqa: E501"))
    result = lint("--add-noqa", ".")
    assert result.exit_code == 0
    assert "Added 2 noqa comments." in result.stderr
    assert "scaler = torch.cuda.amp.GradScaler()  # noqa: E501, LC405\n" in (project / "amp_setup.py").read_text()
    line = (project / "train.py").read_text().splitlines()[line_of(SOFTMAX_CE, "loss = criterion(") - 1]
    assert line.endswith("  # noqa: LC602")
    assert lint(".").exit_code == 0
    assert lint("--add-noqa", "--fix", ".").exit_code == 2


def test_add_noqa_goes_after_a_multiline_string(lint, project):
    source = 'import torch\n\n\ndef load(path):\n    return torch.load(path, map_location="""\ncpu""")\n'
    write(project / "load.py", source)
    lint("--add-noqa", "load.py")
    assert (project / "load.py").read_text().endswith('cpu""")  # noqa: LC508\n')
    assert lint("load.py").exit_code == 0


# --- watch ------------------------------------------------------------------------------------------


def _read_until(proc: subprocess.Popen, text: str, timeout: float = 60) -> str:
    seen = ""
    deadline = time.monotonic() + timeout
    while text not in seen:
        if time.monotonic() > deadline:
            raise AssertionError(f"{text!r} never printed; got {seen!r}")
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            raise AssertionError(f"exited early: {seen!r}")
        seen += line
    return seen


@pytest.mark.slow
def test_watch_checks_again_when_a_file_changes(project):
    script = write(project / "train.py", CLEAN)
    env = {**os.environ, "NO_COLOR": "1", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "loopcheck", "lint", "--watch", "-f", "concise", "train.py"],
        cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        _read_until(proc, "Watching for changes")
        script.write_text(ZERO_GRAD_LATE, encoding="utf-8")
        out = _read_until(proc, "Watching for changes")
        assert "Files changed: checking again." in out
        assert "train.py:9:13: LC102" in out
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert lint_usage_error("--watch", "--fix")


def lint_usage_error(*args: str) -> bool:
    from typer.testing import CliRunner

    result = CliRunner().invoke(app, ["lint", *args])
    return result.exit_code == 2 and "--watch cannot be combined" in result.stderr


# --- discovery and scope ----------------------------------------------------------------------------


def test_gitignored_folders_and_virtualenvs_are_not_linted(lint, project):
    write(project / ".gitignore", "checkpoints/\n")
    write(project / "train.py", CLEAN)
    write(project / "checkpoints" / "old_train.py", SOFTMAX_CE)
    write(project / "env" / "pyvenv.cfg", "home = /usr/bin\n")
    write(project / "env" / "lib" / "python3.11" / "site-packages" / "pkg" / "train.py", SOFTMAX_CE)
    write(project / "wandb" / "run-1" / "files" / "code" / "train.py", SOFTMAX_CE)
    assert lint(".").stdout.strip() == "No findings (1 file checked)."
    unignored = json.loads(lint(".", "--no-respect-gitignore", "-f", "json").stdout)
    assert [f["path"] for f in unignored["findings"]] == ["checkpoints/old_train.py"]
    # pre-commit names files; --force-exclude applies every exclude to them
    staged = lint("checkpoints/old_train.py", "env/lib/python3.11/site-packages/pkg/train.py", "--force-exclude")
    assert staged.exit_code == 0 and "No findings (0 files checked)." in staged.stdout


def test_extend_exclude_from_the_configuration_and_the_command_line(lint, project):
    write(project / "pyproject.toml", '[tool.loopcheck]\nextend-exclude = ["legacy"]\n')
    write(project / "legacy" / "train.py", SOFTMAX_CE)
    write(project / "old" / "train.py", SOFTMAX_CE)
    write(project / "train.py", CLEAN)
    doc = json.loads(lint(".", "-f", "json").stdout)
    assert [f["path"] for f in doc["findings"]] == ["old/train.py"]
    doc = json.loads(lint(".", "--extend-exclude", "old", "-f", "json").stdout)
    assert doc["findings"] == [] and doc["summary"]["files_checked"] == 1


def test_findings_stay_in_the_files_being_linted_and_out_of_excluded_ones(lint, project):
    write(project / "engine.py", ENGINE)
    write(project / "main.py", MAIN)
    assert json.loads(lint("main.py", "-f", "json").stdout)["findings"] == []
    both = json.loads(lint(".", "-f", "json").stdout)["findings"]
    assert [(f["path"], f["code"]) for f in both] == [("engine.py", "LC102")]
    write(project / "pyproject.toml", '[tool.loopcheck]\nexclude = ["engine.py"]\n')
    assert json.loads(lint(".", "-f", "json").stdout)["findings"] == []


# --- notebooks ----------------------------------------------------------------------------------------


def notebook(*sources: str) -> str:
    cells = [{"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
              "source": s.splitlines(keepends=True)} for s in sources]
    return json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1)


def test_notebooks_are_found_and_reported_by_cell_in_every_format(lint, project):
    head, body = ZERO_GRAD_LATE.split("def train", 1)
    write(project / "nb" / "explore.ipynb", notebook("!nvidia-smi\n" + head, "def train" + body))
    write(project / "train.py", CLEAN)
    concise = lint(".", "-f", "concise")
    assert concise.exit_code == 1
    assert concise.stdout == (
        "nb/explore.ipynb:cell 2:6:13: LC102 " + json.loads(lint(".", "-f", "json").stdout)["findings"][0]["message"] + "\n"
    )
    text = lint("nb/explore.ipynb").stdout
    assert " 6 |             optimizer.zero_grad()" in text  # the snippet is the cell's own line
    doc = json.loads(lint(".", "-f", "json").stdout)
    (finding,) = doc["findings"]
    assert (finding["cell"], finding["line"], finding["column"], finding["fix"]) == (2, 6, 13, None)
    assert "::error file=nb/explore.ipynb,line=6,col=13," in lint(".", "-f", "github").stdout
    assert "title=LC102::cell 2: " in lint(".", "-f", "github").stdout
    sarif = json.loads(lint(".", "-f", "sarif").stdout)
    assert sarif["runs"][0]["results"][0]["properties"] == {"cell": 2}


def test_fix_refuses_notebooks_clearly(lint, project):
    path = write(project / "explore.ipynb", notebook(ZERO_GRAD_LATE))
    before = path.read_bytes()
    result = lint("--fix", "explore.ipynb")
    assert result.exit_code == 1
    assert "explore.ipynb: 1 fixable finding not fixed: --fix does not rewrite notebooks" in result.stdout
    assert path.read_bytes() == before
