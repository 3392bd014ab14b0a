"""LP301 scheduler cadence, LP302 unexplained LR jumps, LP303 LR changed behind the scheduler."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F
from torch.optim import lr_scheduler

import loopcheck
from .conftest import Net, codes


def fresh(lr=0.05):
    torch.manual_seed(0)
    net = Net()
    return net, torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)


def step(net, opt, x, y):
    opt.zero_grad()
    F.cross_entropy(net(x), y).backward()
    opt.step()


def train_per_epoch(net, opt, sched, batches, epochs, steps):
    """Train `epochs` epochs of `steps` batches, stepping the scheduler once per epoch."""
    with loopcheck.probe(net, opt, scheduler=sched, on_finding="ignore", summary=False) as probe:
        for _ in range(epochs):
            for x, y in batches.epoch(steps):
                step(net, opt, x, y)
            sched.step()
    return probe


def test_onecycle_stepped_per_epoch(batches):
    net, opt = fresh()
    epochs, per_epoch = 4, 10
    sched = lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=epochs * per_epoch)
    probe = train_per_epoch(net, opt, sched, batches, epochs, per_epoch)
    assert codes(probe) == {"LP301"}
    (f,) = probe.findings
    assert f.where == "OneCycleLR" and f.step == 20 and "once every 10" in f.message


def test_scheduler_stepped_twice_per_optimizer_step(batches):
    net, opt = fresh()
    sched = lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 100))
    with loopcheck.probe(net, opt, scheduler=sched, on_finding="ignore", summary=False) as probe:
        for x, y in batches.epoch(12):
            step(net, opt, x, y)
            sched.step()  # in the training step ...
            sched.step()  # ... and again in the loop
    assert codes(probe) == {"LP301"}
    (f,) = probe.findings
    assert "2 times" in f.message and f.step == 2


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before")
def test_scheduler_before_the_first_optimizer_step(batches):
    net, opt = fresh()
    sched = lr_scheduler.StepLR(opt, step_size=5, gamma=0.5)
    with loopcheck.probe(net, opt, scheduler=sched, on_finding="ignore", summary=False) as probe:
        for x, y in batches.epoch(8):
            sched.step()
            step(net, opt, x, y)
    assert codes(probe) == {"LP301"}
    (f,) = probe.findings
    assert f.step == 0 and "before the first optimizer step" in f.message


def test_manual_lr_edit_behind_the_scheduler(batches):
    net, opt = fresh()
    sched = lr_scheduler.CosineAnnealingLR(opt, T_max=60)
    with loopcheck.probe(net, opt, scheduler=sched, on_finding="ignore", summary=False) as probe:
        for i, (x, y) in enumerate(batches.epoch(60)):
            if i == 30:
                for group in opt.param_groups:
                    group["lr"] *= 0.5
            step(net, opt, x, y)
            sched.step()
    assert codes(probe) == {"LP303"}
    (f,) = probe.findings
    assert f.where == "param_groups[0]" and f.step == 30


def test_lr_reset_mid_run_by_reloading_a_stale_scheduler_state(batches):
    net, opt = fresh()
    sched = lr_scheduler.CosineAnnealingLR(opt, T_max=80)
    start = sched.state_dict()
    with loopcheck.probe(net, opt, scheduler=sched, on_finding="ignore", summary=False) as probe:
        for i, (x, y) in enumerate(batches.epoch(60)):
            if i == 40:
                sched.load_state_dict(start)  # "recovering" with the wrong state
            step(net, opt, x, y)
            sched.step()
    assert codes(probe) == {"LP302"}
    (f,) = probe.findings
    assert f.step == 41 and "went back from position 40 to 1" in f.message


def test_lr_set_back_to_its_initial_value_is_a_jump(batches):
    net, opt = fresh()
    sched = lr_scheduler.ExponentialLR(opt, gamma=0.97)
    with loopcheck.probe(net, opt, scheduler=sched, on_finding="ignore", summary=False) as probe:
        for i, (x, y) in enumerate(batches.epoch(40)):
            if i == 25:
                for group in opt.param_groups:
                    group["lr"] = group["initial_lr"]
            step(net, opt, x, y)
            sched.step()
    assert codes(probe) == {"LP302"}
    assert probe.findings[0].step == 25


def _first_run(batches, steps):
    net, opt = fresh()
    sched = lr_scheduler.LambdaLR(opt, lambda s: 0.5 ** (s / 20))
    for x, y in batches.epoch(steps):
        step(net, opt, x, y)
        sched.step()
    return {"model": net.state_dict(), "optimizer": opt.state_dict(), "scheduler": sched.state_dict()}


@pytest.mark.parametrize("restore_scheduler", [False, True])
def test_resume_without_the_scheduler_state(batches, restore_scheduler):
    ckpt = _first_run(batches, 30)
    torch.manual_seed(1)
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    net.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["optimizer"])
    sched = lr_scheduler.LambdaLR(opt, lambda s: 0.5 ** (s / 20))
    if restore_scheduler:
        sched.load_state_dict(ckpt["scheduler"])
    with loopcheck.probe(net, opt, scheduler=sched, on_finding="ignore", summary=False) as probe:
        for x, y in batches.epoch(10):
            step(net, opt, x, y)
            sched.step()
    if restore_scheduler:
        assert probe.findings == []
    else:
        # SGD keeps no step count, but its momentum buffers show it was trained before
        assert codes(probe) == {"LP302"}
        assert "momentum buffers" in probe.findings[0].message


def test_resume_with_adam_state_but_fresh_scheduler(batches):
    torch.manual_seed(0)
    net = Net()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    for x, y in batches.epoch(30):
        step(net, opt, x, y)
    saved = opt.state_dict()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    opt.load_state_dict(saved)
    sched = lr_scheduler.LinearLR(opt, start_factor=0.01, total_iters=50)
    with loopcheck.probe(net, opt, scheduler=sched, on_finding="ignore", summary=False) as probe:
        for x, y in batches.epoch(10):
            step(net, opt, x, y)
            sched.step()
    assert codes(probe) == {"LP302"}
    (f,) = probe.findings
    assert "30 steps of state" in f.message and f.step == 2


def test_per_epoch_and_plateau_schedulers_with_amp_skips_stay_clean(batches):
    net, opt = fresh()
    step_sched = lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    plateau = lr_scheduler.ReduceLROnPlateau(opt, patience=0, factor=0.5)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8)
    hit = {"k": -1}
    net.head.bias.register_hook(lambda g: g * float("inf") if hit["k"] == 0 else g)
    with loopcheck.probe(net, opt, scheduler=[step_sched, plateau], scaler=scaler,
                         on_finding="ignore", summary=False) as probe:
        for epoch in range(4):
            for k, (x, y) in enumerate(batches.epoch(10)):
                hit["k"] = k + epoch  # the first step of the first epoch overflows
                opt.zero_grad()
                scaler.scale(F.cross_entropy(net(x), y)).backward()
                scaler.step(opt)
                scaler.update()
            step_sched.step()
            plateau.step(1.0 + epoch)  # a worsening metric: plateau halves the LR
    assert probe.findings == []
    assert probe.skipped == 1


class WarmupThenConstant(lr_scheduler.LRScheduler):
    """A user subclass: linear warm-up over `warmup` steps, then constant."""

    def __init__(self, optimizer, warmup):
        self.warmup = warmup
        super().__init__(optimizer)

    def get_lr(self):
        scale = min(1.0, (self.last_epoch + 1) / self.warmup)
        return [base * scale for base in self.base_lrs]


def _per_step_schedules(opt, total):
    warm = lambda s: min(1.0, (s + 1) / 500)  # noqa: E731
    return {
        "lambda-warmup": lambda: lr_scheduler.LambdaLR(opt, warm),
        "cosine-in-steps": lambda: lr_scheduler.CosineAnnealingLR(opt, T_max=total),
        "linear-in-steps": lambda: lr_scheduler.LinearLR(opt, start_factor=1.0, end_factor=0.0, total_iters=total),
        "sequential": lambda: lr_scheduler.SequentialLR(opt, [
            lr_scheduler.LinearLR(opt, start_factor=0.01, total_iters=300),
            lr_scheduler.CosineAnnealingLR(opt, T_max=total - 300)], milestones=[300]),
        "subclass": lambda: WarmupThenConstant(opt, warmup=1000),
    }


@pytest.mark.parametrize("kind", ["lambda-warmup", "cosine-in-steps", "linear-in-steps", "sequential", "subclass"])
def test_schedules_sized_in_steps_stepped_per_epoch(batches, kind):
    net, opt = fresh()
    epochs, per_epoch = 4, 12
    sched = _per_step_schedules(opt, total=100 * per_epoch)[kind]()
    probe = train_per_epoch(net, opt, sched, batches, epochs, per_epoch)
    assert codes(probe) == {"LP301"}
    (f,) = probe.findings
    assert f.step == 24 and "12x slower" in f.message


def _per_epoch_schedules(opt, epochs):
    return {
        "cosine-in-epochs": lambda: lr_scheduler.CosineAnnealingLR(opt, T_max=epochs),
        "step": lambda: lr_scheduler.StepLR(opt, step_size=30, gamma=0.1),
        "multistep": lambda: lr_scheduler.MultiStepLR(opt, milestones=[60, 80], gamma=0.1),
        "warmup-5-epochs": lambda: lr_scheduler.LambdaLR(opt, lambda e: min(1.0, (e + 1) / 5)),
        "exponential": lambda: lr_scheduler.ExponentialLR(opt, gamma=0.97),
    }


@pytest.mark.parametrize("kind", ["cosine-in-epochs", "step", "multistep", "warmup-5-epochs", "exponential"])
def test_schedules_sized_in_epochs_stepped_per_epoch_are_fine(batches, kind):
    net, opt = fresh()
    per_epoch = 12
    sched = _per_epoch_schedules(opt, epochs=90)[kind]()
    probe = train_per_epoch(net, opt, sched, batches, 4, per_epoch)
    assert probe.findings == []


def test_step_lr_moved_into_the_batch_loop_collapses_the_lr(batches):
    net, opt = fresh()
    sched = lr_scheduler.StepLR(opt, step_size=30, gamma=0.1)
    with loopcheck.probe(net, opt, scheduler=sched, on_finding="ignore", summary=False) as probe:
        for x, y in batches.epoch(300):
            step(net, opt, x, y)
            sched.step()
    assert codes(probe) == {"LP301"}
    (f,) = probe.findings
    assert f.where == "StepLR" and "every batch" in f.message and f.step < 300


def test_a_schedule_that_never_moves_in_the_run(batches):
    net, opt = fresh()
    sched = lr_scheduler.MultiStepLR(opt, milestones=[30, 60], gamma=0.1)  # sized for a longer run
    with loopcheck.probe(net, opt, scheduler=sched, on_finding="ignore", summary=False) as probe:
        for _ in range(6):
            for x, y in batches.epoch(8):
                step(net, opt, x, y)
            sched.step()  # once per epoch: six steps, the first milestone is 30
    (f,) = probe.findings
    assert f.code == "LP301" and "never changed the LR" in f.message and "24 scheduler steps later" in f.message
