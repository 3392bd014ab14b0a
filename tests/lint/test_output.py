"""Output formats on hand-made reports: json, sarif (schema-valid), github, text, concise, statistics."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

from loopcheck.catalog import catalog, page
from loopcheck.findings import Finding
from loopcheck.lint.output import FileError, Format, Report
from loopcheck.lint.output import machine, sarif, text

SCHEMA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "sarif-schema-2.1.0.json"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
COLOUR = re.compile(r"\x1b\[[0-9;]*(3[0-9]|9[0-7])[0-9;]*m")

SOURCE = [
    "def train(model, loader, optimizer):",
    "    for x, y in loader:",
    "        loss = model(x, y)",
    "        loss.backward()",
    "        optimizer.zero_grad()",
    "        optimizer.step()",
]


def make(code: str, line: int, column: int, end_column: int, message: str, *, path="pkg/train.py", severity=None, fix=None):
    p = page(code)
    return Finding(
        code=code, name=p.name, severity=severity or p.severity, message=message, path=path,
        line=line, column=column, end_line=line, end_column=end_column, fix=fix,
    )


FIX = {
    "applicability": "safe",
    "message": "use torch.amp.GradScaler('cuda')",
    "edits": [{"line": 3, "column": 14, "end_line": 3, "end_column": 35, "content": "torch.amp.GradScaler('cuda')"}],
}


@pytest.fixture
def report() -> Report:
    return Report(
        findings=[
            make("LC405", 3, 14, 35, "deprecated `torch.cuda.amp.GradScaler`", fix=FIX),
            make("LC102", 5, 9, 30, "`optimizer.zero_grad()` runs between `loss.backward()` and `optimizer.step()`"),
            make("LC702", 2, 5, 24, "loader neither shuffles: 100% of batches in order, a:b,c", path="data.py"),
        ],
        errors=[FileError("broken.py", 7, "invalid syntax: unexpected ':'")],
        files_checked=3,
    )


def test_findings_are_sorted_by_path_and_position(report):
    assert [(f.path, f.line) for f in report.findings] == [("data.py", 2), ("pkg/train.py", 3), ("pkg/train.py", 5)]


def test_json_follows_the_public_contract(report):
    doc = json.loads(machine.json_report(report))
    assert list(doc) == ["version", "findings", "errors", "summary"]
    assert doc["version"] == 1
    first = doc["findings"][1]
    assert list(first) == ["code", "name", "severity", "path", "line", "column", "end_line", "end_column", "message", "fix"]
    assert first["code"] == "LC405" and first["severity"] == "info" and first["fix"] == FIX
    assert doc["findings"][2]["fix"] is None
    assert doc["errors"] == [{"path": "broken.py", "line": 7, "message": "invalid syntax: unexpected ':'"}]
    summary = doc["summary"]
    assert (summary["error"], summary["warning"], summary["info"]) == (1, 1, 1)
    assert summary["findings"] == 3 and summary["files_checked"] == 3 and summary["errors"] == 1
    assert summary["fixable"] == 1


def test_json_statistics_count_per_code():
    rep = Report([make("LC102", 5, 9, 30, "m"), make("LC102", 9, 9, 30, "m"), make("LC702", 2, 5, 9, "m")])
    rows = json.loads(machine.json_statistics(rep))
    assert rows == [
        {"code": "LC102", "name": "zero-grad-between-backward-and-step", "severity": "error", "count": 2, "fixable": 0},
        {"code": "LC702", "name": page("LC702").name, "severity": "warning", "count": 1, "fixable": 0},
    ]


def test_sarif_is_valid_and_carries_rules_results_and_fixes(report, tmp_path):
    doc = json.loads(sarif.sarif(report, root=tmp_path))
    if SCHEMA.is_file():
        jsonschema = pytest.importorskip("jsonschema")
        jsonschema.validate(doc, json.loads(SCHEMA.read_text(encoding="utf-8")))
    assert doc["version"] == "2.1.0"
    (run,) = doc["runs"]
    driver = run["tool"]["driver"]
    assert driver["name"] == "loopcheck" and driver["version"] and driver["informationUri"].startswith("http")
    rules = driver["rules"]
    assert [r["id"] for r in rules] == [c for c in catalog() if c.startswith("LC")]
    by_id = {r["id"]: r for r in rules}
    lc102 = by_id["LC102"]
    assert lc102["name"] == "zero-grad-between-backward-and-step"
    assert lc102["shortDescription"]["text"] == page("LC102").summary
    assert lc102["defaultConfiguration"]["level"] == "error"
    assert by_id["LC405"]["defaultConfiguration"]["level"] == "note"
    assert by_id["LC201"]["fullDescription"]["text"] == page("LC201").section("What it finds")
    assert "## Why it matters" in by_id["LC201"]["help"]["markdown"]
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == tmp_path.resolve().as_uri() + "/"
    results = run["results"]
    assert [r["ruleId"] for r in results] == ["LC702", "LC405", "LC102"]
    for r in results:
        assert rules[r["ruleIndex"]]["id"] == r["ruleId"]
    lc102_result = results[2]
    assert lc102_result["level"] == "error"
    loc = lc102_result["locations"][0]["physicalLocation"]
    assert loc["artifactLocation"] == {"uri": "pkg/train.py", "uriBaseId": "%SRCROOT%"}
    assert loc["region"] == {"startLine": 5, "startColumn": 9, "endLine": 5, "endColumn": 30}
    assert "fixes" not in lc102_result
    (fix,) = results[1]["fixes"]
    assert fix["description"]["text"] == FIX["message"]
    (change,) = fix["artifactChanges"]
    assert change["replacements"] == [
        {
            "deletedRegion": {"startLine": 3, "startColumn": 14, "endLine": 3, "endColumn": 35},
            "insertedContent": {"text": "torch.amp.GradScaler('cuda')"},
        }
    ]
    (invocation,) = run["invocations"]
    assert invocation["executionSuccessful"] is False
    (note,) = invocation["toolExecutionNotifications"]
    assert note["level"] == "error" and "invalid syntax" in note["message"]["text"]


def test_sarif_paths_are_uri_encoded_and_runs_without_findings_succeed():
    rep = Report([make("LC102", 1, 1, 2, "m", path="my runs/train #2.py")], files_checked=1)
    run = json.loads(sarif.sarif(rep))["runs"][0]
    assert run["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "my%20runs/train%20%232.py"
    assert run["invocations"][0]["executionSuccessful"] is True
    empty = json.loads(sarif.sarif(Report([], files_checked=2)))["runs"][0]
    assert empty["results"] == []


def test_github_commands_use_the_right_level_and_escaping(report):
    lines = machine.github(report).splitlines()
    assert lines[0] == (
        "::warning file=data.py,line=2,col=5,endLine=2,endColumn=24,title=LC702::"
        "loader neither shuffles: 100%25 of batches in order, a:b,c"
    )
    assert lines[1].startswith("::notice file=pkg/train.py,line=3,col=14,endLine=3,endColumn=35,title=LC405::")
    assert lines[2].startswith("::error file=pkg/train.py,line=5,col=9,")
    assert lines[3] == "::error file=broken.py,line=7,title=loopcheck::invalid syntax: unexpected ':'"
    odd = Report([make("LC102", 1, 1, 2, "two\nlines\r", path="a,b:c.py")])
    assert machine.github(odd) == "::error file=a%2Cb%3Ac.py,line=1,col=1,endLine=1,endColumn=2,title=LC102::two%0Alines%0D\n"


def render_text(report: Report, **kwargs) -> str:
    buf = io.StringIO()
    text.full(report, text.console(buf), lambda f: SOURCE if f.path == "pkg/train.py" else [], **kwargs)
    return buf.getvalue()


def test_text_shows_location_message_source_and_a_caret_under_the_span(report):
    out = render_text(report)
    assert not ANSI.search(out)  # not a terminal: no escape codes at all
    lines = out.splitlines()
    at = lines.index("pkg/train.py:5:9: LC102 `optimizer.zero_grad()` runs between `loss.backward()` and `optimizer.step()`")
    assert lines[at + 1] == " 5 |         optimizer.zero_grad()"
    caret = lines[at + 2]
    assert caret.startswith("   |         ^^^^^^^^^^^^^^^^^^^^^ zero-grad-between-backward-and-step (error)")
    assert caret.index("^") == lines[at + 1].index("o")
    assert "data.py:2:5: LC702 loader neither shuffles" in out  # [] in messages is not rich markup
    assert "Found 3 findings: 1 error, 1 warning, 1 info (3 files checked)." in out
    assert "1 fixable with `loopcheck lint --fix`." in out
    assert "1 file could not be checked" in out


def test_text_colours_only_a_terminal_and_never_with_no_color(report, monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("TERM", "xterm-256color")
    assert COLOUR.search(render_text(report))
    monkeypatch.setenv("NO_COLOR", "1")
    assert not ANSI.search(render_text(report))


def test_a_clean_report_says_so():
    out = render_text(Report([], files_checked=4))
    assert out.strip() == "No findings (4 files checked)."


def test_concise_and_statistics(report):
    assert text.concise(report).splitlines() == [
        "data.py:2:5: LC702 loader neither shuffles: 100% of batches in order, a:b,c",
        "pkg/train.py:3:14: LC405 [*] deprecated `torch.cuda.amp.GradScaler`",
        "pkg/train.py:5:9: LC102 `optimizer.zero_grad()` runs between `loss.backward()` and `optimizer.step()`",
    ]
    stats = text.statistics_text(Report([make("LC102", 5, 9, 30, "m"), make("LC102", 9, 9, 30, "m"), make("LC405", 3, 1, 2, "m", fix=FIX)]))
    assert stats.splitlines() == [
        "2  LC102  zero-grad-between-backward-and-step  error",
        f"1  LC405  {page('LC405').name:<35}  info     1 fixable",
    ]
    out = render_text(Report([make("LC102", 5, 9, 30, "m")], files_checked=1), statistics=True)
    assert out.splitlines()[0] == "1  LC102  zero-grad-between-backward-and-step  error"
    assert "5 |" not in out


def test_errors_are_listed_as_path_line_error_message(report):
    assert text.error_lines(report) == "broken.py:7: error: invalid syntax: unexpected ':'\n"


def test_format_names():
    assert Format.parse("SARIF") is Format.SARIF and Format.JSON.machine and not Format.CONCISE.machine
    with pytest.raises(ValueError, match=r"unknown format 'xml' \(choose text, concise, json, sarif, github\)"):
        Format.parse("xml")
