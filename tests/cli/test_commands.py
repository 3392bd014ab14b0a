"""The other commands and the entry points: rules, explain, --version, python -m loopcheck."""

from __future__ import annotations

import subprocess
import sys

from loopcheck import __version__
from loopcheck.catalog import catalog, page


def test_version(lint):
    result = lint("--version", command="")
    assert result.exit_code == 0 and result.stdout.strip() == f"loopcheck {__version__}"


def test_rules_lists_every_code_with_name_and_severity(lint, monkeypatch):
    monkeypatch.setenv("COLUMNS", "240")  # rich truncates the table to the terminal's width
    result = lint(command="rules")
    assert result.exit_code == 0
    for code, p in catalog().items():
        line = next(l for l in result.stdout.splitlines() if l.startswith(code + " "))
        assert p.name in line and p.severity.value in line
    family = lint("LC2", command="rules")
    codes = {l.split()[0] for l in family.stdout.splitlines()[1:] if l.strip()}
    assert codes == {c for c in catalog() if c.startswith("LC2")}


def test_explain_prints_the_page(lint):
    result = lint("lc001", command="explain")
    assert result.exit_code == 0
    assert result.stdout.strip() == page("LC001").text.strip()


def test_explain_an_unknown_code_exits_2(lint):
    result = lint("LC999", command="explain")
    assert result.exit_code == 2
    assert "unknown rule code 'LC999'" in result.stderr


def test_python_dash_m_runs_lint_with_real_exit_codes(tmp_path):
    (tmp_path / ".git").mkdir()
    (tmp_path / "requirements.txt").write_text("torch>=2.1\n")
    (tmp_path / "ckpt.py").write_text("import torch\n\nstate = torch.load('last.pt')\n")
    (tmp_path / "clean.py").write_text("import torch\n\nstate = torch.load('last.pt', weights_only=True)\n")
    run = lambda *args: subprocess.run(  # noqa: E731
        [sys.executable, "-m", "loopcheck", "lint", *args], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    found = run("ckpt.py", "--format", "concise")
    assert found.returncode == 1, found.stderr
    assert found.stdout.startswith("ckpt.py:3:9: LC508 ")
    assert run("clean.py").returncode == 0
    bad = run("clean.py", "--format", "yaml")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "unknown format 'yaml'" in bad.stderr


def test_lint_never_imports_torch(tmp_path):
    (tmp_path / ".git").mkdir()
    (tmp_path / "requirements.txt").write_text("torch>=2.1\n")
    (tmp_path / "ckpt.py").write_text("import torch\n\nstate = torch.load('last.pt')\n")
    code = (
        "import sys\n"
        "from loopcheck.cli import app\n"
        "try:\n"
        "    app(['lint', 'ckpt.py', '--format', 'json'])\n"
        "except SystemExit as exc:\n"
        "    assert exc.code == 1, exc.code\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert '"LC508"' in done.stdout
