"""The linter installs and runs without torch (pre-commit builds an isolated environment)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

BLOCKER = textwrap.dedent("""
    import sys

    class _NoTorch:
        def find_spec(self, name, path=None, target=None):
            if name == "torch" or name.startswith("torch."):
                raise ImportError(f"torch is not installed here ({name})")
            return None

    sys.meta_path.insert(0, _NoTorch())
""")


def _env(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "sitecustomize.py").write_text(BLOCKER)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(REPO)])
    return env


def test_torch_is_really_blocked(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", "import torch"], env=_env(tmp_path), capture_output=True, text=True,
                          cwd=tmp_path, timeout=60)
    assert done.returncode != 0 and "torch is not installed here" in done.stderr


def test_lint_runs_and_finds_without_torch(tmp_path: Path) -> None:
    fixture = REPO / "fixtures" / "lc1_zero_grad_after_backward.py"
    probe = "import sys; import loopcheck.lint.api; assert not any(m == 'torch' or m.startswith('torch.') for m in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], env=_env(tmp_path), capture_output=True, text=True,
                          cwd=tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr
    done = subprocess.run(
        [sys.executable, "-m", "loopcheck", "lint", str(fixture), "--format", "json", "--no-cache", "--isolated"],
        env=_env(tmp_path), capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert [(f["code"], f["line"]) for f in report["findings"] if f["severity"] == "error"] == [("LC102", 32)]
    assert report["errors"] == []
