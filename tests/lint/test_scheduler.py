"""LC201-LC205: scheduler order, cadence, plateau metric and double steps.

Each case is a small script whose offending lines carry `# expect: LC2xx`; the test asserts that
the LC2 findings are exactly those (line, code) pairs.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from loopcheck.lint.api import lint_paths, lint_source

from . import _support
from ._support import expected


def check(source: str) -> None:
    _support.check(textwrap.dedent(source), "LC2")


HEAD = """\
import torch
from torch import nn
"""


def script(body: str) -> str:
    return HEAD + textwrap.dedent(body)


# --------------------------------------------------------------------------- LC201


def test_scheduler_at_top_of_batch_iteration_is_before_the_step():
    check(script("""
        def train(model, loader, epochs):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=epochs * len(loader))
            for epoch in range(epochs):
                model.train()
                for x, y in loader:
                    sched.step()  # expect: LC201
                    opt.zero_grad()
                    loss = nn.functional.mse_loss(model(x), y)
                    loss.backward()
                    opt.step()
    """))


def test_scheduler_at_top_of_epoch_before_the_batch_loop():
    check(script("""
        def train(model, loader, epochs):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            sched = torch.optim.lr_scheduler.StepLR(opt, step_size=30)
            for epoch in range(epochs):
                sched.step()  # expect: LC201
                model.train()
                for x, y in loader:
                    opt.zero_grad()
                    loss = nn.functional.mse_loss(model(x), y)
                    loss.backward()
                    opt.step()
    """))


def test_scheduler_in_main_before_train_function_that_steps():
    check(script("""
        def train(model, loader, optimizer):
            model.train()
            for x, y in loader:
                optimizer.zero_grad()
                nn.functional.cross_entropy(model(x), y).backward()
                optimizer.step()

        def main(model, loader, epochs):
            optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
            scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.9)
            for epoch in range(epochs):
                scheduler.step()  # expect: LC201
                train(model, loader, optimizer)
    """))


def test_scheduler_before_scaler_step():
    check(script("""
        def train(model, loader, epochs):
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
            sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-3, epochs=epochs, steps_per_epoch=len(loader))
            scaler = torch.amp.GradScaler("cuda")
            model.train()
            for epoch in range(epochs):
                for x, y in loader:
                    opt.zero_grad()
                    with torch.autocast("cuda"):
                        loss = nn.functional.mse_loss(model(x), y)
                    scaler.scale(loss).backward()
                    sched.step()  # expect: LC201
                    scaler.step(opt)
                    scaler.update()
    """))


def test_a_schedule_stepped_to_an_explicit_epoch_is_not_early():
    # `sched.step(epoch)` at the top of the epoch sets that epoch's rate by its index (the old
    # explicit-epoch call): no value of the schedule is skipped. Without the index, it is
    check(script("""
        def train(model, loader, epochs):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            sched = torch.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.1)
            warm = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.99)
            for epoch in range(1, epochs + 1):
                sched.step(epoch)
                warm.step()  # expect: LC201
                for x, y in loader:
                    opt.zero_grad()
                    nn.functional.mse_loss(model(x), y).backward()
                    opt.step()
    """))


def test_a_branch_on_the_class_of_the_scheduler_narrows_it():
    # under `isinstance(scheduler, WarmRestarts)` the object is that plain class of the project,
    # whose `step()` only computes the next rate (`apply` sets it): no torch schedule is stepped early.
    # The other branch's torch scheduler, stepped at the top of the epoch, still is
    check(script("""
        import math

        class WarmRestarts:
            def __init__(self, top, bottom, period):
                self.top, self.bottom, self.period, self.t, self.lr = top, bottom, period, 0, top

            def step(self):
                self.t += 1
                self.lr = self.bottom + 0.5 * (self.top - self.bottom) * (1 + math.cos(math.pi * self.t / self.period))

            def apply(self, optimizer):
                for group in optimizer.param_groups:
                    group["lr"] = self.lr

        def train(model, loader, optimizer, scheduler, epochs):
            for epoch in range(epochs):
                if not isinstance(scheduler, WarmRestarts):
                    scheduler.step()  # expect: LC201
                for x, y in loader:
                    optimizer.zero_grad()
                    loss = nn.functional.mse_loss(model(x), y)
                    if isinstance(scheduler, WarmRestarts):
                        scheduler.step()
                        scheduler.apply(optimizer)
                    loss.backward()
                    optimizer.step()
    """))


def test_a_branch_on_a_torch_schedule_class_still_steps_a_torch_schedule():
    check(script("""
        class Warmup(torch.optim.lr_scheduler.LambdaLR):
            def __init__(self, optimizer, steps):
                super().__init__(optimizer, lambda s: min(1.0, (s + 1) / steps))

        def train(model, loader, optimizer, scheduler):
            for x, y in loader:
                if isinstance(scheduler, (Warmup, torch.optim.lr_scheduler.OneCycleLR)):
                    scheduler.step()  # expect: LC201
                optimizer.zero_grad()
                nn.functional.mse_loss(model(x), y).backward()
                optimizer.step()
                if isinstance(scheduler, Warmup):
                    scheduler.step()
    """))


def test_scheduler_after_the_optimizer_is_clean_at_both_levels():
    check(script("""
        def train(model, loader, epochs):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            per_step = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=epochs * len(loader))
            for epoch in range(epochs):
                model.train()
                for x, y in loader:
                    opt.zero_grad()
                    nn.functional.mse_loss(model(x), y).backward()
                    opt.step()
                    per_step.step()

        def train_epochs(model, loader, epochs):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=[30, 60])
            for epoch in range(epochs):
                model.train()
                for x, y in loader:
                    opt.zero_grad()
                    nn.functional.mse_loss(model(x), y).backward()
                    opt.step()
                sched.step()
    """))


def test_scheduler_under_the_accumulation_guard_with_the_optimizer_is_clean():
    check(script("""
        def train(model, loader, epochs, accum_steps=4):
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
            total_steps = epochs * len(loader) // accum_steps
            sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 1000))
            model.train()
            for epoch in range(epochs):
                for i, (x, y) in enumerate(loader):
                    loss = nn.functional.mse_loss(model(x), y) / accum_steps
                    loss.backward()
                    if (i + 1) % accum_steps == 0:
                        opt.step()
                        sched.step()
                        opt.zero_grad()
    """))


def test_two_optimizers_each_followed_by_its_scheduler_are_clean():
    check(script("""
        def train(netG, netD, loader, epochs):
            optD = torch.optim.Adam(netD.parameters(), lr=2e-4)
            optG = torch.optim.Adam(netG.parameters(), lr=2e-4)
            total = epochs * len(loader)
            schedD = torch.optim.lr_scheduler.LinearLR(optD, start_factor=1.0, end_factor=0.0, total_iters=total)
            schedG = torch.optim.lr_scheduler.LinearLR(optG, start_factor=1.0, end_factor=0.0, total_iters=total)
            for epoch in range(epochs):
                for real in loader:
                    fake = netG(torch.randn(real.size(0), 100))
                    optD.zero_grad()
                    lossD = netD(real).mean() - netD(fake.detach()).mean()
                    lossD.backward()
                    optD.step()
                    schedD.step()
                    optG.zero_grad()
                    lossG = -netD(fake).mean()
                    lossG.backward()
                    optG.step()
                    schedG.step()
    """))


def test_plateau_stepped_after_validation_is_not_lc201():
    check(script("""
        def fit(model, train_loader, val_loader, epochs):
            opt = torch.optim.Adam(model.parameters(), lr=1e-3)
            sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=2)
            for epoch in range(epochs):
                model.train()
                for x, y in train_loader:
                    opt.zero_grad()
                    nn.functional.mse_loss(model(x), y).backward()
                    opt.step()
                model.eval()
                with torch.no_grad():
                    val = sum(nn.functional.mse_loss(model(x), y).item() for x, y in val_loader)
                sched.step(val)
    """))


def test_scheduler_before_optimizer_across_files(tmp_path: Path):
    (tmp_path / "engine.py").write_text(textwrap.dedent("""\
        def train_one_epoch(model, loader, optimizer, criterion):
            model.train()
            for x, y in loader:
                optimizer.zero_grad()
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
    """))
    main = textwrap.dedent("""\
        import torch
        from torch import nn
        from engine import train_one_epoch

        def main(model, loader, epochs):
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10)
            for epoch in range(epochs):
                scheduler.step()  # expect: LC201
                train_one_epoch(model, loader, optimizer, nn.CrossEntropyLoss())
    """)
    path = tmp_path / "main.py"
    path.write_text(main)
    report = lint_paths([path], select="LC2", jobs=1)
    assert {(Path(f.path).name, f.line, f.code) for f in report.findings} == {
        ("main.py", line, code) for line, code in expected(main)
    }


# --------------------------------------------------------------------------- LC202


def test_onecycle_and_warmup_schedules_stepped_per_epoch():
    check(script("""
        from transformers import get_cosine_schedule_with_warmup

        def train(model, loader, epochs):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, epochs=epochs, steps_per_epoch=len(loader))
            for epoch in range(epochs):
                model.train()
                for x, y in loader:
                    opt.zero_grad()
                    nn.functional.mse_loss(model(x), y).backward()
                    opt.step()
                sched.step()  # expect: LC202

        def finetune(model, loader, epochs):
            opt = torch.optim.AdamW(model.parameters(), lr=2e-5)
            num_training_steps = epochs * len(loader)
            sched = get_cosine_schedule_with_warmup(opt, num_warmup_steps=500, num_training_steps=num_training_steps)
            model.train()
            for epoch in range(epochs):
                for batch in loader:
                    opt.zero_grad()
                    model(**batch).loss.backward()
                    opt.step()
                sched.step()  # expect: LC202
    """))


def test_cosine_sized_in_steps_stepped_per_epoch():
    check(script("""
        def train(model, loader, epochs):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=len(loader) * epochs)
            for epoch in range(epochs):
                model.train()
                for x, y in loader:
                    opt.zero_grad()
                    nn.functional.mse_loss(model(x), y).backward()
                    opt.step()
                sched.step()  # expect: LC202
    """))


def test_onecycle_sized_in_epochs_may_be_stepped_per_epoch():
    check(script("""
        def train(model, loader, epochs):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=epochs)
            for epoch in range(epochs):
                model.train()
                for x, y in loader:
                    opt.zero_grad()
                    nn.functional.mse_loss(model(x), y).backward()
                    opt.step()
                sched.step()
    """))


# --------------------------------------------------------------------------- LC203


def test_epoch_schedules_stepped_every_batch():
    check(script("""
        def train(model, loader, epochs):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            decay = torch.optim.lr_scheduler.StepLR(opt, step_size=30, gamma=0.1)
            cosine = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs)
            for epoch in range(epochs):
                model.train()
                for x, y in loader:
                    opt.zero_grad()
                    nn.functional.mse_loss(model(x), y).backward()
                    opt.step()
                    decay.step()  # expect: LC203
                    cosine.step()  # expect: LC203
    """))


def test_epoch_schedule_under_accumulation_guard_is_still_per_step():
    check(script("""
        def train(model, loader, epochs, accum=8):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=[30, 60])
            model.train()
            for epoch in range(epochs):
                for i, (x, y) in enumerate(loader):
                    (nn.functional.mse_loss(model(x), y) / accum).backward()
                    if (i + 1) % accum == 0:
                        opt.step()
                        sched.step()  # expect: LC203
                        opt.zero_grad()
    """))


def test_per_step_cosine_and_end_of_epoch_guard_and_fractional_epoch_are_clean():
    check(script("""
        def train(model, loader, epochs):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            total_steps = epochs * len(loader)
            cosine = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=total_steps)
            decay = torch.optim.lr_scheduler.StepLR(opt, step_size=30)
            restarts = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=10)
            iters = len(loader)
            for epoch in range(epochs):
                model.train()
                for i, (x, y) in enumerate(loader):
                    opt.zero_grad()
                    nn.functional.mse_loss(model(x), y).backward()
                    opt.step()
                    cosine.step()
                    restarts.step(epoch + i / iters)
                    if i == len(loader) - 1:
                        decay.step()
    """))


def test_step_based_loop_without_epochs_is_not_lc203():
    check(script("""
        def train(model, stream, max_steps):
            opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
            sched = torch.optim.lr_scheduler.StepLR(opt, step_size=30)
            model.train()
            for step, (x, y) in enumerate(stream):
                if step == max_steps:
                    break
                opt.zero_grad()
                nn.functional.mse_loss(model(x), y).backward()
                opt.step()
                sched.step()
    """))


# --------------------------------------------------------------------------- LC204


def test_plateau_without_metric_and_with_the_epoch_counter():
    check(script("""
        def fit(model, loader, val_loader, epochs):
            opt = torch.optim.Adam(model.parameters(), lr=1e-3)
            plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="min")
            for epoch in range(epochs):
                model.train()
                for x, y in loader:
                    opt.zero_grad()
                    nn.functional.mse_loss(model(x), y).backward()
                    opt.step()
                model.eval()
                with torch.no_grad():
                    val = sum(nn.functional.mse_loss(model(x), y).item() for x, y in val_loader)
                if epoch % 2:
                    plateau.step()  # expect: LC204
                else:
                    plateau.step(epoch)  # expect: LC204
    """))


def test_plateau_with_the_metric_is_clean():
    check(script("""
        def fit(model, loader, val_loader, epochs):
            opt = torch.optim.Adam(model.parameters(), lr=1e-3)
            plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="max")
            for epoch in range(epochs):
                model.train()
                for x, y in loader:
                    opt.zero_grad()
                    nn.functional.cross_entropy(model(x), y).backward()
                    opt.step()
                model.eval()
                hits = 0
                with torch.no_grad():
                    for x, y in val_loader:
                        hits += (model(x).argmax(1) == y).sum().item()
                plateau.step(metrics=hits / len(val_loader.dataset))
    """))


# --------------------------------------------------------------------------- LC205


def test_stepped_in_batch_loop_by_a_helper_and_again_per_epoch():
    check(script("""
        def train_one_epoch(model, loader, optimizer, scheduler):
            model.train()
            for x, y in loader:
                optimizer.zero_grad()
                nn.functional.mse_loss(model(x), y).backward()
                optimizer.step()
                scheduler.step()

        def main(model, loader, epochs):
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=epochs * len(loader))
            for epoch in range(epochs):
                train_one_epoch(model, loader, optimizer, scheduler)
                scheduler.step()  # expect: LC205
    """))


def test_per_epoch_schedule_in_both_loops_is_reported_in_the_batch_loop():
    check(script("""
        def train(model, loader, epochs):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            sched = torch.optim.lr_scheduler.StepLR(opt, step_size=30)
            for epoch in range(epochs):
                model.train()
                for x, y in loader:
                    opt.zero_grad()
                    nn.functional.mse_loss(model(x), y).backward()
                    opt.step()
                    sched.step()  # expect: LC205
                sched.step()
    """))


def test_stepped_twice_in_one_iteration_through_a_helper():
    check(script("""
        def optimizer_step(optimizer, scheduler):
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()

        def train(model, loader, epochs):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=epochs * len(loader))
            model.train()
            for epoch in range(epochs):
                for x, y in loader:
                    nn.functional.mse_loss(model(x), y).backward()
                    optimizer_step(opt, sched)
                    sched.step()  # expect: LC205
    """))


def test_optimizer_and_scheduler_stepped_twice_in_one_iteration_is_one_step_each():
    """A checkpoint round-trip test: a step, a save and a load, another step; the schedule
    follows the optimizer step for step."""
    check(script("""
        def test_save_and_resume(model, data, tmp_dir, configs):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            schedulers = [torch.optim.lr_scheduler.StepLR(opt, step_size=1)]
            for config in configs:
                model(data).sum().backward()
                opt.step()
                [scheduler.step() for scheduler in schedulers]
                torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, tmp_dir / config)
                model.load_state_dict(torch.load(tmp_dir / config)["model"])
                model(data).sum().backward()
                opt.step()
                [scheduler.step() for scheduler in schedulers]
    """))


def test_two_scheduler_steps_with_the_optimizer_stepped_through_an_unknown_wrapper():
    """The optimizer steps through a framework's wrapper the model does not know: whether it
    steps between the two scheduler steps is not seen, so no error."""
    check(script("""
        def run(strategy, model, data, tmp_dir, configs):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            sched = torch.optim.lr_scheduler.LinearLR(opt)
            wrapped = strategy.build_wrapper(opt)
            for config in configs:
                model(data).sum().backward()
                wrapped.step()
                sched.step()
                strategy.save_checkpoint(tmp_dir / config)
                model(data).sum().backward()
                wrapped.step()
                sched.step()
    """))


def test_a_diffusion_samplers_step_is_not_a_learning_rate_step():
    """`scheduler.step(model_output, timestep, sample)` of a noise scheduler, twice per loop of a
    sampling test or a predictor-corrector pipeline: no learning rate moves."""
    check(script("""
        def check_two_steps(scheduler_class, config, unet, sample):
            scheduler = scheduler_class(**config)
            scheduler.set_timesteps(10)
            for t in scheduler.timesteps:
                residual = unet(sample, t)
                first = scheduler.step(residual, t, sample).prev_sample
                second = scheduler.step(residual, t, first, return_dict=False)[0]
                sample = second
    """))


def test_steps_on_two_branches_are_one_step():
    check(script("""
        def train(model, loader, epochs, warmup_epochs=5):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            warm = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=warmup_epochs)
            main = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs - warmup_epochs)
            for epoch in range(epochs):
                model.train()
                for x, y in loader:
                    opt.zero_grad()
                    nn.functional.mse_loss(model(x), y).backward()
                    opt.step()
                if epoch < warmup_epochs:
                    warm.step()
                else:
                    main.step()
    """))


# --------------------------------------------------------------------------- messages


def test_messages_name_the_objects():
    source = script("""
        def train(model, loader, epochs):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=epochs * len(loader))
            for epoch in range(epochs):
                model.train()
                for x, y in loader:
                    sched.step()
                    opt.zero_grad()
                    nn.functional.mse_loss(model(x), y).backward()
                    opt.step()
    """)
    (finding,) = [f for f in lint_source(source) if f.code == "LC201"]
    assert finding.message.startswith("`sched.step()` (line 10) runs before `opt.step()` (line 13) in the batch loop")
    assert finding.severity.value == "error"


def test_steps_under_complementary_settings_are_not_lc205():
    check(script("""
        def train(model, loader, epochs, per_step):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs * len(loader) if per_step else epochs)
            for epoch in range(epochs):
                model.train()
                for x, y in loader:
                    opt.zero_grad()
                    nn.functional.mse_loss(model(x), y).backward()
                    opt.step()
                    if per_step:
                        sched.step()
                if not per_step:
                    sched.step()
    """))


def test_timm_plateau_takes_epoch_then_metric():
    check(script("""
        from timm.scheduler import PlateauLRScheduler

        def fit(model, loader, val_loader, epochs):
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
            sched = PlateauLRScheduler(opt, decay_rate=0.5, patience_t=3)
            for epoch in range(epochs):
                model.train()
                for x, y in loader:
                    opt.zero_grad()
                    nn.functional.mse_loss(model(x), y).backward()
                    opt.step()
                model.eval()
                with torch.no_grad():
                    val = sum(nn.functional.mse_loss(model(x), y).item() for x, y in val_loader)
                sched.step(epoch + 1, val)
    """))
