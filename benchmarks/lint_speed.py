"""Lint speed: `check_paths` against a bare libcst parse of the same files, in one run.

The fixtures (single files and multi-file projects) are copied into a temporary tree until it
holds at least `--files` Python files. Both measurements use the same number of worker
processes and run interleaved, `--repeat` times each; the medians and their ratio are printed.
The target is a ratio of at most 2.0: parsing is the floor, the loop model and the rules should
cost no more than one more parse.

`--single-lines N` measures one large file instead: the single-file fixtures concatenated until
the file has at least N lines (one process; the fixes of its many findings are part of the cost).

    python benchmarks/lint_speed.py [--files 500] [--jobs N] [--repeat 5] [--select LC1]
    python benchmarks/lint_speed.py --single-lines 20000 [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
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
    module = cst.parse_module(Path(path).read_bytes())
    return len(module.body)


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=500)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--select", default=None, help="only these codes or prefixes (default: every rule)")
    parser.add_argument("--single-lines", type=int, default=0, help="measure one file of at least this many lines")
    args = parser.parse_args()
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


if __name__ == "__main__":
    main()
