"""Recall on real bugs from history: lint each buggy file as its project shipped it.

For every bug of history.toml, the Python files of its repository at the commit before the fix
are rebuilt from the local mirror into a scratch folder (nothing is downloaded), the file (or the
folders named by `lint`, for bugs that span files) is linted, and the bug counts as *found* when
a finding of its code lands in its file within `--slack` lines of `line` or of one of `also`.
A finding of the right code elsewhere in the file is reported apart (found, wrong line).

    python benchmarks/realworld/history.py [--mirrors DIR] [--out DIR] [--slack 2] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from mirror_files import DEFAULT_MIRRORS, MirrorMissing, extract_python, slug  # noqa: E402

HISTORY_FILE = HERE / "history.toml"
DEFAULT_OUT = Path("/tmp/loopcheck-history")
REQUIRED = ("repo", "commit", "fix", "file", "line", "code", "what")


@dataclass
class Bug:
    repo: str
    commit: str
    fix: str
    file: str
    line: int
    code: str
    what: str
    also: list[int] = field(default_factory=list)
    lint: list[str] = field(default_factory=list)


@dataclass
class Result:
    bug: Bug
    verdict: str  # found | wrong-line | missed | no-mirror | error
    lines: list[int]  # lines of the code's findings in the file
    other: list[str]  # other codes reported in the file (code:line)
    note: str = ""


def load_bugs(path: Path) -> list[Bug]:
    data = tomllib.loads(path.read_text())
    bugs = []
    for i, entry in enumerate(data.get("bug", [])):
        missing = [k for k in REQUIRED if k not in entry]
        if missing:
            raise SystemExit(f"{path}: bug entry {i + 1} lacks {', '.join(missing)}")
        bugs.append(Bug(**{k: entry[k] for k in (*REQUIRED, "also", "lint") if k in entry}))
    return bugs


def check(bug: Bug, mirrors: Path, out: Path, slack: int) -> Result:
    from loopcheck import lint_paths

    dest = out / f"{slug(bug.repo)}@{bug.commit[:12]}"
    try:
        if not (dest / ".complete").is_file():
            extract_python(mirrors, bug.repo, bug.commit, dest)
            (dest / ".complete").write_text(bug.commit)
    except MirrorMissing as exc:
        return Result(bug, "no-mirror", [], [], str(exc))
    target = dest / bug.file
    if not target.is_file():
        return Result(bug, "error", [], [], f"{bug.file} is not in {bug.repo}@{bug.commit[:12]}")
    report = lint_paths([dest / p for p in (bug.lint or [bug.file])], jobs=1)
    in_file = [f for f in report.findings if Path(f.path).resolve() == target.resolve()]
    lines = sorted(f.line for f in in_file if f.code == bug.code)
    other = sorted(f"{f.code}:{f.line}" for f in in_file if f.code != bug.code)
    wanted = [bug.line, *bug.also]
    if any(abs(line - w) <= slack for line in lines for w in wanted):
        verdict = "found"
    elif lines:
        verdict = "wrong-line"
    else:
        verdict = "missed"
    note = "; ".join(f"{e.path}:{e.line}: {e.message}" for e in report.errors)
    return Result(bug, verdict, lines, other, note)


def report(results: list[Result], out=sys.stdout) -> None:
    by_code: dict[str, list[Result]] = defaultdict(list)
    for r in results:
        by_code[r.bug.code].append(r)
    print(f"{'code':<6} {'bugs':>4} {'found':>5} {'wrong line':>10} {'missed':>6}", file=out)
    for code in sorted(by_code):
        rs = by_code[code]
        count = lambda v: sum(r.verdict == v for r in rs)  # noqa: E731
        print(f"{code:<6} {len(rs):>4} {count('found'):>5} {count('wrong-line'):>10} "
              f"{len(rs) - count('found') - count('wrong-line'):>6}", file=out)
    judged = [r for r in results if r.verdict in ("found", "wrong-line", "missed")]
    found = sum(r.verdict == "found" for r in judged)
    if judged:
        print(f"\nrecall: {found}/{len(judged)} = {100 * found / len(judged):.1f} % found at the "
              f"right code and line", file=out)
    print("", file=out)
    for r in results:
        b = r.bug
        where = f"{b.repo}@{b.commit[:10]}:{b.file}:{b.line}"
        detail = "" if r.verdict == "no-mirror" else (f"{b.code} at {r.lines}" if r.lines else f"no {b.code}") + (
            f"; also reported: {', '.join(r.other)}" if r.other else "")
        print(f"{r.verdict:<10} {where} [{b.code}] {detail}", file=out)
        if r.note:
            print(f"{'':<10} {r.note}", file=out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--history", type=Path, default=HISTORY_FILE)
    ap.add_argument("--mirrors", type=Path, default=DEFAULT_MIRRORS)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="scratch folder")
    ap.add_argument("--slack", type=int, default=2, help="lines of tolerance (default 2)")
    ap.add_argument("--json", type=Path, help="write the results here")
    args = ap.parse_args(argv)
    if not args.history.is_file():
        print(f"error: {args.history} not found", file=sys.stderr)
        return 2
    results = [check(b, args.mirrors, args.out, args.slack) for b in load_bugs(args.history)]
    missing = [r for r in results if r.verdict == "no-mirror"]
    for r in missing:
        print(f"warning: {r.note}", file=sys.stderr)
    report(results)
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=1))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
