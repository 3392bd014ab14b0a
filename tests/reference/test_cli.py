"""`python -m loopcheck.reference`: arguments, exit codes, --stop-after-steps and signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from .conftest import load, records, ref

SMALL = ["--batch-size", "64", "--log-every", "1", "--no-progress"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--epochs", "0"], "--epochs must be at least 1"),
        (["--accum", "0"], "--accum must be at least 1"),
        (["--lr", "-1"], "--lr must be a positive number"),
        (["--ema", "1.5"], "--ema must be a decay in [0, 1)"),
        (["--scheduler", "linear"], "invalid choice: 'linear'"),
        (["--batch-size", "many"], "invalid int value: 'many'"),
        (["--stop-after-steps", "0"], "--stop-after-steps must be at least 1"),
    ],
)
def test_bad_arguments_exit_2_with_a_message(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        ref.main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_batch_larger_than_the_data_is_refused(tmp_path, capsys):
    code = ref.main(["--ckpt-dir", str(tmp_path), "--batch-size", "4096", "--no-progress"])
    assert code == 2
    assert "larger than the 2048 training samples" in capsys.readouterr().err


def test_resuming_with_other_settings_exits_2(tmp_path, capsys):
    base = ["--ckpt-dir", str(tmp_path), "--epochs", "1", *SMALL]
    assert ref.main([*base, "--stop-after-steps", "2"]) == 0
    assert ref.main([*base, "--seed", "7"]) == 2
    err = capsys.readouterr().err
    assert "seed (checkpoint: 0, now: 7)" in err and "another --ckpt-dir" in err


@pytest.mark.slow
def test_stop_after_steps_then_resume_from_the_command_line(tmp_path, capsys):
    args = ["--epochs", "1", "--ckpt-dir", str(tmp_path), *SMALL]
    assert ref.main([*args, "--stop-after-steps", "5"]) == 0
    assert "run the same command again to resume" in capsys.readouterr().err
    assert load(tmp_path / "last.pt")["step"] == 5

    env = dict(os.environ, OMP_NUM_THREADS="1")
    second = subprocess.run([sys.executable, "-m", "loopcheck.reference", *args], env=env,
                            capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr
    assert "resumed from" in second.stdout and "epoch 1/1" in second.stdout
    steps = [r["step"] for r in records(tmp_path) if r["kind"] == "train"]
    assert steps == list(range(1, 2048 // 64 + 1))  # one line per step, none twice, none missing


@pytest.mark.slow
def test_sigterm_finishes_the_step_saves_and_exits(tmp_path):
    # SIGINT takes the same path; test_resume sends it in-process, mid-accumulation.
    signum = signal.SIGTERM
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "loopcheck.reference", "--epochs", "1000", "--ckpt-dir", str(tmp_path), *SMALL]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        log = tmp_path / "metrics.jsonl"
        deadline = time.monotonic() + 60
        while not (log.exists() and log.stat().st_size > 0):  # wait until training runs
            assert proc.poll() is None and time.monotonic() < deadline, "training did not start"
            time.sleep(0.05)
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signum, err
    assert "Traceback" not in err
    assert f"{signal.Signals(signum).name}: finishing the current optimizer step" in err
    state = load(tmp_path / "last.pt")
    assert not state["finished"] and state["step"] >= 1
    # Saved at an optimizer-step boundary, with the log up to that step.
    assert state["batch_in_epoch"] == state["step"] - state["epoch"] * (2048 // 64)
    assert json.loads(log.read_text().splitlines()[-1])["step"] <= state["step"]
