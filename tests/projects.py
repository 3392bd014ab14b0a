"""Small training projects shared by the end-to-end tests (CLI, flake8, pre-commit, the Action)."""

from __future__ import annotations

# LC102 at 9:13: the gradients are reset between backward and step.
ZERO_GRAD_LATE = """\
import torch


def train(model, loader, optimizer, epochs):
    for epoch in range(epochs):
        for inputs, targets in loader:
            loss = torch.nn.functional.cross_entropy(model(inputs), targets)
            loss.backward()
            optimizer.zero_grad()
            optimizer.step()
"""

# Two files: the softmax in model.py's forward, CrossEntropyLoss in train.py (LC602 at 14 of train.py).
MODEL = """\
import torch.nn.functional as F
from torch import nn


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(784, 10)

    def forward(self, x):
        return F.softmax(self.head(x), dim=1)
"""

TRAIN = """\
import torch
from torch import nn

from model import Classifier


def train(loader, epochs):
    model = Classifier()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    criterion = nn.CrossEntropyLoss()
    for epoch in range(epochs):
        for images, labels in loader:
            optimizer.zero_grad()
            loss = criterion(model(images), labels)
            loss.backward()
            optimizer.step()
"""

# Two files: the loop's bug sits in engine.py (LC102 at 6), main.py drives it.
ENGINE = """\
def train_one_epoch(model, loader, optimizer, criterion):
    model.train()
    for inputs, targets in loader:
        loss = criterion(model(inputs), targets)
        loss.backward()
        optimizer.zero_grad()
        optimizer.step()
"""

MAIN = """\
import torch
from torch import nn

from engine import train_one_epoch


def main(model, loader, epochs):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    criterion = nn.CrossEntropyLoss()
    for epoch in range(epochs):
        train_one_epoch(model, loader, optimizer, criterion)
"""

# Two files: driver.py's loop calls the step in steps.py, whose reset sits between the backward
# and the step (LC102 in steps.py, found by driver.py's model)
STEP_MODULE = """\
import torch


def train_step(model, batch, optimizer, criterion):
    optimizer.zero_grad()
    loss = criterion(model(batch[0]), batch[1])
    optimizer.step()
    loss.backward()
    return loss
"""
