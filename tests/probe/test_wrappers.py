"""Objects returned by accelerate's `Accelerator.prepare` are watched through the wrappers."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

import loopcheck
from .conftest import Net, codes

accelerate = pytest.importorskip("accelerate")


def _prepared(batches):
    torch.manual_seed(0)
    accelerator = accelerate.Accelerator(cpu=True)
    net = Net()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-3, total_steps=200)
    return accelerator, *accelerator.prepare(net, opt, sched)


def test_prepared_model_optimizer_and_scheduler_are_watched(batches):
    accelerator, net, opt, sched = _prepared(batches)
    with loopcheck.probe(net, opt, scheduler=sched, on_finding="ignore", summary=False) as probe:
        for x, y in batches.epoch(30):
            opt.zero_grad()
            accelerator.backward(F.cross_entropy(net(x), y))
            opt.step()
            sched.step()
    assert probe.findings == []
    assert probe.step == 30


def test_prepared_loop_without_zero_grad_is_lp403(batches):
    accelerator, net, opt, sched = _prepared(batches)
    with loopcheck.probe(net, opt, scheduler=sched, on_finding="ignore", summary=False) as probe:
        for x, y in batches.epoch(10):
            accelerator.backward(F.cross_entropy(net(x), y))
            opt.step()
            sched.step()
    assert "LP403" in codes(probe)
