"""LP401 training in eval mode, LP402 evaluation in train mode, and the look-alikes that are fine."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F
from torch.optim.swa_utils import AveragedModel, update_bn

import loopcheck
from .conftest import codes


def fit(net, opt, x, y):
    opt.zero_grad()
    F.cross_entropy(net(x), y).backward()
    opt.step()


def test_eval_left_on_after_validation(net, batches):
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    with loopcheck.probe(net, opt, on_finding="ignore", summary=False) as probe:
        for epoch in range(3):
            for x, y in batches.epoch(10):
                fit(net, opt, x, y)
            net.eval()  # validation ... and model.train() is never called again
            with torch.no_grad():
                for x, _ in batches.epoch(3):
                    net(x)
    assert codes(probe) == {"LP401"}
    (f,) = probe.findings
    assert f.where == "Net" and f.step == 10 and f.count == 20


def test_validation_without_eval(net, batches):
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    with loopcheck.probe(net, opt, on_finding="ignore", summary=False) as probe:
        for epoch in range(2):
            for x, y in batches.epoch(10):
                fit(net, opt, x, y)
            with torch.no_grad():
                for x, _ in batches.epoch(4):
                    net(x)
    assert codes(probe) == {"LP402"}
    (f,) = probe.findings
    assert f.step == 10 and "body.1" in f.message


def test_trainable_submodule_left_in_eval(net, batches):
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    net.train()
    net.body.eval()
    with loopcheck.probe(net, opt, on_finding="ignore", summary=False) as probe:
        for x, y in batches.epoch(5):
            fit(net, opt, x, y)
    assert codes(probe) == {"LP401"}
    assert probe.findings[0].where == "body"


def test_frozen_eval_backbone_norm_eval_and_pseudo_labels_are_fine(batches):
    torch.manual_seed(0)
    backbone = nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32), nn.ReLU())
    head = nn.Sequential(nn.Linear(32, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 4))
    model = nn.Sequential(backbone, head)
    backbone.requires_grad_(False)
    opt = torch.optim.SGD(head.parameters(), lr=0.05)
    with loopcheck.probe(model, opt, on_finding="ignore", summary=False) as probe:
        for x, y in batches.epoch(20):
            model.train()
            backbone.eval()  # frozen feature extractor with fixed statistics
            head[1].eval()  # "norm_eval": batch-norm statistics frozen, affine still trained
            with torch.no_grad():
                pseudo = model(x).argmax(1)  # one no-grad pass in train mode, then training
            opt.zero_grad()
            F.cross_entropy(model(x), pseudo).backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            for x, _ in batches.epoch(3):
                model(x)
    assert probe.findings == []


def test_swa_batchnorm_recalibration_is_not_evaluation(net, batches):
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    swa = AveragedModel(net)
    loader = [x for x, _ in batches.epoch(5)]
    with loopcheck.probe(net, opt, on_finding="ignore", summary=False) as probe:
        for x, y in batches.epoch(10):
            fit(net, opt, x, y)
            swa.update_parameters(net)
        update_bn(loader, net)  # train-mode forward passes under no_grad, on purpose
    assert probe.findings == []
