"""Gradient accumulation: each micro-batch loss is divided by the length of its window, the
last, shorter window of an epoch included; counters count optimizer steps."""

from __future__ import annotations

import contextlib
import math

from .conftest import records, ref, run, tiny_config

MICRO_BATCHES = 216 // 16  # 13: with --accum 2, six windows of two and a last one of one


def test_loss_is_divided_by_the_real_window_length(tmp_path):
    cfg = tiny_config(tmp_path, accum=2, log_every=1, epochs=1)
    dataset = ref.SyntheticClassification(cfg, "train")
    label = {row.numpy().tobytes(): int(y) for row, y in zip(dataset.x, dataset.y)}
    losses = []  # the loss of each training micro-batch, recomputed from the model's output

    @contextlib.contextmanager
    def wrap(model, optimizer, scheduler, scaler):
        def hook(module, args, output):
            if module.training:
                targets = ref.torch.tensor([label[row.numpy().tobytes()] for row in args[0]])
                losses.append(ref.F.cross_entropy(output.detach().float(), targets))

        handle = model.register_forward_hook(hook)
        try:
            yield
        finally:
            handle.remove()

    run(cfg, wrap=wrap)
    assert len(losses) == MICRO_BATCHES
    windows = [losses[i:i + 2] for i in range(0, MICRO_BATCHES, 2)]
    assert [len(w) for w in windows] == [2] * 6 + [1]
    expected = [sum((loss / len(w)).double() for loss in w).item() for w in windows]
    logged = [r for r in records(tmp_path) if r["kind"] == "train"]
    assert [r["step"] for r in logged] == list(range(1, math.ceil(MICRO_BATCHES / 2) + 1))
    assert [r["loss"] for r in logged] == expected


def test_schedule_counts_optimizer_steps(tmp_path):
    # The warmup-cosine schedule spans exactly the optimizer steps of the run, whatever --accum.
    for accum in (1, 2):
        ckpt = tmp_path / f"accum{accum}"
        cfg = tiny_config(ckpt, accum=accum, log_every=1, ema=0.0)
        run(cfg)
        steps = cfg.epochs * math.ceil(MICRO_BATCHES / accum)
        train = [r for r in records(ckpt) if r["kind"] == "train"]
        assert [r["step"] for r in train] == list(range(1, steps + 1))
        factor = ref.WarmupCosine(max(1, round(cfg.warmup * steps)), steps)
        assert train[-1]["lr"] == cfg.lr * factor(steps)  # the last step reached the schedule's end
