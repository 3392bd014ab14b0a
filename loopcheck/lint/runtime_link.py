"""`loopcheck lint --runtime-log run.jsonl`: marks the static findings that a probe run confirmed.

A static finding is confirmed when the run log holds a runtime finding whose rule page names the
static code as its `lint_twin` (LP403 grads-not-zeroed <-> LC101 zero-grad-missing, ...). The
mark is appended to the message, so every output format carries it; codes, severities and the
exit code stay as they were. Reading the log needs no torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loopcheck.catalog import runtime_twins
from loopcheck.findings import Finding


def runtime_findings(path: Path) -> list[dict[str, Any]]:
    """The run's findings: from its end record, or as logged when the run ended without one.

    Raises `loopcheck.probe.report.LogError` when the file is not a readable probe run log.
    """
    from loopcheck.probe.report import read_log

    records = read_log(path)
    end = next((r for r in reversed(records) if r["type"] == "end"), None)
    found = end.get("findings") if end is not None else None
    if not isinstance(found, list):
        found = [r for r in records if r["type"] == "finding"]
    return [f for f in found if isinstance(f, dict) and isinstance(f.get("code"), str)]


def confirm(findings: list[Finding], runtime: list[dict[str, Any]], log: str) -> list[Finding]:
    seen: dict[str, dict[str, Any]] = {}
    for f in runtime:
        seen.setdefault(f["code"], f)
    marked = []
    for finding in findings:
        twins = [seen[c] for c in runtime_twins(finding.code) if c in seen]
        if twins:
            what = "; ".join(
                f"{t['code']} {t.get('name', '')}".rstrip() + (f" from step {t['step']}" if t.get("step") is not None else "")
                for t in twins
            )
            finding = finding.with_(
                message=f"{finding.message} [confirmed at run time in {log}: {what}]",
                extra={**finding.extra, "confirmed_by": [t["code"] for t in twins]},
            )
        marked.append(finding)
    return marked
