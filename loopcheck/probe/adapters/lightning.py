"""A Lightning `Callback` that runs the probe over `Trainer.fit`: `LoopcheckCallback(log="run.jsonl")`.

The probe starts when training starts (after the sanity check), with the trainer's optimizers,
LR schedulers and the precision plugin's GradScaler; the trained modules are found by the
probe's discovery, because `training_step` often calls a submodule (`self.net(x)`) rather than
the LightningModule itself. Lightning steps optimizers with a closure that runs the forward and
backward passes; the probe waits for the closure to return before it reads the gradients. The
probe ends with training, or with the exception that ends it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

try:
    from lightning.pytorch.callbacks import Callback
except ImportError:  # the standalone package
    from pytorch_lightning.callbacks import Callback  # type: ignore[no-redef]

from loopcheck.probe.config import ProbeConfig
from loopcheck.probe.probe import Probe


class LoopcheckCallback(Callback):
    """Watch a Lightning fit for silent training bugs; `probe` holds the findings afterwards."""

    def __init__(self, *, log: str | Path | None = None, on_finding: str = "warn", **options: Any) -> None:
        super().__init__()
        ProbeConfig.from_options(options)  # a misspelt option fails here, not after the sanity check
        self.options = dict(log=log, on_finding=on_finding, **options)
        self.probe: Probe | None = None

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        schedulers = [config.scheduler for config in getattr(trainer, "lr_scheduler_configs", [])]
        scaler = getattr(trainer.precision_plugin, "scaler", None)
        self.probe = Probe(optimizer=list(trainer.optimizers), scheduler=schedulers, scaler=scaler, **self.options)
        self.probe.__enter__()

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._close(None)

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._close(exception)

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self._close(None)

    def _close(self, error: BaseException | None) -> None:
        if self.probe is not None and self.probe.live:
            self.probe.__exit__(type(error) if error is not None else None, error, None)

