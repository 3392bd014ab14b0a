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


def test_backbone_unfrozen_mid_run_while_left_in_eval(batches):
    """Unfreezing (requires_grad_) calls neither train() nor eval(): the detector sees it at the next
    sample, from the flags it keeps, and only then does the eval-mode backbone count as trained."""
    torch.manual_seed(0)
    backbone = nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32), nn.ReLU())
    model = nn.Sequential(backbone, nn.Linear(32, 4))
    backbone.requires_grad_(False)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    model.train()
    backbone.eval()
    with loopcheck.probe(model, opt, on_finding="ignore", summary=False, every=5) as probe:
        for k, (x, y) in enumerate(batches.epoch(30)):
            if k == 12:
                backbone.requires_grad_(True)  # fine-tuning starts, the backbone still in eval mode
            fit(model, opt, x, y)
    (f,) = probe.findings
    assert f.code == "LP401" and f.where == "0" and f.step == 15  # the sample after step 15


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


def test_one_validation_batch_per_epoch_in_train_mode(net, batches):
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    val_x, _ = next(iter(batches))
    with loopcheck.probe(net, opt, on_finding="ignore", summary=False) as probe:
        for epoch in range(3):
            for x, y in batches.epoch(10):
                fit(net, opt, x, y)
            with torch.no_grad():
                net(val_x)  # a single validation batch, model still in train mode
    assert codes(probe) == {"LP402"}
    (f,) = probe.findings
    assert f.step == 10 and "batch's statistics" in f.message and "dropout" in f.message


def test_a_forward_every_few_steps_in_train_mode_without_batch_norm(batches):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with loopcheck.probe(model, opt, on_finding="ignore", summary=False) as probe:
        for k, (x, y) in enumerate(batches.epoch(20)):
            fit(model, opt, x, y)
            if k % 5 == 4:
                with torch.no_grad():
                    model(x)  # a quick accuracy check every five steps
    (f,) = probe.findings
    assert f.code == "LP402" and f.step == 5
    assert "dropout active" in f.message and "statistics" not in f.message and "norm" not in f.message


def test_teacher_and_frozen_metric_network_under_no_grad_are_fine(batches):
    torch.manual_seed(0)
    student = nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 4))
    teacher = nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 4))
    metric = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8)).eval().requires_grad_(False)
    teacher.requires_grad_(False)
    opt = torch.optim.SGD(student.parameters(), lr=0.05)
    with loopcheck.probe([student, teacher, metric], opt, on_finding="ignore", summary=False) as probe:
        for k, (x, y) in enumerate(batches.epoch(30)):
            with torch.no_grad():
                soft = teacher(x).softmax(1)  # a mean-teacher in train mode, every step
            opt.zero_grad()
            out = student(x)
            (F.cross_entropy(out, y) + F.kl_div(out.log_softmax(1), soft, reduction="batchmean")).backward()
            opt.step()
            with torch.no_grad():
                for p, q in zip(teacher.parameters(), student.parameters()):
                    p.lerp_(q, 0.01)
            if k % 10 == 9:
                with torch.no_grad():
                    metric(out.detach())  # a frozen, eval-mode metric network every ten steps
    assert probe.findings == []
