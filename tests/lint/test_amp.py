"""LC401-LC405: GradScaler order in the training step and the deprecated AMP spellings."""

from __future__ import annotations

import textwrap

from . import _support
from ._support import codes, snippet


def lc4(source: str) -> list[tuple[int, str]]:
    return codes(source, ["LC4"])


def messages(source: str, code: str) -> list[str]:
    return _support.messages(snippet(source), code)


# --- LC401 clip-before-unscale -----------------------------------------------------------------

CLIP_SCALED = """
import torch

def train_one_epoch(model, loader, optimizer, criterion, scaler):
    model.train()
    for x, y in loader:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = criterion(model(x), y)
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
"""


def test_clip_of_scaled_gradients_is_reported():
    assert lc4(CLIP_SCALED) == [(10, "LC401")]
    (message,) = messages(CLIP_SCALED, "LC401")
    assert "scaler.unscale_(optimizer)" in message


def test_unscale_before_clip_is_clean():
    good = CLIP_SCALED.replace(
        "        torch.nn.utils.clip_grad_norm_",
        "        scaler.unscale_(optimizer)\n        torch.nn.utils.clip_grad_norm_",
    )
    assert lc4(good) == []


def test_unscale_after_the_clip_is_too_late():
    late = CLIP_SCALED.replace(
        "        scaler.step(optimizer)",
        "        scaler.unscale_(optimizer)\n        scaler.step(optimizer)",
    )
    assert lc4(late) == [(10, "LC401")]


def test_clip_value_counts_as_clipping():
    src = CLIP_SCALED.replace("clip_grad_norm_(model.parameters(), 1.0)", "clip_grad_value_(model.parameters(), 0.5)")
    assert lc4(src) == [(10, "LC401")]


def test_amp_and_plain_branches_are_judged_separately():
    src = """
    import torch

    def train_one_epoch(model, loader, optimizer, criterion, scaler=None, grad_clip=None):
        model.train()
        for x, y in loader:
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast("cuda", enabled=scaler is not None):
                loss = criterion(model(x), y)
            if scaler is not None:
                scaler.scale(loss).backward()
                if grad_clip is not None:
                    scaler.unscale_(optimizer)
                    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
                scaler.step(optimizer)
                scaler.update()
            else:
                loss.backward()
                if grad_clip is not None:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
                optimizer.step()
    """
    assert lc4(src) == []


def test_clip_after_both_branches_without_unscale_is_reported():
    src = """
    import torch

    def train_one_epoch(model, loader, optimizer, criterion, scaler, use_amp):
        for x, y in loader:
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            if use_amp:
                scaler.scale(loss).backward()
            else:
                loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            if use_amp:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
    """
    assert lc4(src) == [(11, "LC401")]


def test_unscale_in_called_helper_under_accumulation_guard_is_clean():
    src = """
    import torch

    def clip_gradients(scaler, optimizer, model, max_norm):
        scaler.unscale_(optimizer)
        return torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)

    def train(model, loader, optimizer, scaler, accum_steps=4):
        model.train()
        for i, batch in enumerate(loader):
            with torch.autocast("cuda", dtype=torch.float16):
                loss = model(**batch).loss / accum_steps
            scaler.scale(loss).backward()
            if (i + 1) % accum_steps == 0:
                clip_gradients(scaler, optimizer, model, 1.0)
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad(set_to_none=True)
    """
    assert lc4(src) == []


def test_loss_scaler_class_that_unscales_inside_is_clean():
    src = """
    import torch

    class NativeScaler:
        def __init__(self):
            self._scaler = torch.amp.GradScaler("cuda")

        def __call__(self, loss, optimizer, clip_grad=None, parameters=None):
            self._scaler.scale(loss).backward()
            if clip_grad is not None:
                self._scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(parameters, clip_grad)
            self._scaler.step(optimizer)
            self._scaler.update()

    def train_one_epoch(model, criterion, loader, optimizer, loss_scaler):
        model.train()
        for x, y in loader:
            with torch.autocast("cuda"):
                loss = criterion(model(x), y)
            optimizer.zero_grad()
            loss_scaler(loss, optimizer, clip_grad=1.0, parameters=model.parameters())

    def main(model, criterion, loader):
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        loss_scaler = NativeScaler()
        for epoch in range(10):
            train_one_epoch(model, criterion, loader, optimizer, loss_scaler)
    """
    assert lc4(src) == []


def test_accelerate_backward_and_clip_are_clean():
    src = """
    import torch
    from accelerate import Accelerator

    def train(model, loader, optimizer):
        accelerator = Accelerator(mixed_precision="fp16")
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        model.train()
        for batch in loader:
            loss = model(**batch).loss
            accelerator.backward(loss)
            accelerator.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad()
    """
    assert lc4(src) == []


def test_bf16_autocast_without_scaler_is_clean():
    src = """
    import torch

    def train(model, loader, optimizer, criterion):
        model.train()
        for x, y in loader:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = criterion(model(x), y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    """
    assert lc4(src) == []


# --- LC402 optimizer-step-bypasses-scaler ------------------------------------------------------

DIRECT_STEP = """
import torch

def train_one_epoch(model, loader, optimizer, criterion):
    scaler = torch.amp.GradScaler("cuda")
    model.train()
    for x, y in loader:
        optimizer.zero_grad()
        with torch.autocast("cuda", dtype=torch.float16):
            loss = criterion(model(x), y)
        scaler.scale(loss).backward()
        optimizer.step()
"""


def test_direct_optimizer_step_after_scaled_backward_is_reported():
    assert lc4(DIRECT_STEP) == [(11, "LC402")]
    (message,) = messages(DIRECT_STEP, "LC402")
    assert "scaler.step(optimizer)" in message and "scaler.update()" in message


def test_scaler_step_is_clean():
    good = DIRECT_STEP.replace("        optimizer.step()", "        scaler.step(optimizer)\n        scaler.update()")
    assert lc4(good) == []


def test_direct_step_on_the_plain_branch_is_clean():
    src = """
    import torch

    def train(model, loader, optimizer, criterion, scaler, args):
        for x, y in loader:
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            if args.amp:
                scaler.scale(loss).backward()
            else:
                loss.backward()
            if not args.amp:
                optimizer.step()
            else:
                scaler.step(optimizer)
                scaler.update()
    """
    assert lc4(src) == []


def test_gan_generator_stepped_around_the_scaler_is_reported():
    src = """
    import torch

    def train(netG, netD, loader, criterion, optD, optG, nz=100):
        scaler = torch.amp.GradScaler("cuda")
        for real, _ in loader:
            optD.zero_grad()
            with torch.autocast("cuda"):
                fake = netG(torch.randn(real.size(0), nz, 1, 1))
                lossD = criterion(netD(real), netD(fake.detach()))
            scaler.scale(lossD).backward()
            scaler.step(optD)
            optG.zero_grad()
            with torch.autocast("cuda"):
                lossG = criterion(netD(fake), None)
            scaler.scale(lossG).backward()
            optG.step()
            scaler.update()
    """
    assert lc4(src) == [(16, "LC402")]


# --- LC403 scaler-update-missing ---------------------------------------------------------------

NO_UPDATE = """
import torch

def train_one_epoch(model, loader, optimizer, criterion, scaler):
    model.train()
    for x, y in loader:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = criterion(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
"""


def test_scaler_step_without_update_is_reported():
    assert lc4(NO_UPDATE) == [(10, "LC403")]


def test_update_once_per_epoch_is_reported():
    src = """
    import torch

    def train(model, loader, optimizer, criterion, scaler, epochs):
        for epoch in range(epochs):
            model.train()
            for x, y in loader:
                optimizer.zero_grad()
                with torch.autocast("cuda"):
                    loss = criterion(model(x), y)
                scaler.scale(loss).backward()
                scaler.step(optimizer)
            scaler.update()
    """
    assert lc4(src) == [(11, "LC403")]


def test_update_in_a_called_helper_is_clean():
    src = NO_UPDATE.replace(
        "        scaler.step(optimizer)\n",
        "        finish_step(scaler, optimizer)\n",
    ) + textwrap.dedent(
        """
        def finish_step(scaler, optimizer):
            scaler.step(optimizer)
            scaler.update()
        """
    )
    assert lc4(src) == []


def test_one_update_for_two_optimizers_is_clean():
    src = """
    import torch

    def train(model, loader, criterion, scaler, optimizers):
        for x, y in loader:
            for opt in optimizers:
                opt.zero_grad()
            with torch.autocast("cuda"):
                loss = criterion(model(x), y)
            scaler.scale(loss).backward()
            for opt in optimizers:
                scaler.step(opt)
            scaler.update()
    """
    assert lc4(src) == []


def test_step_method_over_its_optimizers_leaves_the_iteration_to_its_caller():
    # a wrapper's per-batch method: the loop only walks the optimizers, each stepped once, then
    # one update; the batch loop is the caller's. A loop that steps the same optimizer again is not
    src = """
    import torch

    class Optimizers:
        def __init__(self, optimizers, scaler, accum=1):
            self.optimizers = optimizers
            self.scaler = scaler
            self.accum = accum

        def step(self, loss, global_step):
            self.scaler.scale(loss).backward()
            if (global_step + 1) % self.accum == 0:
                for optimizer in self.optimizers:
                    self.scaler.unscale_(optimizer)
                for optimizer in self.optimizers:
                    self.scaler.step(optimizer)
                self.scaler.update()
                for optimizer in self.optimizers:
                    optimizer.zero_grad(set_to_none=True)

        def step_twice(self, loss, optimizer):
            self.scaler.scale(loss).backward()
            for _ in range(2):
                self.scaler.step(optimizer)
    """
    assert lc4(src) == [(23, "LC403")]


def test_step_and_update_under_accumulation_guard_are_clean():
    src = """
    import torch

    def train(model, loader, optimizer, scaler, accum=8):
        for i, batch in enumerate(loader):
            with torch.autocast("cuda"):
                loss = model(batch).mean() / accum
            scaler.scale(loss).backward()
            if (i + 1) % accum == 0:
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad()
    """
    assert lc4(src) == []


# --- LC404 backward-not-scaled -----------------------------------------------------------------

UNSCALED = """
import torch

def train_one_epoch(model, loader, optimizer, criterion, scaler):
    model.train()
    for x, y in loader:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = criterion(model(x), y)
        loss.backward()
        scaler.step(optimizer)
        scaler.update()
"""


def test_unscaled_backward_with_scaler_step_is_reported():
    assert lc4(UNSCALED) == [(9, "LC404")]
    (message,) = messages(UNSCALED, "LC404")
    assert "scaler.scale(loss).backward()" in message


def test_scaled_backward_is_clean():
    assert lc4(UNSCALED.replace("        loss.backward()", "        scaler.scale(loss).backward()")) == []


def test_a_scaled_loss_kept_in_a_name_is_scaled():
    scaled = UNSCALED.replace("        loss.backward()", "        scaled = scaler.scale(loss) / 2\n        scaled.backward()")
    assert lc4(scaled) == []
    # rebound to something the scaler never saw, it is not
    rebound = scaled.replace("        scaled.backward()", "        scaled = loss * 0.5\n        scaled.backward()")
    assert lc4(rebound) == [(11, "LC404")]


def test_a_loss_scaled_in_one_branch_is_not_judged_unscaled():
    # a trainer that scales only under fp16, through `typing.cast`, then one backward for both
    src = """
    import torch
    from typing import cast

    def train(model, loader, optimizer, scaler, use_grad_scaling):
        for x, y in loader:
            optimizer.zero_grad()
            loss = model(x, y)
            if use_grad_scaling:
                loss = cast(torch.Tensor, scaler.scale(loss))
            loss.backward()
            if use_grad_scaling:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
    """
    assert lc4(src) == []


def test_a_scaled_loss_handed_to_a_helper_is_scaled():
    src = """
    import torch

    def backward_pass(loss):
        loss.backward()

    def train(model, loader, optimizer, scaler):
        for x, y in loader:
            optimizer.zero_grad()
            backward_pass(scaler.scale(model(x, y)))
            scaler.step(optimizer)
            scaler.update()
    """
    assert lc4(src) == []
    assert lc4(src.replace("backward_pass(scaler.scale(model(x, y)))", "backward_pass(model(x, y))")) == [(4, "LC404")]


def test_plain_branch_with_disabled_scaler_after_both_branches_is_clean():
    src = """
    import torch

    def train(model, loader, optimizer, criterion, use_amp):
        scaler = torch.amp.GradScaler("cuda", enabled=use_amp)
        for x, y in loader:
            optimizer.zero_grad()
            with torch.autocast("cuda", enabled=use_amp):
                loss = criterion(model(x), y)
            if use_amp:
                scaler.scale(loss).backward()
            else:
                loss.backward()
            scaler.step(optimizer)
            scaler.update()
    """
    assert lc4(src) == []


def test_gan_generator_loss_not_scaled_is_reported():
    src = """
    import torch

    def train(netG, netD, loader, criterion, optD, optG, nz=100):
        scaler = torch.amp.GradScaler("cuda")
        for real, _ in loader:
            netD.zero_grad()
            with torch.autocast("cuda"):
                fake = netG(torch.randn(real.size(0), nz, 1, 1))
                errD = criterion(netD(real), netD(fake.detach()))
            scaler.scale(errD).backward()
            scaler.step(optD)
            netG.zero_grad()
            with torch.autocast("cuda"):
                errG = criterion(netD(fake), None)
            errG.backward()
            scaler.step(optG)
            scaler.update()
    """
    assert lc4(src) == [(15, "LC404")]


def test_enabled_false_scaler_used_everywhere_is_clean():
    src = """
    import torch

    def train(model, loader, optimizer, criterion, use_amp=False):
        scaler = torch.amp.GradScaler("cuda", enabled=use_amp)
        for x, y in loader:
            optimizer.zero_grad()
            with torch.autocast("cuda", enabled=use_amp):
                loss = criterion(model(x), y)
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
    """
    assert lc4(src) == []


# --- LC405 deprecated-amp-api ------------------------------------------------------------------


def test_deprecated_attribute_calls_are_reported_with_the_replacement():
    src = """
    import torch

    scaler = torch.cuda.amp.GradScaler(init_scale=2.0**14)
    ctx = torch.cuda.amp.autocast(dtype=torch.float16)
    cpu_ctx = torch.cpu.amp.autocast()
    fine = torch.amp.autocast("cuda")
    """
    assert lc4(src) == [(3, "LC405"), (4, "LC405"), (5, "LC405")]
    text = " ".join(messages(src, "LC405"))
    assert 'torch.amp.GradScaler("cuda", ...)' in text
    assert 'torch.amp.autocast("cuda", ...)' in text
    assert 'torch.amp.autocast("cpu", ...)' in text


def test_deprecated_from_import_reports_the_import_and_each_call():
    src = """
    from torch.cuda.amp import GradScaler, autocast

    def train(model, loader, optimizer):
        scaler = GradScaler()
        for x in loader:
            with autocast():
                loss = model(x).mean()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
    """
    assert lc4(src) == [(1, "LC405"), (4, "LC405"), (6, "LC405")]


def test_aliased_modules_are_resolved():
    src = """
    import torch as th
    import torch.cuda.amp as amp
    from torch.cuda import amp as cuda_amp

    a = th.cuda.amp.autocast()
    b = amp.GradScaler()
    c = cuda_amp.autocast()
    """
    assert lc4(src) == [(2, "LC405"), (3, "LC405"), (5, "LC405"), (6, "LC405"), (7, "LC405")]


def test_torch_amp_and_other_cuda_amp_names_are_clean():
    src = """
    import torch
    from torch.amp import GradScaler, autocast
    from torch.cuda import amp  # the module alone is not reported

    scaler = GradScaler("cuda")
    with autocast("cuda", dtype=torch.bfloat16):
        pass
    """
    assert lc4(src) == []


def test_events_of_separate_entry_functions_are_not_chained():
    src = """
    import torch

    def backward_step(scaler, loss):
        scaler.scale(loss).backward()

    def clip(model, max_norm):
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    """
    assert lc4(src) == []


def test_step_function_without_loop_leaves_update_to_its_caller():
    src = """
    import torch

    def train_step(model, batch, optimizer, scaler):
        with torch.autocast("cuda"):
            loss = model(batch).mean()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        optimizer.zero_grad()
        return loss.detach()
    """
    assert lc4(src) == []


def test_scaler_handed_to_an_unknown_helper_is_left_alone():
    src = """
    import torch
    from trainlib.amp import finish_step, unscale_all

    def train(model, loader, optimizer, criterion, scaler):
        for x, y in loader:
            optimizer.zero_grad()
            with torch.autocast("cuda"):
                loss = criterion(model(x), y)
            scaler.scale(loss).backward()
            unscale_all(scaler, [optimizer])
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            finish_step(scaler)
    """
    assert lc4(src) == []


def test_a_stand_in_scaler_in_the_other_branch_keeps_the_real_ones_steps():
    """Without mixed precision the loop gets a do-nothing scaler of the project's own; with it, a
    GradScaler. The unscale before clipping is the GradScaler's, and so is the step."""
    src = """
    import torch

    class NoOpScaler:
        def scale(self, loss):
            return loss

        def unscale_(self, optimizer):
            pass

        def step(self, optimizer):
            optimizer.step()

        def update(self):
            pass

    def train(model, loader, optimizer, use_amp, clip):
        if use_amp:
            scaler = torch.amp.GradScaler("cuda")
        else:
            scaler = NoOpScaler()
        for batch in loader:
            optimizer.zero_grad()
            with torch.autocast("cuda", enabled=use_amp):
                loss = model(**batch).loss
            scaler.scale(loss).backward()
            if clip:
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            scaler.step(optimizer)
            scaler.update()
    """
    assert lc4(src) == []
