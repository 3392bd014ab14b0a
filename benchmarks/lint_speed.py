"""Lint speed: `check_paths` against a bare libcst parse, a warm cache, and TorchFix, in one run.

loopcheck's own modules are byte-compiled first, as an installed package is. The fixtures
(single files and multi-file projects) are copied into a temporary tree until it
holds at least `--files` Python files. Both measurements use the same number of worker
processes and run interleaved, `--repeat` times each; the medians and their ratio are printed.
The target is a ratio of at most 2.0: parsing is the floor, the loop model and the rules should
cost no more than one more parse.

Then, on the same tree and with the same number of processes, the command line itself:
`loopcheck lint --no-cache` (cold) against `loopcheck lint` on the unchanged tree with a warm
`.loopcheck_cache/` (target: at least 10x faster), and the cold run against TorchFix, which is
installed into its own environment (`benchmarks/.torchfix-venv`: it pins an older libcst) and is
never a dependency of loopcheck. `--no-cli` skips those two comparisons.

`--single-lines N` measures one large file instead: the single-file fixtures concatenated until
the file has at least N lines (one process; the fixes of its many findings are part of the cost).

`--tree DIR` measures any directory as it is (a package of the standard library, torch's sources,
a real project): the cold command line `loopcheck lint --no-cache --isolated` against a bare
libcst parse of the same files with the same number of worker processes, interleaved, with the
peak memory of the lint process and the CPU time of both (the system's share and the page faults
apart: memory mapped and unmapped over and over shows there first); `--per-file` adds each file's check against its own parse
(one process, the run's shared project), and `--edit-one` the re-lint after one file changes
on a warm cache against the parse of that file alone (each edit made `--repeat` times), and
`--warm` the cold command line against the same command on the unchanged tree with a warm cache;
`--against CHECKOUT` times another source tree of loopcheck (an older commit, checked out with
`git worktree add`) on the same tree, interleaved with this one (with `--edit-one`: the same edits
on a copy of the tree of its own, since a cache holds one version's results).

    python benchmarks/lint_speed.py [--files 500] [--jobs N] [--repeat 5] [--select LC1]
    python benchmarks/lint_speed.py --single-lines 20000 [--repeat 3]
    python benchmarks/lint_speed.py --tree /usr/lib/python3.11/email [--per-file] [--edit-one] [--warm]
    python benchmarks/lint_speed.py --tree DIR --against /tmp/old-checkout
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import libcst as cst  # noqa: E402

from loopcheck.lint.api import CodeFilter  # noqa: E402
from loopcheck.lint.engine import check_paths, discover  # noqa: E402


def build_tree(root: Path, minimum: int) -> list[Path]:
    source = REPO / "fixtures"
    per_copy = len(list(source.rglob("*.py")))
    if per_copy == 0:
        raise SystemExit("no fixtures to replicate")
    copies = -(-minimum // per_copy)
    for i in range(copies):
        shutil.copytree(source, root / f"copy_{i:03d}")
    files, _ = discover([root])
    return files


def build_single(root: Path, lines: int) -> list[Path]:
    """One file made of the single-file fixtures, repeated until it has `lines` lines."""
    parts = []
    for fixture in sorted((REPO / "fixtures").glob("*.py")):
        text = fixture.read_text(encoding="utf-8")
        # a __future__ import is only legal at the top of a file
        parts.append("".join(line for line in text.splitlines(keepends=True) if not line.startswith("from __future__")))
    if not parts:
        raise SystemExit("no fixtures to replicate")
    chunks: list[str] = []
    total = 0
    while total < lines:
        for part in parts:
            chunks.append(part if part.endswith("\n") else part + "\n")
            total += part.count("\n") + (0 if part.endswith("\n") else 1)
            if total >= lines:
                break
    target = root / "big_train.py"
    target.write_text("".join(chunks), encoding="utf-8")
    return [target]


def _parse(path: str) -> int:
    try:
        module = cst.parse_module(Path(path).read_bytes())
    except (cst.ParserSyntaxError, SyntaxError, RecursionError, ValueError):
        return 0  # the standard library's Python 2 and broken test inputs: the lint reports them
    return len(module.body)


def _cpu() -> float:
    """CPU seconds of this process and of its children that have ended (pool workers, commands)."""
    return _usage()[0]


def _usage() -> tuple[float, float, int]:
    """CPU seconds, of them the system's, and minor page faults, of this process and of its
    children that have ended. System time out of proportion to the parse's shows memory mapped
    and unmapped over and over (CPython's frame stack did that to deep recursion once)."""
    import resource

    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    system = own.ru_stime + kids.ru_stime
    return own.ru_utime + kids.ru_utime + system, system, own.ru_minflt + kids.ru_minflt


def _since(before: tuple[float, float, int]) -> tuple[float, float, int]:
    now = _usage()
    return now[0] - before[0], now[1] - before[1], now[2] - before[2]


def _medians(runs: list[tuple[float, float, int]]) -> tuple[float, float, int]:
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs), int(statistics.median(r[2] for r in runs))


def parse_all(files: list[Path], jobs: int) -> float:
    start = time.perf_counter()
    names = [str(f) for f in files]
    if jobs > 1:
        chunk = max(1, min(16, len(names) // (jobs * 4)))
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            sum(pool.map(_parse, names, chunksize=chunk))
    else:
        sum(map(_parse, names))
    return time.perf_counter() - start


def lint_all(root: Path, jobs: int, select: str | None) -> tuple[float, int]:
    enabled = CodeFilter(select.split(",")) if select else CodeFilter()
    start = time.perf_counter()
    report = check_paths([root], jobs=jobs, enabled=enabled)
    return time.perf_counter() - start, len(report.findings)


def run_cli(command: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start


def loopcheck_cli(root: Path, jobs: int, *, cache: bool) -> list[str]:
    command = [sys.executable, "-m", "loopcheck", "lint", str(root), "--format", "json", "--jobs", str(jobs), "--isolated"]
    return command if cache else command + ["--no-cache"]


def warm_against_cold(root: Path, jobs: int, repeat: int) -> None:
    """The command line twice: without the cache, and on an unchanged tree with a warm cache."""
    (root / "pyproject.toml").write_text("[project]\nname = 'speed-tree'\n")  # the cache lives at the project root
    run_cli(loopcheck_cli(root, jobs, cache=True), REPO)  # fill the cache once
    cold, warm = [], []
    for _ in range(repeat):
        cold.append(run_cli(loopcheck_cli(root, jobs, cache=False), REPO))
        warm.append(run_cli(loopcheck_cli(root, jobs, cache=True), REPO))
    c, w = statistics.median(cold), statistics.median(warm)
    print(f"loopcheck lint, cold (--no-cache): median {c:.2f}s   warm cache, unchanged tree: median {w:.2f}s")
    print(f"ratio cold / warm: {c / w:.1f}x faster when warm  (target >= 10x)")


def torchfix_env() -> Path | None:
    """TorchFix in the benchmark's own virtual environment (it pins an older libcst than loopcheck's)."""
    env = REPO / "benchmarks" / ".torchfix-venv"
    exe = env / "bin" / "torchfix"
    if not exe.exists():
        print("installing torchfix into benchmarks/.torchfix-venv ...", file=sys.stderr)
        made = subprocess.run([sys.executable, "-m", "venv", str(env)], capture_output=True)
        if made.returncode == 0:
            subprocess.run([str(env / "bin" / "python"), "-m", "pip", "install", "--quiet", "torchfix"], capture_output=True)
    return exe if exe.exists() else None


def against_torchfix(root: Path, jobs: int, repeat: int) -> None:
    """loopcheck (cold) and TorchFix over the same files, same number of processes, interleaved."""
    exe = torchfix_env()
    if exe is None:
        print("torchfix: skipped (it could not be installed into benchmarks/.torchfix-venv)")
        return
    ours, theirs = [], []
    for _ in range(repeat):
        ours.append(run_cli(loopcheck_cli(root, jobs, cache=False), REPO))
        theirs.append(run_cli([str(exe), "--jobs", str(jobs), str(root)], REPO))
    o, t = statistics.median(ours), statistics.median(theirs)
    print(f"loopcheck lint (cold): median {o:.2f}s   torchfix: median {t:.2f}s")
    print(f"ratio loopcheck / torchfix: {o / t:.2f}x  (below 1: loopcheck is faster; TorchFix runs other, syntax-level rules, so this is for scale)")


def cli_run(command: list[str], checkout: Path = REPO) -> tuple[float, int]:
    """Seconds and peak resident memory (KiB, the largest process of the run) of one command,
    run with loopcheck from `checkout` (a source tree of it: this one, or an older one)."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    env = {**os.environ, "PYTHONPATH": str(checkout)} if checkout != REPO else None
    start = time.perf_counter()
    subprocess.run(command, cwd=checkout, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    elapsed = time.perf_counter() - start
    return elapsed, max(before, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)


def copy_trees(trees: list[Path], scratch: Path) -> Path:
    """The trees' Python files copied side by side into one scratch project (a pyproject.toml at
    its root: the project, and the cache, are the measured files alone, never what surrounds
    them), so measuring never writes into the original trees."""
    root = scratch / "project"
    root.mkdir()
    (root / "pyproject.toml").write_text("[project]\nname = 'speed-tree'\n")
    for tree in trees:
        shutil.copytree(tree, root / tree.resolve().name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".git"))
    return root


def measure_tree(root: Path, jobs: int, repeat: int, per_file: bool, edit_one: bool, warm: bool,
                 against: Path | None = None) -> None:
    files, _ = discover([root])
    lines = sum(f.read_bytes().count(b"\n") for f in files)
    checkouts = [REPO] + ([against] if against is not None else [])
    parse_times: list[float] = []
    parse_cpu: list[tuple[float, float, int]] = []
    lint_times: dict[Path, list[float]] = {c: [] for c in checkouts}
    lint_cpu: dict[Path, list[tuple[float, float, int]]] = {c: [] for c in checkouts}
    peak = 0
    for i in range(repeat):
        before = _usage()
        parse_times.append(parse_all(files, jobs))
        parse_cpu.append(_since(before))
        for checkout in checkouts if i % 2 == 0 else checkouts[::-1]:  # neither always runs first
            before = _usage()
            elapsed, used = cli_run(loopcheck_cli(root, jobs, cache=False), checkout)
            lint_cpu[checkout].append(_since(before))
            lint_times[checkout].append(elapsed)
            peak = used if checkout == REPO else peak
    p, (pc, ps, pf) = statistics.median(parse_times), _medians(parse_cpu)
    print(f"trees: {len(list(root.iterdir())) - 1}  files: {len(files)}  lines: {lines}  workers: {jobs}  repeats: {repeat}")
    print(f"bare libcst parse: median {p:.2f}s  ({', '.join(f'{t:.2f}' for t in parse_times)})")
    for checkout in checkouts:
        lint, (lc, ls, lf) = statistics.median(lint_times[checkout]), _medians(lint_cpu[checkout])
        name = "" if checkout == REPO else f" ({checkout})"
        print(f"loopcheck lint --no-cache{name}: median {lint:.2f}s  ({', '.join(f'{t:.2f}' for t in lint_times[checkout])})")
        print(f"ratio: {lint / p:.2f}x  (target <= 2.0x)" + ("" if name else f"   peak memory of one lint process: {peak / 1024:.0f} MiB"))
        # CPU time is what a loaded machine distorts least; the start-up of the command is in it
        print(f"CPU time: parse {pc:.2f}s  lint {lc:.2f}s  ratio {lc / pc:.2f}x")
        print(f"  of it system time: parse {ps:.2f}s  lint {ls:.2f}s;  minor page faults: parse {pf:,}  lint {lf:,}")
    if per_file:
        worst_file(files)
    if edit_one:
        relint_one(root, files, jobs, repeat, against)
    if warm:
        warm_against_cold(root, jobs, repeat)


def worst_file(files: list[Path]) -> None:
    """Each file linted alone against its own bare parse, two ways: cold (a fresh project: the
    files importing it are analysed too, their models may report into it), and with the rest of
    the project known (every other file's analysis kept in a cache, as after a first run or in
    an editor): its own analysis, its followed modules parsed, the kept analyses read."""
    import os

    from loopcheck.lint.cache import Cache
    from loopcheck.lint.engine import check_file, check_files
    from loopcheck.lint.summary import stored_in

    parses = {}
    for f in files:
        start = time.perf_counter()
        _parse(str(f))
        parses[f] = time.perf_counter() - start
    considered = [f for f in files if parses[f] >= 0.02] or files  # tiny files: timer noise
    cold = []
    for f in considered:
        start = time.perf_counter()
        check_file(f)
        cold.append(((time.perf_counter() - start) / parses[f], f))
    with tempfile.TemporaryDirectory() as scratch:
        cache = Cache(Path(scratch))
        with stored_in(cache.summaries, cache.prepare):
            check_files(files, jobs=1, store=cache)
            known = []
            for f in considered:
                store = _AllBut(cache, os.path.realpath(f))
                start = time.perf_counter()
                check_files([f], jobs=1, store=store)
                known.append(((time.perf_counter() - start) / parses[f], f))
    for label, rows in (("alone, cold", cold), ("alone, the rest of the project cached", known)):
        ratio, f = max(rows)
        median = statistics.median(r for r, _ in rows)
        print(f"slowest file, {label}: {ratio:.2f}x its parse ({f.name}, parse {parses[f] * 1000:.0f} ms; "
              f"median file {median:.2f}x)  (target <= 3x)")


class _AllBut:
    """The cache's kept analyses, except the one of `path` (analysed again as if just edited)."""

    def __init__(self, cache: object, path: str) -> None:
        self.cache, self.path = cache, path
        self.derived = getattr(cache, "derived", None)  # the parts kept by content, as a warm run reads them

    def analysis(self, path: str, codes: tuple[str, ...], promised: bool, answer: bool = True) -> object:
        import os

        return None if os.path.realpath(path) == self.path else self.cache.analysis(path, codes, promised, answer)

    def unsure(self, path: str, codes: tuple[str, ...]) -> bool:
        return self.cache.unsure(path, codes)

    def keep_analysis(self, result: object, codes: tuple[str, ...], promised: bool) -> None:
        return None

    def learn(self, facts: object) -> None:
        self.cache.learn(facts)


def relint_one(root: Path, files: list[Path], jobs: int, repeat: int = 5, against: Path | None = None) -> None:
    """Warm cache, then one file changes: the re-lint against the parse of that file alone.

    Two files, each edited three ways, each edit made `repeat` times (a different text each time)
    and undone after each re-lint (and the original re-linted, untimed): the largest file, and the module most project files import
    (whose results all depend on it); a comment appended, a comment added at the top (which moves
    every function and class of the file down a line, unchanged), and a statement added to the
    body of the file's last function (code the analysis of the file reads again). Beside the
    re-lint, two start-ups are measured in the same run: the command on a folder with nothing to
    analyse, and the command analysing a one-statement PyTorch file (the libcst parser and the
    rules imported), which any re-lint that analyses anything pays.

    `against`: another checkout of loopcheck makes the same edits on its own copy of the tree (a
    cache is kept for one version of the linter), each edit alternating between the two."""
    from loopcheck.lint.engine import project_for

    (root / "pyproject.toml").exists() or print("note: no pyproject.toml at the tree's root; the cache lives at the nearest project root")
    trees = {REPO: root}
    if against is not None:
        trees[against] = root.parent / "against"
        shutil.copytree(root, trees[against], ignore=shutil.ignore_patterns(".loopcheck_cache"))
    warm = {}
    for checkout, tree in trees.items():
        cli_run(loopcheck_cli(tree, jobs, cache=True), checkout)
        warm[checkout], _ = cli_run(loopcheck_cli(tree, jobs, cache=True), checkout)
    largest = max(files, key=lambda f: f.stat().st_size if f.name != "__init__.py" else 0)
    project = project_for(largest)
    importers = {f: len(project.dependents(f)) for f in files}
    central = max(files, key=lambda f: importers[f])
    with tempfile.TemporaryDirectory() as empty:
        (Path(empty) / "x.py").write_text("x = 1\n")
        (Path(empty) / "pyproject.toml").write_text("[project]\nname = 'empty'\n")
        nothing = [sys.executable, "-m", "loopcheck", "lint", "--no-cache", "--isolated", empty]
        startup = statistics.median(cli_run(nothing)[0] for _ in range(repeat))
        (Path(empty) / "x.py").write_text("import torch\n\nx = torch.zeros(1)\n")
        analysing = statistics.median(cli_run(nothing)[0] for _ in range(repeat))
    print(f"warm (unchanged) {warm[REPO]:.2f}s; command start-up {startup:.2f}s, analysing one small file {analysing:.2f}s")
    stamp = time.time_ns()  # edits no earlier run made (the cache keeps some facts by content)
    for label, target in (("the largest", largest), (f"imported by {importers[central]} files", central)):
        original = target.read_bytes()
        edits = {"comment appended": lambda i: original + f"\n# edited {stamp} {i}\n".encode(),
                 "comment added at the top (every part moves down)": lambda i: f"# edited {stamp} {i}\n".encode() + original,
                 "statement added to the last function": lambda i: _body_edit(original, stamp + i)}
        start = time.perf_counter()
        _parse(str(target))
        parse = time.perf_counter() - start
        for what, edit in edits.items():
            times: dict[Path, list[float]] = {checkout: [] for checkout in trees}
            for i in range(repeat):
                edited = edit(i)
                if edited is None:
                    break
                for checkout in list(trees) if i % 2 == 0 else list(trees)[::-1]:  # neither always first
                    copy = trees[checkout] / target.relative_to(root)
                    copy.write_bytes(edited)
                    try:
                        times[checkout].append(cli_run(loopcheck_cli(trees[checkout], jobs, cache=True), checkout)[0])
                    finally:
                        copy.write_bytes(original)
                    # untimed: the next edit is again one change from the original (the cache now
                    # holds this edit's results; a text differing from it in a comment only would
                    # move nothing)
                    cli_run(loopcheck_cli(trees[checkout], jobs, cache=True), checkout)
            for checkout, measured in times.items():
                if not measured:
                    continue
                relint = statistics.median(measured)
                name = "" if checkout == REPO else f" [{checkout}]"
                print(f"one file changed ({label}: {target.relative_to(root)}, parse {parse * 1000:.0f} ms), {what}{name}: "
                      f"re-lint {relint:.2f}s ({', '.join(f'{t:.2f}' for t in measured)}); beyond start-up "
                      f"{(relint - startup) / parse:.1f}x its parse, beyond analysing one small file "
                      f"{(relint - analysing) / parse:.1f}x  (target <= 2x)")


def _body_edit(source: bytes, i: int) -> bytes | None:
    """`source` with a statement added as the first line of the body of its last top-level
    function or method (None when it has none)."""
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if not functions:
        return None
    last = max(functions, key=lambda n: n.body[0].lineno)
    first = last.body[0]
    if first.lineno == last.lineno:  # `def f(): return x`
        return None
    lines = source.splitlines(keepends=True)
    indent = lines[first.lineno - 1][: first.col_offset]
    lines.insert(first.lineno - 1, indent + f"_edited = {i}\n".encode())
    return b"".join(lines)


def compile_loopcheck(checkout: Path = REPO) -> None:
    """Byte-compile loopcheck's own modules first, as installing a package does: where bytecode
    writing is off (`PYTHONDONTWRITEBYTECODE`), every command would otherwise compile the linter's
    sources again, and that start-up cost would be counted as linting."""
    import compileall

    compileall.compile_dir(checkout / "loopcheck", quiet=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=500)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--select", default=None, help="only these codes or prefixes (default: every rule)")
    parser.add_argument("--no-cli", action="store_true", help="skip the warm-cache and TorchFix comparisons")
    parser.add_argument("--single-lines", type=int, default=0, help="measure one file of at least this many lines")
    parser.add_argument("--tree", type=Path, nargs="+", help="measure these directories as they are")
    parser.add_argument("--per-file", action="store_true", help="with --tree: each file against its own parse")
    parser.add_argument("--edit-one", action="store_true", help="with --tree: re-lint after one file changes, warm cache")
    parser.add_argument("--warm", action="store_true", help="with --tree: the command line cold against a warm cache")
    parser.add_argument("--against", type=Path, default=None,
                        help="with --tree: also time the command of this other checkout of loopcheck, interleaved")
    args = parser.parse_args()
    compile_loopcheck()
    if args.against:
        compile_loopcheck(args.against)
    if args.tree:
        for tree in args.tree:
            if not tree.is_dir():
                raise SystemExit(f"--tree {tree}: not a directory")
        with tempfile.TemporaryDirectory(prefix="loopcheck-tree-") as tmp:
            root = copy_trees(args.tree, Path(tmp))
            measure_tree(root, args.jobs, args.repeat, args.per_file, args.edit_one, args.warm,
                         args.against.resolve() if args.against else None)
        return
    with tempfile.TemporaryDirectory(prefix="loopcheck-speed-") as tmp:
        root = Path(tmp)
        if args.single_lines:
            files = build_single(root, args.single_lines)
            args.jobs = 1
        else:
            files = build_tree(root, args.files)
        parse_times: list[float] = []
        lint_times: list[float] = []
        findings = 0
        for _ in range(args.repeat):
            parse_times.append(parse_all(files, args.jobs))
            elapsed, findings = lint_all(root, args.jobs, args.select)
            lint_times.append(elapsed)
        parse_median = statistics.median(parse_times)
        lint_median = statistics.median(lint_times)
        rules = args.select or "all rules"
        lines = sum(f.read_text(encoding="utf-8").count("\n") for f in files)
        print(f"files: {len(files)}  lines: {lines}  workers: {args.jobs}  repeats: {args.repeat}  rules: {rules}  findings: {findings}")
        print(f"bare libcst parse: median {parse_median:.2f}s  ({', '.join(f'{t:.2f}' for t in parse_times)})")
        print(f"check_paths:       median {lint_median:.2f}s  ({', '.join(f'{t:.2f}' for t in lint_times)})")
        print(f"ratio: {lint_median / parse_median:.2f}x  (target <= 2.0x)")
        if not args.no_cli and not args.single_lines:
            warm_against_cold(root, args.jobs, args.repeat)
            against_torchfix(root, args.jobs, args.repeat)


if __name__ == "__main__":
    main()
