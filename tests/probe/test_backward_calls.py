"""Backward spelled `torch.autograd.backward(...)` and optimizer steps driven by a closure (LBFGS)."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import loopcheck
from .conftest import codes


def test_autograd_backward_without_zero_grad_is_lp403(net, batches):
    opt = torch.optim.SGD(net.parameters(), lr=0.001)
    with loopcheck.probe(net, opt, on_finding="ignore", summary=False) as probe:
        for x, y in batches.epoch(10):
            torch.autograd.backward(F.cross_entropy(net(x), y))
            opt.step()
    f = next(f for f in probe.findings if f.code == "LP403")
    assert f.step == 1


def test_autograd_backward_of_several_losses_keeping_their_graphs_is_lp202(net, batches):
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    kept = []
    with loopcheck.probe(net, opt, on_finding="ignore", summary=False) as probe:
        for x, y in batches.epoch(60):
            opt.zero_grad()
            out = net(x)
            main, aux = F.cross_entropy(out, y), 1e-3 * out.pow(2).mean()
            torch.autograd.backward([main, aux])
            opt.step()
            kept.append(main)
    assert codes(probe) == {"LP202"}


def test_autograd_backward_clean_loop_stays_clean(net, batches):
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    with loopcheck.probe(net, opt, on_finding="ignore", summary=False) as probe:
        for x, y in batches.epoch(40):
            opt.zero_grad()
            torch.autograd.backward(F.cross_entropy(net(x), y))
            opt.step()
    assert probe.findings == []
    assert probe.step_loss[0] is not None


class Series(nn.Module):
    """A small sequence regressor of the kind LBFGS trains on full batches."""

    def __init__(self) -> None:
        super().__init__()
        self.lin1 = nn.Linear(8, 16)
        self.lin2 = nn.Linear(16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin2(torch.tanh(self.lin1(x)))


def _series() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 8, generator=g)
    return x, torch.sin(x.sum(1, keepdim=True))


def _lbfgs_run(steps: int, *, zero_grad: bool, poison_at: int | None = None):
    torch.manual_seed(0)
    model = Series()
    opt = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=5)
    x, y = _series()
    returned = []
    with loopcheck.probe(model, opt, on_finding="ignore", summary=False) as probe:
        for step in range(steps):
            def closure():
                if zero_grad:
                    opt.zero_grad()
                loss = F.mse_loss(model(x), y)
                if step == poison_at:
                    loss = loss * float("nan")
                loss.backward()
                return loss
            returned.append(float(opt.step(closure).detach()))
    return probe, returned


def test_lbfgs_closure_with_zero_grad_is_clean_and_logs_the_first_evaluation():
    probe, returned = _lbfgs_run(6, zero_grad=True)
    assert probe.findings == []
    # the loss recorded for the last step is the one step() returned (the first evaluation)
    assert float(probe.step_loss[0]) == pytest.approx(returned[-1])


def test_lbfgs_closure_without_zero_grad_is_lp403():
    probe, _ = _lbfgs_run(4, zero_grad=False)
    assert "LP403" in codes(probe)


def test_lbfgs_nan_loss_in_the_closure_is_lp105_at_that_step():
    probe, _ = _lbfgs_run(6, zero_grad=True, poison_at=3)
    f = next(f for f in probe.findings if f.code.startswith("LP10"))
    assert (f.code, f.step) == ("LP105", 4)


def test_a_step_after_more_backward_calls_than_are_kept_reads_the_sum_of_all_their_losses(net, batches):
    # Step 10 (a step no sampled check looks at) accumulates 100 micro-batches: past 64 kept
    # losses they are folded into a number, and the step reads the sum of all of them.
    opt = torch.optim.SGD(net.parameters(), lr=0.001)
    data = list(batches.epoch(9))
    x, y = data[0]
    with loopcheck.probe(net, opt, on_finding="ignore", summary=False) as probe:
        for bx, by in data:
            opt.zero_grad()
            F.cross_entropy(net(bx), by).backward()
            opt.step()
        assert probe._lean  # the usual path of a step between watched ones
        opt.zero_grad()
        total = 0.0
        for _ in range(100):
            loss = F.cross_entropy(net(x), y) / 100
            total += loss.item()
            loss.backward()
        opt.step()
    assert probe.findings == [] and probe.step == 10
    assert probe.step_loss[0] == pytest.approx(total, rel=1e-5)
