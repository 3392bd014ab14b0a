"""A PyTorch training loop that gets every detail right.

Plain PyTorch, no framework, one file: it imports only torch, numpy and the standard library
(rich, when installed, draws the progress bar), so it can be copied out and used as the start
of a new project. It trains a small model on a built-in synthetic classification dataset; the
two places to replace with your own data and model are marked `REPLACE:`.

    python train.py --epochs 10 --seed 0 --ckpt-dir runs/exp1 [--amp] [--accum 2] [--ema 0.999]
    torchrun --nproc_per_node 2 train.py --ckpt-dir runs/exp1        # data parallel (gloo / nccl)

Running it again with the same --ckpt-dir resumes from DIR/last.pt, and the resumed run ends
bit-identical to one that was never interrupted:

- the order of the samples of an epoch is a pure function of (seed, epoch), so a resumed epoch
  sees the same batches, and the batches consumed before the interruption are skipped;
- checkpoints are taken only at optimizer-step boundaries. A stop requested in the middle of a
  gradient-accumulation window (Ctrl-C, SIGTERM, --stop-after-steps) first finishes the window
  and its optimizer step, then saves, so no partial gradient ever needs to be saved;
- everything that the rest of the run depends on is saved: model, optimizer, scheduler,
  GradScaler, EMA, the position (epoch, micro-batch, optimizer step), early-stopping state, the
  running log window, and the RNG states of Python, NumPy, torch (CPU and CUDA) and the
  DataLoader generator, per rank.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import itertools
import json
import math
import os
import random
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, ContextManager, Dict, Iterator, List, Optional

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Sampler, Subset

SCHEDULERS = ("cosine", "step", "plateau", "onecycle")
PER_STEP_SCHEDULERS = ("cosine", "onecycle")  # sized in optimizer steps, stepped after each one
CHECKPOINT_FORMAT = 1

# Settings that do not change the trajectory of a run: they may differ when resuming.
RESUMABLE_OVERRIDES = frozenset(
    {"ckpt_dir", "stop_after_steps", "workers", "save_every", "keep_last", "log_every", "progress"}
)


@dataclass
class Config:
    """Every setting of a run; saved in each checkpoint."""

    epochs: int = 10
    seed: int = 0
    ckpt_dir: str = "checkpoints"
    amp: bool = False  # bf16 autocast on CPU, fp16 autocast + GradScaler on CUDA
    accum: int = 1  # micro-batches per optimizer step
    stop_after_steps: Optional[int] = None  # stop as an interruption would, after K optimizer steps
    batch_size: int = 32  # per micro-batch and per process
    lr: float = 3e-3
    weight_decay: float = 0.05
    warmup: float = 0.1  # fraction of the optimizer steps spent warming up (cosine)
    clip: float = 1.0  # max gradient norm; 0 disables clipping (the norm is still logged)
    workers: int = 0
    ema: float = 0.0  # EMA decay of the weights, e.g. 0.999; 0 disables the EMA
    patience: int = 0  # epochs without improvement before stopping early; 0 disables
    scheduler: str = "cosine"
    save_every: int = 50  # optimizer steps between step checkpoints; 0 disables them
    keep_last: int = 3  # step checkpoints kept on disk (last.pt and best.pt are always kept)
    log_every: int = 10  # optimizer steps per line of metrics.jsonl
    progress: bool = True  # progress bar when stderr is a terminal
    # The synthetic dataset and the model (REPLACE: with your own settings).
    data_seed: int = 1234
    train_samples: int = 2048
    val_samples: int = 512
    features: int = 32
    classes: int = 8
    hidden: int = 128
    dropout: float = 0.1
    label_noise: float = 0.05

    def validate(self) -> None:
        """Raise ValueError with a readable message for a setting that cannot work."""
        checks = [
            (self.epochs >= 1, "--epochs must be at least 1"),
            (self.accum >= 1, "--accum must be at least 1"),
            (self.batch_size >= 1, "--batch-size must be at least 1"),
            (self.lr > 0 and math.isfinite(self.lr), "--lr must be a positive number"),
            (self.weight_decay >= 0, "--weight-decay must not be negative"),
            (0 <= self.warmup < 1, "--warmup must be in [0, 1)"),
            (self.clip >= 0, "--clip must not be negative"),
            (self.workers >= 0, "--workers must not be negative"),
            (0 <= self.ema < 1, "--ema must be a decay in [0, 1), e.g. 0.999 (0 disables it)"),
            (self.patience >= 0, "--patience must not be negative"),
            (self.scheduler in SCHEDULERS, f"--scheduler must be one of {', '.join(SCHEDULERS)}"),
            (self.save_every >= 0, "--save-every must not be negative"),
            (self.keep_last >= 1, "--keep-last must be at least 1"),
            (self.log_every >= 1, "--log-every must be at least 1"),
            (self.stop_after_steps is None or self.stop_after_steps >= 1, "--stop-after-steps must be at least 1"),
            (self.train_samples >= 1 and self.val_samples >= 1, "the dataset sizes must be at least 1"),
            (0 <= self.dropout < 1 and 0 <= self.label_noise <= 1, "dropout and label noise must be in [0, 1)"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)


class CheckpointError(RuntimeError):
    """A checkpoint cannot be resumed with this configuration (the message says why)."""


# --------------------------------------------------------------------------------------------
# Data and model. REPLACE: these two with your own dataset and model.
# --------------------------------------------------------------------------------------------


class SyntheticClassification(Dataset):
    """REPLACE: your dataset. Gaussian clusters, one per class, with a little label noise.

    Deterministic: the same (data_seed, split) always gives the same samples, whatever the
    training seed, so runs with different seeds train on the same data.
    """

    def __init__(self, cfg: Config, split: str) -> None:
        centers = torch.randn(cfg.classes, cfg.features, generator=torch.Generator().manual_seed(cfg.data_seed))
        g = torch.Generator().manual_seed(derive_seed(cfg.data_seed, {"train": 1, "val": 2}[split]))
        samples = cfg.train_samples if split == "train" else cfg.val_samples
        labels = torch.randint(cfg.classes, (samples,), generator=g)
        self.x = centers[labels] + 1.5 * torch.randn(samples, cfg.features, generator=g)
        noisy = torch.rand(samples, generator=g) < cfg.label_noise
        self.y = torch.where(noisy, torch.randint(cfg.classes, (samples,), generator=g), labels)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, index: int):
        # Any random augmentation here should draw from a generator seeded by
        # (seed, epoch, index): then a resumed epoch augments exactly as the original one.
        return self.x[index], self.y[index]


class MLP(nn.Module):
    """REPLACE: your model. BatchNorm and Dropout make train/eval modes matter."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(cfg.features, cfg.hidden),
            nn.BatchNorm1d(cfg.hidden),
            nn.ReLU(),
            nn.Dropout(cfg.dropout),
            nn.Linear(cfg.hidden, cfg.hidden),
            nn.BatchNorm1d(cfg.hidden),
            nn.ReLU(),
            nn.Dropout(cfg.dropout),
        )
        self.head = nn.Linear(cfg.hidden, cfg.classes)  # logits: the loss applies log-softmax itself

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


# --------------------------------------------------------------------------------------------
# Seeding, distributed setup, samplers
# --------------------------------------------------------------------------------------------


def derive_seed(*keys: int) -> int:
    """A well-mixed 63-bit seed from several integers (seed, rank, epoch, ...)."""
    return int(np.random.SeedSequence(list(keys)).generate_state(2, np.uint64)[0] >> np.uint64(1))


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (CPU and every CUDA device)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # also seeds all CUDA devices


def seed_worker(worker_id: int) -> None:
    """DataLoader worker_init_fn: derive Python and NumPy seeds from the worker's torch seed.

    torch seeds each worker from the loader's generator; Python's `random` and NumPy would
    otherwise start every worker (and every epoch, with fork) from the same state.
    """
    worker_seed = torch.initial_seed() % 2**32
    np.random.seed(worker_seed)
    random.seed(worker_seed)


@dataclass
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    created_group: bool = False

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def setup_distributed() -> DistInfo:
    """Join the process group that torchrun describes in the environment (if any)."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return DistInfo()
    created = False
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
        created = True
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
    return DistInfo(dist.get_rank(), dist.get_world_size(), local_rank, created)


class ResumableSampler(Sampler[int]):
    """Wraps a sampler and leaves out its first `skip` indices: the samples that an
    interrupted epoch already consumed. The wrapped sampler's order is unchanged."""

    def __init__(self, sampler: Sampler[int]) -> None:
        self.sampler = sampler
        self.skip = 0

    def __iter__(self) -> Iterator[int]:
        return itertools.islice(iter(self.sampler), self.skip, None)

    def __len__(self) -> int:
        return len(self.sampler) - self.skip  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# Optimizer and learning-rate schedules
# --------------------------------------------------------------------------------------------


def parameter_groups(model: nn.Module, weight_decay: float) -> List[Dict[str, Any]]:
    """Weight decay on weight matrices only: decaying biases and norm scales only hurts."""
    decay = [p for p in model.parameters() if p.requires_grad and p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.ndim < 2]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


class WarmupCosine:
    """LR factor: linear warmup to 1, then cosine decay to `floor`, over optimizer steps.

    A class rather than a lambda so that LambdaLR saves its settings in its state dict."""

    def __init__(self, warmup_steps: int, total_steps: int, floor: float = 0.01) -> None:
        self.warmup_steps = warmup_steps
        self.total_steps = total_steps
        self.floor = floor

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            return (step + 1) / self.warmup_steps
        progress = (step - self.warmup_steps) / max(1, self.total_steps - self.warmup_steps)
        return self.floor + (1 - self.floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def build_scheduler(cfg: Config, optimizer: torch.optim.Optimizer, steps_per_epoch: int):
    """The schedule named by cfg.scheduler. Per-step schedules are sized in optimizer steps
    (micro-batches / accum, rounded up), never in batches or epochs."""
    total_steps = cfg.epochs * steps_per_epoch
    if cfg.scheduler == "cosine":
        warmup_steps = max(1, round(cfg.warmup * total_steps))
        return torch.optim.lr_scheduler.LambdaLR(optimizer, WarmupCosine(warmup_steps, total_steps))
    if cfg.scheduler == "onecycle":
        return torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=cfg.lr, total_steps=total_steps)
    if cfg.scheduler == "step":
        return torch.optim.lr_scheduler.StepLR(optimizer, step_size=max(1, cfg.epochs // 3), gamma=0.3)
    return torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=0.5, patience=1)


# --------------------------------------------------------------------------------------------
# Checkpoint files
# --------------------------------------------------------------------------------------------


def atomic_write(path: Path, data: bytes) -> None:
    """Write `data` to `path` so that a crash at any moment leaves either the old file or the
    new one, never a torn one: temporary file, flush, fsync, rename, fsync the directory."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)  # atomic on POSIX and Windows
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if hasattr(os, "O_DIRECTORY"):  # make the rename itself durable
        fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def step_checkpoints(ckpt_dir: Path) -> List[Path]:
    """The step checkpoints in `ckpt_dir`, oldest first."""
    return sorted(ckpt_dir.glob("step-*.pt"), key=lambda p: p.name)


def prune_step_checkpoints(ckpt_dir: Path, keep_last: int) -> None:
    """Keep the newest `keep_last` step checkpoints; last.pt and best.pt are never touched."""
    for old in step_checkpoints(ckpt_dir)[:-keep_last]:
        if old.name not in ("last.pt", "best.pt"):
            old.unlink(missing_ok=True)


def capture_rng(loader_generator: torch.Generator) -> Dict[str, Any]:
    """This process's RNG states, in types that torch.load(weights_only=True) accepts."""
    np_state = np.random.get_state()
    return {
        "python": random.getstate(),
        "numpy": [np_state[0], np_state[1].tolist(), *np_state[2:]],
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "loader": loader_generator.get_state(),
    }


def restore_rng(state: Dict[str, Any], loader_generator: torch.Generator) -> None:
    random.setstate(_as_tuples(state["python"]))
    name, keys, *rest = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), *rest))
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    loader_generator.set_state(state["loader"])


def _as_tuples(value: Any) -> Any:
    # random.setstate wants tuples; a checkpoint may hand back lists.
    return tuple(_as_tuples(v) for v in value) if isinstance(value, (list, tuple)) else value


# --------------------------------------------------------------------------------------------
# Stop requests, metrics log, progress bar
# --------------------------------------------------------------------------------------------


class StopRequest:
    """Turns SIGINT and SIGTERM into a request to stop at the next optimizer-step boundary.

    The loop then finishes the current optimizer step, writes last.pt and returns. A second
    signal stops at once (KeyboardInterrupt) for a user who does not want to wait.
    """

    def __init__(self) -> None:
        self.signum: Optional[int] = None
        self._previous: Dict[int, Any] = {}

    def __enter__(self) -> "StopRequest":
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: object) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt
        self.signum = signum
        # os.write, not print: the signal may arrive while the progress bar is writing to
        # stderr, and a buffered stream must not be re-entered.
        message = (f"\n{signal.Signals(signum).name}: finishing the current optimizer step, then "
                   "saving last.pt (send it again to stop at once)\n")
        os.write(sys.stderr.fileno(), message.encode())


class MetricsLog:
    """metrics.jsonl: one JSON object per line, written by rank 0 only.

    On resume, records written after the checkpoint (by a run that crashed before its next
    save) are dropped, so the log reads as one uninterrupted run.
    """

    def __init__(self, path: Path, enabled: bool) -> None:
        self.path = path
        self.enabled = enabled

    def truncate_after(self, step: int) -> None:
        if not self.enabled or not self.path.exists():
            return
        kept = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                if json.loads(line).get("step", 0) <= step:
                    kept.append(line)
            except json.JSONDecodeError:
                break  # a line torn by a crash: nothing after it is trustworthy
        atomic_write(self.path, "".join(f"{line}\n" for line in kept).encode("utf-8"))

    def write(self, record: Dict[str, Any]) -> None:
        if self.enabled:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")


class ProgressBar:
    """A rich progress bar with loss and LR on stderr; silent when stderr is not a terminal,
    when rich is not installed, or on ranks other than 0."""

    def __init__(self, enabled: bool, total: int, completed: int) -> None:
        self._progress = None
        if not (enabled and sys.stderr.isatty()):
            return
        try:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
        except ImportError:
            return
        self._progress = Progress(
            TextColumn("[bold]epoch {task.fields[epoch]}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]}  lr {task.fields[lr]}"), TimeRemainingColumn(),
            console=Console(stderr=True), transient=False,
        )
        self._task = self._progress.add_task("train", total=total, completed=completed, epoch="-", loss="-", lr="-")
        self._progress.start()

    def update(self, completed: int, **fields: Any) -> None:
        if self._progress is not None:
            self._progress.update(self._task, completed=completed, **fields)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()


def _memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    try:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    except ImportError:  # Windows
        return float("nan")


# --------------------------------------------------------------------------------------------
# The trainer
# --------------------------------------------------------------------------------------------


WrapHook = Callable[[nn.Module, torch.optim.Optimizer, Any, "torch.amp.GradScaler"], ContextManager[Any]]


class Trainer:
    """Owns the objects of one run and the loop over them."""

    def __init__(self, cfg: Config, dist_info: DistInfo) -> None:
        self.cfg = cfg
        self.dist = dist_info
        if torch.cuda.is_available():
            self.device = torch.device("cuda", dist_info.local_rank)
        else:
            self.device = torch.device("cpu")
        cuda = self.device.type == "cuda"

        # The same seed everywhere for the initial weights; per-rank seeds once the model is
        # built (below), so that ranks draw different dropout masks.
        seed_everything(cfg.seed)

        # Data. The sampler's order is a pure function of (seed, epoch) once set_epoch() is
        # called; with one process it is simply a seeded shuffle. drop_last keeps every
        # optimizer step the same size (a tiny last batch gives a noisy step and odd BatchNorm).
        train_set = SyntheticClassification(cfg, "train")
        val_set = SyntheticClassification(cfg, "val")
        self.train_sampler = DistributedSampler(
            train_set, num_replicas=dist_info.world_size, rank=dist_info.rank, shuffle=True, seed=cfg.seed, drop_last=True
        )
        self.resumable_sampler = ResumableSampler(self.train_sampler)
        # The loader's own generator seeds the worker processes; without it, creating an
        # iterator would draw from the global torch RNG and shift dropout after a resume. It
        # is reseeded from (seed, rank, epoch) at every epoch (see train_one_epoch).
        self.loader_generator = torch.Generator()
        loader_args = dict(
            num_workers=cfg.workers,
            pin_memory=cuda,  # page-locked host memory makes non_blocking copies asynchronous
            persistent_workers=cfg.workers > 0,  # no worker start-up cost at every epoch
            worker_init_fn=seed_worker,
        )
        self.train_loader = DataLoader(
            train_set, batch_size=cfg.batch_size, sampler=self.resumable_sampler, drop_last=True,
            generator=self.loader_generator, **loader_args,
        )
        # Validation: every sample exactly once across ranks (a DistributedSampler would pad
        # with duplicates and bias the metrics), never dropped, never shuffled.
        val_shard = Subset(val_set, range(dist_info.rank, len(val_set), dist_info.world_size))
        self.val_loader = DataLoader(
            val_shard, batch_size=2 * cfg.batch_size, shuffle=False,
            generator=torch.Generator().manual_seed(cfg.seed), **loader_args,
        )
        self.micro_batches = len(self.train_sampler) // cfg.batch_size  # per epoch and rank
        if self.micro_batches == 0:
            raise ValueError(
                f"--batch-size {cfg.batch_size} is larger than the {len(self.train_sampler)} training "
                "samples each process sees: no batch would ever be trained on"
            )
        self.steps_per_epoch = math.ceil(self.micro_batches / cfg.accum)

        # Model, EMA, optimizer, schedule, mixed precision.
        self.net = MLP(cfg).to(self.device)
        if dist_info.enabled:
            seed_everything(cfg.seed + dist_info.rank)
        self.ema = None
        if cfg.ema > 0:
            # use_buffers=True also averages the BatchNorm running statistics.
            self.ema = AveragedModel(self.net, multi_avg_fn=get_ema_multi_avg_fn(cfg.ema), use_buffers=True)
        self.model: nn.Module = self.net
        if dist_info.enabled:
            self.model = DDP(self.net, device_ids=[dist_info.local_rank] if cuda else None)
        self.optimizer = torch.optim.AdamW(parameter_groups(self.net, cfg.weight_decay), lr=cfg.lr)
        self.scheduler = build_scheduler(cfg, self.optimizer, self.steps_per_epoch)
        self.amp_dtype = torch.float16 if cuda else torch.bfloat16
        # fp16 needs loss scaling to keep small gradients from flushing to zero; bf16 has
        # fp32's exponent range and does not. Disabled, the scaler is a no-op pass-through.
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=cfg.amp and self.amp_dtype == torch.float16)
        self.criterion = nn.CrossEntropyLoss()

        # Where the run is. `batch_in_epoch` counts micro-batches already trained in `epoch`.
        self.epoch = 0
        self.batch_in_epoch = 0
        self.step = 0  # optimizer steps (not micro-batches): the clock of schedule and log
        self.best_metric: Optional[float] = None
        self.best_epoch = -1
        self.bad_epochs = 0
        self.finished = False
        # The log window: sums over the optimizer steps since the last log line, kept on the
        # device (no host sync per step) and saved, so a resumed log matches an unbroken one.
        self.window = torch.zeros(2, dtype=torch.float64, device=self.device)  # loss, grad norm
        self.window_steps = 0
        self.steps_this_run = 0

        self.ckpt_dir = Path(cfg.ckpt_dir)
        self.log = MetricsLog(self.ckpt_dir / "metrics.jsonl", enabled=dist_info.is_main)
        self.stop = StopRequest()

    # ---------------------------------------------------------------------------- helpers

    def autocast(self) -> ContextManager[Any]:
        return torch.autocast(self.device.type, dtype=self.amp_dtype, enabled=self.cfg.amp)

    def lr(self) -> float:
        return self.optimizer.param_groups[0]["lr"]

    def all_reduce(self, tensor: torch.Tensor, op: Any = None) -> torch.Tensor:
        if self.dist.enabled:
            dist.all_reduce(tensor, op=op or dist.ReduceOp.SUM)
        return tensor

    def print(self, *args: Any) -> None:
        if self.dist.is_main:
            print(*args, flush=True)

    def should_stop(self) -> bool:
        """Whether any rank wants to stop. All ranks must agree, or one would wait forever
        in the next all-reduce for a rank that has left."""
        local = self.stop.signum is not None or (
            self.cfg.stop_after_steps is not None and self.steps_this_run >= self.cfg.stop_after_steps
        )
        if not self.dist.enabled:
            return local
        flag = torch.tensor([float(local)], device=self.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())

    def sync_buffers(self) -> None:
        """Give every rank rank 0's BatchNorm statistics. DDP does this before each forward;
        doing it after each step too keeps EMA, evaluation and checkpoints identical on all
        ranks (and a resumed rank identical to its uninterrupted self)."""
        if self.dist.enabled:
            for buffer in self.net.buffers():
                dist.broadcast(buffer, src=0)

    # ---------------------------------------------------------------------------- checkpoints

    def state_dict(self) -> Dict[str, Any]:
        # Each rank has its own RNG states (dropout) and loss sums: save every rank's.
        local = (capture_rng(self.loader_generator), self.window.cpu())
        if self.dist.enabled:
            per_rank: List[Any] = [None] * self.dist.world_size
            dist.all_gather_object(per_rank, local)
        else:
            per_rank = [local]
        return {
            "format": CHECKPOINT_FORMAT,
            "model": self.net.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "ema": self.ema.state_dict() if self.ema is not None else None,
            "epoch": self.epoch,
            "batch_in_epoch": self.batch_in_epoch,
            "step": self.step,
            "best_metric": self.best_metric,
            "best_epoch": self.best_epoch,
            "bad_epochs": self.bad_epochs,
            "finished": self.finished,
            "log_window": {"sums": [sums for _, sums in per_rank], "steps": self.window_steps},
            "rng": [rng for rng, _ in per_rank],
            "world_size": self.dist.world_size,
            "config": asdict(self.cfg),
        }

    def save_checkpoint(self, step_file: bool = False) -> None:
        """Write last.pt (and a step checkpoint) on rank 0; all ranks take part (RNG gather)."""
        state = self.state_dict()
        if self.dist.is_main:
            buffer = io.BytesIO()
            torch.save(state, buffer)
            data = buffer.getvalue()
            if step_file:
                atomic_write(self.ckpt_dir / f"step-{self.step:08d}.pt", data)
                prune_step_checkpoints(self.ckpt_dir, self.cfg.keep_last)
            atomic_write(self.ckpt_dir / "last.pt", data)
        if self.dist.enabled:
            dist.barrier()  # nobody runs ahead (or exits) before the file is in place

    def save_best(self, metrics: Dict[str, float]) -> None:
        """best.pt: only what inference needs. With an EMA, its weights are the ones to use."""
        if not self.dist.is_main:
            return
        weights = self.ema.module.state_dict() if self.ema is not None else self.net.state_dict()
        best = io.BytesIO()
        torch.save(
            {"model": weights, "epoch": self.epoch, "step": self.step, "metrics": metrics,
             "weights": "ema" if self.ema is not None else "model", "config": asdict(self.cfg)},
            best,
        )
        atomic_write(self.ckpt_dir / "best.pt", best.getvalue())

    def resume(self) -> bool:
        """Load last.pt if there is one. Returns whether the run resumed."""
        path = self.ckpt_dir / "last.pt"
        if not path.exists():
            return False
        try:
            ckpt = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:
            raise CheckpointError(f"cannot read {path}: {exc}") from exc
        if not isinstance(ckpt, dict) or ckpt.get("format") != CHECKPOINT_FORMAT:
            raise CheckpointError(f"{path} is not a checkpoint written by this script")
        saved = ckpt["config"]
        changed = [
            f"{name} (checkpoint: {saved.get(name)!r}, now: {value!r})"
            for name, value in asdict(self.cfg).items()
            if name not in RESUMABLE_OVERRIDES and saved.get(name) != value
        ]
        if changed:
            raise CheckpointError(
                f"{path} was written with other settings: {'; '.join(changed)}. Resume with the same "
                "settings, or start a new run with another --ckpt-dir"
            )
        if ckpt["world_size"] != self.dist.world_size:
            raise CheckpointError(
                f"{path} was written by {ckpt['world_size']} process(es), this run has {self.dist.world_size}"
            )
        self.net.load_state_dict(ckpt["model"])
        self.optimizer.load_state_dict(ckpt["optimizer"])
        self.scheduler.load_state_dict(ckpt["scheduler"])
        self.scaler.load_state_dict(ckpt["scaler"])
        if self.ema is not None:
            self.ema.load_state_dict(ckpt["ema"])
        self.epoch = ckpt["epoch"]
        self.batch_in_epoch = ckpt["batch_in_epoch"]
        self.step = ckpt["step"]
        self.best_metric = ckpt["best_metric"]
        self.best_epoch = ckpt["best_epoch"]
        self.bad_epochs = ckpt["bad_epochs"]
        self.finished = ckpt["finished"]
        self.window = ckpt["log_window"]["sums"][self.dist.rank].to(self.device)
        self.window_steps = ckpt["log_window"]["steps"]
        restore_rng(ckpt["rng"][self.dist.rank], self.loader_generator)
        self.log.truncate_after(self.step)
        return True

    # ---------------------------------------------------------------------------- training

    def fit(self, wrap: Optional[WrapHook] = None) -> Dict[str, Any]:
        """Train until the last epoch, early stopping or a stop request."""
        if self.dist.is_main:
            self.ckpt_dir.mkdir(parents=True, exist_ok=True)
            for stale in self.ckpt_dir.glob(".*.tmp"):  # left by a crash during a save
                stale.unlink(missing_ok=True)
        if self.dist.enabled:
            dist.barrier()
        if self.resume():
            self.print(f"resumed from {self.ckpt_dir / 'last.pt'}: epoch {self.epoch + 1}, "
                       f"micro-batch {self.batch_in_epoch}, optimizer step {self.step}")
        if self.finished or self.epoch >= self.cfg.epochs:
            self.print(f"nothing to do: the run in {self.ckpt_dir} has finished")
            return self.result(self.final_status())

        total_steps = self.cfg.epochs * self.steps_per_epoch
        bar = ProgressBar(self.cfg.progress and self.dist.is_main, total_steps, self.step)
        hook = wrap(self.model, self.optimizer, self.scheduler, self.scaler) if wrap else contextlib.nullcontext()
        try:
            with self.stop, hook:
                for epoch in range(self.epoch, self.cfg.epochs):
                    self.epoch = epoch
                    if not self.train_one_epoch(epoch, bar):
                        self.save_checkpoint()
                        return self.result("interrupted")
                    self.end_epoch(epoch)  # sets `finished` after the last epoch or on early stop
                    self.save_checkpoint()
                    if self.finished:
                        break
                    if self.should_stop():
                        return self.result("interrupted")
        finally:
            bar.close()
        if self.final_status() == "early_stopped":
            self.print(f"early stop: no improvement for {self.bad_epochs} epochs; best val loss "
                       f"{self.best_metric:.4f} at epoch {self.best_epoch + 1}")
        return self.result(self.final_status())

    def final_status(self) -> str:
        return "early_stopped" if self.epoch < self.cfg.epochs else "finished"

    def train_one_epoch(self, epoch: int, bar: ProgressBar) -> bool:
        """One epoch from micro-batch `batch_in_epoch` on. Returns False when it stopped early
        on a stop request (at an optimizer-step boundary; the caller saves)."""
        cfg = self.cfg
        self.train_sampler.set_epoch(epoch)  # a new, reproducible order every epoch
        self.loader_generator.manual_seed(derive_seed(cfg.seed, self.dist.rank, epoch))
        self.resumable_sampler.skip = self.batch_in_epoch * cfg.batch_size
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        seen = 0
        window_start_time = time.perf_counter()
        data_wait = 0.0
        fetch_start = time.perf_counter()
        for micro_batch, (x, y) in enumerate(self.train_loader, start=self.batch_in_epoch):
            data_wait += time.perf_counter() - fetch_start
            x = x.to(self.device, non_blocking=True)
            y = y.to(self.device, non_blocking=True)

            # The accumulation window holding this micro-batch; the last window of an epoch
            # may be shorter, and its loss is divided by its real length.
            first = micro_batch - micro_batch % cfg.accum
            micro_batches = min(cfg.accum, self.micro_batches - first)
            is_last = micro_batch == first + micro_batches - 1

            # Under DDP, gradients are all-reduced only on the window's last backward.
            sync = contextlib.nullcontext() if is_last or not self.dist.enabled else self.model.no_sync()
            with sync:
                with self.autocast():
                    logits = self.model(x)
                    loss = self.criterion(logits.float(), y)
                # The mean over the window, not the sum of `micro_batches` means.
                loss = loss / micro_batches
                self.scaler.scale(loss).backward()
            self.window[0] += loss.detach().double()
            seen += x.shape[0]
            self.batch_in_epoch = micro_batch + 1
            if not is_last:
                fetch_start = time.perf_counter()
                continue

            self.optimizer_step()
            self.steps_this_run += 1
            shown = {"epoch": f"{epoch + 1}/{cfg.epochs}", "lr": f"{self.lr():.2e}"}
            if self.step % cfg.log_every == 0:
                loss_value = self.log_train(epoch, seen, time.perf_counter() - window_start_time, data_wait)
                seen, data_wait, window_start_time = 0, 0.0, time.perf_counter()
                shown["loss"] = f"{loss_value:.4f}"
            bar.update(self.step, **shown)
            end_of_epoch = self.batch_in_epoch == self.micro_batches
            if not end_of_epoch:
                if cfg.save_every and self.step % cfg.save_every == 0:
                    self.save_checkpoint(step_file=True)
                if self.should_stop():
                    return False
            fetch_start = time.perf_counter()
        return True

    def optimizer_step(self) -> None:
        """Unscale, clip, step, reset gradients, advance the per-step schedule and the EMA."""
        self.scaler.unscale_(self.optimizer)  # clip the true gradients, not the scaled ones
        max_norm = self.cfg.clip if self.cfg.clip > 0 else float("inf")
        grad_norm = torch.nn.utils.clip_grad_norm_(self.net.parameters(), max_norm)
        scale_before = self.scaler.get_scale()  # 1.0 when the scaler is disabled
        self.scaler.step(self.optimizer)  # skips the step if the gradients hold inf/NaN
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)  # frees the memory, and nothing reads stale grads
        self.step += 1
        self.window[1] += grad_norm.detach().double()
        self.window_steps += 1
        self.sync_buffers()
        # A step skipped by the GradScaler (inf gradients, so it lowered the scale) did not
        # change the weights: the schedule and the EMA do not advance either.
        if self.scaler.get_scale() >= scale_before:
            if self.cfg.scheduler in PER_STEP_SCHEDULERS:
                self.scheduler.step()
            if self.ema is not None:
                self.ema.update_parameters(self.net)

    def log_train(self, epoch: int, samples: int, seconds: float, data_wait: float) -> float:
        """Write one train line of metrics.jsonl (the window's means) and return its loss."""
        sums = self.all_reduce(self.window.clone()) / self.dist.world_size
        loss, grad_norm = (sums / max(1, self.window_steps)).tolist()
        self.window.zero_()
        self.window_steps = 0
        self.log.write({
            "kind": "train", "step": self.step, "epoch": epoch + 1, "loss": loss, "lr": self.lr(),
            "grad_norm": grad_norm, "samples_per_s": samples * self.dist.world_size / max(seconds, 1e-9),
            "data_wait_s": data_wait, "memory_mb": _memory_mb(self.device),
        })
        return loss

    def end_epoch(self, epoch: int) -> None:
        """Validate, step the per-epoch schedule, update early stopping and best.pt."""
        metrics = evaluate(self.net, self.val_loader, self.device, self.autocast, self.all_reduce)
        if self.ema is not None:
            ema_metrics = evaluate(self.ema, self.val_loader, self.device, self.autocast, self.all_reduce)
            metrics.update({f"ema_{k}": v for k, v in ema_metrics.items()})
        monitored = metrics["ema_loss" if self.ema is not None else "loss"]

        # Per-epoch schedules step once per epoch, after the epoch's optimizer steps; the
        # plateau schedule needs the metric it watches.
        if self.cfg.scheduler == "plateau":
            self.scheduler.step(monitored)
        elif self.cfg.scheduler not in PER_STEP_SCHEDULERS:
            self.scheduler.step()

        self.batch_in_epoch = 0
        self.epoch = epoch + 1  # a checkpoint from here resumes with the next epoch
        if self.best_metric is None or monitored < self.best_metric:
            self.best_metric, self.best_epoch, self.bad_epochs = monitored, epoch, 0
            self.save_best(metrics)
        else:
            self.bad_epochs += 1
        if self.epoch == self.cfg.epochs or (self.cfg.patience and self.bad_epochs >= self.cfg.patience):
            self.finished = True
        self.log.write({"kind": "eval", "step": self.step, "epoch": epoch + 1, "lr": self.lr(),
                        **{f"val_{k}": v for k, v in metrics.items()},
                        "best_epoch": self.best_epoch + 1, "bad_epochs": self.bad_epochs})
        ema_text = f"  ema val loss {metrics['ema_loss']:.4f}" if self.ema is not None else ""
        self.print(f"epoch {epoch + 1}/{self.cfg.epochs}  step {self.step}  val loss {metrics['loss']:.4f}  "
                   f"val acc {metrics['accuracy']:.4f}{ema_text}  lr {self.lr():.2e}")

    def result(self, status: str) -> Dict[str, Any]:
        return {
            "status": status, "epoch": self.epoch, "step": self.step, "best_metric": self.best_metric,
            "best_epoch": self.best_epoch, "signal": self.stop.signum, "ckpt_dir": str(self.ckpt_dir),
            "rank": self.dist.rank,
        }


@torch.inference_mode()
def evaluate(model: nn.Module, loader: DataLoader, device: torch.device,
             autocast: Callable[[], ContextManager[Any]], all_reduce: Callable[..., torch.Tensor]) -> Dict[str, float]:
    """Validation loss and accuracy, summed over samples and all-reduced over ranks.

    inference_mode builds no autograd graph; eval() makes BatchNorm use its running statistics
    and turns Dropout off. Averaging per-batch means would over-weight a short last batch.
    """
    was_training = model.training
    model.eval()
    totals = torch.zeros(3, dtype=torch.float64, device=device)  # loss sum, correct, samples
    for x, y in loader:
        x = x.to(device, non_blocking=True)
        y = y.to(device, non_blocking=True)
        with autocast():
            logits = model(x)
        totals[0] += F.cross_entropy(logits.float(), y, reduction="sum").double()
        totals[1] += (logits.argmax(dim=1) == y).sum()
        totals[2] += y.numel()
    all_reduce(totals)
    model.train(was_training)
    loss_sum, correct, count = totals.tolist()
    return {"loss": loss_sum / count, "accuracy": correct / count}


# --------------------------------------------------------------------------------------------
# Entry points
# --------------------------------------------------------------------------------------------


def train(cfg: Config, wrap: Optional[WrapHook] = None) -> Dict[str, Any]:
    """Run (or resume) training with `cfg`. Returns a summary with "status": finished,
    early_stopped or interrupted.

    `wrap(model, optimizer, scheduler, scaler)`, if given, returns a context manager that the
    whole loop runs inside (a profiler, a debugging probe, ...).
    """
    cfg.validate()
    # Deterministic kernels so that the same run gives the same bits (cuBLAS needs this set
    # before its first use). Restored on return: the caller's process is not ours to change.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    saved_flags = (torch.are_deterministic_algorithms_enabled(),
                   torch.is_deterministic_algorithms_warn_only_enabled(), torch.backends.cudnn.benchmark)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    dist_info = setup_distributed()
    try:
        return Trainer(cfg, dist_info).fit(wrap)
    finally:
        torch.use_deterministic_algorithms(saved_flags[0], warn_only=saved_flags[1])
        torch.backends.cudnn.benchmark = saved_flags[2]
        if dist_info.created_group:
            dist.destroy_process_group()


def parse_args(argv: Optional[List[str]] = None) -> Config:
    defaults = Config()
    parser = argparse.ArgumentParser(
        description="Train a small model with every training-loop detail right. Running it again "
        "with the same --ckpt-dir resumes exactly where it stopped.",
    )
    parser.add_argument("--epochs", type=int, default=defaults.epochs)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--ckpt-dir", default=defaults.ckpt_dir, help="checkpoints and metrics.jsonl go here")
    parser.add_argument("--amp", action="store_true", help="mixed precision: bf16 on CPU, fp16 + GradScaler on CUDA")
    parser.add_argument("--accum", type=int, default=defaults.accum, help="micro-batches per optimizer step")
    parser.add_argument("--stop-after-steps", type=int, default=None, metavar="K",
                        help="stop (as an interruption would) after K optimizer steps of this run")
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size, help="per micro-batch and process")
    parser.add_argument("--lr", type=float, default=defaults.lr)
    parser.add_argument("--weight-decay", type=float, default=defaults.weight_decay)
    parser.add_argument("--warmup", type=float, default=defaults.warmup, help="warmup fraction (cosine)")
    parser.add_argument("--clip", type=float, default=defaults.clip, help="max gradient norm (0: no clipping)")
    parser.add_argument("--workers", type=int, default=defaults.workers, help="DataLoader worker processes")
    parser.add_argument("--ema", type=float, default=defaults.ema, metavar="DECAY", help="EMA decay (0: off)")
    parser.add_argument("--patience", type=int, default=defaults.patience, help="early stopping (0: off)")
    parser.add_argument("--scheduler", choices=SCHEDULERS, default=defaults.scheduler)
    parser.add_argument("--save-every", type=int, default=defaults.save_every, help="steps between step checkpoints")
    parser.add_argument("--keep-last", type=int, default=defaults.keep_last, help="step checkpoints kept")
    parser.add_argument("--log-every", type=int, default=defaults.log_every, help="steps per metrics.jsonl line")
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    args = vars(parser.parse_args(argv))
    cfg = Config(**{f.name: args[f.name] for f in dataclasses.fields(Config) if f.name in args})
    try:
        cfg.validate()
    except ValueError as exc:
        parser.error(str(exc))  # exit code 2
    return cfg


def main(argv: Optional[List[str]] = None) -> int:
    """Command line entry point. Exit codes: 0 finished, early-stopped or stopped by
    --stop-after-steps; 128 + signal number when stopped by a signal; 2 bad arguments or a
    checkpoint that does not fit them."""
    cfg = parse_args(argv)
    try:
        result = train(cfg)
    except (CheckpointError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if result["status"] == "interrupted" and result["rank"] == 0:
        print(f"stopped at optimizer step {result['step']}; run the same command again to resume "
              f"from {Path(cfg.ckpt_dir) / 'last.pt'}", file=sys.stderr)
    if result["status"] == "interrupted" and result["signal"] is not None:
        return 128 + result["signal"]
    return 0


if __name__ == "__main__":
    sys.exit(main())
