"""A Hugging Face `TrainerCallback` that runs the probe over `Trainer.train()`.

    trainer = Trainer(model, args, train_dataset=..., callbacks=[LoopcheckCallback(log="run.jsonl")])

The probe starts at `on_train_begin` with the Trainer's model, optimizer and LR scheduler (the
Accelerate wrappers around them are seen through, see `adapters.accelerate`); a GradScaler is
found at its first use. It ends at `on_train_end`. The Trainer has no hook for an exception, so
the probe is started like `probe.start()`: if training dies, the interpreter-exit handler still
removes the hooks and writes the end record and summary.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from loopcheck.probe import lifecycle
from loopcheck.probe.config import ProbeConfig
from loopcheck.probe.probe import Probe


class LoopcheckCallback(TrainerCallback):
    """Watch a Trainer run for silent training bugs; `probe` holds the findings afterwards."""

    def __init__(self, *, log: str | Path | None = None, on_finding: str = "warn", **options: Any) -> None:
        ProbeConfig.from_options(options)  # a misspelt option fails here, not when training starts
        self.options = dict(log=log, on_finding=on_finding, **options)
        self.probe: Probe | None = None

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, optimizer: Any = None,
                       lr_scheduler: Any = None, **kwargs: Any) -> None:
        if self.probe is not None and self.probe.live:
            lifecycle.stop(self.probe)
        self.probe = lifecycle.start(Probe(model, optimizer, scheduler=lr_scheduler, **self.options))

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.probe is not None:
            lifecycle.stop(self.probe)
