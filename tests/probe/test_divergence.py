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
    # each of the first steps moves the weights by about twice their norm; the samples at steps 20
    # and 40 confirm it (the same finding, counted again)
    assert f.step == 3 and f.extra["ratio"] > 1 and "far too high" in f.message and f.count == 2


def _mlp_run(lr, steps=40):
    """An MNIST-style MLP with Adam, the way such scripts are written, on a fixed synthetic task."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(196, 128), nn.ReLU(), nn.Dropout(0.2), nn.Linear(128, 10))
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    g = torch.Generator().manual_seed(0)
    data = [(torch.rand(64, 1, 14, 14, generator=g), torch.randint(0, 10, (64,), generator=g)) for _ in range(8)]
    losses = []
    with loopcheck.probe(model, opt, on_finding="ignore", summary=False) as probe:
        for step in range(steps):
            x, y = data[step % len(data)]
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return probe, losses


def test_a_hundred_times_adams_rate_that_blows_the_weights_up_is_found_in_its_first_steps():
    probe, losses = _mlp_run(lr=0.1)  # 1e-3 is the sane value
    # the signature that LP502 cannot see: a spike, then the loss back at chance level
    assert max(losses[:5]) > 10 * losses[0] and losses[-1] < 1.5 * losses[0]
    f = next(f for f in probe.findings if f.code == "LP106")
    assert f.step == 3 and "first 3 optimizer steps" in f.message
    assert f.extra["parameter"] in ("1.weight", "4.weight")
    assert f.count == 2  # the weights' growth at the first sample (steps 1 to 20) is the same finding


def _gan_run(lr, steps=60):
    """A small GAN on vectors, two Adam optimizers, the generator's step after the discriminator's."""
    torch.manual_seed(0)
    gen = nn.Sequential(nn.Linear(16, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, 100), nn.Tanh())
    disc = nn.Sequential(nn.Linear(100, 64), nn.LeakyReLU(0.2), nn.Linear(64, 1))
    opt_d = torch.optim.Adam(disc.parameters(), lr=lr, betas=(0.5, 0.999))
    opt_g = torch.optim.Adam(gen.parameters(), lr=lr, betas=(0.5, 0.999))
    g = torch.Generator().manual_seed(0)
    real_batches = [torch.rand(32, 100, generator=g) * 2 - 1 for _ in range(4)]
    ones, zeros = torch.ones(32, 1), torch.zeros(32, 1)
    with loopcheck.probe([disc, gen], [opt_d, opt_g], on_finding="ignore", summary=False) as probe:
        for step in range(steps):
            disc.zero_grad()
            loss_real = F.binary_cross_entropy_with_logits(disc(real_batches[step % 4]), ones)
            fake = gen(torch.randn(32, 16, generator=g))
            loss_fake = F.binary_cross_entropy_with_logits(disc(fake.detach()), zeros)
            (loss_real + loss_fake).backward()
            opt_d.step()
            gen.zero_grad()
            F.binary_cross_entropy_with_logits(disc(fake), ones).backward()
            opt_g.step()
    return probe


def test_a_gan_at_a_hundred_times_its_rate_is_found_in_the_first_steps():
    probe = _gan_run(lr=0.02)  # 2e-4 is the usual value
    found = {f.where: f for f in probe.findings if f.code == "LP106"}
    assert "optimizer0" in found and found["optimizer0"].step == 3


def test_a_gan_at_its_usual_rate_stays_clean():
    assert _gan_run(lr=2e-4).findings == []


def test_adams_sane_rate_stays_clean():
    probe, _ = _mlp_run(lr=1e-3)
    assert probe.findings == []


def test_lbfgs_steps_are_not_measured():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))
    opt = torch.optim.LBFGS(model.parameters(), lr=1.0, max_iter=4)
    x = torch.randn(64, 4, generator=torch.Generator().manual_seed(0))
    y = x.sum(1, keepdim=True).sin()
    with loopcheck.probe(model, opt, on_finding="ignore", summary=False) as probe:
        for _ in range(45):
            def closure():
                opt.zero_grad()
                loss = F.mse_loss(model(x), y)
                loss.backward()
                return loss
            opt.step(closure)
    assert "LP106" not in codes(probe)


def test_reinforce_whose_loss_grows_with_the_returns_stays_clean():
    """Policy gradient without a baseline: the loss is -log p times the return, and the returns grow
    from about 1 to tens as the agent learns to keep going, so the loss rises far above its start
    while the run is healthy. Its per-episode values jump by large factors: not a divergence."""
    torch.manual_seed(0)
    policy = nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 2), nn.Softmax(dim=1))
    opt = torch.optim.Adam(policy.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)
    losses = []
    with loopcheck.probe(policy, opt, on_finding="ignore", summary=False) as probe:
        for episode in range(120):
            log_probs = []
            for t in range(200):  # the corridor goes on while the agent keeps right
                probs = policy(torch.randn(1, 4, generator=g))
                action = torch.multinomial(probs, 1, generator=g).item()
                log_probs.append(torch.log(probs[0, action]))
                if action != 1:
                    break
            returns, future = [], 0.0
            for _ in log_probs:
                future = 1.0 + 0.99 * future
                returns.insert(0, future)
            loss = torch.stack([-lp * r for lp, r in zip(log_probs, returns)]).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    early, later = sorted(losses[:20]), sorted(losses[40:80])
    assert later[len(later) // 2] > 2 * early[len(early) // 2]  # the loss did grow
    assert probe.findings == []


def test_a_small_new_head_that_grows_while_the_loss_falls_is_fine(batches):
    """Fine-tuning: a pretrained body and a new head initialised small, the way linear probes are;
    the head's norm grows several times in its first steps, and that is learning."""
    torch.manual_seed(0)
    body = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU())
    head = nn.Linear(64, 4)
    nn.init.normal_(head.weight, std=0.01)
    nn.init.zeros_(head.bias)
    model = nn.Sequential(body, head)
    opt = torch.optim.Adam([{"params": body.parameters(), "lr": 1e-4}, {"params": head.parameters(), "lr": 3e-3}])
    start = head.weight.norm().item()
    losses = []
    with loopcheck.probe(model, opt, on_finding="ignore", summary=False) as probe:
        for x, y in batches.epoch(60):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
    assert head.weight.norm().item() > 4 * start
    assert sum(losses[-10:]) / 10 < 0.95 * sum(losses[:5]) / 5
    assert probe.findings == []
