"""LC801: EMA / SWA averaging before the optimizer step.

Each case is a small script whose offending lines carry `# expect: LC801`; the test asserts that
the LC8 findings are exactly those (line, code) pairs.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from . import _support

pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")  # a rule crash fails the test

HEAD = """\
import torch
import torch.nn as nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
"""


def found_in_project(path: Path) -> set[tuple[str, int, str]]:
    return _support.found_in_project(path, "LC8")


def check(body: str) -> None:
    _support.check(HEAD + textwrap.dedent(body), "LC8")


def test_update_between_backward_and_step():
    check("""
        def train(model, loader, epochs):
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
            ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.999))
            criterion = nn.CrossEntropyLoss()
            for epoch in range(epochs):
                model.train()
                for x, y in loader:
                    opt.zero_grad()
                    loss = criterion(model(x), y)
                    loss.backward()
                    ema.update_parameters(model)  # expect: LC801
                    opt.step()
    """)


def test_update_at_the_top_of_the_iteration():
    check("""
        from timm.utils import ModelEmaV2

        def train(model, loader, epochs):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            model_ema = ModelEmaV2(model, decay=0.9998)
            criterion = nn.CrossEntropyLoss()
            for epoch in range(epochs):
                model.train()
                for x, y in loader:
                    model_ema.update(model)  # expect: LC801
                    opt.zero_grad()
                    loss = criterion(model(x), y)
                    loss.backward()
                    opt.step()
    """)


def test_update_after_the_step_is_fine():
    check("""
        def train(model, loader, epochs):
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
            ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.999))
            criterion = nn.CrossEntropyLoss()
            for epoch in range(epochs):
                model.train()
                for x, y in loader:
                    opt.zero_grad()
                    loss = criterion(model(x), y)
                    loss.backward()
                    opt.step()
                    ema.update_parameters(model)
    """)


def test_update_before_the_scaler_step_in_a_helper():
    check("""
        def step(model, batch, opt, scaler, ema, criterion):
            x, y = batch
            with torch.autocast("cuda", dtype=torch.float16):
                loss = criterion(model(x), y)
            scaler.scale(loss).backward()
            ema.update_parameters(model)  # expect: LC801
            scaler.step(opt)
            scaler.update()
            opt.zero_grad(set_to_none=True)

        def train(model, loader, epochs):
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
            scaler = torch.amp.GradScaler("cuda")
            ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.999))
            criterion = nn.CrossEntropyLoss()
            for epoch in range(epochs):
                model.train()
                for batch in loader:
                    step(model, batch, opt, scaler, ema, criterion)
    """)


def test_update_under_the_accumulation_guard_after_the_step_is_fine():
    check("""
        def train(model, loader, epochs, accum=4):
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
            ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.999))
            criterion = nn.CrossEntropyLoss()
            for epoch in range(epochs):
                model.train()
                for i, (x, y) in enumerate(loader):
                    loss = criterion(model(x), y) / accum
                    loss.backward()
                    if (i + 1) % accum == 0:
                        opt.step()
                        opt.zero_grad()
                        ema.update_parameters(model)
    """)


def test_update_before_a_guarded_step_is_reported():
    check("""
        def train(model, loader, epochs, accum=4):
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
            ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.999))
            criterion = nn.CrossEntropyLoss()
            for epoch in range(epochs):
                model.train()
                for i, (x, y) in enumerate(loader):
                    loss = criterion(model(x), y) / accum
                    loss.backward()
                    ema.update_parameters(model)  # expect: LC801
                    if (i + 1) % accum == 0:
                        opt.step()
                        opt.zero_grad()
    """)


def test_swa_at_the_top_of_the_epoch_and_at_its_end():
    check("""
        def train_top(model, loader, epochs, swa_start):
            opt = torch.optim.SGD(model.parameters(), lr=0.05)
            swa_model = AveragedModel(model)
            criterion = nn.CrossEntropyLoss()
            for epoch in range(epochs):
                if epoch >= swa_start:
                    swa_model.update_parameters(model)  # expect: LC801
                model.train()
                for x, y in loader:
                    opt.zero_grad()
                    loss = criterion(model(x), y)
                    loss.backward()
                    opt.step()

        def train_end(model, loader, epochs, swa_start):
            opt = torch.optim.SGD(model.parameters(), lr=0.05)
            swa_model = AveragedModel(model)
            criterion = nn.CrossEntropyLoss()
            for epoch in range(epochs):
                model.train()
                for x, y in loader:
                    opt.zero_grad()
                    loss = criterion(model(x), y)
                    loss.backward()
                    opt.step()
                if epoch >= swa_start:
                    swa_model.update_parameters(model)
    """)


def test_swa_at_the_top_of_the_epoch_before_a_helper_that_trains():
    check("""
        def train_one_epoch(model, loader, opt, criterion):
            model.train()
            for x, y in loader:
                opt.zero_grad()
                loss = criterion(model(x), y)
                loss.backward()
                opt.step()

        def train(model, loader, epochs):
            opt = torch.optim.SGD(model.parameters(), lr=0.05)
            swa_model = AveragedModel(model)
            criterion = nn.CrossEntropyLoss()
            for epoch in range(epochs):
                swa_model.update_parameters(model)  # expect: LC801
                train_one_epoch(model, loader, opt, criterion)
    """)


def test_gan_average_of_the_generator_after_its_step():
    check("""
        def train(gen, disc, loader, epochs):
            opt_g = torch.optim.Adam(gen.parameters(), lr=2e-4, betas=(0.5, 0.999))
            opt_d = torch.optim.Adam(disc.parameters(), lr=2e-4, betas=(0.5, 0.999))
            gen_ema = AveragedModel(gen, multi_avg_fn=get_ema_multi_avg_fn(0.999))
            bce = nn.BCEWithLogitsLoss()
            for epoch in range(epochs):
                for real in loader:
                    z = torch.randn(real.size(0), 128)
                    fake = gen(z)
                    opt_d.zero_grad()
                    ones, zeros = torch.ones(real.size(0), 1), torch.zeros(real.size(0), 1)
                    d_loss = bce(disc(real), ones) + bce(disc(fake.detach()), zeros)
                    d_loss.backward()
                    opt_d.step()
                    opt_g.zero_grad()
                    g_loss = bce(disc(fake), ones)
                    g_loss.backward()
                    opt_g.step()
                    gen_ema.update_parameters(gen)
    """)


def test_update_in_a_trainer_method_across_files(tmp_path: Path):
    (tmp_path / "engine.py").write_text(textwrap.dedent("""
        def optimizer_step(model, optimizer, ema):
            ema.update(model)
            optimizer.step()
            optimizer.zero_grad()
    """))
    source = textwrap.dedent("""
        import torch
        import torch.nn as nn
        from timm.utils import ModelEmaV2
        from engine import optimizer_step

        def train(model, loader, epochs):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            ema = ModelEmaV2(model)
            criterion = nn.CrossEntropyLoss()
            for epoch in range(epochs):
                model.train()
                for x, y in loader:
                    loss = criterion(model(x), y)
                    loss.backward()
                    optimizer_step(model, opt, ema)
    """)
    (tmp_path / "train.py").write_text(source)
    assert found_in_project(tmp_path / "train.py") == {("engine.py", 3, "LC801")}
