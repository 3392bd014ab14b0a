"""The loop model across classes and helpers: calls dispatched on the class of `self`, abstract
methods, loops that draw from a loader's iterator, accelerate's accumulation context, and
constructors handed back inside tuples."""

from __future__ import annotations

import textwrap

import libcst as cst

from loopcheck.lint.loopmodel import EventKind, LoopKind, ModuleModel, Role, build_model

K = EventKind


def model_of(source: str) -> ModuleModel:
    return build_model("train.py", cst.parse_module(textwrap.dedent(source)))


def loops(m: ModuleModel, kind: LoopKind):
    return [loop for loop in m.walk_loops() if loop.kind is kind]


TRAINERS = """
import torch

class Base:
    def __init__(self, model, loader, val_loader):
        self.model = model
        self.loader = loader
        self.val_loader = val_loader
        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def fit(self, epochs):
        for epoch in range(epochs):
            self.train_epoch()
            self.validate()

    def train_epoch(self):
        raise NotImplementedError

    def validate(self):
        print("no validation")

class Classifier(Base):
    def train_epoch(self):
        for x, y in self.loader:
            self.optimizer.zero_grad()
            torch.nn.functional.cross_entropy(self.model(x), y).backward()
            self.optimizer.step()

    def validate(self):
        self.model.eval()
        for x, y in self.val_loader:
            self.model(x)
"""


def test_a_base_class_call_reaches_the_subclass_override() -> None:
    m = model_of(TRAINERS)
    (batch,) = loops(m, LoopKind.BATCH)
    assert [site.callee for site in batch.via] == ["Classifier.train_epoch"]
    assert batch.parent is not None and batch.parent.line == 12  # the epoch loop of Base.fit
    evals = loops(m, LoopKind.EVAL)
    assert evals and all(loop.via[-1].callee == "Classifier.validate" for loop in evals)
    assert any(loop.parent is batch.parent for loop in evals)


def test_an_instance_of_the_subclass_dispatches_to_its_overrides() -> None:
    m = model_of(TRAINERS + """
trainer = Classifier(net, train_loader, val_loader)
trainer.fit(10)
""")
    callees = {tuple(site.callee for site in loop.via) for loop in loops(m, LoopKind.BATCH)}
    assert ("Base.fit", "Classifier.train_epoch") in callees


def test_a_base_method_run_on_the_instance_is_not_walked_again_as_an_entry() -> None:
    m = model_of(TRAINERS + """
trainer = Classifier(net, train_loader, val_loader)
trainer.fit(10)
""")
    chains = [tuple(site.callee for site in loop.via) for loop in loops(m, LoopKind.BATCH)]
    assert chains == [("Base.fit", "Classifier.train_epoch")]


def test_a_subclass_whose_instance_never_runs_the_base_method_still_gets_it_walked() -> None:
    m = model_of(TRAINERS + """
class Regressor(Base):
    def train_epoch(self):
        for x, y in self.loader:
            self.optimizer.zero_grad()
            torch.nn.functional.mse_loss(self.model(x), y).backward()
            self.optimizer.step()

trainer = Classifier(net, train_loader, val_loader)
trainer.fit(10)
""")
    chains = {tuple(site.callee for site in loop.via) for loop in loops(m, LoopKind.BATCH)}
    assert ("Base.fit", "Classifier.train_epoch") in chains
    assert ("Regressor.train_epoch",) in chains  # `Base.fit` walked as an entry on a Regressor


def test_super_keeps_the_class_of_self() -> None:
    m = model_of(TRAINERS + """
class LoggingClassifier(Classifier):
    def fit(self, epochs):
        print("start")
        super().fit(epochs)

    def validate(self):
        with torch.no_grad():
            for x, y in self.val_loader:
                self.model(x)
""")
    chains = [tuple(site.callee for site in loop.via) for loop in loops(m, LoopKind.EVAL)]
    assert ("Base.fit", "LoggingClassifier.validate") in chains
    assert ("Base.fit", "Classifier.validate") not in chains


def test_an_abstract_method_does_not_end_the_iteration() -> None:
    m = model_of("""
import torch

class Trainer:
    def compute_loss(self, batch):
        \"\"\"Each subclass defines its loss.\"\"\"
        raise NotImplementedError()

    def run(self, loader):
        for batch in loader:
            self.optimizer.zero_grad()
            loss = self.compute_loss(batch)
            loss.backward()
            self.optimizer.step()
""")
    (batch,) = loops(m, LoopKind.BATCH)
    assert [(e.kind, e.target) for e in batch.traces[0]] == [
        (K.ZERO_GRAD, "self.optimizer"), (K.BACKWARD, "loss"), (K.STEP, "self.optimizer")]


def test_a_counted_loop_that_draws_from_a_loader_iterates_it() -> None:
    m = model_of("""
import torch

def train(model, loader, val_loader, optimizer, steps):
    batches = iter(loader)
    for _ in range(steps):
        x, y = next(batches)
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    held_out = val_loader.__iter__()
    for _ in range(len(val_loader)):
        model(held_out.next()[0])
    for _ in range(3):
        model(torch.randn(1, 3))
""")
    (batch,) = loops(m, LoopKind.BATCH)
    assert batch.loader == "loader"
    others = [loop for loop in m.walk_loops() if loop is not batch]
    assert [loop.loader for loop in others] == ["val_loader", None]


ACCELERATE = """
import torch
from accelerate import Accelerator

def train(model, loader):
    accelerator = Accelerator(gradient_accumulation_steps=4)
    optimizer = torch.optim.AdamW(model.parameters())
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for batch in loader:
        with accelerator.accumulate(model):
            accelerator.backward(model(**batch).loss)
            optimizer.step()
            optimizer.zero_grad()
            model.zero_grad()
"""


def test_accumulate_holds_the_prepared_optimizer_to_the_syncing_micro_batch() -> None:
    m = model_of(ACCELERATE)
    (batch,) = loops(m, LoopKind.BATCH)
    held = {(e.kind, e.target): [g.text for g in e.guards if g.accumulation] for e in batch.events}
    assert held[(K.STEP, "optimizer")] == ["accelerator.sync_gradients"]
    assert held[(K.ZERO_GRAD, "optimizer")] == ["accelerator.sync_gradients"]
    assert held[(K.ZERO_GRAD, "model")] == []  # the network's own reset runs on every micro-batch
    shapes = {tuple((e.kind, e.target) for e in trace if e.kind is not K.BACKWARD) for trace in batch.traces}
    assert ((K.FORWARD, "model"), (K.ZERO_GRAD, "model")) in shapes  # a micro-batch that does not sync
    assert any((K.STEP, "optimizer") in trace and (K.ZERO_GRAD, "optimizer") in trace for trace in shapes)


def test_without_accumulate_nothing_is_held() -> None:
    m = model_of(ACCELERATE.replace("with accelerator.accumulate(model):", "if True:"))
    (batch,) = loops(m, LoopKind.BATCH)
    assert all(not e.guards for e in batch.events)


def test_a_loss_scaler_held_by_update_grad_leaves_paths_without_the_step() -> None:
    m = model_of("""
import torch
from timm.utils import NativeScaler

def train(model, loader, optimizer, accum_steps):
    loss_scaler = NativeScaler()
    for i, (x, y) in enumerate(loader):
        loss = torch.nn.functional.cross_entropy(model(x), y) / accum_steps
        loss_scaler(loss, optimizer, update_grad=(i + 1) % accum_steps == 0)
        if (i + 1) % accum_steps == 0:
            optimizer.zero_grad()
""")
    (batch,) = loops(m, LoopKind.BATCH)
    steps = [any(e.kind is K.STEP for e in trace) for trace in batch.traces]
    assert True in steps and False in steps


def test_constructors_returned_in_tuples_are_bound_per_caller() -> None:
    m = model_of("""
import torch
from torch.utils.data import DataLoader

def plain(ds):
    loader = DataLoader(ds, shuffle=False)
    return torch.nn.Linear(2, 2), loader

def shuffled(ds):
    return torch.nn.Linear(2, 2), DataLoader(ds, shuffle=True)

def first(ds):
    model, loader = plain(ds)
    for x in loader:
        model(x).sum().backward()

def second(ds):
    model, loader = shuffled(ds)
    for x in loader:
        model(x).sum().backward()
""")
    names = [loop.loader for loop in m.walk_loops()]
    assert names == ["loader", "loader@second"]
    calls = [m.bindings[n].call for n in names]
    assert [cst.Module(body=[]).code_for_node(c.args[1]) for c in calls] == ["shuffle=False", "shuffle=True"]
    assert all(m.bindings[n].role is Role.LOADER for n in names)


def test_a_string_argument_folds_the_helpers_test_and_registry_switches_are_kept() -> None:
    m = model_of("""
class Trainer:
    def set_mode(self, mode):
        for name in self.networks:
            if mode == "train":
                self.networks[name].train()
            else:
                self.networks[name].eval()

    def fit(self, loader):
        self.set_mode("train")
        for x in loader:
            self.model(x).sum().backward()
        self.set_mode("eval")
""")
    switches = [(e.kind, e.target, e.detail.get("container")) for e in m.events if e.kind in (K.TRAIN_MODE, K.EVAL_MODE)]
    assert switches == [(K.TRAIN_MODE, "self.networks", True), (K.EVAL_MODE, "self.networks", True)]
