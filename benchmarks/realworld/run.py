"""Lint every rebuilt repository of the benchmark and store the findings in one JSON file.

Each repository is linted on its own, from its root, with all lint rules and no configuration or
cache (`loopcheck lint --isolated --no-cache --select ALL -f json .`), so a finding's path is
relative to the repository. Each finding is stored with the enclosing function (qualified name,
or `<module>`), which lets a verdict survive small line shifts. Lines linted are counted per
repository.

    python benchmarks/realworld/run.py [SCRATCH] [--out FILE] [--only NAME ...] [--jobs N]
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from benchset import REPOS_FILE, DEFAULT_OUT, FINDINGS_NAME, load_repos  # noqa: E402


def scopes_of(source: str) -> list[tuple[int, int, str]]:
    """(first line, last line, qualified name) of every function and class, outer ones first."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    found: list[tuple[int, int, str]] = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                first = min([child.lineno] + [d.lineno for d in child.decorator_list])
                found.append((first, child.end_lineno or child.lineno, name))
                walk(child, name + ".")
            else:
                walk(child, prefix)

    walk(tree, "")
    return found


def enclosing(scopes: list[tuple[int, int, str]], line: int) -> str:
    """The innermost function or class around line, `<module>` at top level."""
    best = "<module>"
    for first, last, name in scopes:
        if first <= line <= last:
            best = name  # later entries are nested deeper
    return best


def lint_repo(root: Path, loopcheck: list[str], jobs: int | None) -> dict:
    cmd = [*loopcheck, "lint", "--isolated", "--no-cache", "--select", "ALL", "-f", "json"]
    if jobs:
        cmd += ["--jobs", str(jobs)]
    proc = subprocess.run([*cmd, "."], cwd=root, capture_output=True, text=True)
    if proc.returncode not in (0, 1, 2):
        raise RuntimeError(f"exit {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise RuntimeError(f"no JSON report (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")


def collect(repo_name: str, root: Path, report: dict) -> dict:
    """The stored record of one repository: lines linted, findings with scopes, file errors."""
    sources = {p.relative_to(root).as_posix(): p.read_text(errors="replace")
               for p in sorted(root.rglob("*.py"))}
    scope_cache: dict[str, list] = {}
    findings = []
    for f in report.get("findings", []):
        path = Path(f["path"]).as_posix().removeprefix("./")
        if path not in scope_cache:
            scope_cache[path] = scopes_of(sources.get(path, ""))
        findings.append({
            "repo": repo_name, "path": path, "line": f["line"], "code": f["code"],
            "severity": f["severity"], "function": enclosing(scope_cache[path], f["line"]),
            "message": f["message"],
        })
    findings.sort(key=lambda f: (f["path"], f["line"], f["code"]))
    return {
        "lines": sum(s.count("\n") for s in sources.values()),
        "files": len(sources),
        "findings": findings,
        "errors": [{"path": Path(e["path"]).as_posix().removeprefix("./"), "line": e.get("line"),
                    "message": e["message"]} for e in report.get("errors", [])],
    }


def _project_commit() -> str | None:
    """The commit of the project checkout that holds this script (which linter was measured)."""
    proc = subprocess.run(["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True)
    return proc.stdout.strip() or None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("scratch", nargs="?", type=Path, default=DEFAULT_OUT,
                    help=f"folder rebuilt by rebuild.py (default {DEFAULT_OUT})")
    ap.add_argument("--out", type=Path, default=None,
                    help=f"findings file to write (default SCRATCH/{FINDINGS_NAME})")
    ap.add_argument("--repos", type=Path, default=REPOS_FILE,
                    help="repository list (default: repos.toml next to this script)")
    ap.add_argument("--only", nargs="*", default=None, help="lint only these owner/name")
    ap.add_argument("--jobs", type=int, default=None, help="passed to loopcheck lint --jobs")
    ap.add_argument("--loopcheck", default=f"{sys.executable} -m loopcheck",
                    help="command that runs loopcheck (default: this Python's -m loopcheck)")
    args = ap.parse_args(argv)

    out = args.out or args.scratch / FINDINGS_NAME
    repos = [r for r in load_repos(args.repos) if not args.only or r.name in args.only]
    result: dict = {"version": 1, "repos": {}}
    if args.only and out.exists():  # refresh some repositories, keep the others
        result = json.loads(out.read_text())
    result["linter"] = {"command": args.loopcheck, "commit": _project_commit()}
    missing = 0
    for repo in repos:
        root = args.scratch / repo.slug
        if not root.is_dir():
            missing += 1
            print(f"MISSING {repo.name}: {root} not rebuilt; run rebuild.py first", file=sys.stderr)
            continue
        start = time.perf_counter()
        try:
            report = lint_repo(root, args.loopcheck.split(), args.jobs)
        except RuntimeError as exc:
            print(f"FAILED  {repo.name}: {exc}", file=sys.stderr)
            missing += 1
            continue
        record = collect(repo.name, root, report)
        record["commit"] = repo.commit
        result["repos"][repo.name] = record
        sev = {s: sum(f["severity"] == s for f in record["findings"]) for s in ("error", "warning", "info")}
        print(f"{repo.name:45s} {record['lines']:7d} lines  E{sev['error']:3d} W{sev['warning']:3d} "
              f"I{sev['info']:3d}  parse errors {len(record['errors'])}  {time.perf_counter() - start:5.1f}s",
              flush=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"findings -> {out}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
