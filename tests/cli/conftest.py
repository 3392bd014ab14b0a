"""Shared pieces of the CLI tests: a runner, a project folder, and small training scripts.

Each script triggers one rule family that does not depend on the others: LC602 (error),
LC508 (warning), LC405 (info, with a safe fix). CLEAN has none of them.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loopcheck.cli import app

SOFTMAX_CE = textwrap.dedent(
    """\
    import torch
    import torch.nn.functional as F
    from torch import nn


    class Classifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.head = nn.Linear(784, 10)

        def forward(self, x):
            return F.softmax(self.head(x), dim=1)


    def train(loader, epochs):
        model = Classifier()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        criterion = nn.CrossEntropyLoss()
        for epoch in range(epochs):
            for images, labels in loader:
                optimizer.zero_grad()
                loss = criterion(model(images), labels)
                loss.backward()
                optimizer.step()
    """
)

UNSAFE_LOAD = textwrap.dedent(
    """\
    import torch


    def load_weights(model, path):
        state = torch.load(path, map_location="cpu")
        model.load_state_dict(state["model"])
        return model
    """
)

OLD_AMP = textwrap.dedent(
    """\
    import torch

    scaler = torch.cuda.amp.GradScaler()
    """
)

CLEAN = textwrap.dedent(
    """\
    import torch


    def load_weights(model, path):
        state = torch.load(path, map_location="cpu", weights_only=True)
        model.load_state_dict(state["model"])
        return model
    """
)

DRIVER = """\
import torch
from torch import nn

from settings import SEED
from steps import train_step


def main(loader):
    torch.manual_seed(SEED)
    model = nn.Linear(8, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    criterion = nn.CrossEntropyLoss()
    for epoch in range(3):
        for batch in loader:
            train_step(model, batch, optimizer, criterion)
"""


def line_of(source: str, text: str) -> int:
    """1-based line of the first line of source containing text."""
    for number, line in enumerate(source.splitlines(), start=1):
        if text in line:
            return number
    raise AssertionError(f"{text!r} not in source")


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty project folder (the cache root) that is also the working directory. It declares
    the torch range most projects do (LC508's severity depends on it)."""
    root = tmp_path / "proj"
    root.mkdir()
    (root / ".git").mkdir()
    (root / "requirements.txt").write_text("numpy\ntorch>=2.1\n")
    monkeypatch.chdir(root)
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    return root


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


class Lint:
    """`loopcheck lint ...` run in-process; returns the click Result (exit_code, stdout, stderr)."""

    def __init__(self) -> None:
        self.runner = CliRunner()

    def __call__(self, *args: str, command: str = "lint"):
        return self.runner.invoke(app, [command, *args] if command else list(args), catch_exceptions=False)


@pytest.fixture
def lint() -> Lint:
    return Lint()
