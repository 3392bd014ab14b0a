"""LP101 / LP102 gradient norms, LP403 gradients not reset, LP404 unused parameters, LP501 loss spikes."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

import loopcheck
from loopcheck.probe.cadence import Cadence
from .conftest import Net, codes


def _one_huge_loss(batches, at, **options):
    torch.manual_seed(0)
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.02, momentum=0.9)
    with loopcheck.probe(net, opt, on_finding="ignore", summary=False, **options) as probe:
        for step, (x, y) in enumerate(batches.epoch(140)):
            opt.zero_grad()
            loss = F.cross_entropy(net(x), y)
            if step == at:
                loss = loss * 1e4
            loss.backward()
            opt.step()
    return probe


def test_loss_times_1e4_on_a_watched_step_is_a_loss_and_gradient_spike(batches):
    # step 112: gradient norms are measured every 4th step, and judged after 30 measurements (the
    # interval is fixed: left to the probe, it grows on a model this small, see test_cadence.py)
    probe = _one_huge_loss(batches, at=111, check_every=4)
    assert codes(probe) == {"LP101", "LP501"}
    spike = {f.code: f for f in probe.findings}
    assert spike["LP501"].step == spike["LP101"].step == 112
    assert spike["LP101"].count >= 1  # the steps right after a huge update may spike as well: counted, not repeated
    assert "body.0 " in spike["LP101"].message  # the largest layer norms are named


def test_a_gradient_spike_between_watched_steps_shows_in_the_loss_or_with_check_every_1(batches):
    # Step 114 is not a watched step: its gradient norms are not measured, its loss is.
    spike = {f.code: f for f in _one_huge_loss(batches, at=113).findings}
    assert spike["LP501"].step == 114 and ("LP101" not in spike or spike["LP101"].step > 114)
    spike = {f.code: f for f in _one_huge_loss(batches, at=113, check_every=1).findings}
    assert spike["LP501"].step == spike["LP101"].step == 114


def test_saturated_layers_are_reported_as_vanishing(net, batches):
    with torch.no_grad():
        net.mid.bias.fill_(-1e3)  # tanh after mid saturates: no gradient reaches mid and below
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    with loopcheck.probe(net, opt, on_finding="ignore", summary=False, vanish_steps=20) as probe:
        for x, y in batches.epoch(45):
            opt.zero_grad()
            F.cross_entropy(net(x), y).backward()
            opt.step()
    assert codes(probe) == {"LP102"}
    (f,) = probe.findings
    assert f.step == 20 and f.where == "body.0"
    assert set(f.extra["layers"]) == {"body.0", "body.1", "mid"}


def test_missing_zero_grad_is_lp403(net, batches):
    opt = torch.optim.SGD(net.parameters(), lr=0.001)
    with loopcheck.probe(net, opt, on_finding="ignore", summary=False) as probe:
        for x, y in batches.epoch(10):
            F.cross_entropy(net(x), y).backward()
            opt.step()
    assert "LP403" in codes(probe)
    f = next(f for f in probe.findings if f.code == "LP403")
    # reported once, counted at every later watched step (steps 2 to 8, each of the first steps)
    assert f.step == 1 and f.count == 7


def test_gradient_accumulation_and_other_reset_styles_stay_clean(batches):
    torch.manual_seed(3)
    net = Net()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    accum = 4
    with loopcheck.probe(net, opt, on_finding="ignore", summary=False) as probe:
        for i, (x, y) in enumerate(batches.epoch(48)):
            (F.cross_entropy(net(x), y) / accum).backward()
            if (i + 1) % accum == 0:
                opt.step()
                if i < 16:
                    opt.zero_grad(set_to_none=False)
                elif i < 32:
                    for p in net.parameters():
                        p.grad = None
                else:
                    net.zero_grad()
    assert probe.findings == [] and probe.step == 12


def _gan(steps: int, generator_resets_until: int | None = None):
    """A GAN step by step: D on real and detached fake, then G through D; G's gradients are reset
    before each of its backward passes up to step `generator_resets_until` (every step: None)."""
    torch.manual_seed(4)
    netG = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))
    netD = nn.Sequential(nn.Linear(8, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
    optG = torch.optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
    optD = torch.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
    real_data = torch.randn(256, 8) * 0.5 + 1.0
    with loopcheck.probe([netD, netG], [optD, optG], on_finding="ignore", summary=False) as probe:
        for i in range(steps):
            real = real_data[torch.randint(0, 256, (32,))]
            fake = netG(torch.randn(32, 8))
            netD.zero_grad()
            errD = F.binary_cross_entropy_with_logits(netD(real), torch.ones(32, 1))
            errD = errD + F.binary_cross_entropy_with_logits(netD(fake.detach()), torch.zeros(32, 1))
            errD.backward()
            optD.step()
            if generator_resets_until is None or i < generator_resets_until:
                netG.zero_grad()
            errG = F.binary_cross_entropy_with_logits(netD(fake), torch.ones(32, 1))
            errG.backward()  # also fills netD's gradients, reset before D's next backward
            optG.step()
    return probe


def test_two_optimizers_gan_style_stay_clean():
    probe = _gan(40)
    assert probe.findings == []
    assert probe.step == 40


def test_a_gan_whose_generator_stops_resetting_midway_is_found_for_that_optimizer_only(monkeypatch):
    # From step 21 on (past the first steps, which are all watched) the generator's reset is gone:
    # between watched steps nothing follows the gradients, and the next watched step finds it.
    # The norms reported as taking no time: the interval tuned at step 20 stays at 4.
    timed = Cadence.timed
    monkeypatch.setattr(Cadence, "timed", lambda self, seconds: timed(self, 0.0))
    probe = _gan(40, generator_resets_until=20)
    resets = [f for f in probe.findings if f.code == "LP403"]
    assert [f.where for f in resets] == ["optimizer1"]
    assert probe.cadence.check_every == 4
    assert resets[0].step == 24  # the first watched step of the generator after the change


def test_unused_head_is_named(batches):
    torch.manual_seed(5)
    net = Net(extra_head=True)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3, weight_decay=0.05)
    with loopcheck.probe(net, opt, on_finding="ignore", summary=False, unused_after=10) as probe:
        for x, y in batches.epoch(15):
            opt.zero_grad()
            F.cross_entropy(net(x), y).backward()
            opt.step()
    assert codes(probe) == {"LP404"}
    (f,) = probe.findings
    assert f.where == "aux_head" and f.step == 10 and "50 trainable values" in f.message


def test_frozen_parameters_are_not_unused(batches):
    torch.manual_seed(6)
    net = Net(extra_head=True)
    net.aux_head.requires_grad_(False)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    with loopcheck.probe(net, opt, on_finding="ignore", summary=False) as probe:
        for x, y in batches.epoch(8):
            opt.zero_grad()
            F.cross_entropy(net(x), y).backward()
            opt.step()
    assert probe.findings == []
