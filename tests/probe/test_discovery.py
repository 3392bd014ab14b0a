"""Discovery: what the probe is not given it finds, what it finds is watched as if given, and nothing stays."""

from __future__ import annotations

import importlib
import warnings

import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.optim import lr_scheduler

import loopcheck
from .conftest import Batches, Net
from loopcheck.probe import ProbeWarning
from loopcheck.probe.discovery import HandWrittenUpdates

_optim = importlib.import_module("torch.optim.optimizer")
_module = importlib.import_module("torch.nn.modules.module")


def build(seed=0):
    torch.manual_seed(seed)
    net = Net(dropout=0.2)
    opt = torch.optim.AdamW(net.parameters(), lr=3e-3)
    sched = lr_scheduler.StepLR(opt, step_size=10, gamma=0.5)
    return net, opt, sched


def train(net, opt, sched, steps, *, zero_grad=True, sched_twice=False, nan_at=None):
    for i, (x, y) in enumerate(Batches().epoch(steps)):
        if i == nan_at:
            with torch.no_grad():
                net.mid.weight[1, 1] = float("nan")
        if zero_grad:
            opt.zero_grad()
        F.cross_entropy(net(x), y).backward()
        opt.step()
        sched.step()
        if sched_twice:
            sched.step()


def found(probe):
    return sorted({(f.code, f.where) for f in probe.findings})


def quiet(**kwargs):
    return loopcheck.probe(on_finding="ignore", summary=False, every=5, **kwargs)


def test_no_arguments_finds_model_optimizer_and_scheduler_made_inside_the_block():
    with quiet() as probe:
        net, opt, sched = build()
        train(net, opt, sched, 30, zero_grad=False)
    assert probe.models == [net] and probe.optimizers == [opt] and probe.schedulers == [sched]
    assert probe.step == 30
    assert ("LP403", None) in found(probe)


@pytest.mark.parametrize("fault", ["zero_grad", "sched_twice", "nan_at"])
def test_same_findings_as_objects_passed_by_hand(fault):
    options = {"zero_grad": False} if fault == "zero_grad" else {"sched_twice": True} if fault == "sched_twice" else {"nan_at": 12}
    net, opt, sched = build()
    with quiet(model=net, optimizer=opt, scheduler=sched) as given:
        train(net, opt, sched, 30, **options)
    net, opt, sched = build()
    with quiet() as discovered:  # made before the block: found through their use
        train(net, opt, sched, 30, **options)
    assert found(given) and found(discovered) == found(given)
    assert discovered.schedulers == [sched]


def test_a_scheduler_not_passed_is_found_and_named():
    net, opt, sched = build()
    with pytest.warns(ProbeWarning, match="found StepLR, not passed to the probe as scheduler=") as caught:
        with quiet(model=net, optimizer=opt) as probe:
            train(net, opt, sched, 12, sched_twice=True)
    assert probe.schedulers == [sched]
    assert "LP301" in {f.code for f in probe.findings}
    assert [w.filename for w in caught if "found StepLR" in str(w.message)] == [__file__]  # the user's line


def test_a_gradscaler_not_passed_is_found_at_its_first_use_and_named():
    net, opt, _ = build()
    scaler = torch.amp.GradScaler("cpu")
    with pytest.warns(ProbeWarning, match="found GradScaler, not passed to the probe as scaler="):
        with quiet(model=net, optimizer=opt) as probe:
            for x, y in Batches().epoch(3):
                opt.zero_grad()
                scaler.scale(F.cross_entropy(net(x), y)).backward()
                scaler.step(opt)
                scaler.update()
    assert probe.scaler is scaler and probe.step + probe.skipped == 3


def test_scheduler_stepped_before_the_first_optimizer_step_is_seen_in_discovery():
    net, opt, sched = build()
    with quiet() as probe:
        sched.step()  # the classic off-by-one: before any optimizer step
        train(net, opt, sched, 5)
    assert probe.schedulers == [sched] and probe.optimizers == [opt]
    assert [f.code for f in probe.findings if f.code == "LP301"] == ["LP301"]


def test_a_gradscaler_is_found_at_first_use():
    net, opt, _ = build()
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 16)
    with quiet() as probe:
        for x, y in Batches().epoch(6):
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = F.cross_entropy(net(x), y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
    assert probe.scaler is scaler and probe.optimizers == [opt]
    assert probe.step + probe.skipped == 6


def test_model_alone_watches_hand_written_updates():
    torch.manual_seed(0)
    net = Net(dropout=0.0)
    with quiet(model=net) as probe:
        for i, (x, y) in enumerate(Batches().epoch(30)):
            if i == 20:
                with torch.no_grad():
                    net.mid.weight[0, 0] = float("inf")
            loss = F.cross_entropy(net(x), y)
            loss.backward()
            for p in net.parameters():
                p.data -= 0.05 * p.grad
                p.grad = None
    assert len(probe.optimizers) == 1 and isinstance(probe.optimizers[0], HandWrittenUpdates)
    assert probe.step == 29  # the first backward cannot tell hand-written updates from an optimizer's
    codes = {f.code for f in probe.findings}
    assert "LP103" in codes and "LP403" not in codes


def test_hand_written_updates_without_a_gradient_reset_are_found_and_a_clean_one_is_clean():
    def run(reset):
        torch.manual_seed(0)
        net = Net(dropout=0.0)
        with quiet() as probe:
            for x, y in Batches().epoch(25):
                F.cross_entropy(net(x), y).backward()
                with torch.no_grad():
                    for p in net.parameters():
                        p -= 0.05 * p.grad
                if reset:
                    net.zero_grad()
        return probe

    assert [f.code for f in run(reset=False).findings] == ["LP403"]
    assert run(reset=True).findings == []


def test_an_existing_optimizer_is_waited_for_not_replaced_by_a_stand_in():
    net, opt, _ = build()
    with quiet() as probe:
        for i, (x, y) in enumerate(Batches().epoch(8)):  # accumulation: two backward passes per step
            F.cross_entropy(net(x), y).backward()
            if i % 2 == 1:
                opt.step()
                opt.zero_grad()
    assert probe.optimizers == [opt] and probe.step == 4 and probe.findings == []


def test_gan_two_models_two_optimizers():
    torch.manual_seed(0)
    with quiet() as probe:
        gen, disc = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 6)), nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 1))
        opt_g = torch.optim.Adam(gen.parameters(), lr=1e-3)
        opt_d = torch.optim.Adam(disc.parameters(), lr=1e-3)
        for _ in range(6):
            real, z = torch.randn(8, 6), torch.randn(8, 4)
            fake = gen(z)
            opt_d.zero_grad()
            d_loss = F.softplus(-disc(real)).mean() + F.softplus(disc(fake.detach())).mean()
            d_loss.backward()
            opt_d.step()
            opt_g.zero_grad()
            F.softplus(-disc(fake)).mean().backward()
            opt_g.step()
    assert {id(m) for m in probe.models} == {id(gen), id(disc)}
    assert {id(o) for o in probe.optimizers} == {id(opt_g), id(opt_d)}
    assert probe.findings == []


def test_which_steps_are_watched_follows_each_optimizer_also_one_found_mid_run():
    """Each optimizer's first 8 steps are watched, then one in `check_every`, counted per optimizer,
    also for an optimizer that discovery finds after the first one has stepped."""
    torch.manual_seed(0)
    gen, disc = nn.Linear(4, 6), nn.Linear(6, 1)
    opt_d = torch.optim.SGD(disc.parameters(), lr=1e-2)
    seen: list[tuple[int, bool, bool]] = []
    with quiet(check_every=3) as probe:
        for k in range(30):
            if k == 11:
                opt_g = torch.optim.SGD(gen.parameters(), lr=1e-2)
                assert probe.watched(1)  # not known yet: its first step
            fake = gen(torch.randn(8, 4))
            opt_d.zero_grad()
            disc(fake.detach()).pow(2).mean().backward()
            opt_d.step()
            if k >= 11:
                opt_g.zero_grad()
                disc(fake).mean().backward()
                opt_g.step()
                seen.append((k, probe.watched(0), probe.watched(1)))
    assert len(probe.optimizers) == 2

    def rule(n: int) -> bool:  # whether an optimizer's n-th step is watched
        return n <= 8 or n % 3 == 0

    assert seen == [(k, rule(k + 2), rule(k - 9)) for k in range(11, 30)]


def test_frozen_and_no_grad_models_are_not_watched():
    torch.manual_seed(0)
    teacher = nn.Linear(16, 4).requires_grad_(False)
    ema = Net()
    net, opt, sched = build()
    with quiet() as probe:
        for x, y in Batches().epoch(4):
            opt.zero_grad()
            (F.cross_entropy(net(x), y) + F.mse_loss(net(x), teacher(x))).backward()
            opt.step()
            with torch.no_grad():
                ema(x)
    assert probe.models == [net]


def _global_state():
    return (len(_optim._global_optimizer_pre_hooks), len(_module._global_forward_pre_hooks),
            [c.__dict__.get("__init__") for c in (lr_scheduler.LRScheduler, lr_scheduler.ReduceLROnPlateau)],
            [torch.amp.GradScaler.__dict__.get(n) for n in ("scale", "step", "unscale_")],
            torch.Tensor.__dict__.get("backward"))


@pytest.mark.parametrize("error", [None, RuntimeError])
def test_discovery_hooks_are_all_removed_on_exit(error):
    before = _global_state()
    net, opt, sched = build()
    with pytest.raises(RuntimeError) if error else warnings.catch_warnings():
        with quiet():
            assert _global_state() != before
            train(net, opt, sched, 3)
            if error:
                raise error("crash")
    assert _global_state() == before
    assert not opt._optimizer_step_pre_hooks and not any(m._forward_pre_hooks for m in net.modules())


def test_parameters_bit_identical_with_discovery():
    net_a, opt_a, sched_a = build()
    train(net_a, opt_a, sched_a, 25)
    with quiet() as probe:
        net_b, opt_b, sched_b = build()
        train(net_b, opt_b, sched_b, 25)
    assert probe.step == 25
    for a, b in zip(net_a.state_dict().values(), net_b.state_dict().values()):
        assert torch.equal(a, b)


def test_module_search_ends_once_the_models_hold_every_trained_parameter():
    net, opt, sched = build()
    with quiet():
        train(net, opt, sched, 3)
        assert len(_module._global_forward_pre_hooks) == 0


def test_nothing_to_watch_is_said_in_the_summary(capsys):
    with loopcheck.probe(every=5) as probe:
        torch.ones(3).sum()
    assert probe.findings == []
    assert "nothing to watch" in capsys.readouterr().err


def test_detectors_rebuilt_for_found_objects_leave_no_hooks_behind():
    def hooks_during(**given):
        net, opt, sched = build()
        objects = {"model": net, "optimizer": opt, "scheduler": sched} if given else {}
        with quiet(**objects) as probe:
            train(net, opt, sched, 3)
            count = sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in net.modules())
        return count, len(probe.detectors), sum(d.enabled for d in probe.detectors)

    assert hooks_during() == hooks_during(given=True)


def test_the_run_log_records_what_was_found_and_the_report_shows_it(tmp_path, capsys):
    import json

    from loopcheck.probe.report import render_report

    net, opt, sched = build()
    with quiet(log=tmp_path / "run.jsonl") as probe:
        train(net, opt, sched, 12, zero_grad=False)
    records = [json.loads(line) for line in (tmp_path / "run.jsonl").read_text().splitlines()]
    assert records[0]["type"] == "header" and records[0]["models"] == []
    watched = [r for r in records if r["type"] == "watch"][-1]
    assert [m["class"] for m in watched["models"]] == ["Net"]
    assert [o["class"] for o in watched["optimizers"]] == ["AdamW"]
    assert [s["class"] for s in watched["schedulers"]] == ["StepLR"]
    assert [f["lint"] for f in records if f["type"] == "finding"] == [["LC101"]]
    capsys.readouterr()
    assert render_report(tmp_path / "run.jsonl") == 1
    out = capsys.readouterr().out
    assert "model Net" in out and "optimizer AdamW" in out and "scheduler StepLR" in out
    assert probe.step == 12


def test_a_failing_search_is_switched_off_and_the_run_goes_on(monkeypatch):
    from loopcheck.probe import discovery

    def broken(self):
        raise RuntimeError("simulated bug in the search")

    monkeypatch.setattr(discovery.Discovery, "_new_roots", broken)
    net, opt, sched = build()
    with pytest.warns(ProbeWarning, match="finding the run's objects failed .*simulated bug"):
        with quiet() as probe:
            train(net, opt, sched, 6)
    assert probe.models == [] and probe.step == 0  # nothing found, nothing broken
    assert all(torch.isfinite(p).all() for p in net.parameters())
