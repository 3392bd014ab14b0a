"""LP601: a data pipeline slower than the model."""

from __future__ import annotations

import time

import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset

import loopcheck


class SlowDataset(Dataset):
    """Each sample costs a decode / augmentation of several milliseconds; the model needs far less."""

    def __init__(self, n: int, delay: float) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 16, generator=g)
        self.y = torch.randint(0, 4, (n,), generator=g)
        self.delay = delay

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        time.sleep(self.delay)
        return self.x[i], self.y[i]


def run(net, delay, preload=False):
    loader = DataLoader(SlowDataset(96, delay), batch_size=8, shuffle=True, num_workers=0)
    if preload:
        loader = list(loader)
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    with loopcheck.probe(net, opt, on_finding="ignore", summary=False, every=4, stall_window=8) as probe:
        for x, y in loader:
            opt.zero_grad()
            F.cross_entropy(net(x), y).backward()
            opt.step()
    return probe


def test_slow_dataloader_is_a_data_stall(net):
    probe = run(net, delay=0.004)  # >= 32 ms of waiting per batch of 8
    assert [f.code for f in probe.findings] == ["LP601"]
    assert probe.findings[0].severity.value == "info"


def test_preloaded_batches_are_not(net):
    probe = run(net, delay=0.004, preload=True)
    assert probe.findings == []
