"""Score a benchmark run against the verdicts: precision per severity and per code.

Reads the findings written by run.py and verdicts.tsv (one judged finding a row), matches them,
and prints: lines linted, findings per 1k lines per severity, precision tp / (tp + fp) per
severity and per code with debatable ones counted apart, the findings nobody has judged yet, and
the verdicts whose finding is gone (a gone true positive is a bug the linter no longer finds).
It is a report: the exit code is 0 whatever the numbers; 2 only when an input cannot be read.

A verdict matches a finding on (repo, path, line, code); when the line moved it matches on
(repo, path, code, function), the nearest line first.

    python benchmarks/realworld/score.py [--findings FILE] [--verdicts FILE] [--json]
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from benchset import DEFAULT_OUT, FINDINGS_NAME, VERDICTS_FILE  # noqa: E402

SEVERITIES = ("error", "warning", "info")
JUDGED = ("error", "warning")  # every finding of these severities needs a verdict
VERDICTS = ("tp", "fp", "debatable")
COLUMNS = ("repo", "path", "line", "code", "function", "verdict", "reason")


class InputError(Exception):
    """An input file is missing or malformed; the message says where and what to do."""


@dataclass
class Verdict:
    repo: str
    path: str
    line: int
    code: str
    function: str
    verdict: str
    reason: str
    row: int  # line in the verdict file, for messages


def read_verdicts(path: Path) -> list[Verdict]:
    if not path.is_file():
        raise InputError(f"{path}: no verdict file")
    verdicts = []
    with path.open(newline="") as fh:
        reader = csv.reader(fh, delimiter="\t")
        header = next(reader, None)
        if header is None or tuple(header) != COLUMNS:
            raise InputError(f"{path}:1: the header must be the tab-separated columns {', '.join(COLUMNS)}")
        for row_no, row in enumerate(reader, start=2):
            if not row or row[0].startswith("#"):
                continue
            if len(row) != len(COLUMNS):
                raise InputError(f"{path}:{row_no}: {len(row)} columns, expected {len(COLUMNS)} "
                                 "separated by tabs")
            repo, fpath, line, code, function, verdict, reason = row
            if verdict not in VERDICTS:
                raise InputError(f"{path}:{row_no}: verdict {verdict!r}, expected one of {', '.join(VERDICTS)}")
            if not line.isdigit():
                raise InputError(f"{path}:{row_no}: line {line!r} is not a number")
            if not reason.strip():
                raise InputError(f"{path}:{row_no}: give a one-line reason for the verdict")
            verdicts.append(Verdict(repo, fpath, int(line), code, function, verdict, reason, row_no))
    return verdicts


def read_findings(path: Path) -> dict:
    if not path.is_file():
        raise InputError(f"{path}: no findings file; run benchmarks/realworld/run.py first")
    try:
        data = json.loads(path.read_text())
        data["repos"]
    except (json.JSONDecodeError, KeyError, TypeError):
        raise InputError(f"{path}: not a findings file written by run.py")
    return data


def match(findings: list[dict], verdicts: list[Verdict]) -> tuple[list[Verdict | None], list[Verdict]]:
    """The verdict of each finding (None when unjudged), and the verdicts that matched nothing."""
    exact = {(v.repo, v.path, v.line, v.code): v for v in verdicts}
    chosen: list[Verdict | None] = [exact.get((f["repo"], f["path"], f["line"], f["code"])) for f in findings]
    used = {id(v) for v in chosen if v is not None}
    by_scope: dict[tuple, list[Verdict]] = defaultdict(list)
    for v in verdicts:
        if id(v) not in used:
            by_scope[(v.repo, v.path, v.code, v.function)].append(v)
    for i, f in enumerate(findings):
        if chosen[i] is not None:
            continue
        pool = [v for v in by_scope.get((f["repo"], f["path"], f["code"], f["function"]), ())
                if id(v) not in used]
        if pool:
            best = min(pool, key=lambda v: abs(v.line - f["line"]))
            chosen[i] = best
            used.add(id(best))
    return chosen, [v for v in verdicts if id(v) not in used]


def _tally() -> dict:
    return {"findings": 0, "tp": 0, "fp": 0, "debatable": 0, "unjudged": 0}


def _precision(t: dict) -> float | None:
    judged = t["tp"] + t["fp"]
    return t["tp"] / judged if judged else None


def score(data: dict, verdicts: list[Verdict]) -> dict:
    findings = [f for rec in data["repos"].values() for f in rec["findings"]]
    lines = sum(rec["lines"] for rec in data["repos"].values())
    chosen, stale = match(findings, verdicts)
    per_sev = {s: _tally() for s in SEVERITIES}
    per_code: dict[str, dict] = defaultdict(_tally)
    unjudged = []
    for f, v in zip(findings, chosen):
        for t in (per_sev.setdefault(f["severity"], _tally()), per_code[f["code"]]):
            t["findings"] += 1
            t[v.verdict if v else "unjudged"] += 1
        per_code[f["code"]]["severity"] = f["severity"]
        if v is None and f["severity"] in JUDGED:
            unjudged.append(f)
    for t in (*per_sev.values(), *per_code.values()):
        t["precision"] = _precision(t)
    for sev, t in per_sev.items():
        t["per_1k_lines"] = 1000 * t["findings"] / lines if lines else 0.0
    gone = defaultdict(int)
    for v in stale:
        gone[v.verdict] += 1
    return {
        "linter": data.get("linter", {}),
        "repos": len(data["repos"]),
        "lines": lines,
        "parse_errors": sum(len(rec.get("errors", ())) for rec in data["repos"].values()),
        "severity": per_sev,
        "code": dict(sorted(per_code.items())),
        "unjudged": [{k: f[k] for k in ("repo", "path", "line", "code", "severity", "function", "message")}
                     for f in unjudged],
        "gone": {"count": len(stale), **{k: gone[k] for k in VERDICTS},
                 "true_positives": [{"repo": v.repo, "path": v.path, "line": v.line, "code": v.code,
                                     "reason": v.reason} for v in stale if v.verdict == "tp"]},
    }


def _pct(p: float | None) -> str:
    return "   -  " if p is None else f"{100 * p:5.1f}%"


def render(result: dict) -> str:
    linter = result["linter"].get("commit")
    out = [f"{result['repos']} repositories, {result['lines']} lines linted, "
           f"{result['parse_errors']} files not analysed"
           + (f" (project at {linter})" if linter else ""), ""]
    head = f"{'':10s} {'findings':>8s} {'per 1k':>7s} {'tp':>4s} {'fp':>4s} {'deb':>4s} {'unj':>4s} {'precision':>9s}"
    out.append(head)
    for sev, t in result["severity"].items():
        out.append(f"{sev:10s} {t['findings']:8d} {t['per_1k_lines']:7.2f} {t['tp']:4d} {t['fp']:4d} "
                   f"{t['debatable']:4d} {t['unjudged']:4d} {_pct(t['precision']):>9s}")
    out += ["", f"{'code':10s} {'severity':>8s} {'found':>7s} {'tp':>4s} {'fp':>4s} {'deb':>4s} {'unj':>4s} {'precision':>9s}"]
    for code, t in result["code"].items():
        out.append(f"{code:10s} {t['severity']:>8s} {t['findings']:7d} {t['tp']:4d} {t['fp']:4d} "
                   f"{t['debatable']:4d} {t['unjudged']:4d} {_pct(t['precision']):>9s}")
    gone = result["gone"]
    if gone["count"]:
        out += ["", f"verdicts whose finding is gone: {gone['count']} "
                    f"(fp {gone['fp']}, debatable {gone['debatable']}, tp {gone['tp']})"]
        for v in gone["true_positives"]:
            out.append(f"  lost true positive: {v['repo']} {v['path']}:{v['line']} {v['code']}  ({v['reason']})")
    if result["unjudged"]:
        out += ["", f"unjudged error and warning findings: {len(result['unjudged'])}"]
        for f in result["unjudged"]:
            out.append(f"  {f['repo']}\t{f['path']}\t{f['line']}\t{f['code']}\t{f['function']}\t"
                       f"{f['severity']}: {f['message']}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--findings", type=Path, default=DEFAULT_OUT / FINDINGS_NAME,
                    help=f"findings file written by run.py (default {DEFAULT_OUT / FINDINGS_NAME})")
    ap.add_argument("--verdicts", type=Path, default=VERDICTS_FILE,
                    help="verdict file (default: verdicts.tsv next to this script)")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    args = ap.parse_args(argv)
    try:
        result = score(read_findings(args.findings), read_verdicts(args.verdicts))
    except InputError as exc:
        print(f"score: {exc}", file=sys.stderr)
        return 2
    try:
        print(json.dumps(result, indent=1) if args.json else render(result))
    except BrokenPipeError:  # the report piped into head: the reader has what it wanted
        sys.stderr.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
