"""LC501-LC509: what a training checkpoint holds, the resumed epoch, torch.load and torch.save."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from loopcheck.lint.api import lint_paths, lint_source

from . import _support
from ._support import codes, snippet


def lc5(source: str, info: bool = True) -> list[tuple[int, str]]:
    return codes(source, ["LC5"], info)


def messages(source: str, code: str) -> list[str]:
    return _support.messages(snippet(source), code)


# A training loop with an optimizer, a scheduler, a scaler and an EMA; SAVE is replaced by the
# checkpoint under test (always on line 24).
LOOP = """
import random

import numpy as np
import torch
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn


def fit(model, loader, criterion, epochs, path):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs)
    scaler = torch.amp.GradScaler("cuda")
    ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.999))
    for epoch in range(epochs):
        model.train()
        for x, y in loader:
            optimizer.zero_grad()
            with torch.autocast("cuda", dtype=torch.float16):
                loss = criterion(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            ema.update_parameters(model)
        scheduler.step()
        SAVE
"""

FULL = {
    "model": "model.state_dict()",
    "optimizer": "optimizer.state_dict()",
    "scheduler": "scheduler.state_dict()",
    "scaler": "scaler.state_dict()",
    "ema": "ema.state_dict()",
    "epoch": "epoch + 1",
    "rng": "torch.get_rng_state()",
}


def save_of(entries: dict[str, str]) -> str:
    body = ", ".join(f'"{k}": {v}' for k, v in entries.items())
    return LOOP.replace("SAVE", f"torch.save({{{body}}}, path)")


def without(*keys: str) -> dict[str, str]:
    return {k: v for k, v in FULL.items() if k not in keys}


def test_full_checkpoint_is_clean():
    assert lc5(save_of(FULL)) == []


@pytest.mark.parametrize(
    ("missing", "code"),
    [
        ("optimizer", "LC501"),
        ("scheduler", "LC502"),
        ("scaler", "LC503"),
        ("epoch", "LC504"),
        ("rng", "LC505"),
        ("ema", "LC506"),
    ],
)
def test_each_missing_state_is_reported_on_the_save(missing, code):
    assert lc5(save_of(without(missing))) == [(24, code)]


def test_several_missing_states_are_reported_together():
    assert lc5(save_of({"model": "model.state_dict()", "epoch": "epoch"}), info=False) == [
        (24, "LC501"),
        (24, "LC502"),
        (24, "LC503"),
        (24, "LC506"),
    ]


def test_scheduler_position_restored_by_hand_is_clean():
    # YOLOv5 recomputes the schedule from the saved epoch instead of saving the scheduler
    src = save_of(without("scheduler")).replace(
        "    for epoch in range(epochs):\n", "    scheduler.last_epoch = -1\n    for epoch in range(epochs):\n", 1
    )
    assert lc5(src) == []


@pytest.mark.parametrize(
    "entries",
    [
        {"optim": "optimizer.state_dict()"},
        {"opt_state": "optimizer.state_dict()"},
        {"optimizer_state_dict": "optimizer.state_dict()"},
        {"optimizer_state": "optimizer.state_dict()"},
        {"opt": "optimizer.state_dict()"},
        {"o": "optimizer.state_dict()"},
        {"optimizerG": "optimizer.state_dict()"},
    ],
)
def test_optimizer_keys_are_matched_by_meaning(entries):
    assert lc5(save_of({**without("optimizer"), **entries})) == []


def test_opt_holding_the_run_options_is_not_the_optimizer():
    # YOLO-style `"opt": vars(opt)` is argparse's options, not the optimizer state
    assert lc5(save_of({**without("optimizer"), "opt": "vars(args)"})) == [(24, "LC501")]


@pytest.mark.parametrize(
    "entries",
    [
        {
            "lr_scheduler": "scheduler.state_dict()",
            "grad_scaler": "scaler.state_dict()",
            "model_ema": "ema.state_dict()",
        },
        {"sched": "scheduler.state_dict()", "amp_scaler": "scaler.state_dict()", "ema_state_dict": "ema.state_dict()"},
        {"state": '{"s": scheduler.state_dict(), "c": scaler.state_dict(), "e": ema.state_dict()}'},
    ],
)
def test_other_keys_are_matched_by_meaning(entries):
    base = {k: v for k, v in FULL.items() if k not in ("scheduler", "scaler", "ema")}
    assert lc5(save_of({**base, **entries})) == []


@pytest.mark.parametrize(
    "entries",
    [
        {"global_step": "epoch * 100"},
        {"iteration": "epoch"},
        {"meta": '{"epoch": epoch, "lr": 0.1}'},
    ],
)
def test_progress_keys_are_matched_by_meaning(entries):
    assert lc5(save_of({**without("epoch"), **entries})) == []


@pytest.mark.parametrize(
    "entries",
    [
        {"rng_state": "torch.get_rng_state()"},
        {"generators": '{"py": random.getstate(), "np": np.random.get_state()}'},
        {"cuda": "torch.cuda.get_rng_state_all()"},
    ],
)
def test_rng_states_are_matched_by_key_or_value(entries):
    assert lc5(save_of({**without("rng"), **entries})) == []


def test_epoch_in_the_file_name_counts_as_progress():
    src = save_of(without("epoch")).replace("}, path)", '}, f"{path}/epoch_{epoch:03d}.pt")')
    assert lc5(src) == []


def test_checkpoint_spread_over_several_files_is_read_as_one():
    src = LOOP.replace(
        "SAVE",
        "torch.save(optimizer.state_dict(), f\"{path}/optimizer.pt\")\n"
        "        torch.save(scheduler.state_dict(), f\"{path}/scheduler.pt\")\n"
        "        torch.save({\"python\": random.getstate(), \"torch\": torch.get_rng_state()}, f\"{path}/rng.pth\")\n"
        "        torch.save({\"model\": model.state_dict(), \"ema\": ema.state_dict(), "
        "\"scaler\": scaler.state_dict(), "
        "\"epoch\": epoch + 1}, f\"{path}/state.pt\")",
    )
    assert lc5(src) == []
    without_scheduler = src.replace("        torch.save(scheduler.state_dict(), f\"{path}/scheduler.pt\")\n", "")
    assert lc5(without_scheduler) == [(26, "LC502")]


def test_weights_per_epoch_without_resume_are_not_a_training_checkpoint():
    src = """
    import torch

    def train(model, loader, optimizer, criterion, epochs):
        for epoch in range(epochs):
            model.train()
            for x, y in loader:
                optimizer.zero_grad()
                criterion(model(x), y).backward()
                optimizer.step()
            torch.save(model.state_dict(), f"checkpoints/model_{epoch:03d}.pt")
    """
    assert lc5(src) == []


def test_checkpoint_built_over_several_statements():
    src = LOOP.replace(
        "SAVE",
        'ckpt = {"model": model.state_dict(), "epoch": epoch + 1}\n'
        '        ckpt["scheduler"] = scheduler.state_dict()\n'
        "        ckpt.update(scaler=scaler.state_dict(), ema=ema.state_dict(), rng=torch.get_rng_state())\n"
        "        torch.save(ckpt, path)",
    )
    assert lc5(src) == [(27, "LC501")]


def test_checkpoint_built_in_a_helper():
    src = """
    import torch

    def save_checkpoint(model, optimizer, epoch, path):
        state = {"model": model.state_dict(), "epoch": epoch, "rng": torch.get_rng_state()}
        torch.save(state, path)

    def train(model, loader, optimizer, criterion, epochs):
        for epoch in range(epochs):
            model.train()
            for x, y in loader:
                optimizer.zero_grad()
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
            save_checkpoint(model, optimizer, epoch + 1, "last.pt")
    """
    assert lc5(src) == [(5, "LC501")]


def test_weights_for_inference_next_to_a_full_checkpoint_are_not_checked():
    src = LOOP.replace(
        "SAVE",
        "torch.save(model.state_dict(), 'best_model.pt')\n"
        '        torch.save({"model": model.state_dict(), "epoch": epoch + 1}, "export/best.pt")\n'
        "        torch.save({" + ", ".join(f'"{k}": {v}' for k, v in FULL.items()) + "}, path)",
    )
    assert lc5(src) == []


def test_only_save_of_a_script_that_resumes_is_a_training_checkpoint():
    src = """
    import os
    import torch

    def train(model, loader, optimizer, criterion, epochs, path="ckpt.pt"):
        if os.path.exists(path):
            model.load_state_dict(torch.load(path, weights_only=True))
        for epoch in range(epochs):
            model.train()
            for x, y in loader:
                optimizer.zero_grad()
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
            torch.save(model.state_dict(), path)
    """
    assert lc5(src, info=False) == [(14, "LC501"), (14, "LC504")]


EXPORT_THEN_EVALUATE = """
import torch

def evaluate(model_path, make_model, episodes=10):
    policy = make_model()
    policy.load_state_dict(torch.load(model_path, weights_only=True))
    policy.eval()
    return [policy(torch.zeros(1, 4)).sum() for _ in range(episodes)]

def main(q_net, make_model, batches, optimizer, save_model=True):
    for batch in batches:
        loss = q_net(batch).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    if save_model:
        model_path = "runs/q_net.pt"
        torch.save(q_net.state_dict(), model_path)
        returns = evaluate(model_path, make_model)
"""


def test_weights_read_back_by_an_evaluation_helper_after_training_are_not_a_resume():
    # the helper loads the file the script just wrote, into a fresh network, to score it
    assert lc5(EXPORT_THEN_EVALUATE) == []
    # the same file loaded into the trained network before the loop is a resume
    resumed = EXPORT_THEN_EVALUATE.replace(
        "    for batch in batches:",
        "    model_path = \"runs/q_net.pt\"\n    q_net.load_state_dict(torch.load(model_path))\n    for batch in batches:")
    assert "q_net.load_state_dict" in resumed
    assert (19, "LC501") in lc5(resumed, info=False)


def test_weights_only_save_without_resume_is_not_checked():
    src = """
    import torch

    def train(model, loader, optimizer, criterion, epochs):
        for epoch in range(epochs):
            model.train()
            for x, y in loader:
                optimizer.zero_grad()
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
        torch.save(model.state_dict(), "model.pt")
    """
    assert lc5(src) == []


def test_script_without_optimizer_is_not_checked_for_optimizer_state():
    src = """
    import torch

    def export(model, epoch, path):
        torch.save({"model": model.state_dict(), "epoch": epoch, "rng": torch.get_rng_state()}, path)
    """
    assert lc5(src) == []


def test_unknown_checkpoint_content_is_not_checked():
    src = """
    import torch

    def train(model, loader, optimizer, criterion, epochs, trainer):
        for epoch in range(epochs):
            for x, y in loader:
                optimizer.zero_grad()
                criterion(model(x), y).backward()
                optimizer.step()
            torch.save(trainer.checkpoint(), "last.pt")
    """
    assert lc5(src) == []


def test_the_state_of_a_whole_run_is_not_judged_by_its_key():
    # a framework's run state (network, optimizers, schedulers, counters) saved as one entry
    src = """
    import torch

    def train(model, loader, optimizer, criterion, epochs, state, path):
        for epoch in range(epochs):
            for x, y in loader:
                optimizer.zero_grad()
                criterion(model(x), y).backward()
                optimizer.step()
            checkpoint = {"state": state.state_dict(), "rng": torch.get_rng_state()}
            torch.save(checkpoint, path)
    """
    assert lc5(src) == []
    # the network's own state next to the random state is weights, not the run
    assert (10, "LC501") in lc5(src.replace("state.state_dict()", "model.state_dict()"))


def test_a_test_that_saves_without_training_writes_no_training_checkpoint():
    # a library's test of its loader writes a hand-made checkpoint; another test trains
    src = """
    import torch

    def test_fit_reduces_the_loss(model, loader, criterion):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in loader:
            optimizer.zero_grad()
            criterion(model(x), y).backward()
            optimizer.step()

    def test_loader_reads_an_old_checkpoint(folder):
        checkpoint = {"state": {"model": {"w": torch.zeros(2)}, "epoch": 3}, "rng": torch.get_rng_state()}
        path = str(folder / "full.pt")
        torch.save(checkpoint, path)
    """
    assert lc5(src, info=False) == []
    # the same save in the test that trains is a training checkpoint
    trained = src.replace("            optimizer.step()\n", "            optimizer.step()\n        torch.save({'model': model.state_dict(), 'epoch': 1}, 'last.pt')\n")
    assert (9, "LC501") in lc5(trained, info=False)


def test_entries_under_computed_keys_leave_the_content_unknown():
    # the optimizer's entry is stored under a key made at run time
    src = """
    import torch

    def train(model, optimizer, loader, steps, path, index):
        for x in loader:
            optimizer.zero_grad()
            model(x).sum().backward()
            optimizer.step()
        ckpt = dict(model=model.state_dict(), steps=steps)
        key = f"optim{index}"
        ckpt = {**ckpt, key: optimizer.state_dict()}
        torch.save(ckpt, path)
    """
    assert lc5(src) == []
    # the same checkpoint with literal keys only is judged (it lacks the RNG state)
    literal = src.replace("ckpt = {**ckpt, key: optimizer.state_dict()}", "ckpt = {**ckpt, 'optim': optimizer.state_dict()}")
    assert lc5(literal) == [(11, "LC505")]


def test_data_cached_to_a_file_and_read_back_is_no_checkpoint():
    # a script that simulates its training data once and reloads it on the next run
    src = """
    import os
    import torch

    def load_data(path, sampler):
        if os.path.exists(path):
            cached = torch.load(path, weights_only=True)
            return cached["xs"], cached["ts"]
        xs, ts = sampler()
        torch.save({"xs": xs, "ts": ts}, path)
        return xs, ts

    def train(model, sampler, path, steps):
        xs, ts = load_data(path, sampler)
        optimizer = torch.optim.Adam(model.parameters())
        for step in range(steps):
            optimizer.zero_grad()
            model(xs, ts).backward()
            optimizer.step()
    """
    assert lc5(src) == []
    # the network's weights cached and read back that way are a checkpoint without its optimizer
    weights = src.replace('torch.save({"xs": xs, "ts": ts}, path)', 'torch.save({"model": model.state_dict()}, path)')
    assert weights != src
    assert (9, "LC501") in lc5(weights.replace("def load_data(path, sampler):", "def load_data(path, sampler, model=None):"))


# --- LC507 resume-epoch-off-by-one -------------------------------------------------------------

RESUME = """
import os
import torch

def fit(model, loader, optimizer, criterion, epochs, path):
    start_epoch = 0
    if os.path.exists(path):
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        start_epoch = ckpt["epoch"]
    for epoch in range(start_epoch, epochs):
        model.train()
        for x, y in loader:
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}, path)
"""


def test_resume_at_the_finished_epoch_is_reported_on_the_assignment():
    assert lc5(RESUME, info=False) == [(10, "LC507")]
    (message,) = messages(RESUME, "LC507")
    assert '+ 1' in message


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ('start_epoch = ckpt["epoch"]', 'start_epoch = ckpt["epoch"] + 1'),
        ('start_epoch = ckpt["epoch"]', 'start_epoch = ckpt["epoch"]\n        start_epoch += 1'),
        ('"epoch": epoch}', '"epoch": epoch + 1}'),
    ],
)
def test_resume_that_adds_one_somewhere_is_clean(old, new):
    assert lc5(RESUME.replace(old, new), info=False) == []


def test_get_with_default_and_int_are_read_too():
    src = RESUME.replace('start_epoch = ckpt["epoch"]', 'start_epoch = int(ckpt.get("epoch", 0))')
    assert lc5(src, info=False) == [(10, "LC507")]


def test_resume_through_a_load_helper_is_reported():
    src = """
    import torch

    def load_checkpoint(path, model, optimizer):
        ckpt = torch.load(path, weights_only=True)
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        return ckpt["epoch"], ckpt.get("best", 0.0)

    def fit(model, loader, optimizer, criterion, epochs, path, resume=False):
        start_epoch, best = 0, 0.0
        if resume:
            start_epoch, best = load_checkpoint(path, model, optimizer)
        for epoch in range(start_epoch, epochs):
            model.train()
            for x, y in loader:
                optimizer.zero_grad()
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
            state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}
            torch.save(state, path)
    """
    assert lc5(src, info=False) == [(12, "LC507")]


def test_resume_method_of_a_trainer_class_is_reported():
    src = """
    import torch

    class Trainer:
        def __init__(self, model, optimizer, loader, criterion, epochs):
            self.model, self.optimizer, self.loader = model, optimizer, loader
            self.criterion, self.epochs = criterion, epochs
            self.start_epoch = 0

        def resume(self, path):
            state = torch.load(path, weights_only=True)
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            self.start_epoch = state["epoch"]

        def fit(self, path):
            for epoch in range(self.start_epoch, self.epochs):
                self.model.train()
                for x, y in self.loader:
                    self.optimizer.zero_grad()
                    self.criterion(self.model(x), y).backward()
                    self.optimizer.step()
                torch.save(
                    {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(), "epoch": epoch},
                    path,
                )
    """
    assert lc5(src, info=False) == [(13, "LC507")]


def test_tuple_position_of_the_start_epoch_is_respected():
    src = """
    import torch

    def load_checkpoint(path, model):
        ckpt = torch.load(path, weights_only=True)
        model.load_state_dict(ckpt["model"])
        return ckpt["best"], ckpt["epoch"]

    def fit(model, loader, optimizer, criterion, epochs, path):
        best, start_epoch = load_checkpoint(path, model)
        for epoch in range(start_epoch, epochs):
            for x, y in loader:
                optimizer.zero_grad()
                criterion(model(x), y).backward()
                optimizer.step()
            torch.save({"model": model.state_dict(), "epoch": epoch, "best": epoch - 1}, path)
    """
    assert lc5(src, info=False) == [(9, "LC507"), (15, "LC501")]
    swapped = src.replace("best, start_epoch =", "start_epoch, best =")
    assert lc5(swapped, info=False) == [(15, "LC501")]


def test_mid_epoch_checkpoint_is_not_an_off_by_one():
    src = RESUME.replace(
        "            optimizer.step()\n",
        "            optimizer.step()\n            torch.save({\"model\": model.state_dict(), "
        "\"optimizer\": optimizer.state_dict(), \"epoch\": epoch}, path)\n",
    ).replace(
        '        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), '
        '"epoch": epoch}, path)\n',
        "",
    )
    assert lc5(src, info=False) == []


def test_imagenet_style_resume_with_saved_epoch_plus_one_is_clean():
    src = """
    import torch

    def main(args, model, loader, optimizer, criterion):
        if args.resume:
            checkpoint = torch.load(args.resume, weights_only=True)
            args.start_epoch = checkpoint["epoch"]
            model.load_state_dict(checkpoint["state_dict"])
            optimizer.load_state_dict(checkpoint["optimizer"])
        for epoch in range(args.start_epoch, args.epochs):
            model.train()
            for x, y in loader:
                optimizer.zero_grad()
                criterion(model(x), y).backward()
                optimizer.step()
            torch.save(
                {"epoch": epoch + 1, "state_dict": model.state_dict(), "optimizer": optimizer.state_dict()},
                "checkpoint.pth.tar",
            )
    """
    assert lc5(src, info=False) == []


# --- LC508 torch-load-unsafe -------------------------------------------------------------------


def test_torch_load_without_weights_only_is_reported():
    src = """
    import torch
    from torch import load

    a = torch.load("a.pt", map_location="cpu")
    b = torch.load("b.pt", weights_only=True)
    c = torch.load("c.pt", weights_only=False)
    d = load("d.pt")
    e = torch.load("e.pt", **kwargs)
    """
    assert lc5(src) == [(4, "LC508"), (7, "LC508")]


SETUP_WITH_A_TABLE = """
from setuptools import setup

_deps = ["numpy", "torch>=2.6", "torchvision", "accelerate>=0.31.0"]
deps = {{name.split(">")[0]: name for name in _deps}}

def deps_list(*names):
    return [deps[name] for name in names]

extras = {{}}
extras["torch"] = deps_list("torch", "accelerate")
setup(name="pkg", install_requires=[deps["numpy"]], extras_require=extras{more})
"""


@pytest.mark.parametrize(("more", "severity"), [
    ("", None),  # torch>=2.6: the default is weights_only=True, nothing to say
    (', tests_require=["torch"]', "warning"),  # a bare requirement in a list admits any version
])
def test_a_setup_py_table_of_requirements_is_read_for_its_torch_floor(tmp_path: Path, more, severity):
    """`"torch"` as a key of the requirements table (`deps_list("torch")`, `extras["torch"]`) is no
    requirement; `"torch>=2.6"` in the table is."""
    (tmp_path / "setup.py").write_text(SETUP_WITH_A_TABLE.format(more=more))
    (tmp_path / "resume.py").write_text("import torch\n\nstate = torch.load(path)\n")
    report = lint_paths([tmp_path], select=["LC508"])
    assert [f.severity.value for f in report.findings] == ([severity] if severity else [])


def test_other_load_functions_are_not_torch_load():
    src = """
    import json
    import pickle

    cfg = json.load(open("cfg.json"))
    obj = pickle.load(open("x.pkl", "rb"))
    """
    assert lc5(src) == []


# --- LC509 whole-model-pickled -----------------------------------------------------------------

PICKLED = """
import torch

def train(model, loader, optimizer, criterion):
    for x, y in loader:
        optimizer.zero_grad()
        criterion(model(x), y).backward()
        optimizer.step()
    torch.save(model, "model.pt")
"""


def test_pickled_model_is_reported_as_info():
    found = lint_source(textwrap.dedent(PICKLED).lstrip("\n"), select=["LC509"])
    assert [(f.line, f.code, f.severity.value) for f in found] == [(8, "LC509", "info")]
    assert "model.state_dict()" in found[0].message


def test_state_dict_save_is_not_pickling_the_model():
    assert lc5(PICKLED.replace("torch.save(model,", "torch.save(model.state_dict(),")) == []


def test_model_inside_the_saved_dict_is_reported():
    src = PICKLED.replace('torch.save(model, "model.pt")', 'torch.save({"model": model, "arch": "mlp"}, "model.pt")')
    assert ("LC509" in {code for _, code in lc5(src)})


# --- fixtures ----------------------------------------------------------------------------------

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def test_checkpoint_helper_in_another_module_is_followed():
    report = lint_paths([FIXTURES / "ckpt_project"], select=["LC5"])
    found = sorted((Path(f.path).name, f.line, f.code) for f in report.findings if f.severity.value != "info")
    assert found == [("train.py", 56, "LC507"), ("utils.py", 18, "LC502")]


def test_lc508_is_silent_on_a_file_this_code_saves_under_the_same_path_template():
    source = textwrap.dedent('''
        import torch

        def train(generator, opt, epochs):
            if opt.epoch != 0:
                generator.load_state_dict(torch.load("saved_models/%s/generator_%d.pth" % (opt.dataset_name, opt.epoch)))
            for epoch in range(epochs):
                torch.save(generator.state_dict(), "saved_models/%s/generator_%d.pth" % (opt.dataset_name, epoch))

        def evaluate(generator, opt):
            generator.load_state_dict(torch.load("pretrained/%s.pth" % opt.name))
    ''')
    lines = [f.line for f in lint_source(source, "train.py", select=["LC508"])]
    assert lines == [11]


TWO_TRAINING_FUNCTIONS = """
import torch


def train_epoch(model, loader, optimizer):
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()


def train_joint_epoch(model, loaders, optimizer):
    for batches in zip(*loaders):
        for x, y in batches:
            torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()


def train_retriever(model, loader, epochs, name):
    retriever_optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for e in range(epochs):
        train_epoch(model, loader, retriever_optimizer)
        state = {"model": model.state_dict(), "optimizer": retriever_optimizer.state_dict(), "epoch": e}
        torch.save(state, f"{name}_{e}.pth")
"""


def test_an_optimizer_stepped_only_by_a_function_nobody_here_calls_is_not_missing():
    # `train_joint_epoch` is an entry point of its own: its `optimizer` is not stepped by the run
    # that writes the retriever's checkpoint, which holds that run's only optimizer
    assert (25, "LC501") not in lc5(TWO_TRAINING_FUNCTIONS)
    gan = TWO_TRAINING_FUNCTIONS.replace(
        "        train_epoch(model, loader, retriever_optimizer)\n",
        "        train_epoch(model, loader, retriever_optimizer)\n"
        "        train_joint_epoch(model, [loader], critic_optimizer)\n").replace(
        "    for e in range(epochs):\n",
        "    critic_optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)\n    for e in range(epochs):\n")
    assert (27, "LC501") in lc5(gan)
