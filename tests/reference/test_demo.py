"""The README's main-job command: `python -m loopcheck.demo` shows all three parts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_demo_runs_all_three_parts():
    env = dict(os.environ, OMP_NUM_THREADS="1", COLUMNS="100")
    proc = subprocess.run([sys.executable, "-m", "loopcheck.demo"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=180)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "Traceback" not in out + proc.stderr
    for title in ("1. lint", "2. reference loop", "3. probe"):
        assert title in out
    # lint names the example's bugs (or says why it could not run)
    assert ("LC602" in out and "LC201" in out and "LC401" in out) or "skipped: the linter" in out
    assert "bit-identical" in out
    assert "LP103" in out or "skipped: the probe" in out
    assert "demo finished" in out
