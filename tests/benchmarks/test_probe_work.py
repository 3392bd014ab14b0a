"""The work benchmark counts what the probe executes per step: the counts are positive, name the
probe's own functions, and repeat exactly from one run to the next."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "probe_work.py"
TINY = ["--models", "mlp", "--steps", "12", "--settle", "4", "--check-every", "4", "--top", "3"]


def _run(*flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *flags], capture_output=True, text=True, timeout=300)


def test_counts_per_kind_of_step_are_positive_and_repeat_exactly():
    first, second = _run(*TINY), _run(*TINY)
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout  # counted, not timed
    rows = dict(re.findall(r"^ +(lean|watched|sample|mean) +instructions +(-?\d+)", first.stdout, re.M))
    assert set(rows) >= {"lean", "watched", "mean"}
    assert all(int(n) > 0 for n in rows.values())
    functions = re.findall(r"^ +[\d.]+  (\S+)$", first.stdout, re.M)
    assert len(functions) == 3 and all(f.startswith("probe/") for f in functions)


def test_an_unknown_model_is_a_usage_error():
    done = _run("--models", "resnet")
    assert done.returncode == 2 and "unknown model(s) resnet" in done.stderr
