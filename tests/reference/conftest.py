"""Shared helpers of the reference-loop tests: a tiny configuration, runs, and exact comparison
of checkpoints and metric logs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List

import pytest

torch = pytest.importorskip("torch")

import loopcheck.reference.train as ref  # noqa: E402

# Values in metrics.jsonl that measure the machine, not the run.
TIMING_FIELDS = ("samples_per_s", "data_wait_s", "memory_mb")


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    # Other test processes share the cores; one thread is also the fastest for these tiny models.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def tiny_config(ckpt_dir: Path, **overrides: Any) -> "ref.Config":
    """13 micro-batches per epoch (216 // 16): with --accum 2 the last window of each epoch
    holds a single micro-batch, so the partial window is exercised too."""
    settings: Dict[str, Any] = dict(
        epochs=2, seed=3, ckpt_dir=str(ckpt_dir), batch_size=16, train_samples=216, val_samples=48,
        features=8, classes=4, hidden=16, lr=1e-2, ema=0.9, save_every=4, keep_last=2, log_every=2,
        progress=False,
    )
    settings.update(overrides)
    return ref.Config(**settings)


def run(cfg: "ref.Config", wrap=None) -> Dict[str, Any]:
    return ref.train(cfg, wrap=wrap)


def load(path: Path) -> Dict[str, Any]:
    return torch.load(path, map_location="cpu", weights_only=True)


def assert_same(a: Any, b: Any, where: str = "checkpoint") -> None:
    """Recursive equality; tensors must match bit for bit (dtype and values)."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor), where
        assert a.dtype == b.dtype and a.shape == b.shape, where
        assert torch.equal(a, b), f"{where}: tensors differ"
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), f"{where}: keys {sorted(a)} != {sorted(b)}"
        for key in a:
            assert_same(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def training_state(ckpt_dir: Path) -> Dict[str, Any]:
    """last.pt without the settings that may differ between runs (stop_after_steps, ...)."""
    state = load(ckpt_dir / "last.pt")
    workers = state["config"]["workers"]
    state["config"] = {k: v for k, v in state["config"].items() if k not in ref.RESUMABLE_OVERRIDES}
    if workers:
        # With persistent workers the loader draws its workers' base seed from its generator
        # only when it starts them, once per process, so the draw count differs after a
        # resume. The generator is reseeded from (seed, rank, epoch) at every epoch start, so
        # this never reaches the training; everything else must match bit for bit.
        for rank_state in state["rng"]:
            del rank_state["loader"]
    return state


def records(ckpt_dir: Path) -> List[Dict[str, Any]]:
    lines = (ckpt_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [{k: v for k, v in json.loads(line).items() if k not in TIMING_FIELDS} for line in lines]


def assert_runs_identical(expected_dir: Path, actual_dir: Path) -> None:
    assert_same(training_state(expected_dir), training_state(actual_dir), "last.pt")
    assert_same(load(expected_dir / "best.pt")["model"], load(actual_dir / "best.pt")["model"], "best.pt")
    assert records(expected_dir) == records(actual_dir)


@pytest.fixture(scope="session")
def baseline(tmp_path_factory):
    """Uninterrupted runs, one per configuration, computed once and shared by the tests."""
    cache: Dict[tuple, Path] = {}

    def get(**overrides: Any) -> Path:
        key = tuple(sorted(overrides.items()))
        if key not in cache:
            ckpt = tmp_path_factory.mktemp("baseline")
            result = run(tiny_config(ckpt, **overrides))
            assert result["status"] == "finished"
            cache[key] = ckpt
        return cache[key]

    return get
