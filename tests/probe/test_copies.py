"""Saving and copying the watched model inside the block: whole-model pickles and EMA deep copies."""

from __future__ import annotations

import copy
import io
import pickle

import torch
from torch.nn import functional as F

import loopcheck
from .conftest import Net, codes


def test_whole_model_save_inside_the_block(net, batches, tmp_path):
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    with loopcheck.probe(net, opt, on_finding="ignore", summary=False) as probe:
        for step, (x, y) in enumerate(batches.epoch(10)):
            opt.zero_grad()
            F.cross_entropy(net(x), y).backward()
            opt.step()
            if step % 5 == 4:
                torch.save(net, tmp_path / "model.pt")  # the whole module, not its state_dict
                torch.save({"model": net, "optimizer": opt.state_dict()}, tmp_path / "ckpt.pt")
    assert probe.findings == []
    loaded = torch.load(tmp_path / "model.pt", weights_only=False)
    assert not loaded._forward_hooks and not loaded._forward_pre_hooks
    assert not any(m._forward_hooks for m in loaded.modules())
    assert torch.equal(loaded.head.weight, net.head.weight)


def test_ema_deep_copy_inside_the_block_gets_no_probe_hooks(batches):
    torch.manual_seed(0)
    net = Net()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    ema = None
    with loopcheck.probe(net, opt, on_finding="ignore", summary=False) as probe:
        for step, (x, y) in enumerate(batches.epoch(30)):
            opt.zero_grad()
            F.cross_entropy(net(x), y).backward()
            opt.step()
            if ema is None:
                ema = copy.deepcopy(net)  # made after the first step, the usual EMA shape
                ema.requires_grad_(False)
            else:
                with torch.no_grad():
                    for e, p in zip(ema.parameters(), net.parameters()):
                        e.lerp_(p, 0.01)
            if step % 10 == 9:
                with torch.no_grad():  # the EMA model evaluated in train mode is the user's choice
                    ema(x)
                    ema(x)
        # the watched model still reports: a NaN weight after the copy is found
        with torch.no_grad():
            net.mid.weight[0, 0] = float("nan")
        for x, y in batches.epoch(2):
            opt.zero_grad()
            F.cross_entropy(net(x), y).backward()
            opt.step()
    assert codes(probe) == {"LP103"}
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in ema.modules())
    pickle.dumps(ema)  # the copy stays picklable after the block
    buffer = io.BytesIO()
    torch.save(ema, buffer)
