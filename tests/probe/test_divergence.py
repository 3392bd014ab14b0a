"""LP502 a loss that climbs far above its start; LP106 updates far larger than the weights."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

import loopcheck
from .conftest import Net, codes


def _classifier(batches, lr, steps=80):
    torch.manual_seed(0)
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9, weight_decay=1e-4)
    with loopcheck.probe(net, opt, on_finding="ignore", summary=False) as probe:
        for x, y in batches.epoch(steps):
            opt.zero_grad()
            F.cross_entropy(net(x), y).backward()
            opt.step()
    return probe


def test_a_hundred_times_the_learning_rate_is_a_divergence(batches):
    probe = _classifier(batches, lr=5.0)  # 0.05 is the sane value
    f = next(f for f in probe.findings if f.code == "LP502")
    assert f.step == 60 and "diverges" in f.message


def test_the_sane_learning_rate_stays_clean(batches):
    assert _classifier(batches, lr=0.05).findings == []


def test_an_oscillating_update_larger_than_the_weights_is_lp106():
    torch.manual_seed(0)
    layer = nn.Linear(8, 8, bias=False)
    opt = torch.optim.SGD(layer.parameters(), lr=0.98)  # each step overshoots to about -0.96 W
    g = torch.Generator().manual_seed(0)
    with loopcheck.probe(layer, opt, on_finding="ignore", summary=False) as probe:
        for _ in range(45):
            x = torch.randn(4096, 8, generator=g)
            opt.zero_grad()
            layer(x).pow(2).mean().mul(8).backward()
            opt.step()
    assert codes(probe) == {"LP106"}
    (f,) = probe.findings
    assert f.step == 40 and "far too high" in f.message
