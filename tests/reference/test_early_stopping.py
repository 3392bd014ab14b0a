"""Early stopping: stops at the right epoch, keeps the best weights in best.pt."""

from __future__ import annotations

import pytest

from .conftest import load, records, ref, run, tiny_config

# A small, noisy training set and a fast LR: the validation loss turns up after a few epochs.
OVERFITTING = dict(train_samples=64, label_noise=0.3, hidden=64, lr=3e-2, ema=0.0, dropout=0.0,
                   scheduler="step", epochs=30)


def expected_stop(val_losses, patience):
    """The epoch (1-based) after which the rule stops, or None if it never does."""
    best, bad = float("inf"), 0
    for epoch, loss in enumerate(val_losses, start=1):
        if loss < best:
            best, bad = loss, 0
        else:
            bad += 1
            if bad >= patience:
                return epoch
    return None


@pytest.mark.parametrize("patience", [1, 2])
def test_stops_after_patience_epochs_without_improvement(tmp_path, patience):
    result = run(tiny_config(tmp_path, patience=patience, **OVERFITTING))
    evals = [r for r in records(tmp_path) if r["kind"] == "eval"]
    losses = [r["val_loss"] for r in evals]
    stop = expected_stop(losses, patience)
    assert stop is not None and stop < OVERFITTING["epochs"], "the run must overfit for this test"
    assert result["status"] == "early_stopped"
    assert len(evals) == stop  # not one epoch more, not one less

    best_epoch = losses.index(min(losses))
    best = load(tmp_path / "best.pt")
    assert best["epoch"] == best_epoch + 1 and best["metrics"]["loss"] == min(losses)
    # best.pt holds the weights of that epoch: evaluating them gives the logged loss again.
    cfg = tiny_config(tmp_path, **OVERFITTING)
    model = ref.MLP(cfg)
    model.load_state_dict(best["model"])
    loader = ref.DataLoader(ref.SyntheticClassification(cfg, "val"), batch_size=2 * cfg.batch_size)
    metrics = ref.evaluate(model, loader, ref.torch.device("cpu"), ref.contextlib.nullcontext, lambda t: t)
    assert metrics["loss"] == min(losses)

    # The stop is part of the saved state: running again does not train on.
    assert load(tmp_path / "last.pt")["finished"]
    assert run(tiny_config(tmp_path, patience=patience, **OVERFITTING))["status"] == "early_stopped"
    assert len([r for r in records(tmp_path) if r["kind"] == "eval"]) == stop


def test_without_patience_all_epochs_run(tmp_path):
    settings = dict(OVERFITTING, epochs=4)
    assert run(tiny_config(tmp_path, patience=0, **settings))["status"] == "finished"
    assert [r["epoch"] for r in records(tmp_path) if r["kind"] == "eval"] == [1, 2, 3, 4]
