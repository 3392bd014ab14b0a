"""Machine output: the JSON report of the public contract and GitHub workflow commands."""

from __future__ import annotations

import json
from typing import Any

from loopcheck.findings import Severity
from loopcheck.lint.output.report import Report, cell_of

JSON_VERSION = 1


def json_report(report: Report) -> str:
    doc: dict[str, Any] = {
        "version": JSON_VERSION,
        "findings": [_finding(f) for f in report.findings],
        "errors": [e.to_dict() for e in report.errors],
        "summary": report.summary(),
    }
    return json.dumps(doc, indent=2) + "\n"


def _finding(f: Any) -> dict[str, Any]:
    data = f.lint_dict()
    cell = cell_of(f)
    if cell is not None:  # a notebook: line and column are inside this cell
        data["cell"] = cell
    return data


def json_statistics(report: Report) -> str:
    return json.dumps(report.statistics() + report.error_rows(), indent=2) + "\n"


def in_cell(cell: int | None, message: str) -> str:
    """A message prefixed with its notebook cell, for formats that have no place for one."""
    return message if cell is None else f"cell {cell}: {message}"


_GITHUB_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def _escape_data(value: str) -> str:
    return value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(value: str) -> str:
    return _escape_data(value).replace(":", "%3A").replace(",", "%2C")


def _command(level: str, props: dict[str, Any], message: str) -> str:
    fields = ",".join(f"{k}={_escape_property(str(v))}" for k, v in props.items() if v is not None)
    return f"::{level} {fields}::{_escape_data(message)}\n"


def github(report: Report) -> str:
    """One workflow command per finding (annotations on the pull request), errors as ::error."""
    out = []
    for f in report.findings:
        props = {
            "file": f.path,
            "line": f.line,
            "col": f.column,
            "endLine": f.end_line,
            "endColumn": f.end_column,
            "title": f.code,
        }
        out.append(_command(_GITHUB_LEVEL[f.severity], props, in_cell(cell_of(f), f.message)))
    for e in report.errors:
        props = {"file": e.path, "line": e.line, "col": e.column, "title": e.code or "loopcheck"}
        out.append(_command("error", props, in_cell(e.cell, e.message)))
    return "".join(out)
