"""The overhead benchmark runs both of its measurements and prints a line per model (timing is
never judged here: the numbers are the benchmark's to report)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "probe_overhead.py"
TINY = ["--models", "mlp,gan", "--blocks", "1", "--steps", "4", "--settle", "1"]


def test_block_ratios_are_printed_per_model_with_the_verdict_line():
    done = subprocess.run([sys.executable, str(SCRIPT), *TINY, "--processes", "1"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if re.match(r"(mlp|gan) +[\d,]+ +[\d.]+ +[\d.]+x", line)]
    assert [row.split()[0] for row in rows] == ["mlp", "gan"]
    assert "target <= 1.03x" in done.stdout.splitlines()[-1]


def test_alternate_prints_the_probe_cost_per_step_per_model():
    done = subprocess.run([sys.executable, str(SCRIPT), *TINY, "--alternate"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if re.match(r"(mlp|gan) +step +[\d.]+ ms +probe +[+-]\d+ us", line)]
    assert [row.split()[0] for row in rows] == ["mlp", "gan"]
