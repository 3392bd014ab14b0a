"""Which steps get the exact checks: each optimizer's first 8, then one in `check_every`, fixed by the
user or, on the CPU, chosen from the measured cost of the gradient norms."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

import loopcheck
from loopcheck.errors import ProbeUsageError
from loopcheck.probe import cadence
from loopcheck.probe.cadence import Cadence, watched_step

from .conftest import Net


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = _Clock()
    monkeypatch.setattr(cadence.time, "perf_counter", fake)
    return fake


def _interval(clock: _Clock, cost: float, step: float, calls_per_step: int = 1, steps: int = 20) -> int:
    """One sampling interval of `steps` steps lasting `step` seconds each, with one timed norm call
    of `cost` seconds per step of each optimizer; the interval chosen at its end."""
    tuner = Cadence(None)
    tuner.retune(0)  # the first sample starts the measurement
    for _ in range(steps):
        for _ in range(calls_per_step):
            tuner.timed(cost)
        clock.now += step
    tuner.retune(steps * calls_per_step)
    return tuner.check_every


def test_the_interval_keeps_the_norms_under_a_quarter_percent_of_the_run(clock):
    assert _interval(clock, cost=10e-6, step=20e-3) == 4  # 0.05% of a step: the default stays
    assert _interval(clock, cost=50e-6, step=2e-3) == 16  # 2.5% of a step: 16 steps apart (0.16%)
    assert _interval(clock, cost=30e-6, step=2e-3) == 8  # 1.5%: 8 is enough (0.19%)
    assert _interval(clock, cost=1e-3, step=1e-3) == 16  # never longer than 16
    # a GAN: two optimizers, each with its own norms per step
    assert _interval(clock, cost=60e-6, step=6e-3, calls_per_step=2) == 8


def test_the_first_sample_only_starts_the_measurement_and_an_empty_interval_changes_nothing(clock):
    tuner = Cadence(None)
    tuner.timed(1.0)
    tuner.retune(20)
    assert tuner.check_every == 4  # nothing measured before the first sample counts
    clock.now += 1.0
    tuner.retune(40)  # no norm call in between
    assert tuner.check_every == 4


def test_a_fixed_interval_or_an_accelerator_is_never_tuned():
    fixed = Cadence(3)
    assert (fixed.check_every, fixed.tuned) == (3, False)
    auto = Cadence(None)
    auto.check_every = 16
    auto.on_accelerator()
    assert (auto.check_every, auto.tuned) == (4, False)


def test_watched_steps():
    assert [n for n in range(1, 40) if watched_step(n, 16)] == [1, 2, 3, 4, 5, 6, 7, 8, 16, 32]


def _train(steps: int, **options):
    torch.manual_seed(0)
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.02)
    watched = []
    with loopcheck.probe(net, opt, on_finding="ignore", summary=False, **options) as probe:
        for step in range(steps):
            x = torch.randn(16, 16)
            opt.zero_grad()
            F.cross_entropy(net(x), torch.randint(0, 4, (16,))).backward()
            if probe.watched(0):
                watched.append(step + 1)
            opt.step()
    return probe, watched


def test_the_probe_lengthens_the_interval_when_the_norms_cost_a_large_share(monkeypatch):
    # every norm call reported as a second long: the interval goes to its longest at the first
    # sample, measured from the end of the always-watched first steps
    timed = Cadence.timed
    monkeypatch.setattr(Cadence, "timed", lambda self, seconds: timed(self, 1.0))
    probe, watched = _train(100)
    assert probe.cadence.check_every == 16
    assert [n for n in watched if n > 8] == [12, 16, 20, 32, 48, 64, 80, 96]


def test_the_measurement_starts_after_the_first_steps_and_leaves_out_their_norms(clock):
    tuner = Cadence(None)
    tuner.timed(1.0)  # a first step's norm call (warm-up): not the steady cost
    tuner.start(8)
    for _ in range(12):
        tuner.timed(10e-6)
        clock.now += 20e-3
    tuner.retune(20)
    assert tuner.check_every == 4  # 0.05% of a step: what the first call cost does not count
    late = Cadence(None)
    late.retune(5)  # a sample before the first steps were over (`every` < 8) started it already
    clock.now += 1.0
    late.start(8)  # ... and the start does not move it
    late.timed(1.0)
    clock.now += 1.0
    late.retune(10)
    assert late.check_every == 16


def test_the_probe_keeps_four_when_the_norms_are_cheap(monkeypatch):
    timed = Cadence.timed
    monkeypatch.setattr(Cadence, "timed", lambda self, seconds: timed(self, 0.0))
    probe, watched = _train(60)
    assert probe.cadence.check_every == 4
    assert [n for n in watched if n > 40] == [44, 48, 52, 56, 60]


def test_a_check_every_given_is_kept_and_nothing_is_timed(monkeypatch):
    calls = []
    monkeypatch.setattr(Cadence, "timed", lambda self, seconds: calls.append(seconds))
    probe, watched = _train(50, check_every=5)
    assert probe.cadence.check_every == 5 and not probe.cadence.tuned and calls == []
    assert [n for n in watched if n > 8] == [10, 15, 20, 25, 30, 35, 40, 45, 50]


@pytest.mark.parametrize("value", [0, -1, 2.5, True, "4"])
def test_a_bad_check_every_is_refused(value):
    with pytest.raises(ProbeUsageError, match="check_every must be a positive integer"):
        loopcheck.probe(Net(), check_every=value)
