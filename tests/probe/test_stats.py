"""The probe's shared statistics: the rolling robust level and the queue of device values."""

from __future__ import annotations

import math
import random
import statistics

import pytest
import torch

from loopcheck.probe.stats import Readings, RobustLevel


def test_rolling_median_follows_the_window_exactly():
    rng = random.Random(0)
    level = RobustLevel(window=25, warmup=5, z=8.0, ratio=10.0)
    seen: list[float] = []
    for _ in range(300):
        value = rng.choice([rng.lognormvariate(0, 1), 1.0, 2.0])  # repeats exercise equal keys
        level.push(value)
        seen.append(math.log(value))
        window = seen[-25:]
        assert level.median() == math.exp(statistics.median(window))


def test_spike_is_judged_against_the_median_before_it():
    level = RobustLevel(window=50, warmup=10, z=8.0, ratio=10.0)
    for k in range(40):
        assert level.push(1.0 + 0.01 * (k % 5)) is None
    verdict = level.push(1e4)
    assert verdict is not None and math.isclose(verdict, 1.02, rel_tol=1e-9)
    assert level.push(float("nan")) is None and level.push(0.0) is None  # not judged, not kept


def test_readings_read_once_and_know_whether_all_values_are_finite():
    readings = Readings()
    a = readings.add([torch.tensor(1.0), torch.tensor(2.0)])
    b = readings.add([torch.tensor(3.0)])
    assert readings.all_finite()
    host = readings.host()
    assert host[a] == [1.0, 2.0] and host[b] == [3.0]
    assert readings.host() is host  # cached until the next add

    for bad in (float("nan"), float("inf"), -float("inf")):
        readings.clear()
        readings.add([torch.tensor(1.0), torch.tensor(bad)])
        assert not readings.all_finite()


def test_huge_finite_values_are_finite_even_when_their_sum_overflows():
    readings = Readings()
    readings.add([torch.tensor(1e308, dtype=torch.float64), torch.tensor(1e308, dtype=torch.float64)])
    assert readings.all_finite()
    readings.add([torch.tensor(float("nan"))])  # a new value invalidates the cached verdict
    assert not readings.all_finite()


def test_sealing_keeps_positions_and_frees_the_scalars():
    import weakref

    readings = Readings()
    first = torch.tensor(1.0)
    a = readings.add([first, torch.tensor(2.0)])
    ref = weakref.ref(first)
    readings.seal()
    del first
    assert ref() is None  # the step's scalars are not kept until the sample
    b = readings.add([torch.tensor(3.0)])
    readings.seal()
    readings.seal()  # nothing queued: no empty part
    c = readings.add([torch.tensor(4.0, dtype=torch.float64)])
    host = readings.host()
    assert host[a] == [1.0, 2.0] and host[b] == [3.0] and host[c] == [4.0]


@pytest.mark.parametrize("on_cpu", [True, False])
def test_the_sentinel_judges_what_was_queued_since_its_last_call_sealed_or_not(on_cpu):
    readings = Readings()
    readings.on_cpu = on_cpu
    readings.add([torch.tensor(1.0), 2.0 if on_cpu else torch.tensor(2.0)])
    assert not readings.tripped()
    readings.add([torch.tensor(float("nan"))])  # not sealed: the sentinel seals it
    assert readings.tripped()
    assert not readings.tripped()  # judged once
    readings.add([torch.tensor(float("inf"))])
    readings.seal()
    assert readings.tripped()
