"""Trees built from `ast` against libcst's parse: how faithful, how fast, and what they save the lint.

The lint reads every module through `tree_from_ast.read_module`, which builds its libcst tree from Python's
own `ast` (`tree_from_ast`), with positions and texts from the `ast` spans, and parses with libcst
only where the builder cannot reproduce the source. This measures that choice:

    python benchmarks/parse_from_ast.py [--tree DIR ...] [--repeat 3] [--lint DIR ... [--jobs N]]

`--tree` (default: the fixtures): per tree, how many files build a tree equal to libcst's (node
types and every field but whitespace and punctuation), how many differ (the first differences are
listed) and how many fall back; then libcst's parse against building from `ast`, interleaved,
with the garbage collector paused as the engine pauses it, and the ratio of the medians.

`--lint DIR`: `check_paths` on DIR with every module parsed by libcst against the engine as it is
(trees built from `ast`), interleaved, and the ratio of the medians; then how many of the findings
are the same to the column and the message, and how many carry the same fix as well. The first
findings and errors that differ are listed.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Iterable

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import libcst as cst  # noqa: E402

from loopcheck.lint import summary, tree_from_ast  # noqa: E402
from loopcheck.lint.syntax import parse_module  # noqa: E402
from loopcheck.lint.tree_from_ast import build  # noqa: E402
from loopcheck.lint.tree_pairs import difference  # noqa: E402


def _sources(tree: Path) -> list[tuple[Path, str]]:
    found = []
    for path in sorted(tree.rglob("*.py")):
        try:
            found.append((path, path.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError):
            continue
    return found


def fidelity(sources: Iterable[tuple[Path, str]], shown: int = 5) -> tuple[dict[str, Any], list[tuple[Path, str]]]:
    """How many sources build a tree equal to libcst's, differ, or fall back to libcst; and the
    sources libcst parses (what it cannot parse is not compared)."""
    same, fallback, differ, parsed = 0, 0, [], []
    for path, text in sources:
        try:
            module = parse_module(text)
        except (cst.ParserSyntaxError, SyntaxError, RecursionError, ValueError):
            continue
        parsed.append((path, text))
        built = build(text)
        if built is None:
            fallback += 1
            continue
        where = difference(module, built)
        if where is None:
            same += 1
        else:
            differ.append(f"{path}: {where}")
    return {"same": same, "fallback": fallback, "differ": len(differ), "examples": differ[:shown]}, parsed


def parse_times(sources: list[tuple[Path, str]], repeat: int) -> tuple[float, float]:
    """Medians of libcst's parse and of building from `ast` (libcst where it falls back), over
    the same sources, interleaved, with the collector paused as the engine pauses it."""
    def native() -> None:
        for _, text in sources:
            parse_module(text)

    def built() -> None:
        summary._TREES.clear()  # the `ast` trees a run reads once: none kept from the last run
        for _, text in sources:
            if build(text) is None:
                parse_module(text)
    times: dict[str, list[float]] = {"native": [], "built": []}
    enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeat):
            for name, run in (("native", native), ("built", built)):
                start = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - start)
                gc.collect()
    finally:
        if enabled:
            gc.enable()
    return statistics.median(times["native"]), statistics.median(times["built"])


def lint_times(tree: Path, jobs: int, repeat: int, shown: int = 5) -> tuple[float, float, dict[str, int]]:
    """Medians of `check_paths` on `tree` with every module parsed by libcst and as the engine is
    (trees built from `ast`), interleaved; and of the findings with libcst's parse, how many the
    engine gives too, to the column and the message, and with the same fix. The first findings
    and errors that differ are printed."""
    from loopcheck.lint.engine import check_paths

    times: dict[str, list[float]] = {"native": [], "built": []}
    found: dict[str, list] = {"native": [], "built": []}
    failed: dict[str, list[str]] = {"native": [], "built": []}
    for _ in range(repeat):
        for name in ("native", "built"):
            tree_from_ast.FROM_AST = name == "built"  # the pool's workers start from this process
            summary._TREES.clear()  # no `ast` tree of the last run is kept for this one
            try:
                start = time.perf_counter()
                report = check_paths([tree], jobs=jobs)
                times[name].append(time.perf_counter() - start)
            finally:
                tree_from_ast.FROM_AST = True
            found[name] = sorted((f.path, f.line, f.column, f.end_line, f.end_column, f.code, f.message, repr(f.fix))
                                 for f in report.findings)
            failed[name] = [f"{e.path}: {e.message}" for e in report.errors]
    located = len({f[:7] for f in found["native"]} & {f[:7] for f in found["built"]})
    fixed = len(set(found["native"]) & set(found["built"]))
    for f in sorted({f[:7] for f in found["native"]} - {f[:7] for f in found["built"]})[:shown]:
        print(f"  only with libcst's parse: {f[0]}:{f[1]}:{f[2]} {f[5]} {f[6][:90]}")
    for f in sorted({f[:7] for f in found["built"]} - {f[:7] for f in found["native"]})[:shown]:
        print(f"  only built:              {f[0]}:{f[1]}:{f[2]} {f[5]} {f[6][:90]}")
    for error in sorted(set(failed["built"]) - set(failed["native"]))[:shown]:
        print(f"  error built:             {error[:200]}")
    return (statistics.median(times["native"]), statistics.median(times["built"]),
            {"findings": len(found["native"]), "located": located, "fixed": fixed})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, nargs="+", default=[REPO / "fixtures"])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--lint", type=Path, nargs="*", default=[], help="also time check_paths on these trees")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    for tree in [*args.tree, *args.lint]:
        if not tree.is_dir():
            parser.error(f"{tree}: not a directory")
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for tree in args.tree:
        found, sources = fidelity(_sources(tree))
        native, built = parse_times(sources, args.repeat)
        print(f"{tree}: {len(sources)} files; {found['same']} built equal to libcst's parse, {found['differ']} "
              f"different, {found['fallback']} parsed by libcst instead")
        for example in found["examples"]:
            print(f"  differs: {example}")
        print(f"  parse: libcst {native:.2f} s, built from ast {built:.2f} s: {native / built:.2f}x faster "
              f"(medians of {args.repeat})")
    for tree in args.lint:
        native, built, same = lint_times(tree, args.jobs, args.repeat)
        print(f"{tree}: check_paths, {args.jobs} worker(s): libcst's parse {native:.2f} s, trees built from ast "
              f"{built:.2f} s: {native / built:.2f}x (medians of {args.repeat}); of its {same['findings']} findings "
              f"{same['located']} the same to the column and the message, {same['fixed']} with the same fix too")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
