"""SARIF 2.1.0 output (GitHub code scanning, IDE viewers): rules from the catalogue, results, fixes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

from loopcheck.catalog import RulePage, catalog
from loopcheck.findings import Finding, Severity
from loopcheck.lint.output.machine import in_cell
from loopcheck.lint.output.report import Report, cell_of, fix_edits

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
FALLBACK_URI = "https://pypi.org/project/loopcheck/"
_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}


def information_uri() -> str:
    """The project's home page from the installed metadata (falls back to its PyPI page)."""
    try:
        from importlib.metadata import PackageNotFoundError, metadata

        meta = metadata("loopcheck")
    except (ImportError, PackageNotFoundError):
        return FALLBACK_URI
    for entry in meta.get_all("Project-URL") or []:
        _, _, url = entry.partition(",")
        if url.strip().startswith("http"):
            return url.strip()
    home = meta.get("Home-page")
    return home if home and home.startswith("http") else FALLBACK_URI


def _uri(path: str) -> str:
    return quote(Path(path).as_posix(), safe="/")


def _rule(page: RulePage) -> dict[str, Any]:
    what = page.section("What it finds") or page.summary
    return {
        "id": page.code,
        "name": page.name,
        "shortDescription": {"text": page.summary},
        "fullDescription": {"text": what},
        "help": {"text": page.text.strip() or page.summary, "markdown": page.text.strip() or page.summary},
        "defaultConfiguration": {"level": _LEVEL[page.severity]},
        "properties": {"tags": [page.family], "fix": page.fix},
    }


def _region(line: int | None, column: int | None, end_line: int | None, end_column: int | None) -> dict[str, int]:
    region: dict[str, int] = {"startLine": max(line or 1, 1)}
    if column:
        region["startColumn"] = column
    if end_line:
        region["endLine"] = end_line
    if end_column and end_line:
        region["endColumn"] = end_column
    return region


def _location(path: str, region: dict[str, int]) -> dict[str, Any]:
    return {
        "physicalLocation": {
            "artifactLocation": {"uri": _uri(path), "uriBaseId": "%SRCROOT%"},
            "region": region,
        }
    }


def _fixes(f: Finding) -> list[dict[str, Any]]:
    edits = fix_edits(f)
    if not edits:
        return []
    replacements = [
        {
            "deletedRegion": _region(e.get("line"), e.get("column"), e.get("end_line"), e.get("end_column")),
            "insertedContent": {"text": e.get("content", "")},
        }
        for e in edits
    ]
    fix = f.fix or {}
    return [
        {
            "description": {"text": fix.get("message") or f"fix {f.code}"},
            "artifactChanges": [{"artifactLocation": {"uri": _uri(f.path or ""), "uriBaseId": "%SRCROOT%"}, "replacements": replacements}],
            "properties": {"applicability": fix.get("applicability", "safe")},
        }
    ]


def _result(f: Finding, index: dict[str, int]) -> dict[str, Any]:
    result: dict[str, Any] = {
        "ruleId": f.code,
        "level": _LEVEL[f.severity],
        "message": {"text": in_cell(cell_of(f), f.message)},
        "locations": [_location(f.path or "", _region(f.line, f.column, f.end_line, f.end_column))],
    }
    if cell_of(f) is not None:
        result["properties"] = {"cell": cell_of(f)}
    if f.code in index:
        result["ruleIndex"] = index[f.code]
    fixes = _fixes(f)
    if fixes:
        result["fixes"] = fixes
    return result


def sarif(report: Report, *, root: Path | None = None) -> str:
    from loopcheck import __version__

    pages = [p for code, p in catalog().items() if code.startswith("LC")]
    index = {p.code: i for i, p in enumerate(pages)}
    root_uri = (root or Path.cwd()).resolve().as_uri().rstrip("/") + "/"
    notifications = [
        {
            "level": "error",
            "message": {"text": in_cell(e.cell, e.message)},
            "locations": [_location(e.path, _region(e.line, e.column, None, None))],
            **({"descriptor": {"id": e.code}} if e.code else {}),
        }
        for e in report.errors
    ]
    run = {
        "tool": {
            "driver": {
                "name": "loopcheck",
                "version": __version__,
                "semanticVersion": __version__,
                "informationUri": information_uri(),
                "rules": [_rule(p) for p in pages],
            }
        },
        "originalUriBaseIds": {"%SRCROOT%": {"uri": root_uri}},
        "columnKind": "unicodeCodePoints",
        "invocations": [{"executionSuccessful": not report.errors, "toolExecutionNotifications": notifications}],
        "results": [_result(f, index) for f in report.findings],
    }
    doc = {"$schema": SCHEMA, "version": "2.1.0", "runs": [run]}
    return json.dumps(doc, indent=2) + "\n"
