"""`loopcheck lint`: paths, formats, selection, fail levels, errors and exit codes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from .conftest import CLEAN, OLD_AMP, SOFTMAX_CE, UNSAFE_LOAD, line_of, write

SCHEMA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "sarif-schema-2.1.0.json"
ANSI = re.compile(r"\x1b\[")


@pytest.fixture
def scripts(project: Path) -> Path:
    write(project / "train.py", SOFTMAX_CE)
    write(project / "utils" / "ckpt.py", UNSAFE_LOAD)
    write(project / "amp_setup.py", OLD_AMP)
    write(project / "clean.py", CLEAN)
    return project


def test_text_report_of_a_folder(lint, scripts):
    result = lint(".")
    assert result.exit_code == 1
    out = result.stdout
    assert not ANSI.search(out)
    ce_line = line_of(SOFTMAX_CE, "loss = criterion(")
    assert re.search(rf"^train\.py:{ce_line}:\d+: LC602 ", out, re.M)
    assert re.search(rf"^utils/ckpt\.py:{line_of(UNSAFE_LOAD, 'torch.load')}:\d+: LC508 ", out, re.M)
    assert re.search(r"^amp_setup\.py:3:10: LC405 ", out, re.M)
    source_line = SOFTMAX_CE.splitlines()[ce_line - 1]
    assert f" {ce_line} | {source_line}" in out
    assert "Found 3 findings: 1 error, 1 warning, 1 info (4 files checked)." in out
    assert result.stderr == ""


def test_a_clean_file_exits_zero(lint, scripts):
    result = lint("clean.py")
    assert result.exit_code == 0
    assert result.stdout.strip() == "No findings (1 file checked)."


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["amp_setup.py"], 0),  # info only: below the default fail level (warning)
        (["amp_setup.py", "--fail-on", "info"], 1),
        (["utils/ckpt.py"], 1),  # a warning fails by default
        (["utils/ckpt.py", "--fail-on", "error"], 0),
        (["train.py", "--fail-on", "error"], 1),
    ],
)
def test_fail_on_sets_the_lowest_failing_severity(lint, scripts, args, code):
    assert lint(*args).exit_code == code


def test_concise_is_one_line_per_finding(lint, scripts):
    result = lint(".", "--format", "concise")
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert [l.split(": ", 2)[1].split()[0] for l in lines] == ["LC405", "LC602", "LC508"]
    assert all(re.match(r"^[\w/.]+:\d+:\d+: LC\d{3} \S", l) for l in lines)


def test_json_report_follows_the_contract(lint, scripts):
    result = lint(".", "--format", "json")
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert doc["version"] == 1
    assert {f["code"]: f["severity"] for f in doc["findings"]} == {"LC602": "error", "LC508": "warning", "LC405": "info"}
    lc508 = next(f for f in doc["findings"] if f["code"] == "LC508")
    assert lc508["path"] == "utils/ckpt.py" and lc508["name"] == "torch-load-unsafe"
    assert lc508["line"] == line_of(UNSAFE_LOAD, "torch.load") and lc508["end_column"] > lc508["column"]
    assert doc["errors"] == []
    assert doc["summary"]["files_checked"] == 4 and doc["summary"]["error"] == 1 and doc["summary"]["info"] == 1
    assert not ANSI.search(result.stdout)


def test_sarif_report_is_schema_valid(lint, scripts):
    result = lint(".", "--format", "sarif")
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    if SCHEMA.is_file():
        import jsonschema

        jsonschema.validate(doc, json.loads(SCHEMA.read_text(encoding="utf-8")))
    run = doc["runs"][0]
    assert {r["ruleId"] for r in run["results"]} == {"LC602", "LC508", "LC405"}
    uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in run["results"]}
    assert uris == {"train.py", "utils/ckpt.py", "amp_setup.py"}
    assert run["invocations"][0]["executionSuccessful"] is True


def test_github_annotations(lint, scripts):
    result = lint(".", "--format", "github")
    lines = result.stdout.splitlines()
    assert [l.split(" ", 1)[0] for l in lines] == ["::notice", "::error", "::warning"]
    assert lines[2].startswith(f"::warning file=utils/ckpt.py,line={line_of(UNSAFE_LOAD, 'torch.load')},col=")
    assert ",title=LC508::" in lines[2]


@pytest.mark.parametrize(
    ("args", "codes"),
    [
        (["--select", "LC6"], {"LC602"}),
        (["--select", "LC602,LC508"], {"LC602", "LC508"}),
        (["--ignore", "LC5,LC4"], {"LC602"}),
        (["--select", "LC5", "--extend-select", "LC405"], {"LC508", "LC405"}),
        (["--select", "ALL", "--ignore", "LC6"], {"LC508", "LC405"}),
        (["--select", "lc508"], {"LC508"}),
    ],
)
def test_select_ignore_and_extend_select(lint, scripts, args, codes):
    doc = json.loads(lint(".", "--format", "json", *args).stdout)
    assert {f["code"] for f in doc["findings"]} == codes


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--format", "xml"], "error: unknown format 'xml' (choose text, concise, json, sarif, github)"),
        (["--select", "LC1,LC999"], "error: --select: unknown rule code 'LC999'"),
        (["--ignore", "E501"], "error: --ignore: unknown rule code 'E501'"),
        (["--fail-on", "fatal"], "error: --fail-on: expected one of error, warning, info, got 'fatal'"),
        (["--statistics", "--format", "sarif"], "error: --statistics cannot be combined with --format sarif"),
        (["--unsafe-fixes"], "error: --unsafe-fixes only applies together with --fix or --diff"),
        (["--isolated", "--config", "pyproject.toml"], "error: --config and --isolated cannot be used together"),
    ],
)
def test_usage_errors_exit_2_with_one_clear_line(lint, scripts, args, message):
    result = lint(".", *args)
    assert result.exit_code == 2
    assert result.stderr.startswith(message) and result.stderr.count("\n") == 1
    assert result.stdout == ""


def test_unreadable_and_unparsable_files_are_errors_and_the_rest_is_still_checked(lint, scripts):
    write(scripts / "broken.py", "import torch\n\ndef train(model:\n    pass\n")
    (scripts / "latin1.py").write_bytes(b"import torch\nname = '\xe9t\xe9'\n")
    result = lint(".", "missing_dir", "--format", "text")
    assert result.exit_code == 2
    assert "Found 3 findings" in result.stdout  # the good files are still reported
    errors = result.stderr.splitlines()
    assert any(re.match(r"^broken\.py:\d+: error: syntax error", e) for e in errors), errors
    assert any(e.startswith("latin1.py:2: error: cannot decode") for e in errors), errors
    assert "missing_dir: error: no such file or directory" in errors
    doc = json.loads(lint(".", "missing_dir", "--format", "json").stdout)
    assert {e["path"] for e in doc["errors"]} == {"broken.py", "latin1.py", "missing_dir"}
    assert all(list(e) == ["path", "line", "message"] for e in doc["errors"])
    assert len(doc["findings"]) == 3


def test_a_missing_path_alone_exits_2(lint, project):
    result = lint("nope.py")
    assert result.exit_code == 2
    assert result.stderr.strip() == "nope.py: error: no such file or directory"


def test_statistics(lint, scripts):
    write(scripts / "more_ckpt.py", UNSAFE_LOAD)
    result = lint(".", "--statistics")
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines[0].startswith("2  LC508  torch-load-unsafe             warning")
    assert lines[1].startswith("1  LC405  deprecated-amp-api            info")
    assert "Found 4 findings" in result.stdout
    rows = json.loads(lint(".", "--statistics", "--format", "json").stdout)
    assert [(r["code"], r["count"]) for r in rows] == [("LC508", 2), ("LC405", 1), ("LC602", 1)]


def test_output_file_gets_the_report_without_colour(lint, scripts, monkeypatch):
    monkeypatch.setenv("FORCE_COLOR", "1")
    result = lint(".", "--output", "report.txt")
    assert result.exit_code == 1
    assert result.stdout == ""
    text = (scripts / "report.txt").read_text()
    assert "LC602" in text and not ANSI.search(text)
    assert lint(".", "-f", "json", "-o", "report.json").exit_code == 1
    assert json.loads((scripts / "report.json").read_text())["summary"]["findings"] == 3
    bad = lint(".", "-o", "no/such/dir/report.txt")
    assert bad.exit_code == 2 and "error: cannot write no/such/dir/report.txt" in bad.stderr


def test_colour_on_a_forced_terminal_and_never_with_no_color(lint, scripts, monkeypatch):
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("TERM", "xterm-256color")
    assert ANSI.search(lint("train.py").stdout)
    assert not ANSI.search(lint("train.py", "--format", "json").stdout)
    monkeypatch.setenv("NO_COLOR", "1")
    assert not ANSI.search(lint("train.py").stdout)


def test_parallel_jobs_give_the_same_report(lint, project):
    for i in range(6):
        write(project / f"exp{i}" / "train.py", SOFTMAX_CE)
        write(project / f"exp{i}" / "ckpt.py", UNSAFE_LOAD)
    serial = json.loads(lint(".", "-f", "json", "--jobs", "1", "--no-cache").stdout)
    parallel = json.loads(lint(".", "-f", "json", "--jobs", "2", "--no-cache").stdout)
    assert serial == parallel
    assert serial["summary"]["findings"] == 12 and serial["summary"]["files_checked"] == 12
    assert lint(".", "--jobs", "0").exit_code == 2


ENGINE = """\
def train_one_epoch(model, loader, optimizer, criterion):
    model.train()
    for inputs, targets in loader:
        loss = criterion(model(inputs), targets)
        loss.backward()
        optimizer.zero_grad()
        optimizer.step()
"""

MAIN = """\
import torch
from torch import nn

from engine import train_one_epoch


def main(model, loader, epochs):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    criterion = nn.CrossEntropyLoss()
    for epoch in range(epochs):
        train_one_epoch(model, loader, optimizer, criterion)
"""


def test_a_helper_reached_from_two_files_is_reported_once(lint, project):
    write(project / "engine.py", ENGINE)
    write(project / "main.py", MAIN)
    for _ in range(2):  # cold, then from the cache
        doc = json.loads(lint(".", "-f", "json").stdout)
        assert [(f["path"], f["code"], f["line"]) for f in doc["findings"]] == [("engine.py", "LC102", 6)]
    main_only = json.loads(lint("main.py", "-f", "json").stdout)
    assert main_only["findings"] == []  # findings are reported only in the files linted
    engine_only = json.loads(lint("engine.py", "-f", "json").stdout)
    assert [(f["path"], f["line"]) for f in engine_only["findings"]] == [("engine.py", 6)]
