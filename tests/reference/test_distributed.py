"""The reference loop under torchrun with two CPU processes (gloo): runs, resumes exactly."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from .conftest import assert_runs_identical, load, records

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

ARGS = ["--epochs", "2", "--batch-size", "64", "--accum", "2", "--ema", "0.9", "--log-every", "3", "--no-progress"]


def torchrun(ckpt_dir, *extra):
    # torchrun's agent makes a `torchelastic_*` folder under the temporary directory and leaves it
    scratch = ckpt_dir.parent / "tmp"
    scratch.mkdir(exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="1", TMPDIR=str(scratch))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "loopcheck.reference", "--ckpt-dir", str(ckpt_dir), *ARGS, *extra]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def test_two_processes_train_and_resume_exactly(tmp_path):
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    out = torchrun(whole).stdout
    assert out.count("epoch 2/2") == 1  # only rank 0 prints

    torchrun(resumed, "--stop-after-steps", "5")  # 2048 / 2 ranks / 64 / 2 = 8 steps per epoch
    state = load(resumed / "last.pt")
    assert (state["world_size"], state["epoch"], state["step"]) == (2, 0, 5)
    assert len(state["rng"]) == 2 and not {"loader", "torch"} - set(state["rng"][1])
    torchrun(resumed)

    assert_runs_identical(whole, resumed)
    evals = [r for r in records(resumed) if r["kind"] == "eval"]
    assert [r["epoch"] for r in evals] == [1, 2]  # written once, by rank 0
