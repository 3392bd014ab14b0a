"""LP103 / LP104 / LP105: NaN and Inf located in forward, backward and the loss; AMP overflow handling."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import loopcheck
from .conftest import Net, codes


def train(net, batches, steps, *, opt=None, before_step=None, loss_fn=None, **options):
    opt = opt or torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    with loopcheck.probe(net, opt, on_finding="ignore", summary=False, **options) as probe:
        for step, (x, y) in enumerate(batches.epoch(steps)):
            if before_step:
                before_step(step)
            opt.zero_grad()
            out = net(x)
            loss = loss_fn(out, y, step) if loss_fn else F.cross_entropy(out, y)
            loss.backward()
            opt.step()
    return probe


def only(probe, code):
    found = [f for f in probe.findings if f.code == code]
    assert len(found) == 1, probe.findings
    return found[0]


def test_nan_weight_in_forward_names_the_layer_and_step(net, batches):
    def corrupt(step):
        if step == 37:
            with torch.no_grad():
                net.mid.weight[3, 5] = float("nan")

    probe = train(net, batches, 60, before_step=corrupt)
    assert codes(probe) == {"LP103"}
    f = only(probe, "LP103")
    assert f.where == "mid"
    assert f.step == 38  # the 38th optimizer step is the first to see it
    assert f.count > 1  # later steps are counted under the first incident, not reported anew


def test_nan_input_batch_is_blamed_on_the_data(net, batches):
    def loss_fn(out, y, step):
        return F.cross_entropy(out, y)

    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    with loopcheck.probe(net, opt, on_finding="ignore", summary=False) as probe:
        for step, (x, y) in enumerate(batches.epoch(30)):
            if step == 12:
                x = x.clone()
                x[0, 0] = float("inf")
            opt.zero_grad()
            F.cross_entropy(net(x), y).backward()
            opt.step()
    f = only(probe, "LP103")
    assert "input batch" in f.message and f.step == 13


@pytest.mark.parametrize("backward_hooks", [False, True])
def test_nan_only_in_backward_names_the_module(net, batches, backward_hooks):
    def arm(step):
        net.trap.armed = step == 25

    probe = train(net, batches, 40, before_step=arm, backward_hooks=backward_hooks)
    assert codes(probe) == {"LP104"}
    f = only(probe, "LP104")
    assert f.where == "trap" and f.step == 26
    assert "mid.weight" in f.message


def test_nonfinite_loss_is_lp105(net, batches):
    def loss_fn(out, y, step):
        loss = F.cross_entropy(out, y)
        return loss * torch.tensor(float("inf")) if step == 9 else loss

    probe = train(net, batches, 20, loss_fn=loss_fn)
    f = only(probe, "LP105")
    assert f.step == 10 and f.where is None


def test_nonfinite_gradient_without_localisation_names_the_parameters(net, batches):
    def arm(step):
        net.trap.armed = step == 5

    probe = train(net, batches, 12, before_step=arm, localize=False)
    f = only(probe, "LP104")
    assert f.step == 6 and "mid.weight" in f.message and f.where in {"mid", "body.0", "body.1"}


def test_bf16_autocast_with_gradscaler_absorbs_overflows(batches):
    torch.manual_seed(1)
    net = Net()
    opt = torch.optim.AdamW(net.parameters(), lr=3e-3)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8, growth_interval=20)
    overflow_at = {7, 8, 40, 41, 90}
    step_no = {"k": 0}
    net.head.weight.register_hook(lambda g: g * float("inf") if step_no["k"] in overflow_at else g)
    with loopcheck.probe(net, opt, scaler=scaler, on_finding="ignore", summary=False) as probe:
        for k, (x, y) in enumerate(batches.epoch(120)):
            step_no["k"] = k
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = F.cross_entropy(net(x), y)
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            nn.utils.clip_grad_norm_(net.parameters(), 1.0)
            scaler.step(opt)
            scaler.update()
    assert probe.findings == []
    assert probe.skipped == len(overflow_at)
    assert probe.step == 120 - len(overflow_at)


def test_persistent_skipping_is_reported_with_its_source(batches):
    torch.manual_seed(2)
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**4)
    with loopcheck.probe(net, opt, scaler=scaler, on_finding="ignore", summary=False, skip_streak=10) as probe:
        for k, (x, y) in enumerate(batches.epoch(40)):
            if k == 15:
                with torch.no_grad():
                    net.head.bias[1] = float("nan")
            opt.zero_grad()
            loss = F.cross_entropy(net(x), y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
    f = only(probe, "LP103")
    assert f.where == "head" and "skipped 10 steps in a row" in f.message
    assert probe.step == 15


@pytest.mark.parametrize("where", ["batch", "loss", "gradient"])
def test_raise_stops_before_the_poisoned_step_is_applied(net, batches, where):
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    before = None
    with pytest.raises(loopcheck.ProbeError) as raised:
        with loopcheck.probe(net, opt, on_finding="raise", summary=False) as probe:
            for step, (x, y) in enumerate(batches.epoch(60)):
                net.trap.armed = where == "gradient" and step == 30
                if where == "batch" and step == 30:
                    x = x.clone()
                    x[3, 1] = float("nan")
                opt.zero_grad()
                loss = F.cross_entropy(net(x), y)
                if where == "loss" and step == 30:
                    loss = loss / 0
                loss.backward()
                before = [p.detach().clone() for p in net.parameters()]
                opt.step()
    # the 31st step raised from inside optimizer.step(), before it changed any parameter
    assert probe.step == 30 and raised.value.finding.step == 31
    assert raised.value.finding.code == {"batch": "LP103", "loss": "LP105", "gradient": "LP104"}[where]
    assert all(torch.equal(a, b) for a, b in zip(before, net.parameters()))


class _Wide(nn.Module):
    """A classifier whose first layer's weight is large (8192 values) and has no bias."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(16, 512, bias=False)
        self.norm = nn.LayerNorm(512)
        self.head = nn.Linear(512, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.norm(self.embed(x))))


@pytest.mark.parametrize("check_every", [4, 1])
def test_a_nan_confined_to_a_large_gradient_between_watched_steps_is_found_at_the_next_step(batches, check_every):
    # Only the large weight's gradient is poisoned (at step 14, not a watched step): the small
    # gradients checked at every step stay finite, so the step applies it and the next forward
    # pass finds the weight; measuring every gradient at every step finds it before it is applied.
    torch.manual_seed(0)
    net = _Wide()
    poison = [False]
    net.embed.weight.register_hook(lambda g: g * float("nan") if poison[0] else g)

    def arm(step):
        poison[0] = step == 13

    probe = train(net, batches, 20, before_step=arm, check_every=check_every)
    f = probe.findings[0]
    assert f.where == "embed"
    if check_every == 1:
        assert (f.code, f.step) == ("LP104", 14) and "embed.weight" in f.message
    else:
        assert (f.code, f.step) == ("LP103", 15) and "embed.weight" in f.message


def test_a_nan_reaching_a_small_gradient_between_watched_steps_names_every_parameter(batches):
    # Step 14 is not a watched step: the small gradients trip, and the step's gradients are all read then.
    torch.manual_seed(0)
    net = _Wide()
    poison = [False]
    # the gradient leaving the head is poisoned: the normalisation's small gradients see it
    net.head.register_full_backward_hook(lambda m, gi, go: (gi[0] * float("nan"),) if poison[0] else None)

    def arm(step):
        poison[0] = step == 13

    probe = train(net, batches, 20, before_step=arm)
    f = probe.findings[0]
    assert (f.code, f.step) == ("LP104", 14) and "embed.weight" in f.message and "norm.weight" in f.message


def test_an_output_masked_in_place_before_the_loss_is_clean(net, batches):
    # Logits of a class the batch must not predict are set to -inf in place after the forward pass
    # (the loss ignores them): the model's own output was finite, and the run is clean.
    def loss_fn(out, y, step):
        out[:, 3] = float("-inf")
        return F.cross_entropy(out, y.clamp(max=2))

    probe = train(net, batches, 30, loss_fn=loss_fn)
    assert codes(probe) == set()


def test_a_nan_output_of_a_probed_model_is_found_at_its_step(net, batches):
    def loss_fn(out, y, step):
        return F.cross_entropy(out, y)

    def corrupt(step):
        net.head.bias.data[0] = float("nan") if step == 21 else net.head.bias.data[0]

    probe = train(net, batches, 30, before_step=corrupt, loss_fn=loss_fn)
    f = only(probe, "LP103")
    assert f.step == 22 and f.where == "head"


def test_a_nan_output_is_named_when_the_loss_raises_before_the_step():
    # binary_cross_entropy refuses NaN probabilities: the poisoned step never reaches
    # optimizer.step(), and the probe names the NaN when the block exits.
    class Decoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1 = nn.Linear(8, 16)
            self.fc2 = nn.Linear(16, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.sigmoid(self.fc2(F.relu(self.fc1(x))))

    torch.manual_seed(0)
    model = Decoder()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    data = [torch.rand(4, 8) for _ in range(4)]

    def train_step(k):
        x = torch.full_like(data[0], float("nan")) if k == 12 else data[k % 4]
        opt.zero_grad()
        loss = F.binary_cross_entropy(model(x), data[k % 4])
        loss.backward()
        opt.step()

    with pytest.raises(RuntimeError):
        with loopcheck.probe(model, opt, on_finding="ignore", summary=False) as probe:
            for k in range(20):
                train_step(k)
    f = only(probe, "LP103")
    assert (f.step, f.where) == (12, "Decoder")


class _TwoBranches(nn.Module):
    """Two branches side by side; the first registered (`side`) is not on the poisoned one's path."""

    def __init__(self) -> None:
        super().__init__()
        self.side = nn.Linear(16, 8)
        self.main = nn.Linear(16, 8)
        self.head = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.cat([self.side(x), self.main(x)], dim=1))


def test_between_watched_steps_only_the_earliest_small_gradient_is_read(batches):
    # The NaN is born in backward on the `main` branch only, at step 14 (not watched): the earliest
    # small gradient (side.weight, 128 values) stays finite, so the step applies it and the next forward finds
    # main's weights; a NaN that reaches the earliest small gradient trips at its own step.
    torch.manual_seed(0)
    net = _TwoBranches()
    poison = [False]
    net.main.weight.register_hook(lambda g: g * float("nan") if poison[0] else g)
    net.main.bias.register_hook(lambda g: g * float("nan") if poison[0] else g)

    def arm(step):
        poison[0] = step == 13

    probe = train(net, batches, 20, before_step=arm, check_every=4)
    f = probe.findings[0]
    assert (f.code, f.where, f.step) == ("LP103", "main", 15) and "main.weight" in f.message

    torch.manual_seed(0)
    net = _TwoBranches()
    net.side.weight.register_hook(lambda g: g * float("nan") if poison[0] else g)
    probe = train(net, batches, 20, before_step=arm, check_every=4)
    f = probe.findings[0]
    assert (f.code, f.step) == ("LP104", 14) and "side.weight" in f.message
