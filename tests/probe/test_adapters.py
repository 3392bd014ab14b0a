"""The adapters against the real libraries: a tiny CPU run each, one injected fault found, a clean run clean.

The fault is the same everywhere: one corrupt row (NaN features) in the training data. The probe
must report it (LP103) at the trained model: as "the input batch already contains NaN" where the
model gets its batch positionally (Lightning, Accelerate), as the model's output where it gets
keyword arguments (the HF Trainer calls `model(**inputs)`, which a forward pre-hook does not see);
the same run without the corrupt row must give no finding at all.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset

import loopcheck

ROWS, BATCH, CORRUPT = 64, 8, 43  # the corrupt row sits in the sixth batch of an unshuffled epoch


class Rows(Dataset):
    """A synthetic 4-class task of 16 features; row CORRUPT holds NaN when `corrupt`."""

    def __init__(self, corrupt: bool, as_dict: bool = False) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(ROWS, 16, generator=g)
        self.y = (self.x @ torch.randn(16, 4, generator=g)).argmax(1)
        if corrupt:
            self.x[CORRUPT, 3] = float("nan")
        self.as_dict = as_dict

    def __len__(self) -> int:
        return ROWS

    def __getitem__(self, i: int):
        return {"x": self.x[i], "labels": self.y[i]} if self.as_dict else (self.x[i], self.y[i])


def mlp() -> nn.Sequential:
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))


def nan_origins(probe) -> list[tuple[str | None, int | None]]:
    return [(f.where, f.step) for f in probe.findings if f.code == "LP103" and "the input batch" in f.message]


# Lightning ----------------------------------------------------------------------------------------

def _lightning_fit(corrupt: bool, tmp_path, crash_at: int | None = None):
    pl = pytest.importorskip("lightning.pytorch", reason="lightning is not installed (test extra)")
    from loopcheck.probe.adapters.lightning import LoopcheckCallback

    class Classifier(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = mlp()

        def training_step(self, batch, batch_idx):
            if batch_idx == crash_at:
                raise RuntimeError("out of memory (simulated)")
            x, y = batch
            return F.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            opt = torch.optim.AdamW(self.parameters(), lr=1e-2)
            sched = torch.optim.lr_scheduler.StepLR(opt, step_size=4, gamma=0.5)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    torch.manual_seed(0)
    callback = LoopcheckCallback(log=tmp_path / "run.jsonl", on_finding="ignore", summary=False, every=4)
    trainer = pl.Trainer(
        max_steps=8, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
        callbacks=[callback], default_root_dir=tmp_path,
    )
    trainer.fit(Classifier(), DataLoader(Rows(corrupt), batch_size=BATCH, shuffle=False))
    return callback.probe


def test_lightning_callback_finds_the_corrupt_row_and_a_clean_fit_is_clean(tmp_path):
    probe = _lightning_fit(corrupt=True, tmp_path=tmp_path)
    assert probe.step == 8 and len(probe.schedulers) == 1
    # training_step calls self.net(x): discovery watches that Sequential, the module actually run
    assert nan_origins(probe) == [("Sequential", CORRUPT // BATCH + 1)]
    clean = _lightning_fit(corrupt=False, tmp_path=tmp_path)
    assert clean.step == 8 and clean.findings == []
    assert not clean.live


def test_lightning_callback_ends_the_probe_when_the_fit_dies(tmp_path):
    with pytest.raises(RuntimeError, match="simulated"):
        _lightning_fit(corrupt=False, tmp_path=tmp_path, crash_at=3)
    assert not getattr(torch.Tensor.backward, "__loopcheck_wrapped__", False)
    lines = (tmp_path / "run.jsonl").read_text().splitlines()
    assert '"type": "end"' in lines[-1] and '"step": 3' in lines[-1]


# Hugging Face Trainer ------------------------------------------------------------------------------

class DictClassifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = mlp()

    def forward(self, x, labels=None):
        logits = self.net(x)
        return {"loss": F.cross_entropy(logits, labels), "logits": logits}


def _hf_train(corrupt: bool, tmp_path):
    transformers = pytest.importorskip("transformers", reason="transformers is not installed (test extra)")
    from loopcheck.probe.adapters.hf import LoopcheckCallback

    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "hf"), max_steps=10, per_device_train_batch_size=BATCH, learning_rate=1e-2,
        report_to=[], save_strategy="no", logging_strategy="no", use_cpu=True, disable_tqdm=True,
        dataloader_num_workers=0, seed=0,
    )
    callback = LoopcheckCallback(on_finding="ignore", summary=False, every=5)
    trainer = transformers.Trainer(model=DictClassifier(), args=args, train_dataset=Rows(corrupt, as_dict=True),
                                   callbacks=[callback])
    trainer.train()
    return callback.probe


def test_hf_trainer_callback_finds_the_corrupt_row_and_a_clean_run_is_clean(tmp_path):
    probe = _hf_train(corrupt=True, tmp_path=tmp_path)
    assert probe.step == 10 and len(probe.schedulers) == 1  # the Trainer's linear schedule
    assert [f.where for f in probe.findings if f.code == "LP103"] == ["DictClassifier"]
    clean = _hf_train(corrupt=False, tmp_path=tmp_path)
    assert clean.step == 10 and clean.findings == []
    assert not clean.live


# Accelerate ----------------------------------------------------------------------------------------

def _accelerate_loop(*, zero_grad: bool, given: bool):
    accelerate = pytest.importorskip("accelerate", reason="accelerate is not installed (test extra)")
    torch.manual_seed(0)
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=100)
    accelerator = accelerate.Accelerator(cpu=True)
    model, opt, loader, sched = accelerator.prepare(model, opt, DataLoader(Rows(False), batch_size=BATCH), sched)
    objects = {"model": model, "optimizer": opt, "scheduler": sched} if given else {}
    with loopcheck.probe(on_finding="ignore", summary=False, every=4, **objects) as probe:
        for epoch in range(2):
            for x, y in loader:
                if zero_grad:
                    opt.zero_grad()
                accelerator.backward(F.cross_entropy(model(x), y))
                opt.step()
                sched.step()
    return probe, opt, sched


@pytest.mark.parametrize("given", [True, False], ids=["passed", "discovered"])
def test_accelerate_prepared_objects_are_watched_through_their_wrappers(given):
    probe, opt, sched = _accelerate_loop(zero_grad=False, given=given)
    assert probe.optimizers == [opt.optimizer] and probe.schedulers == [sched.scheduler]
    assert probe.step == 16 and [f.code for f in probe.findings] == ["LP403"]
    clean, _, _ = _accelerate_loop(zero_grad=True, given=given)
    assert clean.step == 16 and clean.findings == []
