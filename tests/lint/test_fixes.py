"""`loopcheck lint --fix`: each fix on realistic snippets, and the guarantees of fix_source.

For every fixed snippet: the result parses, the fixed code's finding is gone, no code has more
findings than before, comments and blank lines survive, and fixing again changes nothing.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from collections import Counter

import libcst as cst
import pytest

from loopcheck.catalog import catalog
from loopcheck.findings import Finding, Severity
from loopcheck.lint.api import lint_source
from loopcheck.lint.fixes import describe_fix, fixable_codes
from loopcheck.lint.fixing import FixResult, fix_source
from loopcheck.lint.fixes.base import FIXERS
from loopcheck.lint.fixes.edits import Edit, apply_edits, edits_between, edits_replacing
from loopcheck.lint.rules.base import FileContext

PATH = "train.py"


def src(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def lint(source: str) -> list[Finding]:
    result = lint_source(source, PATH)
    return list(getattr(result, "findings", result))


def codes(source: str) -> Counter:
    return Counter(f.code for f in lint(source))


def comments(source: str) -> list[str]:
    return [m.group(0).strip() for m in re.finditer(r"#.*$", source, re.M)]


def blank_lines(source: str) -> int:
    return sum(1 for line in source.splitlines() if not line.strip())


def check_fix(source: str, code: str, expected: str, *, unsafe: bool = False) -> FixResult:
    """Fix `source` and hold the result to every guarantee, and to the exact expected text."""
    before = codes(source)
    assert before[code] >= 1, f"{code} not found in the input: {dict(before)}"
    result = fix_source(source, PATH, unsafe=unsafe)
    cst.parse_module(result.source)
    after = codes(result.source)
    assert after[code] == 0, [str(f) for f in result.remaining]
    assert all(after[c] <= before[c] for c in after), (dict(before), dict(after))
    assert sorted(comments(result.source)) == sorted(comments(source))
    assert blank_lines(result.source) == blank_lines(source)
    assert {f.code for f in result.fixed} >= {code}
    assert result.source == expected
    again = fix_source(result.source, PATH, unsafe=unsafe)
    assert again.source == result.source and again.fixed == []
    return result


def check_untouched(source: str, code: str, *, unsafe: bool = True) -> None:
    assert codes(source)[code] >= 1
    result = fix_source(source, PATH, unsafe=unsafe)
    assert result.source == source
    assert result.fixed == []
    assert code in {f.code for f in result.remaining}


# --- LC405 deprecated AMP API (safe) ---------------------------------------------------------


def test_lc405_from_import_rewrites_the_import_and_every_call():
    source = src(
        '''
        import torch
        from torch.cuda.amp import GradScaler, autocast  # mixed precision


        def train_one_epoch(model, loader, optimizer, criterion, use_amp=True):
            scaler = GradScaler(
                init_scale=2.0**14,
                enabled=use_amp,
            )
            model.train()
            for inputs, targets in loader:
                optimizer.zero_grad(set_to_none=True)

                with autocast(use_amp):
                    loss = criterion(model(inputs), targets)
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
        '''
    )
    expected = src(
        '''
        import torch
        from torch.amp import GradScaler, autocast  # mixed precision


        def train_one_epoch(model, loader, optimizer, criterion, use_amp=True):
            scaler = GradScaler(
                "cuda",
                init_scale=2.0**14,
                enabled=use_amp,
            )
            model.train()
            for inputs, targets in loader:
                optimizer.zero_grad(set_to_none=True)

                with autocast("cuda", enabled=use_amp):
                    loss = criterion(model(inputs), targets)
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
        '''
    )
    check_fix(source, "LC405", expected)


def test_lc405_dotted_calls_in_a_trainer_class():
    source = src(
        '''
        import torch as th


        class Trainer:
            def __init__(self, model, optimizer, amp):
                self.model = model
                self.optimizer = optimizer
                # the scaler is a no-op when amp is off
                self.scaler = th.cuda.amp.GradScaler(enabled=amp)
                self.amp = amp

            def train_step(self, batch):
                self.optimizer.zero_grad()
                with th.cuda.amp.autocast(enabled=self.amp, dtype=th.bfloat16):
                    loss = self.model(**batch).loss
                self.scaler.scale(loss).backward()
                self.scaler.step(self.optimizer)
                self.scaler.update()
                return loss.item()
        '''
    )
    expected = source.replace(
        "th.cuda.amp.GradScaler(enabled=amp)", 'th.amp.GradScaler("cuda", enabled=amp)'
    ).replace("th.cuda.amp.autocast(enabled", 'th.amp.autocast("cuda", enabled')
    check_fix(source, "LC405", expected)


def test_lc405_cpu_autocast_and_module_alias():
    source = src(
        '''
        import torch
        from torch.cuda import amp


        def evaluate_step(model, batch):
            with torch.cpu.amp.autocast(dtype=torch.bfloat16):
                return model(batch)


        def make_scaler():
            return amp.GradScaler(growth_interval=100)
        '''
    )
    expected = src(
        '''
        import torch
        from torch import amp


        def evaluate_step(model, batch):
            with torch.amp.autocast("cpu", dtype=torch.bfloat16):
                return model(batch)


        def make_scaler():
            return amp.GradScaler("cuda", growth_interval=100)
        '''
    )
    check_fix(source, "LC405", expected)


def test_lc405_not_fixed_when_a_use_is_not_a_call():
    # `autocast` is passed around as a value: its calls cannot all be given the device
    source = src(
        '''
        import contextlib

        import torch
        from torch.cuda.amp import autocast


        def forward(model, x, use_amp):
            ctx = autocast if use_amp else contextlib.nullcontext
            with ctx():
                return model(x)
        '''
    )
    check_untouched(source, "LC405")


# --- LC508 torch.load without weights_only (unsafe) ------------------------------------------

RESUME = src(
    '''
    import torch


    def resume(model, optimizer, path):
        # restore the last checkpoint
        state = torch.load(path, map_location="cpu")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])

        extra = torch.load(
            path.with_suffix(".extra.pt"),
            map_location="cpu",
        )
        return state["epoch"] + 1, extra
    '''
)


def test_lc508_adds_weights_only_with_unsafe():
    expected = RESUME.replace(
        'torch.load(path, map_location="cpu")', 'torch.load(path, map_location="cpu", weights_only=True)'
    ).replace('        map_location="cpu",\n', '        map_location="cpu",\n        weights_only=True,\n')
    check_fix(RESUME, "LC508", expected, unsafe=True)


def test_lc508_is_not_applied_without_unsafe():
    result = fix_source(RESUME, PATH)
    assert result.source == RESUME
    assert result.fixed == []
    assert [f.code for f in result.remaining].count("LC508") == 2



def test_lc508_single_argument_through_a_torch_alias():
    source = src(
        '''
        import io

        import torch as th


        def restore(model, blob):
            state = th.load(io.BytesIO(blob))  # from the object store
            model.load_state_dict(state)
        '''
    )
    expected = source.replace("th.load(io.BytesIO(blob))", "th.load(io.BytesIO(blob), weights_only=True)")
    check_fix(source, "LC508", expected, unsafe=True)


def test_lc508_not_fixed_with_a_custom_pickle_module():
    source = src(
        '''
        import dill
        import torch


        def load_run(path):
            return torch.load(path, map_location="cpu", pickle_module=dill)
        '''
    )
    check_untouched(source, "LC508")

# --- LC201 scheduler stepped before the optimizer (safe) -------------------------------------


def test_lc201_epoch_scheduler_moves_after_the_batch_loop():
    source = src(
        '''
        import torch
        from torch import nn


        def train(model, loader, epochs):
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
            scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[30, 60], gamma=0.1)
            criterion = nn.CrossEntropyLoss()
            for epoch in range(epochs):
                # decay at the milestones
                scheduler.step()

                model.train()
                for images, labels in loader:
                    optimizer.zero_grad()
                    loss = criterion(model(images), labels)
                    loss.backward()
                    optimizer.step()
                print(f"epoch {epoch}: lr {scheduler.get_last_lr()[0]:.4f}")
        '''
    )
    expected = src(
        '''
        import torch
        from torch import nn


        def train(model, loader, epochs):
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
            scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[30, 60], gamma=0.1)
            criterion = nn.CrossEntropyLoss()
            for epoch in range(epochs):

                model.train()
                for images, labels in loader:
                    optimizer.zero_grad()
                    loss = criterion(model(images), labels)
                    loss.backward()
                    optimizer.step()
                # decay at the milestones
                scheduler.step()
                print(f"epoch {epoch}: lr {scheduler.get_last_lr()[0]:.4f}")
        '''
    )
    check_fix(source, "LC201", expected)


def test_lc201_batch_scheduler_moves_after_scaler_update():
    source = src(
        '''
        import torch


        class Trainer:
            def __init__(self, model, loader, total_steps):
                self.model = model
                self.loader = loader
                self.optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
                self.scheduler = torch.optim.lr_scheduler.OneCycleLR(
                    self.optimizer, max_lr=3e-4, total_steps=total_steps
                )
                self.scaler = torch.amp.GradScaler("cuda")

            def fit(self):
                self.model.train()
                for batch in self.loader:
                    self.scheduler.step()  # one LR value per optimizer step
                    self.optimizer.zero_grad(set_to_none=True)
                    with torch.autocast("cuda", dtype=torch.float16):
                        loss = self.model(**batch).loss
                    self.scaler.scale(loss).backward()
                    self.scaler.step(self.optimizer)
                    self.scaler.update()

                    self.log(loss)

            def log(self, loss):
                print(loss.item())
        '''
    )
    expected = source.replace(
        "            self.scheduler.step()  # one LR value per optimizer step\n", ""
    ).replace(
        "            self.scaler.update()\n",
        "            self.scaler.update()\n"
        "            self.scheduler.step()  # one LR value per optimizer step\n",
    )
    check_fix(source, "LC201", expected)



def test_lc201_moves_after_the_helper_that_steps():
    source = src(
        '''
        import torch


        def train_one_epoch(model, loader, optimizer):
            model.train()
            for x, y in loader:
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(model(x), y).backward()
                optimizer.step()


        def main(model, loader, epochs):
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
            scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs)
            for epoch in range(epochs):
                scheduler.step()
                train_one_epoch(model, loader, optimizer)
                torch.save({"model": model.state_dict(), "epoch": epoch}, "last.pt")
        '''
    )
    expected = source.replace(
        "        scheduler.step()\n        train_one_epoch(model, loader, optimizer)\n",
        "        train_one_epoch(model, loader, optimizer)\n        scheduler.step()\n",
    )
    check_fix(source, "LC201", expected)

def test_lc201_not_fixed_when_an_iteration_can_end_before_the_step():
    # moving the call below the `continue` would skip schedule steps on skipped batches
    source = src(
        '''
        import torch


        def train(model, loader, optimizer, total_steps):
            scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=1e-3, total_steps=total_steps)
            for batch in loader:
                scheduler.step()
                loss = model(**batch).loss
                if not torch.isfinite(loss):
                    continue
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        '''
    )
    check_untouched(source, "LC201")


# --- LC102 reset between backward and step (safe) --------------------------------------------


def test_lc102_reset_moves_after_the_step():
    source = src(
        '''
        import torch
        import torch.nn.functional as F


        def train_epoch(model, loader, optimizer, device):
            model.train()
            for step, (x, y) in enumerate(loader):
                x, y = x.to(device), y.to(device)
                loss = F.cross_entropy(model(x), y)
                loss.backward()
                # clear old gradients
                optimizer.zero_grad()
                optimizer.step()

                if step % 100 == 0:
                    print(step, loss.item())
        '''
    )
    expected = source.replace(
        "        # clear old gradients\n        optimizer.zero_grad()\n        optimizer.step()\n",
        "        optimizer.step()\n        # clear old gradients\n        optimizer.zero_grad()\n",
    )
    check_fix(source, "LC102", expected)


def test_lc102_reset_moves_into_the_accumulation_branch():
    source = src(
        '''
        import torch


        def train(model, loader, optimizer, scaler, accum_steps=4):
            model.train()
            for i, (x, y) in enumerate(loader):
                with torch.autocast("cuda", dtype=torch.float16):
                    loss = model(x, y) / accum_steps
                scaler.scale(loss).backward()
                optimizer.zero_grad(set_to_none=True)
                if (i + 1) % accum_steps == 0:
                    scaler.step(optimizer)
                    scaler.update()
        '''
    )
    expected = src(
        '''
        import torch


        def train(model, loader, optimizer, scaler, accum_steps=4):
            model.train()
            for i, (x, y) in enumerate(loader):
                with torch.autocast("cuda", dtype=torch.float16):
                    loss = model(x, y) / accum_steps
                scaler.scale(loss).backward()
                if (i + 1) % accum_steps == 0:
                    scaler.step(optimizer)
                    scaler.update()
                    optimizer.zero_grad(set_to_none=True)
        '''
    )
    check_fix(source, "LC102", expected)


def test_lc102_reset_moves_to_the_top_when_the_step_is_conditional():
    source = src(
        '''
        import math

        import torch


        def train(model, loader, optimizer):
            for x, y in loader:
                loss = torch.nn.functional.mse_loss(model(x), y)
                loss.backward()
                model.zero_grad()
                if math.isfinite(loss.item()):
                    optimizer.step()
        '''
    )
    expected = src(
        '''
        import math

        import torch


        def train(model, loader, optimizer):
            for x, y in loader:
                model.zero_grad()
                loss = torch.nn.functional.mse_loss(model(x), y)
                loss.backward()
                if math.isfinite(loss.item()):
                    optimizer.step()
        '''
    )
    check_fix(source, "LC102", expected)



def test_lc102_in_a_step_helper_without_a_loop():
    source = src(
        '''
        import torch


        class Trainer:
            def __init__(self, model, lr):
                self.model = model
                self.optimizer = torch.optim.Adam(model.parameters(), lr=lr)

            def training_step(self, batch):
                loss = self.model(batch["x"]).sub(batch["y"]).pow(2).mean()
                loss.backward()
                self.optimizer.zero_grad(set_to_none=True)
                self.optimizer.step()
                return loss.detach()

            def fit(self, loader, epochs):
                for _ in range(epochs):
                    for batch in loader:
                        self.training_step(batch)
        '''
    )
    expected = source.replace(
        "        self.optimizer.zero_grad(set_to_none=True)\n        self.optimizer.step()\n",
        "        self.optimizer.step()\n        self.optimizer.zero_grad(set_to_none=True)\n",
    )
    check_fix(source, "LC102", expected)


def test_lc102_not_fixed_when_iterations_end_early():
    # accumulation written with `continue`: after the step is the only right place, and a
    # `continue` sits between; the top of the loop would reset every micro-batch
    source = src(
        '''
        import torch


        def train(model, loader, optimizer, accum=8):
            for step, batch in enumerate(loader):
                loss = model(**batch).loss / accum
                loss.backward()
                optimizer.zero_grad()
                if (step + 1) % accum != 0:
                    continue
                optimizer.step()
        '''
    )
    check_untouched(source, "LC102")

# --- LC401 clip before unscale (safe) --------------------------------------------------------


def test_lc401_unscale_inserted_before_the_clip():
    source = src(
        '''
        import torch
        from torch import nn


        def train_one_epoch(model, loader, optimizer, scaler, max_norm=1.0):
            model.train()
            for images, targets in loader:
                optimizer.zero_grad(set_to_none=True)
                with torch.autocast("cuda", dtype=torch.float16):
                    loss = nn.functional.cross_entropy(model(images), targets)
                scaler.scale(loss).backward()

                # keep the update bounded
                grad_norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
                scaler.step(optimizer)
                scaler.update()
        '''
    )
    expected = source.replace(
        "        # keep the update bounded\n",
        "        # keep the update bounded\n        scaler.unscale_(optimizer)\n",
    )
    check_fix(source, "LC401", expected)


def test_lc401_inside_the_accumulation_branch_of_a_trainer():
    source = src(
        '''
        import torch


        class Trainer:
            def __init__(self, model, lr, accum):
                self.model = model
                self.optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
                self.scaler = torch.amp.GradScaler("cuda")
                self.accum = accum

            def train_epoch(self, loader):
                for step, batch in enumerate(loader):
                    with torch.autocast("cuda"):
                        loss = self.model(**batch).loss / self.accum
                    self.scaler.scale(loss).backward()
                    if (step + 1) % self.accum == 0:
                        torch.nn.utils.clip_grad_value_(self.model.parameters(), 5.0)  # spikes
                        self.scaler.step(self.optimizer)
                        self.scaler.update()
                        self.optimizer.zero_grad()
        '''
    )
    expected = source.replace(
        "                torch.nn.utils.clip_grad_value_(",
        "                self.scaler.unscale_(self.optimizer)\n                torch.nn.utils.clip_grad_value_(",
    )
    check_fix(source, "LC401", expected)




def test_lc401_two_clips_of_one_step_get_one_unscale():
    source = src(
        '''
        import torch
        from torch.nn.utils import clip_grad_norm_, clip_grad_value_


        def train(model, loader, optimizer, scaler):
            for x, y in loader:
                optimizer.zero_grad()
                with torch.autocast("cuda"):
                    loss = torch.nn.functional.cross_entropy(model(x), y)
                scaler.scale(loss).backward()
                clip_grad_value_(model.parameters(), 10.0)
                clip_grad_norm_(model.parameters(), 1.0)
                scaler.step(optimizer)
                scaler.update()
        '''
    )
    expected = source.replace(
        "        clip_grad_value_(", "        scaler.unscale_(optimizer)\n        clip_grad_value_("
    )
    result = check_fix(source, "LC401", expected)
    assert result.source.count("unscale_") == 1

def test_lc401_not_fixed_when_the_clip_is_in_a_helper():
    # the clip lives in a function that knows neither the scaler nor the optimizer
    source = src(
        '''
        import torch


        def clip_gradients(model, max_norm):
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)


        def train(model, loader, optimizer, scaler):
            for x, y in loader:
                optimizer.zero_grad()
                with torch.autocast("cuda"):
                    loss = torch.nn.functional.cross_entropy(model(x), y)
                scaler.scale(loss).backward()
                clip_gradients(model, 1.0)
                scaler.step(optimizer)
                scaler.update()
        '''
    )
    check_untouched(source, "LC401")

# --- LC302 evaluation without no_grad (unsafe) -----------------------------------------------

EVALUATE = src(
    '''
    import torch


    def evaluate(model, loader, device):
        model.eval()
        correct = total = 0
        # one pass over the validation set
        for images, labels in loader:
            logits = model(images.to(device))
            correct += (logits.argmax(1).cpu() == labels).sum().item()
            total += labels.numel()

        return correct / total
    '''
)


def test_lc302_wraps_the_evaluation_loop_with_unsafe():
    expected = src(
        '''
        import torch


        def evaluate(model, loader, device):
            model.eval()
            correct = total = 0
            # one pass over the validation set
            with torch.no_grad():
                for images, labels in loader:
                    logits = model(images.to(device))
                    correct += (logits.argmax(1).cpu() == labels).sum().item()
                    total += labels.numel()

            return correct / total
        '''
    )
    check_fix(EVALUATE, "LC302", expected, unsafe=True)


def test_lc302_is_not_applied_without_unsafe():
    result = fix_source(EVALUATE, PATH)
    assert result.source == EVALUATE and result.fixed == []
    assert "LC302" in {f.code for f in result.remaining}


def test_lc302_keeps_multiline_strings_and_the_torch_alias():
    source = src(
        '''
        import torch as th


        def validate(net, val_loader):
            net.eval()
            losses = []
            for x, y in val_loader:
                out = net(x)
                if not th.isfinite(out).all():
                    print("""non-finite output,
        batch skipped""")
                    continue
                losses.append(th.nn.functional.mse_loss(out, y).item())
            return sum(losses) / len(losses)
        '''
    )
    expected = src(
        '''
        import torch as th


        def validate(net, val_loader):
            net.eval()
            losses = []
            with th.no_grad():
                for x, y in val_loader:
                    out = net(x)
                    if not th.isfinite(out).all():
                        print("""non-finite output,
        batch skipped""")
                        continue
                    losses.append(th.nn.functional.mse_loss(out, y).item())
            return sum(losses) / len(losses)
        '''
    )
    check_fix(source, "LC302", expected, unsafe=True)



def test_lc302_wraps_only_the_validation_loop_inside_the_epoch_loop():
    source = src(
        '''
        import torch
        from torch import nn


        def fit(model, train_loader, val_loader, epochs):
            optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
            criterion = nn.CrossEntropyLoss()
            for epoch in range(epochs):
                model.train()
                for x, y in train_loader:
                    optimizer.zero_grad()
                    criterion(model(x), y).backward()
                    optimizer.step()
                model.eval()
                val_loss = 0.0
                for x, y in val_loader:
                    val_loss += criterion(model(x), y).item()
                print(epoch, val_loss / len(val_loader))
        '''
    )
    expected = source.replace(
        "        for x, y in val_loader:\n            val_loss += criterion(model(x), y).item()\n",
        "        with torch.no_grad():\n"
        "            for x, y in val_loader:\n                val_loss += criterion(model(x), y).item()\n",
    )
    check_fix(source, "LC302", expected, unsafe=True)


def test_lc302_not_fixed_for_a_generator_loop():
    # under `with no_grad()` the consumer of the generator would also run without gradients
    source = src(
        '''
        import torch


        def predictions(model, loader):
            model.eval()
            for batch in loader:
                yield model(batch).argmax(dim=1)
        '''
    )
    check_untouched(source, "LC302")

# --- fix_source and describe_fix -------------------------------------------------------------

SEVERAL = src(
    '''
    import torch
    from torch.cuda.amp import GradScaler, autocast


    def main(model, loader, epochs, ckpt):
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10)
        scaler = GradScaler()
        model.load_state_dict(torch.load(ckpt)["model"])
        for epoch in range(epochs):
            scheduler.step()
            for x, y in loader:
                with autocast():
                    loss = torch.nn.functional.cross_entropy(model(x), y)
                scaler.scale(loss).backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.zero_grad()
                scaler.step(optimizer)
                scaler.update()
    '''
)


def test_several_fixes_in_one_file_converge():
    before = codes(SEVERAL)
    assert {"LC405", "LC201", "LC102", "LC401", "LC508"} <= set(before)
    result = fix_source(SEVERAL, PATH)
    after = codes(result.source)
    assert {"LC405", "LC201", "LC102", "LC401"}.isdisjoint(after)
    assert after["LC508"] == before["LC508"]  # unsafe: left alone
    assert all(after[c] <= before[c] for c in after)
    assert fix_source(result.source, PATH).source == result.source
    assert "    scaler = GradScaler(\"cuda\")\n" in result.source
    assert "            with autocast(\"cuda\"):\n" in result.source
    tail = result.source[result.source.index("scaler.scale(loss)") :]
    assert [line.strip() for line in tail.splitlines()] == [
        "scaler.scale(loss).backward()",
        "scaler.unscale_(optimizer)",
        "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)",
        "scaler.step(optimizer)",
        "scaler.update()",
        "optimizer.zero_grad()",
        "scheduler.step()",
    ]
    unsafe = fix_source(SEVERAL, PATH, unsafe=True)
    assert "torch.load(ckpt, weights_only=True)" in unsafe.source
    assert codes(unsafe.source)["LC508"] == 0


def test_enabled_limits_the_codes_fixed_and_reported():
    result = fix_source(SEVERAL, PATH, enabled=lambda code: code == "LC405")
    assert {f.code for f in result.fixed} == {"LC405"}
    assert {f.code for f in result.remaining} <= {"LC405"}
    assert "scheduler.step()\n        for x, y" in result.source  # LC201 left as it was
    assert "from torch.amp import GradScaler, autocast" in result.source


def test_clean_code_is_returned_unchanged():
    clean = src(
        '''
        import torch


        def train(model, loader, optimizer, scheduler):
            for x, y in loader:
                optimizer.zero_grad()
                torch.nn.functional.mse_loss(model(x), y).backward()
                optimizer.step()
                scheduler.step()
        '''
    )
    result = fix_source(clean, PATH, unsafe=True)
    assert result.source == clean and result.fixed == []



def test_tabs_crlf_and_no_final_newline_survive():
    source = (
        "import torch\r\n\r\n\r\ndef train(model, loader, optimizer, scheduler):\r\n"
        "\tfor x, y in loader:\r\n\t\tscheduler.step()\r\n\t\toptimizer.zero_grad()\r\n"
        "\t\ttorch.nn.functional.mse_loss(model(x), y).backward()\r\n\t\toptimizer.step()\r\n"
        "\tckpt = torch.load(\"last.pt\")"
    )
    expected = (
        "import torch\r\n\r\n\r\ndef train(model, loader, optimizer, scheduler):\r\n"
        "\tfor x, y in loader:\r\n\t\toptimizer.zero_grad()\r\n"
        "\t\ttorch.nn.functional.mse_loss(model(x), y).backward()\r\n\t\toptimizer.step()\r\n"
        "\t\tscheduler.step()\r\n\tckpt = torch.load(\"last.pt\", weights_only=True)"
    )
    result = fix_source(source, PATH, unsafe=True)
    assert result.source == expected
    assert sorted(f.code for f in result.fixed) == ["LC201", "LC508"]

def test_a_fix_that_would_not_parse_is_dropped():
    source = "import torch\nscaler = torch.cuda.amp.GradScaler()\n"
    broken = {"applicability": "safe", "message": "m", "edits": [
        {"line": 2, "column": 10, "end_line": 2, "end_column": 10, "content": "("}
    ]}

    def linter(text, path):
        if text != source:
            return []
        return [Finding("LC405", "deprecated-amp-api", Severity.INFO, "m", path=path, line=2, column=10,
                        end_line=2, end_column=37, fix=broken)]

    result = fix_source(source, PATH, linter=linter)
    assert result.source == source and result.fixed == []


def test_fix_field_edits_reproduce_the_fix():
    findings = [f for f in lint(SEVERAL) if f.code in FIXERS]
    assert findings and all(f.fix is not None for f in findings)
    for f in findings:
        fix = f.fix
        assert fix["applicability"] == catalog()[f.code].fix
        assert fix["message"]
        edits = [Edit(**e) for e in fix["edits"]]
        assert all(set(e) == {"line", "column", "end_line", "end_column", "content"} for e in fix["edits"])
        fixed = apply_edits(SEVERAL, edits)
        cst.parse_module(fixed)
        assert fixed != SEVERAL


def test_describe_fix_declines_codes_without_a_fixer_and_foreign_paths():
    module = cst.parse_module(SEVERAL)
    ctx = FileContext(PATH, SEVERAL, module)
    other = Finding("LC205", "x", Severity.ERROR, "m", path=PATH, line=11, column=9)
    assert describe_fix(other, ctx) is None
    elsewhere = Finding("LC201", "x", Severity.ERROR, "m", path="engine.py", line=11, column=9)
    assert describe_fix(elsewhere, ctx) is None


def test_rule_pages_and_fixers_agree():
    pages = catalog()
    assert fixable_codes() == sorted(FIXERS)
    for code in FIXERS:
        assert pages[code].fix in ("safe", "unsafe"), code
    assert {c for c, p in pages.items() if p.fix != "none"} == set(FIXERS)
    assert pages["LC508"].fix == pages["LC302"].fix == "unsafe"


def test_edits_are_minimal_and_exact():
    old = "a = 1\nb = f(x)\nc = 3\n"
    new = "a = 1\nb = f(\"cuda\", x)\nc = 3\nd = 4\n"
    edits = edits_between(old, new)
    assert [e.to_dict() for e in edits] == [
        {"line": 2, "column": 7, "end_line": 2, "end_column": 7, "content": '"cuda", '},
        {"line": 4, "column": 1, "end_line": 4, "end_column": 1, "content": "d = 4\n"},
    ]
    assert apply_edits(old, edits) == new
    no_newline = "x = 1"
    assert apply_edits(no_newline, edits_between(no_newline, "x = 1\ny = 2")) == "x = 1\ny = 2"


def _line_starts(text: str) -> list[int]:
    return [0] + [i + 1 for i, ch in enumerate(text) if ch == "\n"] + ([len(text)] if not text.endswith("\n") else [])


def test_edits_of_a_replaced_span_equal_the_edits_of_the_whole_text():
    import random

    rng = random.Random(7)
    pieces = ["x = 1\n", "\n", "    y()\n", "# note\n", "z = 2\n", "\n", "\n"]
    for _ in range(400):
        old = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 14)))
        bounds = sorted({*_line_starts(old), len(old)})
        start = rng.choice(bounds)
        end = rng.choice([b for b in bounds if b >= start])
        content = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 4)))
        new = old[:start] + content + old[end:]
        assert edits_replacing(old, start, end, content) == edits_between(old, new), (old, start, end, content)
    # an inserted blank line in front of blank lines: the head match runs past the span
    old = "def f():\n    pass\n\n\n\nx = 1\n"
    grown = "def f():\n    pass\n\n\n"
    assert old[:19] == "def f():\n    pass\n\n"
    expected = edits_between(old, grown + old[19:])
    assert expected and expected[0].line == 6  # difflib places the new line after the old blank ones
    assert edits_replacing(old, 0, 19, grown) == expected


def test_a_fix_in_a_large_file_is_the_whole_file_difference():
    helper = "def helper_{i}(x):\n    # keep\n    return x * {i}\n\n\n"
    bad = src("""
        import torch


        def train(model, loader, opt):
            for x, y in loader:
                loss = model(x, y)
                loss.backward()
                opt.zero_grad()
                opt.step()
    """)
    source = "".join(helper.format(i=i) for i in range(300)) + bad + "".join(helper.format(i=i) for i in range(300, 400))
    module = cst.parse_module(source)
    ctx = FileContext(PATH, source, module)
    (finding,) = [f for f in lint_source(source, PATH) if f.code == "LC102"]
    fix = describe_fix(finding.with_(fix=None), ctx)
    assert fix is not None and fix == finding.fix
    # the same edits as rendering the whole fixed module and comparing it with the source
    from loopcheck.lint.fixes import _index

    index = _index(ctx)
    change = FIXERS["LC102"](index, finding)
    assert [e.to_dict() for e in edits_between(source, change.module.code)] == fix["edits"]
    fixed = apply_edits(source, [Edit(**e) for e in fix["edits"]])
    assert "LC102" not in codes(fixed) and fixed.count("# keep") == 400
    # untouched statements are the same objects: only the changed function was rebuilt
    assert sum(a is not b for a, b in zip(module.body, change.module.body)) == 1


# --- the rule pages' examples and the fixtures -----------------------------------------------


@pytest.mark.parametrize("code", sorted(FIXERS))
def test_fixing_the_bad_example_of_the_rule_page(code):
    page = catalog()[code]
    bad = page.example("Bad")
    if not bad:
        pytest.skip(f"{code} has no Bad example yet")
    before = codes(bad)
    result = fix_source(bad, PATH, unsafe=True)
    cst.parse_module(result.source)
    after = codes(result.source)
    assert before[code] >= 1 and after[code] == 0, result.source
    assert all(after[c] <= before[c] for c in after)
    assert fix_source(result.source, PATH, unsafe=True).source == result.source


FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
_FIXABLE_MARK = re.compile(r"# expect:.*\b(" + "|".join(sorted(FIXERS)) + r")\b")


def _fixable_fixtures() -> list[Path]:
    return sorted(p for p in FIXTURES.rglob("*.py") if _FIXABLE_MARK.search(p.read_text(encoding="utf-8")))


@pytest.mark.parametrize("path", _fixable_fixtures(), ids=lambda p: str(p.relative_to(FIXTURES)))
def test_fixtures_with_fixable_findings(path):
    source = path.read_text(encoding="utf-8")
    result = fix_source(source, str(path), unsafe=True)
    cst.parse_module(result.source)
    before = Counter(f.code for f in lint_source(source, str(path)))
    after = Counter(f.code for f in result.remaining)
    assert all(after[c] <= before[c] for c in after), (dict(before), dict(after))
    assert sorted(comments(result.source)) == sorted(comments(source))
    assert fix_source(result.source, str(path), unsafe=True).source == result.source
