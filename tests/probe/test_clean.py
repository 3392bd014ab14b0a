"""Correct training loops written the usual ways produce no finding at all."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F
from torch.optim import lr_scheduler

import loopcheck
from .conftest import Batches, Net


class Trainer:
    """A typical hand-written trainer: AdamW + OneCycleLR, clipping, validation every 50 steps."""

    def __init__(self, steps: int) -> None:
        torch.manual_seed(0)
        self.model = Net(dropout=0.1)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=3e-3, weight_decay=0.05)
        self.scheduler = lr_scheduler.OneCycleLR(self.optimizer, max_lr=3e-3, total_steps=steps)
        self.train_data = Batches(seed=0)
        self.val_data = Batches(n=128, batch=64, seed=0, split=1)
        self.steps = steps
        self.val_losses: list[float] = []

    def train_step(self, x: torch.Tensor, y: torch.Tensor) -> float:
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(self.model(x), y)
        loss.backward()
        nn.utils.clip_grad_norm_(self.model.parameters(), max_norm=2.0)
        self.optimizer.step()
        self.scheduler.step()
        return loss.item()

    @torch.no_grad()
    def validate(self) -> float:
        self.model.eval()
        total = sum(F.cross_entropy(self.model(x), y).item() for x, y in self.val_data.epoch(4))
        self.model.train()
        return total / 4

    def fit(self) -> None:
        for step, (x, y) in enumerate(self.train_data.epoch(self.steps), 1):
            self.train_step(x, y)
            if step % 50 == 0:
                self.val_losses.append(self.validate())


def test_300_steps_adamw_onecycle_with_validation_is_clean(tmp_path):
    trainer = Trainer(300)
    with loopcheck.probe(trainer.model, trainer.optimizer, scheduler=trainer.scheduler,
                         log=tmp_path / "run.jsonl", summary=False) as probe:
        trainer.fit()
    assert probe.findings == []
    assert probe.step == 300 and len(trainer.val_losses) == 6
    assert trainer.val_losses[-1] < trainer.val_losses[0]  # it really trained


def test_inference_mode_evaluation_and_eval_outside_the_model_are_clean():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.LayerNorm(32), nn.GELU(), nn.Dropout(0.1), nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True)
    sched = lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)
    data = Batches()
    with loopcheck.probe(model, opt, scheduler=sched, on_finding="raise", summary=False) as probe:
        for epoch in range(3):
            model.train()
            for x, y in data.epoch(25):
                loss = F.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
            sched.step()
            model.eval()
            with torch.inference_mode():
                for x, _ in data.epoch(3):
                    model(x).softmax(-1)
    assert probe.findings == [] and probe.step == 75
