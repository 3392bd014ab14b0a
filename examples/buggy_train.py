"""Train a small classifier on synthetic data.

This script has several classic training-loop bugs. It runs, and the loss even goes down a
little, yet every one of them costs accuracy or makes the run impossible to resume.
`loopcheck lint examples/buggy_train.py` finds them; examples/fixed_train.py is the same
script done right.
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Classifier(nn.Module):
    def __init__(self, features: int, classes: int, hidden: int = 64):
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(features, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Dropout(0.2),
            nn.Linear(hidden, hidden), nn.ReLU(),
        )
        self.head = nn.Linear(hidden, classes)

    def forward(self, x):
        return F.softmax(self.head(self.body(x)), dim=1)


def make_loaders(batch_size: int):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1024, 16, generator=g)
    y = (x[:, 0] > 0).long() + 2 * (x[:, 1] > 0).long()
    train_set = TensorDataset(x[:768], y[:768])
    val_set = TensorDataset(x[768:], y[768:])
    return (
        DataLoader(train_set, batch_size=batch_size, shuffle=True, drop_last=True),
        DataLoader(val_set, batch_size=batch_size),
    )


def evaluate(model, loader, device):
    correct = total = 0
    with torch.no_grad():
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            probs = model(x)  # expect: LC301
            correct += (probs.argmax(dim=1) == y).sum().item()
            total += y.numel()
    return correct / total


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--resume", default=None)
    parser.add_argument("--out", default="checkpoint.pt")
    args = parser.parse_args()

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    train_loader, val_loader = make_loaders(args.batch_size)
    model = Classifier(16, 4).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=args.lr, total_steps=args.epochs * len(train_loader)
    )
    scaler = torch.amp.GradScaler(device.type, enabled=device.type == "cuda")
    criterion = nn.CrossEntropyLoss()

    start_epoch = 0
    if args.resume:
        ckpt = torch.load(args.resume)
        model.load_state_dict(ckpt["model"])
        start_epoch = ckpt["epoch"] + 1

    losses = []
    for epoch in range(start_epoch, args.epochs):
        model.train()
        for x, y in train_loader:
            x, y = x.to(device), y.to(device)
            with torch.autocast(device.type, enabled=device.type == "cuda"):
                probs = model(x)
                loss = criterion(probs, y)  # expect: LC602
            scaler.scale(loss).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # expect: LC401
            scheduler.step()  # expect: LC201
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
            losses.append(loss)  # expect: LC601

        accuracy = evaluate(model, val_loader, device)
        mean_loss = sum(l.item() for l in losses[-len(train_loader):]) / len(train_loader)
        print(f"epoch {epoch + 1}: loss {mean_loss:.4f}  val acc {accuracy:.3f}")
        torch.save({"model": model.state_dict(), "epoch": epoch}, args.out)  # expect: LC501, LC502, LC503


if __name__ == "__main__":
    main()
