"""The flake8 plugin: `flake8 --select LC` runs loopcheck's rules; flake8 owns selection and noqa."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.projects import MODEL, TRAIN

pytest.importorskip("flake8")

BUGGY = textwrap.dedent(
    """\
    import torch
    from torch import nn


    def train(model, loader, epochs):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        criterion = nn.CrossEntropyLoss()
        for epoch in range(epochs):
            model.train()
            for inputs, targets in loader:
                loss = criterion(model(inputs), targets)
                loss.backward()
                optimizer.zero_grad()
                optimizer.step()
    """
)


def flake8(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flake8", "--isolated", *args],
        cwd=cwd, capture_output=True, text=True, timeout=120,
    )


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("flake8")
    (root / "buggy.py").write_text(BUGGY)
    silenced = BUGGY.replace("optimizer.zero_grad()\n", "optimizer.zero_grad()  # noqa: LC102\n")
    (root / "silenced.py").write_text(silenced)
    clean = BUGGY.replace("            optimizer.zero_grad()\n", "").replace(
        "        for inputs, targets in loader:\n",
        "        for inputs, targets in loader:\n            optimizer.zero_grad()\n",
    )
    assert clean.count("zero_grad") == 1 and clean != BUGGY
    (root / "clean.py").write_text(clean)
    return root


def test_the_plugin_reports_loopcheck_findings_with_flake8_positions(project):
    result = flake8("--select", "LC", "buggy.py", "clean.py", cwd=project)
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1, result.stdout
    assert lines[0].startswith("buggy.py:13:13: LC102 ")


def test_noqa_and_selection_are_flake8s(project):
    assert flake8("--select", "LC", "silenced.py", cwd=project).stdout == ""
    disabled = flake8("--select", "LC", "--disable-noqa", "silenced.py", cwd=project)
    assert "silenced.py:13:13: LC102" in disabled.stdout
    assert flake8("--select", "LC2", "buggy.py", cwd=project).stdout == ""
    assert flake8("--select", "LC", "--extend-ignore", "LC102", "buggy.py", cwd=project).stdout == ""


def test_the_plugin_is_registered_under_the_lc_prefix(project):
    result = flake8("--version", cwd=project)
    assert "loopcheck" in result.stdout



def test_the_plugin_follows_local_imports_like_the_cli(tmp_path, monkeypatch):
    (tmp_path / "model.py").write_text(MODEL)
    (tmp_path / "train.py").write_text(TRAIN)
    result = flake8("--select", "LC", "train.py", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert result.stdout.startswith("train.py:14:"), result.stdout
    assert " LC602 " in result.stdout
    from loopcheck.lint.command import LintOptions, run  # the CLI sees the same finding

    monkeypatch.chdir(tmp_path)
    assert run(LintOptions(paths=[Path("train.py")], format="concise", no_cache=True)) == 1
