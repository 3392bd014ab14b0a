"""Language server latency: diagnostics after an edit of one file of a 300-file project, against
a bare libcst parse of that file, in one run.

A project of `--files` Python files is generated (experiment folders, each with a model, a data
module, an engine whose `train_one_epoch` steps the optimizer, checkpoint utilities and a
`train.py` that calls into them). `loopcheck server` is started over stdio, exactly as an editor
starts it, and one `train.py` is opened. Each round sends one incremental edit (a line that moves
`scheduler.step()` before or after the epoch's training, so the cross-file finding LC201 comes and
goes) and times until the diagnostics of that version arrive (debounce 0), read as an editor's
event loop reads them (no reader thread handing them over). Interleaved with the rounds, the same
text is parsed with `libcst.parse_module` in this process, and checked in this process through
the server's seam (`loopcheck.server.checks.diagnose`), which shows what the protocol adds. The
server, like the seam, re-parses only the statements an edit touches (`server/reparse.py`): the
bare parse of the whole file is the unit the latency is measured in, not a part of it. Medians
and ratios are printed; the target is a server round trip of at most 2x the parse.

    python benchmarks/server_latency.py [--files 300] [--repeat 41]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import libcst as cst  # noqa: E402

from loopcheck.server.checks import diagnose  # noqa: E402
from loopcheck.server.settings import Configurations, Settings  # noqa: E402
from tests.server.lsp import LspClient  # noqa: E402

MODEL = '''\
"""Backbone and head of experiment {n}."""

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.norm = nn.BatchNorm2d(channels)

    def forward(self, x):
        return torch.relu(self.norm(self.conv(x))) + x


class Net(nn.Module):
    def __init__(self, classes={classes}, width={width}, depth=4):
        super().__init__()
        self.stem = nn.Conv2d(3, width, 3, padding=1)
        self.blocks = nn.Sequential(*[Block(width) for _ in range(depth)])
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.head(x.mean(dim=(2, 3)))
'''

DATA = '''\
"""Data of experiment {n}: random crops of a folder of images."""

import torch
from torch.utils.data import DataLoader, Dataset


class Crops(Dataset):
    def __init__(self, root, split, size={size}):
        self.root, self.split, self.size = root, split, size
        self.count = 5000 if split == "train" else 500

    def __len__(self):
        return self.count

    def __getitem__(self, index):
        generator = torch.Generator().manual_seed(index)
        image = torch.rand(3, self.size, self.size, generator=generator)
        return image, index % {classes}


def loaders(root, batch_size):
    train = DataLoader(Crops(root, "train"), batch_size=batch_size, shuffle=True, num_workers=4)
    val = DataLoader(Crops(root, "val"), batch_size=batch_size, num_workers=4)
    return train, val
'''

ENGINE = '''\
"""One epoch of training and one of evaluation, for experiment {n}."""

import torch


def train_one_epoch(model, loader, optimizer, criterion, device, log_every=50):
    model.train()
    running = 0.0
    for step, (images, labels) in enumerate(loader):
        images, labels = images.to(device), labels.to(device)
        optimizer.zero_grad()
        loss = criterion(model(images), labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        optimizer.step()
        running += loss.item()
        if step % log_every == 0:
            print(f"step {{step}} loss {{running / (step + 1):.4f}}")
    return running / max(len(loader), 1)


@torch.no_grad()
def evaluate(model, loader, device):
    model.eval()
    correct = total = 0
    for images, labels in loader:
        images, labels = images.to(device), labels.to(device)
        correct += (model(images).argmax(dim=1) == labels).sum().item()
        total += labels.numel()
    return correct / max(total, 1)
'''

UTILS = '''\
"""Checkpoints and bookkeeping for experiment {n}."""

import os

import torch


def save_checkpoint(path, model, optimizer, scheduler, epoch, best):
    state = {{
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "epoch": epoch,
        "best": best,
    }}
    tmp = path + ".tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)


class Meter:
    def __init__(self):
        self.total, self.count = 0.0, 0

    def add(self, value, n=1):
        self.total += value * n
        self.count += n

    @property
    def mean(self):
        return self.total / max(self.count, 1)
'''

TRAIN = '''\
"""Experiment {n}: python train.py --epochs {epochs}"""

import argparse

import torch
from torch import nn

from data import loaders
from engine import evaluate, train_one_epoch
from model import Net
from utils import Meter, save_checkpoint


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default="./data")
    parser.add_argument("--epochs", type=int, default={epochs})
    parser.add_argument("--lr", type=float, default={lr})
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--out", default="checkpoint.pt")
    return parser.parse_args()


def main():
    args = parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    train_loader, val_loader = loaders(args.data, args.batch_size)
    model = Net().to(device)
    criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs)
    best = 0.0
    history = Meter()
    for epoch in range(args.epochs):
        pass  # scheduler.step() goes after the epoch's training
        loss = train_one_epoch(model, train_loader, optimizer, criterion, device)
        scheduler.step()
        accuracy = evaluate(model, val_loader, device)
        history.add(loss)
        if accuracy > best:
            best = accuracy
        save_checkpoint(args.out, model, optimizer, scheduler, epoch + 1, best)
        print(f"epoch {{epoch}} loss {{loss:.4f}} accuracy {{accuracy:.3f}} best {{best:.3f}}")


if __name__ == "__main__":
    main()
'''

TEMPLATES = {"model.py": MODEL, "data.py": DATA, "engine.py": ENGINE, "utils.py": UTILS, "train.py": TRAIN}
CLEAN_LINE = "        pass  # scheduler.step() goes after the epoch's training\n"
BUGGY_LINE = "        scheduler.step()\n"


def build_project(root: Path, files: int) -> list[Path]:
    written: list[Path] = []
    n = 0
    while len(written) < files:
        folder = root / f"exp_{n:03d}"
        folder.mkdir(parents=True)
        values = {"n": n, "classes": 10 + n % 90, "width": 32 + 16 * (n % 4), "size": 64 + 32 * (n % 3),
                  "epochs": 30 + n % 70, "lr": 0.1 / (1 + n % 5)}
        for name, template in TEMPLATES.items():
            if len(written) == files:
                break
            path = folder / name
            path.write_text(template.format(**values), encoding="utf-8")
            written.append(path)
        n += 1
    (root / "pyproject.toml").write_text("[project]\nname = 'latency-project'\n", encoding="utf-8")
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=41)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="loopcheck-latency-") as tmp:
        root = Path(tmp)
        files = build_project(root, args.files)
        trains = [f for f in files if f.name == "train.py"]
        target = trains[len(trains) // 2]
        text = target.read_text(encoding="utf-8")
        line = text.splitlines(keepends=True).index(CLEAN_LINE)
        variants = [text, text.replace(CLEAN_LINE, BUGGY_LINE)]
        configs = Configurations(Settings(), root)

        client = LspClient(root, inline=True)  # read as an editor reads: no hand-over between threads
        try:
            client.initialize(root, {"debounce": 0})
            client.open(target, text)
            client.diagnostics(target, version=1)
            server_times: list[float] = []
            seam_times: list[float] = []
            parse_times: list[float] = []
            found: set[str] = set()
            for version in range(2, 2 + args.warmup + args.repeat):
                current, new = variants[version % 2], variants[(version + 1) % 2]
                old_line, new_line = current.splitlines(keepends=True)[line], new.splitlines(keepends=True)[line]
                edit = {"range": {"start": {"line": line, "character": 0}, "end": {"line": line, "character": len(old_line) - 1}},
                        "text": new_line.rstrip("\n")}
                start = time.perf_counter()
                client.change(target, version, [edit])
                diagnostics = client.diagnostics(target, version=version)
                server = time.perf_counter() - start
                found.update(d["code"] for d in diagnostics)

                start = time.perf_counter()
                cst.parse_module(new)
                parse = time.perf_counter() - start

                start = time.perf_counter()
                diagnose(target, new, configs.for_path(target))
                seam = time.perf_counter() - start
                if version >= 2 + args.warmup:
                    server_times.append(server)
                    parse_times.append(parse)
                    seam_times.append(seam)
            assert client.close() == 0
        finally:
            if client.proc.poll() is None:
                client.proc.kill()

    p, s, d = (statistics.median(t) * 1000 for t in (parse_times, server_times, seam_times))
    # each round's own ratio: a round's three timings are taken within milliseconds of each
    # other, so a busy machine slows all three alike
    rs = statistics.median(a / b for a, b in zip(server_times, parse_times))
    rd = statistics.median(a / b for a, b in zip(seam_times, parse_times))
    lines = text.count("\n")
    print(f"project: {len(files)} files; edited: {target.relative_to(root)} ({lines} lines); "
          f"rounds: {args.repeat} after {args.warmup} warm-up; codes seen: {', '.join(sorted(found)) or 'none'}")
    print(f"bare libcst parse of the file:            median {p:7.2f} ms")
    print(f"diagnose() in-process (the server's seam): median {d:7.2f} ms   ratio {rd:.2f}x")
    print(f"server: edit -> published diagnostics:     median {s:7.2f} ms   ratio {rs:.2f}x  (target <= 2.0x)")
    print("(ratios: the median of each round's ratio to the parse of the same text)")


if __name__ == "__main__":
    main()
