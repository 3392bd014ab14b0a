"""Tiny models and data for the probe tests: a few thousand parameters, CPU, one thread."""

from __future__ import annotations

import pytest
import torch
from torch import nn

torch.set_num_threads(1)


class GradTrap(nn.Module):
    """Identity in forward; when armed, its backward returns NaN (a bug that only shows in backward)."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _Trap.apply(x, self.armed)


class _Trap(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, armed):  # type: ignore[override]
        ctx.armed = armed
        return x.clone()

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        return (grad * float("nan") if ctx.armed else grad), None


class Net(nn.Module):
    """A small classifier with batch norm and dropout (about 1.9k parameters)."""

    def __init__(self, dropout: float = 0.1, extra_head: bool = False) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Dropout(dropout))
        self.mid = nn.Linear(32, 24)
        self.trap = GradTrap()
        self.act = nn.Tanh()
        self.head = nn.Linear(24, 4)
        self.aux_head = nn.Linear(24, 2) if extra_head else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.act(self.trap(self.mid(self.body(x)))))


class Batches:
    """An endless stream of (x, y) batches of a fixed synthetic classification task."""

    def __init__(self, n: int = 512, batch: int = 32, seed: int = 0, split: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        w = torch.randn(16, 4, generator=g)  # the task: the same for every split of a seed
        g.manual_seed(seed * 1000 + split + 1)
        self.x = torch.randn(n, 16, generator=g)
        self.y = (self.x @ w).argmax(1)
        self.batch = batch
        self.n = n
        self.g = g

    def __iter__(self):
        while True:
            idx = torch.randint(0, self.n, (self.batch,), generator=self.g)
            yield self.x[idx], self.y[idx]

    def epoch(self, steps: int):
        it = iter(self)
        for _ in range(steps):
            yield next(it)


@pytest.fixture
def batches() -> Batches:
    return Batches()


@pytest.fixture
def net() -> Net:
    torch.manual_seed(0)
    return Net()


def codes(probe) -> set[str]:
    return {f.code for f in probe.findings if f.severity.value in ("error", "warning")}
