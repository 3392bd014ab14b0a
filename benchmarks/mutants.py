"""Recall on seeded bugs: mutate correct training scripts and count the mutants lint catches.

The scripts are listed in `benchmarks/realworld/mutant_scripts.toml`: real scripts of public
repositories (pinned commits, rebuilt from local mirrors; nothing is downloaded) and scripts of
this project (the `*_clean.py` fixtures and the reference loop). Each operator of
`mutant_operators.py` yields one mutant per site; the mutant replaces the script in a scratch copy
of its project, and it is *caught* when lint reports a finding of the operator's code that the
unmutated script did not have (findings are compared by code and the text of their line, so
moved lines still match). Mutants that do no harm in their script are listed with a reason in
`benchmarks/realworld/equivalent_mutants.tsv` and left out of the recall.

    python benchmarks/mutants.py [--mirrors DIR] [--out DIR] [--operator NAME ...]
                                 [--script TEXT ...] [--json FILE] [--quiet]
    python benchmarks/mutants.py --from-json FILE   # report a saved run again
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "realworld"))

from mirror_files import DEFAULT_MIRRORS, MirrorMissing, extract_python, slug  # noqa: E402
from mutant_operators import OPERATORS, mutants  # noqa: E402

SCRIPTS_FILE = HERE / "realworld" / "mutant_scripts.toml"
EQUIVALENT_FILE = HERE / "realworld" / "equivalent_mutants.tsv"
DEFAULT_OUT = Path("/tmp/loopcheck-mutants")


@dataclass(frozen=True)
class Script:
    id: str  # `owner/name:path` for a public repository, the project path for our own
    path: Path  # where the script lies in the scratch copy


@dataclass
class Outcome:
    script: str
    operator: str
    code: str
    line: int
    what: str
    caught: bool
    equivalent: str | None  # the reason, when listed as equivalent
    new_codes: list[str]  # codes of every new finding (any code)


def finding_keys(path: Path, source: str) -> Counter:
    """(code, text of the reported line) of every lint finding for the file at `path`."""
    from loopcheck import lint_paths

    lines = source.splitlines()
    report = lint_paths([path], jobs=1)
    keys: Counter = Counter()
    for f in report.findings:
        text = lines[f.line - 1].strip() if 0 < f.line <= len(lines) else ""
        keys[(f.code, text)] += 1
    return keys


def caught_by(before: Counter, after: Counter, code: str) -> tuple[bool, list[str]]:
    """Whether `after` has a finding of `code` that `before` lacks; the codes of all new ones."""
    new = after - before
    codes = sorted({c for c, _ in new})
    return code in codes, codes


def load_scripts(path: Path, mirrors: Path, out: Path) -> tuple[list[Script], list[str]]:
    """Stage every listed script in `out`; returns the scripts and the problems met."""
    data = tomllib.loads(path.read_text())
    scripts: list[Script] = []
    problems: list[str] = []
    staged: set[tuple[str, str]] = set()
    for i, entry in enumerate(data.get("script", [])):
        missing = [k for k in ("repo", "commit", "path") if k not in entry]
        if missing:
            problems.append(f"{path}: script entry {i + 1} lacks {', '.join(missing)}")
            continue
        repo, commit, rel = entry["repo"], entry["commit"], entry["path"]
        dest = out / f"{slug(repo)}@{commit[:12]}"
        try:
            if (repo, commit) not in staged:
                extract_python(mirrors, repo, commit, dest)
                staged.add((repo, commit))
        except MirrorMissing as exc:
            problems.append(str(exc))
            continue
        if not (dest / rel).is_file():
            problems.append(f"{path}: {repo}@{commit[:12]} has no file {rel}")
            continue
        scripts.append(Script(f"{repo}:{rel}", dest / rel))
    for pattern in data.get("project", {}).get("paths", []):
        for src in sorted(ROOT.glob(pattern)):
            rel = src.relative_to(ROOT)
            dest = out / "project" / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            for sibling in src.parent.glob("*.py"):  # the modules it may import
                shutil.copy2(sibling, dest.parent / sibling.name)
            scripts.append(Script(rel.as_posix(), dest))
    return scripts, problems


def load_equivalent(path: Path) -> dict[tuple[str, str, int], str]:
    """(script, operator, line) -> why, from the hand-judged TSV (`#` lines are comments)."""
    table: dict[tuple[str, str, int], str] = {}
    if not path.is_file():
        return table
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        if not raw.strip() or raw.startswith("#"):
            continue
        parts = raw.split("\t")
        if len(parts) != 4 or not parts[2].strip().isdigit():
            raise SystemExit(f"{path}:{n}: expected script<TAB>operator<TAB>line<TAB>why")
        table[(parts[0], parts[1], int(parts[2]))] = parts[3]
    return table


_stamp = [time.time_ns()]


def _write(path: Path, text: str) -> None:
    # a fresh, strictly increasing mtime: a same-size mutant is never taken for a cached parse
    path.write_text(text)
    _stamp[0] += 1_000_000_000
    os.utime(path, ns=(_stamp[0], _stamp[0]))


def run_script(script: Script, operators: list[str], equivalent: dict) -> list[Outcome]:
    original = script.path.read_text()
    before = finding_keys(script.path, original)
    outcomes = []
    try:
        for mutant in mutants(original, operators):
            _write(script.path, mutant.source)
            after = finding_keys(script.path, mutant.source)
            caught, codes = caught_by(before, after, mutant.code)
            why = equivalent.get((script.id, mutant.operator, mutant.line))
            outcomes.append(Outcome(script.id, mutant.operator, mutant.code, mutant.line,
                                    mutant.what, caught, why, codes))
    finally:
        _write(script.path, original)
    return outcomes


def _rate(caught: int, total: int) -> str:
    return f"{caught}/{total} = {100 * caught / total:5.1f} %" if total else "—"


def report(outcomes: list[Outcome], out=sys.stdout) -> None:
    def table(title: str, key) -> None:
        groups: dict[str, list[Outcome]] = defaultdict(list)
        for o in outcomes:
            groups[key(o)].append(o)
        print(f"\n{title:<32} {'mutants':>7} {'equiv':>5}   recall (caught / non-equivalent)", file=out)
        for name in sorted(groups):
            rows = groups[name]
            live = [o for o in rows if o.equivalent is None]
            print(f"{name:<32} {len(rows):>7} {len(rows) - len(live):>5}   "
                  f"{_rate(sum(o.caught for o in live), len(live))}", file=out)

    table("operator", lambda o: f"{o.operator} ({o.code})")
    table("code", lambda o: o.code)
    live = [o for o in outcomes if o.equivalent is None]
    print(f"\nall: {len(outcomes)} mutants, {len(outcomes) - len(live)} equivalent, "
          f"recall {_rate(sum(o.caught for o in live), len(live))}", file=out)
    misses = [o for o in live if not o.caught]
    if misses:
        print("\nmissed (script:line operator -> new codes):", file=out)
        for o in misses:
            print(f"  {o.script}:{o.line} {o.operator} [{o.code}] {o.what}"
                  f" -> {', '.join(o.new_codes) or 'nothing new'}", file=out)
    caught_equiv = [o for o in outcomes if o.equivalent is not None and o.caught]
    if caught_equiv:
        print("\nlisted as equivalent, yet reported (check the listing or the rule):", file=out)
        for o in caught_equiv:
            print(f"  {o.script}:{o.line} {o.operator} [{o.code}]", file=out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scripts", type=Path, default=SCRIPTS_FILE)
    ap.add_argument("--equivalent", type=Path, default=EQUIVALENT_FILE)
    ap.add_argument("--mirrors", type=Path, default=DEFAULT_MIRRORS)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="scratch folder (rebuilt)")
    ap.add_argument("--operator", action="append", choices=sorted(OPERATORS), help="only these")
    ap.add_argument("--script", action="append", help="only scripts whose id contains this")
    ap.add_argument("--json", type=Path, help="write every mutant's outcome here")
    ap.add_argument("--quiet", action="store_true", help="no progress lines")
    ap.add_argument("--from-json", type=Path,
                    help="report a run saved with --json again, with the current equivalent list")
    args = ap.parse_args(argv)
    if args.from_json:
        equivalent = load_equivalent(args.equivalent)
        outcomes = [Outcome(**o) for o in json.loads(args.from_json.read_text())]
        for o in outcomes:
            o.equivalent = equivalent.get((o.script, o.operator, o.line))
        report(outcomes)
        return 0
    if not args.scripts.is_file():
        print(f"error: {args.scripts} not found", file=sys.stderr)
        return 2
    scripts, problems = load_scripts(args.scripts, args.mirrors, args.out)
    for p in problems:
        print(f"warning: {p}", file=sys.stderr)
    if args.script:
        scripts = [s for s in scripts if any(t in s.id for t in args.script)]
    equivalent = load_equivalent(args.equivalent)
    operators = args.operator or list(OPERATORS)
    outcomes: list[Outcome] = []
    for script in scripts:
        try:
            found = run_script(script, operators, equivalent)
        except Exception as exc:  # a script libcst cannot parse: say so, go on
            print(f"warning: {script.id}: {type(exc).__name__}: {exc}", file=sys.stderr)
            continue
        if not args.quiet:
            print(f"{script.id}: {len(found)} mutants, {sum(o.caught for o in found)} caught",
                  file=sys.stderr)
        outcomes.extend(found)
    seen = {(o.script, o.operator, o.line) for o in outcomes}
    for key in sorted(set(equivalent) - seen):
        if not args.script and not args.operator:
            print(f"warning: {args.equivalent.name} lists {key}, which no operator produced",
                  file=sys.stderr)
    report(outcomes)
    if args.json:
        args.json.write_text(json.dumps([asdict(o) for o in outcomes], indent=1))
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
