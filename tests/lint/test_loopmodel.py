"""The loop model built for representative training code."""

from __future__ import annotations

import textwrap
from pathlib import Path

import libcst as cst
import pytest

from loopcheck.lint.loopmodel import (
    EventKind,
    LoopKind,
    ModuleModel,
    Role,
    SchedulerCadence,
    build_model,
    is_accumulation_test,
)
from loopcheck.lint.project import ProjectIndex

K = EventKind


def model_of(source: str, path: str = "train.py", project: ProjectIndex | None = None) -> ModuleModel:
    return build_model(path, cst.parse_module(textwrap.dedent(source)), project=project)


def kinds(events) -> list[tuple[str, str | None]]:
    return [(e.kind.value, e.target) for e in events]


def only_loop(m: ModuleModel, kind: LoopKind):
    loops = [loop for loop in m.walk_loops() if loop.kind is kind]
    assert len(loops) == 1, [(loop.kind, loop.line) for loop in m.walk_loops()]
    return loops[0]


SCRIPT = """
import torch
import torch.nn as nn
from torch.utils.data import DataLoader

class Net(nn.Module):
    def forward(self, x):
        return x

model = Net().to("cuda")
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=30)
criterion = nn.CrossEntropyLoss()
train_loader = DataLoader(train_set, batch_size=32, shuffle=True)

for epoch in range(90):
    model.train()
    for i, (x, y) in enumerate(train_loader):
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
    scheduler.step()
    model.eval()
    with torch.no_grad():
        for x, y in val_loader:
            model(x)
"""


def test_roles_from_constructors_usage_and_names() -> None:
    m = model_of(SCRIPT)
    expect = {
        "model": (Role.MODEL, "constructor", "Net"),
        "optimizer": (Role.OPTIMIZER, "constructor", "AdamW"),
        "scheduler": (Role.SCHEDULER, "constructor", "StepLR"),
        "criterion": (Role.CRITERION, "constructor", "CrossEntropyLoss"),
        "train_loader": (Role.LOADER, "constructor", "DataLoader"),
        "loss": (Role.LOSS, "usage", None),
        "val_loader": (Role.LOADER, "name", None),
    }
    for name, (role, evidence, cls) in expect.items():
        b = m.bindings[name]
        assert (b.role, b.evidence, b.cls) == (role, evidence, cls), name
    assert m.bindings["optimizer"].detail["params_of"] == frozenset({"model"})
    assert m.bindings["optimizer"].qualified == "torch.optim.AdamW"
    assert m.bindings["scheduler"].detail["optimizer"] == "optimizer"
    assert m.bindings["train_loader"].detail["split"] == "train"
    assert m.bindings["val_loader"].detail["split"] == "eval"
    assert m.bindings["model"].line == 10


def test_loop_kinds_traces_and_event_order() -> None:
    m = model_of(SCRIPT)
    epoch = only_loop(m, LoopKind.EPOCH)
    batch = only_loop(m, LoopKind.BATCH)
    evaluation = only_loop(m, LoopKind.EVAL)
    assert batch.parent is epoch and evaluation.parent is epoch
    assert batch.loader == "train_loader" and batch.iter_text == "enumerate(train_loader)"
    assert evaluation.loader == "val_loader"
    assert [kinds(t) for t in batch.traces] == [[
        ("zero_grad", "optimizer"), ("forward", "model"), ("backward", "loss"), ("step", "optimizer"),
    ]]
    assert kinds(epoch.traces[0]) == [("train_mode", "model"), ("sched_step", "scheduler"),
                                      ("eval_mode", "model"), ("no_grad", None)]
    forward = evaluation.events[0]
    assert forward.kind is K.FORWARD and forward.no_grad and forward.loop is evaluation
    zero = batch.events[0]
    assert (zero.line, zero.column, zero.end_line, zero.end_column) == (19, 9, 19, 30)
    assert zero.detail == {"form": "optimizer", "set_to_none": None}
    assert [e.line for e in m.events] == sorted(e.line for e in m.events)


def test_helper_inlined_with_via_and_parameters_bound_to_caller_names() -> None:
    m = model_of("""
        import torch

        def train_one_epoch(net, loader, opt, device):
            net.train()
            for x, y in loader:
                opt.zero_grad()
                net(x.to(device)).sum().backward()
                opt.step()

        def main():
            model = torch.nn.Linear(2, 2)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(3):
                train_one_epoch(model, train_loader, optimizer, "cpu")

        main()
    """)
    batch = only_loop(m, LoopKind.BATCH)
    assert only_loop(m, LoopKind.EPOCH) is batch.parent
    assert kinds(batch.traces[0]) == [("zero_grad", "optimizer"), ("forward", "model"),
                                      ("backward", "net(x.to(device)).sum()"), ("step", "optimizer")]
    step = batch.traces[0][-1]
    assert [(c.callee, c.line) for c in step.via] == [("main", 17), ("train_one_epoch", 15)]
    assert batch.via[-1].callee == "train_one_epoch"
    # the helper is analysed in its caller's context only
    assert sum(1 for e in m.events if e.kind is K.STEP) == 1


def test_trainer_class_attributes_aliases_and_inlined_methods() -> None:
    m = model_of("""
        import torch

        class Trainer:
            def __init__(self, model, lr):
                self.model = model
                self.optimizer = torch.optim.Adam(model.parameters(), lr=lr)
                self.scaler = torch.amp.GradScaler("cuda")

            def train_step(self, batch):
                opt = self.optimizer
                opt.zero_grad()
                with torch.autocast("cuda"):
                    loss = self.model(batch)
                self.scaler.scale(loss).backward()
                self.scaler.step(opt)
                self.scaler.update()

            def fit(self, loader, epochs):
                for epoch in range(epochs):
                    for batch in loader:
                        self.train_step(batch)
    """)
    assert m.bindings["self.optimizer"].role is Role.OPTIMIZER
    assert m.bindings["self.scaler"].role is Role.SCALER
    assert m.bindings["self.model"].role is Role.MODEL
    batch = only_loop(m, LoopKind.BATCH)
    assert kinds(batch.traces[0]) == [
        ("zero_grad", "self.optimizer"), ("forward", "self.model"), ("scaler_scale", "self.scaler"),
        ("backward", "loss"), ("scaler_step", "self.scaler"), ("scaler_update", "self.scaler"),
    ]
    backward = batch.traces[0][3]
    assert backward.detail["scaled"] and backward.detail["scaler"] == "self.scaler"
    assert batch.traces[0][1].autocast and not backward.autocast
    assert batch.traces[0][4].detail["optimizer"] == "self.optimizer"
    assert batch.traces[0][0].via[0].callee == "Trainer.train_step"


def test_trainer_built_at_top_level_runs_init_and_methods() -> None:
    m = model_of("""
        import torch

        class Trainer:
            def __init__(self, model, optimizer):
                self.model = model
                self.optimizer = optimizer

            def fit(self, loader):
                for x in loader:
                    self.optimizer.zero_grad()
                    self.model(x).sum().backward()
                    self.optimizer.step()

        net = torch.nn.Linear(3, 1)
        trainer = Trainer(net, torch.optim.SGD(net.parameters(), lr=0.1))
        trainer.fit(loader)
    """)
    batch = only_loop(m, LoopKind.BATCH)
    assert [e.kind for e in batch.traces[0]] == [K.ZERO_GRAD, K.FORWARD, K.BACKWARD, K.STEP]
    assert m.bindings["self.model"].role is Role.MODEL
    assert batch.traces[0][-1].via[0].callee == "Trainer.fit"


def test_tuple_unpacking_from_a_builder_and_for_targets() -> None:
    m = model_of("""
        import torch

        def build(cfg):
            net = torch.nn.Linear(cfg.d, 1)
            optim = torch.optim.AdamW(net.parameters())
            return net, optim

        def main(cfg, loader):
            model, opt = build(cfg)
            for x, y in zip(loader, range(10)):
                opt.zero_grad()
                model(x).backward()
                opt.step()
    """)
    batch = only_loop(m, LoopKind.BATCH)
    assert kinds(batch.traces[0])[0] == ("zero_grad", "optim")
    assert m.role("optim") is Role.OPTIMIZER and m.role("net") is Role.MODEL
    assert batch.loader == "loader"


def test_guards_accumulation_and_branch_traces() -> None:
    m = model_of("""
        import torch
        def train(model, loader, optimizer, accum_steps, log_every):
            for i, batch in enumerate(loader):
                loss = model(batch)
                if torch.isnan(loss):
                    continue
                loss.backward()
                if (i + 1) % accum_steps == 0:
                    optimizer.step()
                    optimizer.zero_grad()
                else:
                    pass
                if i % log_every == 0:
                    print(loss.item())
    """)
    batch = only_loop(m, LoopKind.BATCH)
    assert [kinds(t) for t in batch.traces] == [
        [("forward", "model")],
        [("forward", "model"), ("backward", "loss"), ("step", "optimizer"), ("zero_grad", "optimizer")],
        [("forward", "model"), ("backward", "loss")],
    ]
    assert batch.trace_ends == ["continue", None, None]
    step = batch.traces[1][2]
    assert step.guarded and step.accumulation_guarded
    assert step.guards[0].text == "(i + 1) % accum_steps == 0" and not step.guards[0].negated


@pytest.mark.parametrize("text,expected", [
    ("(i + 1) % k == 0", True),
    ("step % accum == 0", True),
    ("i % args.grad_accum_steps == 0", True),
    ("(step + 1) % gradient_accumulation_steps == 0 or last_batch", True),
    ("not sync_context", True),
    ("self.is_accumulating", True),
    ("accelerator.sync_gradients", True),
    ("i % log_interval == 0", False),
    ("step % args.save_every == 0", False),
    ("epoch % eval_freq == 0", False),
    ("loss.item() > 10", False),
])
def test_accumulation_guard_recognition(text: str, expected: bool) -> None:
    assert is_accumulation_test(text) is expected


def test_closure_events_stay_out_of_the_trace() -> None:
    m = model_of("""
        import torch
        def fit(model, x, y):
            optimizer = torch.optim.LBFGS(model.parameters())
            for it in range(100):
                def closure():
                    optimizer.zero_grad()
                    loss = ((model(x) - y) ** 2).mean()
                    loss.backward()
                    return loss
                optimizer.step(closure)
    """)
    loop = next(m.walk_loops())
    assert kinds(loop.traces[0]) == [("step", "optimizer")]
    step = loop.traces[0][0]
    assert step.detail["closure"] is True
    assert [e.kind for e in step.detail["closure_events"]] == [K.ZERO_GRAD, K.FORWARD, K.BACKWARD]
    assert all(e.line > 0 for e in step.detail["closure_events"])
    assert all(e.kind is not K.BACKWARD for e in m.events)


def test_no_grad_contexts_decorators_and_statements() -> None:
    m = model_of("""
        import torch

        @torch.no_grad()
        def evaluate(model, loader):
            model.eval()
            for x in loader:
                model(x)

        def predict(model, xs):
            torch.set_grad_enabled(False)
            return [model(x) for x in xs]

        def main(model, loader):
            for epoch in range(3):
                for x in loader:
                    model(x).sum().backward()
                with torch.inference_mode():
                    model(x)
                with torch.set_grad_enabled(epoch > 0):
                    model(x)
                evaluate(model, loader)
    """)
    forwards = [e for e in m.events if e.kind is K.FORWARD]
    by_line = {e.line: e for e in forwards}
    assert not by_line[17].no_grad
    assert by_line[19].no_grad
    assert not by_line[21].no_grad and by_line[21].grad_conditional
    assert by_line[8].no_grad and by_line[8].via[0].callee == "evaluate"
    assert by_line[12].no_grad
    forms = sorted(e.detail["form"] for e in m.events if e.kind is K.NO_GRAD)
    assert forms == ["decorator", "inference_mode", "set_grad_enabled"]


def test_save_keys_built_over_several_statements() -> None:
    m = model_of("""
        import torch
        def train(model, optimizer, scheduler, epochs, ema=None):
            for epoch in range(epochs):
                ckpt = {"model": model.state_dict(), "epoch": epoch}
                ckpt["optimizer"] = optimizer.state_dict()
                ckpt.update(scheduler=scheduler.state_dict())
                if ema is not None:
                    ckpt["ema"] = ema.state_dict()
                torch.save(ckpt, f"ckpt_{epoch}.pt")
    """)
    save = next(e for e in m.events if e.kind is K.SAVE)
    # branches are not told apart: a key added under a condition counts as saved
    assert save.detail["keys"] == frozenset({"model", "epoch", "optimizer", "scheduler", "ema"})
    assert save.detail["state_of"] == frozenset({"model", "optimizer", "scheduler", "ema"})
    assert save.detail["values"]["optimizer"] == "optimizer.state_dict()"
    assert save.detail["path_text"] == 'f"ckpt_{epoch}.pt"' and save.detail["whole_object"] is None


def test_save_through_helpers_and_whole_objects() -> None:
    m = model_of("""
        import torch

        def make_state(model, optimizer, epoch):
            state = dict(model=model.state_dict(), epoch=epoch)
            state["optim"] = optimizer.state_dict()
            return state

        def save_checkpoint(state, path):
            torch.save(state, path)

        def main(loader):
            net = torch.nn.Linear(2, 2)
            opt = torch.optim.SGD(net.parameters(), lr=0.1)
            for epoch in range(5):
                save_checkpoint(make_state(net, opt, epoch), "last.pt")
                save_checkpoint({"model": net.state_dict()}, "weights.pt")
            torch.save(net, "model.pt")
    """)
    saves = [e for e in m.events if e.kind is K.SAVE]
    assert [s.detail["keys"] for s in saves] == [
        frozenset({"model", "epoch", "optim"}), frozenset({"model"}), None,
    ]
    assert saves[0].detail["state_of"] == frozenset({"net", "opt"})
    assert saves[0].via[-1].callee == "save_checkpoint" and saves[0].line == 10
    assert saves[2].detail["whole_object"] == "net"


def test_load_events() -> None:
    m = model_of("""
        import torch
        def resume(model, optimizer, path):
            ckpt = torch.load(path, map_location="cpu")
            model.load_state_dict(ckpt["model"])
            optimizer.load_state_dict(ckpt["optimizer"])
            return torch.load(path, weights_only=True)
    """)
    loads = [e for e in m.events if e.kind is K.LOAD]
    assert [(e.detail["fn"], e.target, e.detail["weights_only"]) for e in loads] == [
        ("torch.load", None, None), ("load_state_dict", "model", None),
        ("load_state_dict", "optimizer", None), ("torch.load", None, True),
    ]
    assert loads[1].detail["key"] == "model"


@pytest.mark.parametrize("ctor,cadence", [
    ("OneCycleLR(opt, max_lr=0.1, total_steps=1000)", SchedulerCadence.PER_STEP),
    ("CyclicLR(opt, 0.001, 0.1)", SchedulerCadence.PER_STEP),
    ("CosineAnnealingLR(opt, T_max=epochs * len(train_loader))", SchedulerCadence.PER_STEP),
    ("LambdaLR(opt, lambda s: min(1.0, s / num_warmup_steps))", SchedulerCadence.PER_STEP),
    ("StepLR(opt, step_size=30, gamma=0.1)", SchedulerCadence.PER_EPOCH),
    ("MultiStepLR(opt, milestones=[30, 60, 90])", SchedulerCadence.PER_EPOCH),
    ("ExponentialLR(opt, gamma=0.95)", SchedulerCadence.PER_EPOCH),
    ("CosineAnnealingLR(opt, T_max=args.epochs)", SchedulerCadence.PER_EPOCH),
    ("CosineAnnealingLR(opt, T_max=100)", SchedulerCadence.UNKNOWN),
    ("ReduceLROnPlateau(opt, patience=5)", SchedulerCadence.METRIC),
    ("CosineAnnealingWarmRestarts(opt, T_0=10)", SchedulerCadence.UNKNOWN),
    ("MultiStepLR(opt, milestones=[60000, 80000])", SchedulerCadence.UNKNOWN),
])
def test_scheduler_cadence(ctor: str, cadence: SchedulerCadence) -> None:
    m = model_of(f"""
        import torch
        from torch.optim.lr_scheduler import *
        def main(model, train_loader, epochs, args, num_warmup_steps):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            sched = {ctor}
    """)
    assert m.bindings["sched"].role is Role.SCHEDULER
    assert m.bindings["sched"].cadence is cadence


def test_cadence_follows_a_name_sized_in_steps_and_hf_schedules() -> None:
    m = model_of("""
        import torch
        from transformers import get_cosine_schedule_with_warmup
        def main(model, loader, epochs):
            opt = torch.optim.AdamW(model.parameters())
            total = epochs * len(loader)
            sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=total)
            warm = get_cosine_schedule_with_warmup(opt, 100, total)
    """)
    assert m.bindings["sched"].cadence is SchedulerCadence.PER_STEP
    assert m.bindings["warm"].cadence is SchedulerCadence.PER_STEP


def test_same_local_name_in_two_functions_keeps_two_bindings() -> None:
    m = model_of("""
        import torch
        def per_step(model, loader):
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, 0.1, total_steps=len(loader))
            for x in loader:
                scheduler.step()

        def per_epoch(model, loader, epochs):
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 30)
            for epoch in range(epochs):
                scheduler.step()
    """)
    targets = [e.target for e in m.events if e.kind is K.SCHED_STEP]
    assert [m.bindings[t].cls for t in targets] == ["OneCycleLR", "StepLR"]


def test_parameter_left_none_prunes_its_branch() -> None:
    m = model_of("""
        import torch
        def step(model, batch, optimizer, scaler=None):
            loss = model(batch)
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.step(optimizer)
            else:
                loss.backward()
                optimizer.step()

        def main(model, loader):
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for batch in loader:
                optimizer.zero_grad()
                step(model, batch, optimizer)
    """)
    batch = only_loop(m, LoopKind.BATCH)
    assert [kinds(t) for t in batch.traces] == [[("zero_grad", "optimizer"), ("forward", "model"),
                                                 ("backward", "loss"), ("step", "optimizer")]]


def test_frozen_models_set_epoch_and_ema() -> None:
    m = model_of("""
        import torch
        from torch.utils.data import DataLoader, DistributedSampler
        from torch.optim.swa_utils import AveragedModel

        def main(student, teacher, dataset, epochs):
            for p in teacher.parameters():
                p.requires_grad = False
            sampler = DistributedSampler(dataset)
            train_loader = DataLoader(dataset, batch_size=8, sampler=sampler)
            ema_model = AveragedModel(student)
            opt = torch.optim.SGD(student.parameters(), lr=0.1)
            for epoch in range(epochs):
                train_loader.sampler.set_epoch(epoch)
                teacher.eval()
                student.train()
                for x in train_loader:
                    opt.zero_grad()
                    (student(x) - teacher(x)).pow(2).mean().backward()
                    opt.step()
                    ema_model.update_parameters(student)
    """)
    modes = {e.target: e for e in m.events if e.kind in (K.EVAL_MODE, K.TRAIN_MODE)}
    assert modes["teacher"].detail["frozen"] and not modes["student"].detail["frozen"]
    set_epoch = next(e for e in m.events if e.kind is K.SET_EPOCH)
    assert set_epoch.target == "sampler"
    ema = next(e for e in m.events if e.kind is K.EMA_UPDATE)
    assert ema.target == "ema_model" and m.role("ema_model") is Role.EMA


def test_cross_file_imports_through_the_project_index(tmp_path: Path) -> None:
    pkg = tmp_path / "proj"
    (pkg / "utils").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "utils" / "__init__.py").write_text("")
    (pkg / "utils" / "ckpt.py").write_text(textwrap.dedent("""
        import torch
        def save_checkpoint(model, optimizer, path):
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)
    """))
    (pkg / "engine.py").write_text(textwrap.dedent("""
        def train_one_epoch(model, loader, optimizer):
            for x in loader:
                optimizer.zero_grad()
                model(x).sum().backward()
                optimizer.step()
    """))
    (pkg / "model.py").write_text(textwrap.dedent("""
        import torch.nn as nn
        class Net(nn.Module):
            def forward(self, x):
                return x
    """))
    main = pkg / "main.py"
    main.write_text(textwrap.dedent("""
        import torch
        import model
        from .engine import train_one_epoch
        from utils.ckpt import save_checkpoint

        def main(loader):
            net = model.Net()
            opt = torch.optim.SGD(net.parameters(), lr=0.1)
            for epoch in range(10):
                train_one_epoch(net, loader, opt)
                save_checkpoint(net, opt, "last.pt")
    """))
    m = build_model(str(main), cst.parse_module(main.read_text()), project=ProjectIndex())
    batch = only_loop(m, LoopKind.BATCH)
    assert batch.path == str(pkg / "engine.py")
    assert kinds(batch.traces[0]) == [("zero_grad", "opt"), ("forward", "net"), ("backward", "model(x).sum()"),
                                      ("step", "opt")]
    assert batch.traces[0][0].line == 4 and batch.traces[0][0].via[0].path == str(main)
    assert m.bindings["net"].role is Role.MODEL and m.bindings["net"].cls == "Net"
    save = next(e for e in m.events if e.kind is K.SAVE)
    assert save.path == str(pkg / "utils" / "ckpt.py")
    assert save.detail["state_of"] == frozenset({"net", "opt"})


# A step helper with its reset, backward and step, in a module of a package (`pkg/helpers.py`)
_HELPER_STEP = """
    def train_step(model, batch, optimizer):
        optimizer.zero_grad()
        loss = model(batch).sum()
        loss.backward()
        optimizer.step()
"""

# The caller's loop, where `{alias}.train_step(...)` runs the helper of the module named `{alias}`
_CALLER = """
    import torch
    {imports}

    def main(net, loader):
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        for epoch in range(3):
            for batch in loader:
                {alias}.train_step(net, batch, opt)
"""


def _write_tree(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text))


def _caller_model(root: Path, driver: str) -> ModuleModel:
    path = root / driver
    return build_model(str(path), cst.parse_module(path.read_text()), project=ProjectIndex([root]))


# (layout, files, the driver, the module its call reaches): a module imported from its package
_MODULE_FROM_PACKAGE = [
    ("from pkg import helpers", {
        "pkg/__init__.py": "VERSION = '1.0'\n",
        "pkg/helpers.py": _HELPER_STEP,
        "train.py": _CALLER.format(imports="from pkg import helpers", alias="helpers"),
    }, "train.py", "pkg/helpers.py"),
    ("from . import helpers", {
        "pkg/__init__.py": "",
        "pkg/helpers.py": _HELPER_STEP,
        "pkg/train.py": _CALLER.format(imports="from . import helpers", alias="helpers"),
    }, "pkg/train.py", "pkg/helpers.py"),
    ("from .. import engine", {
        "pkg/__init__.py": "",
        "pkg/engine.py": _HELPER_STEP,
        "pkg/tools/__init__.py": "",
        "pkg/tools/train.py": _CALLER.format(imports="from .. import engine", alias="engine"),
    }, "pkg/tools/train.py", "pkg/engine.py"),
    ("__init__ imports the module itself", {
        "pkg/__init__.py": "from . import helpers\n",
        "pkg/helpers.py": _HELPER_STEP,
        "train.py": _CALLER.format(imports="from pkg import helpers", alias="helpers"),
    }, "train.py", "pkg/helpers.py"),
    ("__init__ re-exports the module under the name", {
        "pkg/__init__.py": "from .impl import helpers\n",
        "pkg/impl/__init__.py": "",
        "pkg/impl/helpers.py": _HELPER_STEP,
        "train.py": _CALLER.format(imports="from pkg import helpers", alias="helpers"),
    }, "train.py", "pkg/impl/helpers.py"),
    ("the helper module imports its caller back", {
        "pkg/__init__.py": "",
        "pkg/helpers.py": "from train import main\n" + textwrap.dedent(_HELPER_STEP),
        "train.py": _CALLER.format(imports="from pkg import helpers", alias="helpers"),
    }, "train.py", "pkg/helpers.py"),
]


@pytest.mark.parametrize("layout,files,driver,reached", _MODULE_FROM_PACKAGE, ids=[c[0] for c in _MODULE_FROM_PACKAGE])
def test_a_module_imported_from_its_package_is_followed(tmp_path: Path, layout, files, driver, reached) -> None:
    _write_tree(tmp_path, files)
    m = _caller_model(tmp_path, driver)
    batch = only_loop(m, LoopKind.BATCH)
    assert kinds(batch.traces[0]) == [("zero_grad", "opt"), ("forward", "net"), ("backward", "loss"), ("step", "opt")]
    assert {e.path for e in batch.traces[0]} == {str(tmp_path / reached)}
    assert batch.traces[0][0].via[0].path == str(tmp_path / driver)


def test_a_function_re_exported_by_a_package_is_followed(tmp_path: Path) -> None:
    _write_tree(tmp_path, {
        "pkg/__init__.py": "from .helpers import train_step\n",
        "pkg/helpers.py": _HELPER_STEP,
        "train.py": _CALLER.replace("{alias}.", "").format(imports="from pkg import train_step"),
    })
    batch = only_loop(_caller_model(tmp_path, "train.py"), LoopKind.BATCH)
    assert {e.path for e in batch.traces[0]} == {str(tmp_path / "pkg" / "helpers.py")}


# (what `pkg/__init__.py` binds to the name, or what the name resolves to): not the module
# `pkg/helpers.py` beside it, whose step the caller's loop must not receive
_NOT_THE_MODULE = [
    ("a function of __init__", {"pkg/__init__.py": "def helpers():\n    return None\n"}, "from pkg import helpers"),
    ("a variable of __init__", {"pkg/__init__.py": "import types\nhelpers = types.SimpleNamespace()\n"},
     "from pkg import helpers"),
    ("a class of __init__", {"pkg/__init__.py": "class helpers:\n    pass\n"}, "from pkg import helpers"),
    ("a name bound in an if of __init__", {"pkg/__init__.py": "import os\nif os.name == 'nt':\n    helpers = None\n"
                                                              "else:\n    helpers = object()\n"},
     "from pkg import helpers"),
    ("nothing in the project", {"pkg/__init__.py": ""}, "from pkg import missing as helpers"),
    ("a package that is not there", {}, "from nowhere import helpers"),
    ("a relative import above the root", {"pkg/__init__.py": ""}, "from ... import helpers"),
    # (Python would end the cycle at the submodule: here an empty one, with nothing to follow)
    ("a cycle of re-exports", {"pkg/__init__.py": "from .a import helpers\n", "pkg/a.py": "from pkg import helpers\n",
                               "pkg/helpers.py": "# nothing here\n"}, "from pkg import helpers"),
]


@pytest.mark.parametrize("what,files,imports", _NOT_THE_MODULE, ids=[c[0] for c in _NOT_THE_MODULE])
def test_a_name_that_is_not_the_module_is_not_followed_into_it(tmp_path: Path, what, files, imports) -> None:
    _write_tree(tmp_path, {"pkg/helpers.py": _HELPER_STEP, **files,
                           "train.py": _CALLER.format(imports=imports, alias="helpers")})
    m = _caller_model(tmp_path, "train.py")
    assert not [e for e in m.events if e.path != str(tmp_path / "train.py")]
    assert not [loop for loop in m.walk_loops() if loop.kind is LoopKind.BATCH]


def test_recursion_and_depth_are_bounded() -> None:
    m = model_of("""
        def a(model, n):
            model(n).backward()
            return b(model, n)
        def b(model, n):
            return a(model, n - 1)
        def main(model):
            for i in range(3):
                a(model, i)
    """)
    assert len([e for e in m.events if e.kind is K.BACKWARD]) == 1


def test_nothing_is_guessed_for_unrelated_code() -> None:
    m = model_of("""
        import json
        def load(path):
            with open(path) as f:
                return json.load(f)
        for item in load("x.json"):
            print(item.step())
    """)
    assert m.events == [] and all(loop.kind is LoopKind.OTHER for loop in m.walk_loops())


def test_a_call_that_makes_or_fetches_a_network_is_not_a_forward_pass() -> None:
    """A method named like a network (`*_model`) that builds or fetches one: the loop over saved
    runs below publishes checkpoints, it evaluates nothing."""
    m = model_of("""
        def publish(store, ckpt_paths, registry):
            for path in ckpt_paths:
                folder = store.create_training_model(path)
                registry.load_model(path)
                folder.upload(path)
            for name in ("a", "b"):
                net = registry.net(name)
    """)
    assert [e.target for e in m.events if e.kind is K.FORWARD] == ["registry.net"]


def test_wrappers_and_prepare_are_aliases_of_what_they_wrap() -> None:
    m = model_of("""
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP
        from tqdm import tqdm

        class Net(torch.nn.Module):
            pass

        def main(accelerator, loader, rank):
            net = Net()
            model = DDP(net.to(rank), device_ids=[rank])
            model = torch.compile(model)
            opt = torch.optim.AdamW(model.parameters())
            model, opt, loader = accelerator.prepare(model, opt, loader)
            for batch in tqdm(loader, desc="train"):
                opt.zero_grad()
                accelerator.backward(model(batch).loss)
                opt.step()
    """)
    batch = only_loop(m, LoopKind.BATCH)
    assert kinds(batch.traces[0]) == [("zero_grad", "opt"), ("forward", "net"), ("backward", "model(batch).loss"),
                                      ("step", "opt")]
    assert m.bindings["net"].cls == "Net" and m.bindings["opt"].detail["params_of"] == frozenset({"net"})
    assert batch.traces[0][2].detail["divided"] is True  # accelerate scales the loss itself
    assert batch.loader == "loader"


def test_ema_helper_and_requires_grad_freezing() -> None:
    m = model_of("""
        import copy
        import torch

        @torch.no_grad()
        def update_ema(ema, model, decay=0.999):
            for e, p in zip(ema.parameters(), model.parameters()):
                e.mul_(decay).add_(p.detach(), alpha=1 - decay)

        def train(model, loader, opt):
            ema = copy.deepcopy(model).requires_grad_(False)
            backbone = model.backbone
            backbone.requires_grad_(False)
            for x in loader:
                opt.zero_grad()
                model(x).backward()
                opt.step()
                update_ema(ema, model)
            backbone.eval()
    """)
    batch = only_loop(m, LoopKind.BATCH)
    assert kinds(batch.traces[0])[-1] == ("ema_update", "ema")
    assert batch.traces[0][-1].detail["model"] == "model"
    assert m.role("ema") is Role.EMA
    evals = [e for e in m.events if e.kind is K.EVAL_MODE]
    assert [(e.target, e.detail["frozen"]) for e in evals] == [("model.backbone", True)]


def test_self_calls_are_found_by_whole_word() -> None:
    from loopcheck.lint.loopmodel import _self_called

    source = "myself.a() self.b() (self.c ()) xcls.d() cls.e() super().f() _self.g() éself.h()\n"
    assert _self_called(source) == {"b", "c", "e", "f"}


def test_paths_needing_one_test_true_and_false_are_dropped():
    m = model_of("""
        import torch
        def train(model, loader, accumulate):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for x in loader:
                if not accumulate:
                    opt.zero_grad()
                loss = model(x).sum()
                if accumulate:
                    loss.backward()
                else:
                    loss.backward()
                    opt.step()
    """)
    loop = only_loop(m, LoopKind.BATCH)
    shapes = sorted(tuple(e.kind.value for e in trace if e.kind is not K.FORWARD) for trace in loop.traces)
    # the reset (accumulate false) never meets the accumulating branch (accumulate true)
    assert ("zero_grad", "backward") not in shapes
    assert ("zero_grad", "backward", "step") in shapes and ("backward",) in shapes


def test_subset_gradient_reset_is_marked_and_full_reset_is_not():
    m = model_of("""
        import torch
        def train(model, loader):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for x in loader:
                model(x).sum().backward()
                for name, p in model.named_parameters():
                    if "bias" in name:
                        p.grad = None
                for p in model.parameters():
                    if p.grad is not None:
                        p.grad = None
                opt.step()
    """)
    resets = [e for e in m.events if e.kind is K.ZERO_GRAD]
    assert [e.detail.get("subset") for e in resets] == [True, False]


def test_loop_over_an_empty_wrapper_call_ends():
    """`paths = list()` (or `zip()`) iterated later: nothing to unwrap, so the question whether
    it is a loop over parameters ends (it once looped for ever on such a call)."""
    import signal

    def stuck(*_):
        raise AssertionError("building the model did not end")

    alarm = hasattr(signal, "SIGALRM")  # (elsewhere a regression hangs instead of failing)
    previous = signal.signal(signal.SIGALRM, stuck) if alarm else None
    if alarm:
        signal.alarm(20)
    try:
        m = model_of("""
            import torch
            def export(model, loader, names):
                paths = list()
                for p in paths:
                    print(p)
                for a, b in zip():
                    pass
                for i, p in enumerate(list(model.parameters())):
                    p.grad = None
        """)
    finally:
        if alarm:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)
    resets = [e for e in m.events if e.kind is K.ZERO_GRAD]
    assert [e.target for e in resets] == ["model"]


def test_two_functions_with_their_own_local_model_are_two_objects():
    m = model_of("""
        import torch
        def export(path):
            model = torch.nn.Linear(2, 2)
            torch.save(model.state_dict(), path)

        def train(loader, restore):
            model = restore()
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for x in loader:
                opt.zero_grad()
                model(x).sum().backward()
                opt.step()
    """)
    forward = next(e for e in only_loop(m, LoopKind.BATCH).events if e.kind is K.FORWARD)
    assert m.bindings["model"].qualified == "torch.nn.Linear"
    own = m.bindings.get(forward.target)
    assert forward.target != "model" and (own is None or own.qualified is None)  # not export's Linear


def test_timm_style_loss_scaler_call_is_a_backward_and_a_step():
    m = model_of("""
        import torch
        from timm.utils import NativeScaler
        def train(model, loader):
            opt = torch.optim.AdamW(model.parameters())
            loss_scaler = NativeScaler()
            for x in loader:
                opt.zero_grad()
                loss_scaler(model(x).mean(), opt, clip_grad=1.0, parameters=model.parameters())
    """)
    assert kinds(only_loop(m, LoopKind.BATCH).events) == [
        ("zero_grad", "opt"), ("forward", "model"), ("backward", "model(x).mean()"), ("step", "opt"),
    ]
