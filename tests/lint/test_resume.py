"""LC510: a resume that loads a checkpoint but never restores a state the checkpoint holds."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from loopcheck.lint.api import lint_paths

from . import _support
from ._support import codes, snippet


def lc510(source: str) -> list[tuple[int, str]]:
    return codes(source, ["LC510"])


def message(source: str) -> str:
    (found,) = _support.messages(snippet(source), "LC510")
    return found


# A resumable training function; RESUME is replaced by the resume branch under test (the
# `torch.load` is always on line 11) and SAVED by the entries of the checkpoint written each epoch.
SCRIPT = """
import os

import torch


def train(model, loader, criterion, epochs, ckpt_path, resume=False):
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs)
    start_epoch = 0
RESUME
    for epoch in range(start_epoch, epochs):
        model.train()
        for inputs, targets in loader:
            optimizer.zero_grad()
            loss = criterion(model(inputs), targets)
            loss.backward()
            optimizer.step()
        scheduler.step()
        torch.save({SAVED}, ckpt_path)
"""

FULL_SAVE = (
    '"model": model.state_dict(), "optimizer": optimizer.state_dict(), '
    '"scheduler": scheduler.state_dict(), "epoch": epoch + 1'
)


def script(resume: str, saved: str = FULL_SAVE) -> str:
    body = textwrap.indent(textwrap.dedent(resume).strip("\n"), "    ")
    return SCRIPT.replace("RESUME", body).replace("{SAVED}", "{" + saved + "}")


LOAD = 'ckpt = torch.load(ckpt_path, map_location="cpu", weights_only=True)'
LOAD_LINE = 11


def resume_branch(*lines: str, load: str = LOAD, guard: str = "if resume:") -> str:
    return "\n".join([guard, "    " + load, *("    " + line for line in lines)])


def test_snippet_template_puts_the_load_on_its_line():
    assert textwrap.dedent(script(resume_branch())).lstrip("\n").splitlines()[LOAD_LINE - 1].strip() == LOAD


def test_full_restore_is_clean():
    src = script(
        resume_branch(
            'model.load_state_dict(ckpt["model"])',
            'optimizer.load_state_dict(ckpt["optimizer"])',
            'scheduler.load_state_dict(ckpt["scheduler"])',
            'start_epoch = ckpt["epoch"]',
        )
    )
    assert lc510(src) == []


def test_resume_restoring_only_the_weights_is_reported_on_the_load():
    src = script(resume_branch('model.load_state_dict(ckpt["model"])', 'start_epoch = ckpt["epoch"]'))
    assert lc510(src) == [(LOAD_LINE, "LC510")]
    text = message(src)
    assert "optimizer and scheduler state" in text
    assert 'optimizer.load_state_dict(ckpt["optimizer"])' in text
    assert 'scheduler.load_state_dict(ckpt["scheduler"])' in text


def test_missing_scheduler_only_names_the_scheduler():
    src = script(
        resume_branch(
            'model.load_state_dict(ckpt["model"])',
            'optimizer.load_state_dict(ckpt["optimizer"])',
            'start_epoch = ckpt["epoch"]',
        )
    )
    assert lc510(src) == [(LOAD_LINE, "LC510")]
    text = message(src)
    assert "scheduler state but never restores it" in text
    assert "optimizer" not in text.split(":")[0]


def test_start_epoch_never_read_back_is_reported():
    src = script(
        resume_branch(
            'model.load_state_dict(ckpt["model"])',
            'optimizer.load_state_dict(ckpt["optimizer"])',
            'scheduler.load_state_dict(ckpt["scheduler"])',
        )
    )
    assert lc510(src) == [(LOAD_LINE, "LC510")]
    assert 'ckpt["epoch"]' in message(src)


def test_get_counts_as_restoring():
    src = script(
        resume_branch(
            'model.load_state_dict(ckpt["model"])',
            'optimizer.load_state_dict(ckpt.get("optimizer"))',
            'if ckpt.get("scheduler") is not None:',
            '    scheduler.load_state_dict(ckpt["scheduler"])',
            'start_epoch = ckpt.get("epoch", 0)',
        )
    )
    assert lc510(src) == []


def test_membership_test_alone_is_not_a_restore():
    src = script(
        resume_branch(
            'model.load_state_dict(ckpt["model"])',
            'optimizer.load_state_dict(ckpt["optimizer"])',
            'if "scheduler" in ckpt:',
            '    print("checkpoint has a scheduler state")',
            'start_epoch = ckpt["epoch"]',
        )
    )
    assert lc510(src) == [(LOAD_LINE, "LC510")]


def test_keys_are_matched_by_meaning():
    saved = (
        '"net": model.state_dict(), "optim_state": optimizer.state_dict(), '
        '"lr_sched": scheduler.state_dict(), "global_step": epoch * len(loader)'
    )
    restored = script(
        resume_branch(
            'model.load_state_dict(ckpt["net"])',
            'optimizer.load_state_dict(ckpt["optim_state"])',
            'scheduler.load_state_dict(ckpt["lr_sched"])',
            'start_epoch = ckpt["global_step"] // len(loader)',
        ),
        saved,
    )
    assert lc510(restored) == []
    forgotten = script(
        resume_branch('model.load_state_dict(ckpt["net"])', 'start_epoch = ckpt["global_step"] // len(loader)'),
        saved,
    )
    assert lc510(forgotten) == [(LOAD_LINE, "LC510")]
    assert 'optimizer.load_state_dict(ckpt["optim_state"])' in message(forgotten)


def test_states_the_checkpoint_does_not_hold_are_not_asked_for():
    # the save lacks the scheduler (LC502 says so at the save); the resume restores all it holds
    saved = '"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch + 1'
    src = script(
        resume_branch(
            'model.load_state_dict(ckpt["model"])',
            'optimizer.load_state_dict(ckpt["optimizer"])',
            'start_epoch = ckpt["epoch"]',
        ),
        saved,
    )
    assert lc510(src) == []


def test_weights_only_checkpoint_has_nothing_to_restore():
    src = script(resume_branch('model.load_state_dict(ckpt["model"])'), '"model": model.state_dict()')
    assert lc510(src) == []


def test_loop_over_keys_restores_everything():
    src = script(
        resume_branch(
            "objects = {'model': model, 'optimizer': optimizer, 'scheduler': scheduler}",
            "for key, obj in objects.items():",
            "    obj.load_state_dict(ckpt[key])",
            'start_epoch = ckpt["epoch"]',
        )
    )
    assert lc510(src) == []


def test_checkpoint_handed_to_an_unknown_function_says_nothing():
    src = "from trainlib import restore_training_state\n" + script(
        resume_branch(
            'model.load_state_dict(ckpt["model"])',
            "start_epoch = restore_training_state(ckpt, optimizer, scheduler)",
        )
    )
    assert lc510(src) == []


def test_restore_in_a_helper_called_with_the_checkpoint_counts():
    src = """
        import torch


        def restore(state, model, optimizer, scheduler=None):
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            if scheduler is not None:
                scheduler.load_state_dict(state["scheduler"])
            return state["epoch"]


        def train(model, loader, criterion, epochs, path, resume):
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
            scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=30)
            start = 0
            if resume:
                ckpt = torch.load(path, weights_only=True)
                start = restore(ckpt, model, optimizer, scheduler=scheduler)
            for epoch in range(start, epochs):
                for x, y in loader:
                    optimizer.zero_grad()
                    criterion(model(x), y).backward()
                    optimizer.step()
                scheduler.step()
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                            "scheduler": scheduler.state_dict(), "epoch": epoch + 1}, path)
    """
    assert lc510(src) == []
    # the same helper without the scheduler line: the resume forgets it
    forgotten = '            if scheduler is not None:\n                scheduler.load_state_dict(state["scheduler"])\n'
    broken = src.replace(forgotten, "")
    assert lc510(broken) == [(15, "LC510")]  # two lines fewer: the load is on line 15


TRAINER = """
import torch


class Trainer:
    def __init__(self, model, loader, total_steps):
        self.model = model
        self.loader = loader
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        self.scheduler = torch.optim.lr_scheduler.OneCycleLR(self.optimizer, max_lr=1e-4, total_steps=total_steps)
        self.scaler = torch.amp.GradScaler("cuda")
        self.step = 0

    def train_epoch(self):
        for x, y in self.loader:
            self.optimizer.zero_grad()
            with torch.autocast("cuda"):
                loss = torch.nn.functional.mse_loss(self.model(x), y)
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
            self.scheduler.step()
            self.step += 1

    def save_checkpoint(self, path):
        torch.save({"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                    "scheduler": self.scheduler.state_dict(), "scaler": self.scaler.state_dict(),
                    "step": self.step}, path)

    def load_checkpoint(self, path):
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
        self.model.load_state_dict(ckpt["model"])
        self._restore(ckpt)
        self.step = ckpt["step"]

    def _restore(self, ckpt):
        self.optimizer.load_state_dict(ckpt["optimizer"])
        self.scheduler.load_state_dict(ckpt["scheduler"])
        RESTORE_SCALER
"""


def test_trainer_method_receiving_the_checkpoint_counts():
    src = TRAINER.replace("RESTORE_SCALER", 'self.scaler.load_state_dict(ckpt["scaler"])')
    assert lc510(src) == []


def test_trainer_forgetting_the_scaler_is_reported():
    src = TRAINER.replace("RESTORE_SCALER", "pass")
    assert lc510(src) == [(30, "LC510")]
    text = message(src)
    assert "GradScaler state" in text and 'self.scaler.load_state_dict(ckpt["scaler"])' in text


def test_checkpoint_kept_on_an_attribute_says_nothing():
    # another method may restore the rest from `self.ckpt`
    src = (
        TRAINER.replace("RESTORE_SCALER", "pass")
        .replace("ckpt = torch.load(", "self.ckpt = torch.load(")
        .replace('self.model.load_state_dict(ckpt["model"])', 'self.model.load_state_dict(self.ckpt["model"])')
        .replace("self._restore(ckpt)", "self._restore(self.ckpt)")
        .replace('self.step = ckpt["step"]', 'self.step = self.ckpt["step"]')
    )
    assert "self.ckpt = torch.load" in src
    assert lc510(src) == []


def test_trainer_loading_weights_for_inference_is_not_a_resume():
    src = TRAINER.replace("RESTORE_SCALER", 'self.scaler.load_state_dict(ckpt["scaler"])') + """
    def load_weights(self, weights_file):
        weights = torch.load(weights_file, map_location="cpu", weights_only=True)
        self.model.load_state_dict(weights["model"])
"""
    assert lc510(src) == []


@pytest.mark.parametrize(("caller", "expected"), [("test", []), ("resume", [(41, "LC510")])])
def test_weights_loader_is_judged_by_the_function_that_calls_it(caller, expected):
    src = TRAINER.replace("RESTORE_SCALER", 'self.scaler.load_state_dict(ckpt["scaler"])') + f"""
    def load_weights(self, path):
        weights = torch.load(path, map_location="cpu", weights_only=True)
        self.model.load_state_dict(weights["model"])

    def {caller}(self, path):
        self.load_weights(path)
        return [self.model(x) for x, _ in self.loader]
"""
    assert lc510(src) == expected


def test_load_helper_returning_the_checkpoint_is_followed_into_the_caller():
    src = """
        import torch


        def load_checkpoint(path, model, optimizer):
            ckpt = torch.load(path, weights_only=True)
            model.load_state_dict(ckpt["model"])
            optimizer.load_state_dict(ckpt["optimizer"])
            return ckpt


        def main(model, loader, epochs, path, resume):
            optimizer = torch.optim.Adam(model.parameters())
            scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.95)
            start = 0
            if resume:
                ckpt = load_checkpoint(path, model, optimizer)
                SCHEDULER
                start = ckpt["epoch"]
            for epoch in range(start, epochs):
                for x, y in loader:
                    optimizer.zero_grad()
                    model(x).sum().backward()
                    optimizer.step()
                scheduler.step()
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                            "scheduler": scheduler.state_dict(), "epoch": epoch + 1}, path)
    """
    assert lc510(src.replace("SCHEDULER", 'scheduler.load_state_dict(ckpt["scheduler"])')) == []
    assert lc510(src.replace("SCHEDULER", "pass")) == [(5, "LC510")]


def test_scheduler_position_restored_by_hand_counts():
    src = script(
        resume_branch(
            'model.load_state_dict(ckpt["model"])',
            'optimizer.load_state_dict(ckpt["optimizer"])',
            'start_epoch = ckpt["epoch"]',
            "scheduler.last_epoch = start_epoch - 1",
        )
    )
    assert lc510(src) == []


def test_progress_read_back_from_the_restored_scheduler_counts():
    src = script(
        resume_branch(
            'model.load_state_dict(ckpt["model"])',
            'optimizer.load_state_dict(ckpt["optimizer"])',
            'scheduler.load_state_dict(ckpt["scheduler"])',
            "start_epoch = scheduler.last_epoch",
        )
    )
    assert lc510(src) == []


def test_progress_in_the_file_name_is_not_asked_for():
    src = script(
        resume_branch(
            'model.load_state_dict(ckpt["model"])',
            'optimizer.load_state_dict(ckpt["optimizer"])',
            'scheduler.load_state_dict(ckpt["scheduler"])',
            'start_epoch = int(ckpt_path.rsplit("_", 1)[1].split(".")[0])',
        )
    ).replace("ckpt_path)\n", 'f"{ckpt_path}_{epoch}.pt")\n')
    assert 'f"{ckpt_path}_{epoch}.pt"' in src
    assert lc510(src) == []


def test_checkpoints_averaged_in_a_loop_are_not_a_resume():
    src = script(
        """
        if resume:
            ckpt = torch.load(ckpt_path, weights_only=True)
            model.load_state_dict(ckpt["model"])
            optimizer.load_state_dict(ckpt["optimizer"])
            scheduler.load_state_dict(ckpt["scheduler"])
            start_epoch = ckpt["epoch"]
        """
    )
    src += """

def average_last_checkpoints(model, paths):
    total = None
    for path in paths:
        weights = torch.load(path, weights_only=True)["model"]
        total = weights if total is None else {k: total[k] + weights[k] for k in total}
    model.load_state_dict({k: v / len(paths) for k, v in total.items()})
"""
    assert lc510(src) == []


@pytest.mark.parametrize(
    ("load", "guard"),
    [
        # initialising from pretrained weights before training
        ('ckpt = torch.load(args_pretrained, weights_only=True)', "if args_pretrained:"),
        ('ckpt = torch.load("imagenet_backbone.pt", weights_only=True)', "if True:"),
        # a file path that says nothing about resuming, under a condition that says nothing either
        ('ckpt = torch.load(init_path, weights_only=True)', "if init_path:"),
    ],
)
def test_weights_loaded_to_start_from_are_not_a_resume(load, guard):
    src = script(resume_branch('model.load_state_dict(ckpt["model"], strict=False)', load=load, guard=guard))
    assert lc510(src) == []


@pytest.mark.parametrize(
    ("load", "guard"),
    [
        (LOAD, "if resume:"),
        ('ckpt = torch.load(args_resume, weights_only=True)', "if args_resume:"),
        ('ckpt = torch.load(os.path.join(out, "last.pt"), weights_only=True)', "if True:"),
        ('ckpt = torch.load(os.path.join(out, "latest.pt"), weights_only=True)', "if True:"),
        # the file the loop saves to, loaded before the loop
        (LOAD, "if os.path.exists(ckpt_path):"),
    ],
)
def test_weights_only_restore_on_a_resume_path_is_reported(load, guard):
    src = script(resume_branch('model.load_state_dict(ckpt["model"])', load=load, guard=guard))
    assert lc510(src) == [(LOAD_LINE, "LC510")]


@pytest.mark.parametrize("path", ["ckpt_path", 'os.path.join(out, "last.pt")'])
def test_final_evaluation_load_after_training_is_not_a_resume(path):
    src = script("out = os.path.dirname(ckpt_path)")
    src += f"    final = torch.load({path}, weights_only=True)\n    model.load_state_dict(final['model'])\n"
    assert lc510(src) == []


def test_inference_script_loading_only_the_model_is_clean():
    src = """
        import torch


        @torch.no_grad()
        def predict(model, loader, ckpt_path):
            ckpt = torch.load(ckpt_path, map_location="cpu", weights_only=True)
            model.load_state_dict(ckpt["model"])
            model.eval()
            return [model(x).argmax(1) for x in loader]
    """
    assert lc510(src) == []


def test_checkpoint_split_over_files_is_restored_from_all_of_them():
    src = """
        import os

        import torch


        def train(model, loader, epochs, run_dir):
            optimizer = torch.optim.Adam(model.parameters())
            start = 0
            if os.path.exists(os.path.join(run_dir, "last_model.pt")):
                ckpt = torch.load(os.path.join(run_dir, "last_model.pt"), weights_only=True)
                model.load_state_dict(ckpt["model"])
                start = ckpt["epoch"]
                OPTIMIZER
            for epoch in range(start, epochs):
                for x, y in loader:
                    optimizer.zero_grad()
                    model(x).sum().backward()
                    optimizer.step()
                torch.save({"model": model.state_dict(), "epoch": epoch + 1}, os.path.join(run_dir, "last_model.pt"))
                torch.save(optimizer.state_dict(), os.path.join(run_dir, "last_optimizer.pt"))
    """
    restored = 'optimizer.load_state_dict(torch.load(os.path.join(run_dir, "last_optimizer.pt"), weights_only=True))'
    assert lc510(src.replace("OPTIMIZER", restored)) == []
    assert lc510(src.replace("OPTIMIZER", "pass")) == [(10, "LC510")]


def _write(root: Path, files: dict[str, str]) -> list[str]:
    for name, text in files.items():
        (root / name).write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return sorted(files)


PROJECT_TRAIN = """
    import torch

    from ckpt_utils import load_checkpoint, restore_schedule, save_checkpoint


    def main(model, loader, epochs, path, resume):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[30, 60])
        start = 0
        if resume:
            ckpt = load_checkpoint(path, model, optimizer)
            SCHEDULER
            start = ckpt["epoch"]
        for epoch in range(start, epochs):
            for x, y in loader:
                optimizer.zero_grad()
                model(x).sum().backward()
                optimizer.step()
            scheduler.step()
            save_checkpoint(path, model, optimizer, scheduler, epoch)
"""

PROJECT_UTILS = """
    import torch


    def save_checkpoint(path, model, optimizer, scheduler, epoch):
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(), "epoch": epoch + 1}, path)


    def load_checkpoint(path, model, optimizer):
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        return ckpt


    def restore_schedule(scheduler, ckpt):
        scheduler.load_state_dict(ckpt["scheduler"])
"""


@pytest.mark.parametrize(
    ("scheduler", "expected"),
    [
        ("restore_schedule(scheduler, ckpt)", set()),
        ("pass", {("ckpt_utils.py", 10, "LC510")}),
    ],
)
def test_project_save_and_load_helpers_are_followed(tmp_path, scheduler, expected):
    names = _write(
        tmp_path,
        {"train.py": PROJECT_TRAIN.replace("SCHEDULER", scheduler), "ckpt_utils.py": PROJECT_UTILS},
    )
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        report = lint_paths(names, select=["LC510"], jobs=1)
    finally:
        os.chdir(cwd)
    assert not report.errors
    assert {(Path(f.path).name, f.line, f.code) for f in report.findings} == expected


def test_a_load_helper_that_fits_released_weights_with_strict_false_is_not_a_resume():
    # the training script saves full checkpoints; the model is initialised from released weights
    # by a helper that drops the entries whose shapes differ and loads the rest with strict=False
    src = """
    import torch

    def load_checkpoint(model, filename):
        checkpoint = torch.load(filename, map_location="cpu", weights_only=True)
        weights = checkpoint["model"]
        own = model.state_dict()
        for key in list(weights):
            if key in own and weights[key].shape != own[key].shape:
                del weights[key]
        model.load_state_dict(weights, strict=False)
        return model

    def train(model, loader, criterion, epochs, released, out):
        model = load_checkpoint(model, released)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        for epoch in range(epochs):
            for x, y in loader:
                optimizer.zero_grad()
                criterion(model(x), y).backward()
                optimizer.step()
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}, out)
    """
    assert lc510(src) == []
    # a strict load in the same helper reads as resuming the run's own checkpoint
    assert lc510(src.replace("model.load_state_dict(weights, strict=False)", "model.load_state_dict(weights)")) == [(4, "LC510")]
