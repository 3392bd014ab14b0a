"""Exact resume: an interrupted and resumed run ends bit-identical to an uninterrupted one."""

from __future__ import annotations

import contextlib
import math
import os
import signal
import stat

import pytest

from .conftest import assert_runs_identical, load, records, ref, run, tiny_config

MICRO_BATCHES = 216 // 16  # per epoch, see tiny_config


def signal_at_micro_batch(n: int):
    """A wrap hook that sends SIGINT to this process during the n-th training forward pass."""

    @contextlib.contextmanager
    def wrap(model, optimizer, scheduler, scaler):
        seen = 0

        def hook(module, args, output):
            nonlocal seen
            if module.training:
                seen += 1
                if seen == n:
                    signal.raise_signal(signal.SIGINT)

        handle = model.register_forward_hook(hook)
        try:
            yield
        finally:
            handle.remove()

    return wrap


CASES = [
    # (where the run is interrupted, accum, amp, workers)
    ("mid_epoch", 1, False, 0),
    ("mid_epoch", 2, True, 0),
    ("mid_epoch", 1, False, 2),
    ("mid_accumulation", 2, False, 0),
    ("mid_accumulation", 2, True, 2),
    ("epoch_boundary", 1, True, 0),
    ("epoch_boundary", 2, False, 2),
]


@pytest.mark.parametrize("point, accum, amp, workers", CASES)
def test_resume_is_bit_identical(tmp_path, baseline, point, accum, amp, workers):
    steps_per_epoch = math.ceil(MICRO_BATCHES / accum)
    settings = dict(accum=accum, amp=amp, workers=workers)
    if point == "mid_epoch":
        first = run(tiny_config(tmp_path, stop_after_steps=3, **settings))
        expected_position = (0, 3 * accum, 3)  # epoch, micro-batches consumed, optimizer steps
    elif point == "epoch_boundary":
        first = run(tiny_config(tmp_path, stop_after_steps=steps_per_epoch, **settings))
        expected_position = (1, 0, steps_per_epoch)
    else:
        # SIGINT during micro-batch 5, the first of the third window: the loop finishes that
        # window (micro-batch 6) and its optimizer step before it saves and returns.
        first = run(tiny_config(tmp_path, **settings), wrap=signal_at_micro_batch(5))
        assert first["signal"] == signal.SIGINT
        expected_position = (0, 6, 3)
    assert first["status"] == "interrupted"
    saved = load(tmp_path / "last.pt")
    assert (saved["epoch"], saved["batch_in_epoch"], saved["step"]) == expected_position
    assert not saved["finished"]

    second = run(tiny_config(tmp_path, **settings))
    assert second["status"] == "finished"
    assert_runs_identical(baseline(**settings), tmp_path)


def test_several_interruptions_in_a_row(tmp_path, baseline):
    cfg = dict(accum=2)
    assert run(tiny_config(tmp_path, **cfg), wrap=signal_at_micro_batch(3))["status"] == "interrupted"
    # Steps 3..7 complete the first epoch (7 steps): the stop falls on the epoch boundary.
    assert run(tiny_config(tmp_path, stop_after_steps=5, **cfg))["status"] == "interrupted"
    assert load(tmp_path / "last.pt")["epoch"] == 1
    assert run(tiny_config(tmp_path, **cfg), wrap=signal_at_micro_batch(8))["status"] == "interrupted"
    assert load(tmp_path / "last.pt")["epoch"] == 1
    assert run(tiny_config(tmp_path, **cfg))["status"] == "finished"
    assert_runs_identical(baseline(accum=2), tmp_path)


@pytest.mark.parametrize("scheduler", ["step", "plateau", "onecycle"])
def test_resume_with_each_scheduler(tmp_path, baseline, scheduler):
    run(tiny_config(tmp_path, scheduler=scheduler, stop_after_steps=10))
    run(tiny_config(tmp_path, scheduler=scheduler))
    assert_runs_identical(baseline(scheduler=scheduler), tmp_path)


class SimulatedCrash(BaseException):
    """Stands for the process dying: nothing in the loop may catch it."""


def test_crash_while_writing_a_checkpoint_keeps_the_previous_one(tmp_path, baseline, monkeypatch):
    # save_every=4: step 4 writes step-00000004.pt, then last.pt. The crash hits the second of
    # these writes halfway through (a torn file), before its rename.
    real_fsync = os.fsync
    file_syncs = 0

    def crashing_fsync(fd):
        nonlocal file_syncs
        if stat.S_ISREG(os.fstat(fd).st_mode):
            file_syncs += 1
            if file_syncs == 4:
                os.ftruncate(fd, os.fstat(fd).st_size // 2)
                raise SimulatedCrash
        real_fsync(fd)

    monkeypatch.setattr(ref.os, "fsync", crashing_fsync)
    with pytest.raises(SimulatedCrash):
        run(tiny_config(tmp_path, save_every=2, keep_last=5))
    monkeypatch.setattr(ref.os, "fsync", real_fsync)

    previous = load(tmp_path / "last.pt")  # still a whole, loadable checkpoint
    assert previous["step"] == 2
    assert max(r["step"] for r in records(tmp_path)) == 4  # logged after the last good save
    (tmp_path / ".last.pt.12345.tmp").write_bytes(b"left by a killed process")

    assert run(tiny_config(tmp_path, save_every=2, keep_last=5))["status"] == "finished"
    assert not list(tmp_path.glob(".*.tmp"))
    # Same result as if nothing had happened, log included (the orphaned step-4 line is gone).
    assert_runs_identical(baseline(save_every=2, keep_last=5), tmp_path)


def test_retention_keeps_the_last_k_step_checkpoints_and_best(tmp_path):
    cfg = tiny_config(tmp_path, save_every=3, keep_last=2, epochs=3)
    run(cfg)
    # Step checkpoints are written every 3 steps except at an epoch's end (last.pt is then
    # written anyway); the last two survive.
    saved = [s for s in range(1, 3 * MICRO_BATCHES + 1) if s % 3 == 0 and s % MICRO_BATCHES != 0]
    names = sorted(p.name for p in tmp_path.glob("*.pt"))
    assert names == sorted(["best.pt", "last.pt"] + [f"step-{s:08d}.pt" for s in saved[-2:]])
    for name in names:
        load(tmp_path / name)


def test_pruning_never_deletes_best_or_last(tmp_path):
    for name in ["best.pt", "last.pt", "step-00000001.pt", "step-00000010.pt", "step-00000002.pt"]:
        (tmp_path / name).write_bytes(b"x")
    ref.prune_step_checkpoints(tmp_path, keep_last=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.pt", "last.pt", "step-00000010.pt"]


def test_best_checkpoint_holds_only_inference_state(tmp_path):
    run(tiny_config(tmp_path))
    best = load(tmp_path / "best.pt")
    assert set(best) == {"model", "epoch", "step", "metrics", "weights", "config"}
    assert best["weights"] == "ema"
    model = ref.MLP(tiny_config(tmp_path))
    model.load_state_dict(best["model"])  # plain model keys, EMA weights


def test_rerunning_a_finished_run_changes_nothing(tmp_path, capsys):
    run(tiny_config(tmp_path, epochs=1))
    before = (tmp_path / "last.pt").read_bytes()
    assert run(tiny_config(tmp_path, epochs=1))["status"] == "finished"
    assert (tmp_path / "last.pt").read_bytes() == before
    assert "nothing to do" in capsys.readouterr().out


def test_resume_with_other_settings_is_refused(tmp_path):
    run(tiny_config(tmp_path, stop_after_steps=2))
    with pytest.raises(ref.CheckpointError, match=r"accum \(checkpoint: 1, now: 2\)"):
        run(tiny_config(tmp_path, accum=2))
    # Settings that do not change the run may differ.
    assert run(tiny_config(tmp_path, workers=2, log_every=5))["status"] == "finished"


def test_unreadable_checkpoint_is_a_clear_error(tmp_path):
    (tmp_path / "last.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ref.CheckpointError, match="cannot read"):
        run(tiny_config(tmp_path))
