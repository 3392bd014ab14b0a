"""LP103 with dense layers judged by their parameters: which outputs are reduced, and localisation stays exact."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import loopcheck
from .conftest import codes
from loopcheck.probe import layers
from loopcheck.probe.detectors import nonfinite


class ConvNet(nn.Module):
    """A small image classifier in the usual shape: conv / batch norm / ReLU blocks, pooling, a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(2),
        )
        self.classifier = nn.Sequential(nn.Flatten(), nn.Dropout(0.1), nn.Linear(32, 5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


class Rescale(nn.Module):
    """Divides by the batch's scale; when armed the scale is 0 (a custom op that makes NaN by itself)."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = x.abs().mean() * (0.0 if self.armed else 1.0)
        return (x - x.mean()) / scale


class RescaleNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(16, 32)
        self.norm = nn.LayerNorm(32)
        self.rescale = Rescale()
        self.out = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.rescale(self.norm(self.inp(x))))


def images(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(step)
    return torch.randn(4, 3, 8, 8, generator=g), torch.randint(0, 5, (4,), generator=g)


def test_layer_classes():
    class OwnForward(nn.Linear):
        def forward(self, x):
            return super().forward(x).clamp(min=0).log()

    class KeepsForward(nn.Linear):
        pass

    class Stack(nn.Sequential):
        def forward(self, x):
            return super().forward(x) * 2

    hooked = nn.Linear(2, 2)
    hooked.register_forward_hook(lambda m, a, out: out / 0)
    assert layers.is_covered(nn.Linear(2, 2)) and layers.is_covered(nn.Conv2d(1, 1, 3))
    assert layers.is_covered(nn.BatchNorm1d(3)) and layers.is_covered(nn.LayerNorm(3))
    assert layers.is_covered(KeepsForward(2, 2))
    assert not layers.is_covered(OwnForward(2, 2))
    assert not layers.is_covered(hooked)
    assert not layers.is_covered(nn.LayerNorm(3, eps=0.0))
    assert not layers.is_covered(nn.utils.parametrizations.weight_norm(nn.Linear(2, 2)))
    assert not layers.is_covered(nn.LazyLinear(2))
    assert not layers.is_covered(nn.Embedding(4, 2))  # a lookup: a NaN row matters only when it is used
    assert layers.is_pass_through(nn.Sequential(nn.Linear(2, 2)))
    assert not layers.is_pass_through(Stack(nn.Linear(2, 2))) and not layers.is_pass_through(nn.Sequential())
    assert layers.is_safe(nn.AdaptiveAvgPool2d(1)) and not layers.is_safe(nn.Linear(2, 2))


def test_a_conv_net_step_on_the_cpu_reduces_nothing(monkeypatch):
    """The input batch and the output of a training step on the CPU are checked only when something
    went NaN (the loss or a gradient the sentinel reads at the optimizer step)."""
    reduced = []
    real = nonfinite.finite_probe_value

    def counting(t):
        reduced.append(tuple(t.shape))
        return real(t)

    monkeypatch.setattr(nonfinite, "finite_probe_value", counting)
    torch.manual_seed(0)
    model = ConvNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with loopcheck.probe(model, opt, on_finding="ignore", summary=False) as probe:
        for step in range(3):
            x, y = images(step)
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
    assert probe.findings == []
    assert reduced == []


def test_nan_weight_in_a_conv_of_a_sequential_names_that_conv():
    torch.manual_seed(0)
    model = ConvNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    with loopcheck.probe(model, opt, on_finding="ignore", summary=False) as probe:
        for step in range(30):
            if step == 17:
                with torch.no_grad():
                    model.features[4].weight[2, 1, 0, 0] = float("nan")
            x, y = images(step)
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
    assert codes(probe) == {"LP103"}
    (f,) = probe.findings
    assert f.where == "features.4" and f.step == 18
    assert "features.4.weight" in f.message


class InPlaceSkipNet(RescaleNet):
    """The custom op's output is written in place after it returns (`h += skip`), before any check."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.rescale(self.norm(self.inp(x)))
        h += 0.5
        return self.out(h)


@pytest.mark.parametrize(("network", "said"), [
    (RescaleNet, "everything after it inherits the value"),
    (InPlaceSkipNet, "the output was changed in place after it returned"),
])
def test_a_custom_op_after_dense_layers_is_named_not_the_layers(monkeypatch, network, said):
    """On the CPU the custom module's training output is held like the model's: nothing is reduced
    while every step is finite, and the step that goes NaN names the module that made it (judged
    as its output is then, when the forward wrote into it afterwards)."""
    reduced = []
    real = nonfinite.finite_probe_value
    monkeypatch.setattr(nonfinite, "finite_probe_value", lambda t: reduced.append(tuple(t.shape)) or real(t))
    torch.manual_seed(0)
    model = network()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with loopcheck.probe(model, opt, on_finding="ignore", summary=False) as probe:
        for step in range(25):
            model.rescale.armed = step == 11
            if step == 11:
                assert reduced == []
            x = torch.randn(8, 16)
            opt.zero_grad()
            F.cross_entropy(model(x), torch.randint(0, 4, (8,))).backward()
            opt.step()
    assert codes(probe) == {"LP103"}
    (f,) = probe.findings
    assert f.where == "rescale" and f.step == 12 and said in f.message


def test_layers_called_outside_the_model_forward_are_checked(net, batches):
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    with loopcheck.probe(net, opt, on_finding="ignore", summary=False) as probe:
        for step, (x, y) in enumerate(batches.epoch(20)):
            if step == 6:
                x = x.clone()
                x[2, 3] = float("nan")
            opt.zero_grad()
            # the loop drives the submodules itself; the model's forward never runs
            hidden = net.act(net.mid(net.body(x)))
            F.cross_entropy(net.head(hidden), y).backward()
            opt.step()
    f = next(f for f in probe.findings if f.code in ("LP103", "LP105"))
    assert f.code == "LP103" and f.where == "body.0" and f.step == 7


def test_a_loop_that_drives_the_layers_itself_keeps_no_output_alive_past_its_step():
    """The probed model's forward never runs, so nothing starts a new forward pass: the custom
    module's outputs of the first steps, held until their step was judged, are let go at the next."""
    import gc
    import weakref

    torch.manual_seed(0)
    model = RescaleNet()
    outputs = []
    model.rescale.register_forward_hook(lambda module, args, out: outputs.append(weakref.ref(out)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with loopcheck.probe(model, opt, on_finding="ignore", summary=False) as probe:
        for step in range(6):
            x = torch.randn(8, 16)
            opt.zero_grad()
            hidden = model.rescale(model.norm(model.inp(x)))
            F.cross_entropy(model.out(hidden), torch.randint(0, 4, (8,))).backward()
            opt.step()
            del hidden
        gc.collect()
        assert [ref() is None for ref in outputs[:-1]] == [True] * 5
    assert probe.findings == []


def test_a_finite_cpu_step_lets_its_held_output_go_at_its_optimizer_step(net, batches):
    """The model's training output is held for localisation until its step's loss and gradient
    check are read; when they are finite it is let go there, not kept until the next forward."""
    import gc
    import weakref

    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    with loopcheck.probe(net, opt, on_finding="ignore", summary=False) as probe:
        for step, (x, y) in enumerate(batches.epoch(30)):
            opt.zero_grad()
            out = net(x)
            F.cross_entropy(out, y).backward()
            held = weakref.ref(out)
            del out
            watched = probe.watched(0)  # a step the exact checks look at keeps it until the next forward
            opt.step()
            gc.collect()
            if not watched:
                assert held() is None, step
    assert probe.findings == []


def test_batch_norm_evaluating_with_nonfinite_running_statistics_is_named(net, batches):
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    with loopcheck.probe(net, opt, on_finding="ignore", summary=False) as probe:
        for x, y in batches.epoch(5):
            opt.zero_grad()
            F.cross_entropy(net(x), y).backward()
            opt.step()
        net.body[1].running_var[4] = float("nan")
        net.eval()
        with torch.no_grad():
            for x, _ in batches.epoch(3):
                net(x)
    (f,) = [f for f in probe.findings if f.code == "LP103"]
    assert f.where == "body.1"


def test_long_evaluations_are_folded_and_still_checked(net, batches, monkeypatch):
    monkeypatch.setattr(nonfinite, "_FOLD_AT", 16)
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    net.eval()
    with loopcheck.probe(net, opt, on_finding="ignore", summary=False) as probe:
        with torch.no_grad():
            for k, (x, _) in enumerate(batches.epoch(12)):
                if k == 4:
                    x = x.clone()
                    x[0, 0] = float("inf")
                net(x)
    (f,) = probe.findings
    assert f.code == "LP103" and "input batch" in f.message and f.where == "Net"


def test_float_overflow_in_a_dense_layer_is_not_blamed_on_its_finite_weights():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 3))
    with torch.no_grad():
        model[0].weight.zero_()
        model[0].bias.fill_(1.0)  # every hidden unit is tanh(1) ~ 0.76
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with loopcheck.probe(model, opt, on_finding="ignore", summary=False) as probe:
        for step in range(6):
            if step == 3:
                with torch.no_grad():
                    model[2].weight.fill_(3e38)  # finite, but a sum of 8 such products is not
            opt.zero_grad()
            F.cross_entropy(model(torch.ones(4, 8)), torch.zeros(4, dtype=torch.long)).backward()
            opt.step()
    f = next(f for f in probe.findings if f.code.startswith("LP10"))
    assert f.code == "LP103" and f.step == 4 and f.where == "Sequential"
    assert "hold NaN/Inf" not in f.message and "overflow" in f.message and "2" in f.message


def test_only_the_model_is_hooked_until_the_loop_runs_its_layers_itself():
    """Lean: the covered layers and dense groups have no hooks. Armed, once a step ran the model's
    layers without its forward: a dense group has one hook while it can be trusted whole."""
    torch.manual_seed(0)
    model = ConvNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def hooked():
        return sorted(name for name, m in model.named_modules() if m._forward_hooks)

    def step(k, whole=True):
        x, y = images(k)
        opt.zero_grad()
        out = model(x) if whole else model.classifier(model.features(x))
        F.cross_entropy(out, y).backward()
        opt.step()

    whole = ["", "classifier", "features"]
    with loopcheck.probe(model, opt, on_finding="ignore", summary=False) as probe:
        assert hooked() == [""]
        step(0)
        step(1)
        assert hooked() == [""]
        step(2, whole=False)
        assert hooked() == whole
        model.eval()  # batch norm now normalises with running statistics: each layer reports itself
        with torch.no_grad():
            model(images(3)[0])
        assert hooked() == ["", "classifier", "features.0", "features.1", "features.4", "features.5"]
        model.train()
        step(4)
        assert hooked() == whole
    assert probe.findings == []
    assert hooked() == []


def test_lean_localisation_names_the_layer_whose_running_statistics_are_nonfinite():
    """Without layer hooks the covered layers are judged by their parameters (and, in eval mode,
    their running statistics) in the order they complete, around the records of the hooked modules."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32), RescaleNet().rescale, nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with loopcheck.probe(model, opt, on_finding="ignore", summary=False) as probe:
        for step in range(4):
            opt.zero_grad()
            F.cross_entropy(model(torch.randn(8, 16)), torch.zeros(8, dtype=torch.long)).backward()
            opt.step()
        assert sorted(name for name, m in model.named_modules() if m._forward_hooks) == ["", "2"]
        model.eval()
        model[1].running_var[3] = float("nan")
        with torch.no_grad():
            model(torch.randn(8, 16))
    (f,) = probe.findings
    assert (f.code, f.where) == ("LP103", "1") and "1.running_var" in f.message


class Half(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16))
        self.head = nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x)).float()


def test_a_float16_group_is_split_and_its_layers_checked_one_by_one():
    torch.manual_seed(0)
    model = Half().half()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with loopcheck.probe(model, opt, on_finding="ignore", summary=False) as probe:
        for step in range(8):
            if step == 4:
                with torch.no_grad():
                    model.body[2].weight[1, 2] = float("nan")
            x = torch.randn(4, 8, generator=torch.Generator().manual_seed(step)).half()
            opt.zero_grad()
            F.cross_entropy(model(x), torch.zeros(4, dtype=torch.long)).backward()
            opt.step()
        assert model.body[0]._forward_hooks and not model.body._forward_hooks
    f = next(f for f in probe.findings if f.code.startswith("LP10"))
    assert f.code == "LP103" and f.where == "body.2" and f.step == 5


class Scaled(nn.Module):
    """A custom op followed by a child that hands back its input object (dropout at p=0 or in eval, Identity)."""

    def __init__(self, child: nn.Module, child_first: bool) -> None:
        super().__init__()
        self.child = child
        self.child_first = child_first
        self.armed = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.child_first:
            x = self.child(x)
        x = x / x.abs().amax() * (float("nan") if self.armed else 1.0)
        return x if self.child_first else self.child(x)


@pytest.mark.parametrize("child", [nn.Dropout(0.0), nn.Identity(), nn.Dropout(0.3).eval()], ids=str)
@pytest.mark.parametrize("child_first", [False, True])
def test_a_custom_op_whose_child_returns_its_input_is_named_not_its_parent(child, child_first):
    torch.manual_seed(0)
    scaled = Scaled(child, child_first)
    model = nn.Sequential(nn.Linear(4, 8), nn.Sequential(scaled, nn.Dropout(0.0)), nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with loopcheck.probe(model, opt, on_finding="ignore", summary=False) as probe:
        for step in range(6):
            scaled.armed = step == 3
            opt.zero_grad()
            F.cross_entropy(model(torch.randn(5, 4)), torch.zeros(5, dtype=torch.long)).backward()
            opt.step()
    (f,) = probe.findings
    assert (f.code, f.where, f.step) == ("LP103", "1.0", 4)


def test_a_probed_sequential_is_one_group_and_still_names_its_layer():
    torch.manual_seed(0)
    gen = nn.Sequential(nn.Linear(4, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 8), nn.Tanh())
    disc = nn.Sequential(nn.Linear(8, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
    opt_d = torch.optim.Adam(disc.parameters(), lr=1e-3)
    opt_g = torch.optim.Adam(gen.parameters(), lr=1e-3)
    with loopcheck.probe([disc, gen], [opt_d, opt_g], on_finding="ignore", summary=False) as probe:
        assert [name for name, m in gen.named_modules() if m._forward_hooks] == [""]
        for step in range(12):
            if step == 7:
                with torch.no_grad():
                    gen[3].weight[0, 0] = float("nan")
            fake = gen(torch.randn(8, 4))
            opt_d.zero_grad()
            F.softplus(disc(fake.detach())).mean().backward()
            opt_d.step()
            opt_g.zero_grad()
            F.softplus(-disc(fake)).mean().backward()
            opt_g.step()
    f = next(f for f in probe.findings if f.code == "LP103")
    assert f.where == "model1.3" and f.step == 8 and "model1.3.weight" in f.message


def test_a_float16_sequential_is_armed_from_the_start_and_checks_its_layers_one_by_one():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3)).half()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with loopcheck.probe(model, opt, on_finding="ignore", summary=False) as probe:
        x = torch.randn(4, 8).half()
        opt.zero_grad()
        F.cross_entropy(model(x).float(), torch.zeros(4, dtype=torch.long)).backward()
        opt.step()
        assert sorted(name for name, m in model.named_modules() if m._forward_hooks) == ["", "0", "2"]
    assert probe.findings == []
