"""The detection benchmark's cells: a planted fault is named with its delay, a clean run stays clean."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from probe_detection import CASES, run  # noqa: E402


@pytest.mark.parametrize(("fault", "cell"), [
    ("clean", "clean"),
    ("lr100", "LP106, 3"),  # Adam at 0.1 moves the MLP's weights by half their norm per step from the start
    ("eval", "LP401, 0"),
])
def test_mlp_cells(fault, cell):
    torch.set_num_threads(1)
    assert run("mlp", CASES[fault], 50) == cell


def test_mlp_outputs_kept_are_found_at_a_watched_step():
    # The graph marks are looked at on the watched steps: the first 8, then one in 4 until the first
    # sample (step 20) tunes the interval to the norms' measured cost (16 on this MLP on most machines).
    torch.set_num_threads(1)
    code, _, delay = run("mlp", CASES["outputs"], 50).partition(", ")
    assert code == "LP202" and 8 < int(delay) <= 36


def test_a_gan_at_a_hundred_times_its_rate_is_found_and_stays_clean_at_its_own():
    torch.set_num_threads(1)
    assert run("gan", CASES["lr100"], 25) == "LP106, 3"
    assert run("gan", CASES["clean"], 25) == "clean"


def test_a_fault_that_needs_float_inputs_is_not_applicable_to_token_ids():
    assert run("gpt", CASES["nan"], 40) == "n/a (token ids)"
