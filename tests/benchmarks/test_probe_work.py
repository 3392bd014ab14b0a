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


def test_the_floor_is_counted_on_the_same_steps_and_does_less_than_the_probe():
    done = _run(*TINY, "--floor")
    assert done.returncode == 0, done.stderr
    means = re.findall(r"^ +mean +instructions +(-?\d+)", done.stdout, re.M)
    assert len(means) == 2  # the probe's, then the floor's
    probe, floor = (int(n) for n in means)
    assert 0 < floor < probe
    steps = re.findall(r"^mlp +(this|floor) +steps: (.*)$", done.stdout, re.M)
    assert [name for name, _ in steps] == ["this", "floor"] and steps[0][1] == steps[1][1]
    assert re.search(r"^ +[\d.]+  floor_probe\.py:\S+$", done.stdout, re.M)  # its own functions only
    assert re.search(r"^mlp +difference per step, this less floor: instructions \+\d+", done.stdout, re.M)
