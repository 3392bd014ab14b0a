"""The overhead benchmark runs both of its measurements and prints a line per model (timing is
never judged here: the numbers are the benchmark's to report)."""

from __future__ import annotations

import argparse
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "probe_overhead.py"
TINY = ["--models", "mlp,gan", "--blocks", "1", "--steps", "4", "--settle", "1"]


def _run(*flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *flags], capture_output=True, text=True, timeout=300)


def _models(stdout: str, row: str) -> list[str]:
    """The model names of the lines that match `row` from their start, in order."""
    return [line.split()[0] for line in stdout.splitlines() if re.match(row, line)]


def test_block_ratios_are_printed_per_model_with_the_verdict_line():
    done = _run(*TINY, "--processes", "1")
    assert done.returncode == 0, done.stderr
    assert _models(done.stdout, r"(mlp|gan) +[\d,]+ +[\d.]+ +[\d.]+x") == ["mlp", "gan"]
    assert "target <= 1.03x" in done.stdout.splitlines()[-1]


def test_floor_prints_its_ratio_next_to_the_probes_per_model():
    done = _run(*TINY, "--processes", "1", "--floor")
    assert done.returncode == 0, done.stderr
    floor_row = r"(mlp|gan) +[\d,]+ +[\d.]+ +[\d.]+x .*\(floor [\d.]+x; [+-][\d.]+ points\)$"
    assert _models(done.stdout, floor_row) == ["mlp", "gan"]


def test_alternate_prints_the_probe_cost_per_step_per_model():
    done = _run(*TINY, "--alternate")
    assert done.returncode == 0, done.stderr
    assert _models(done.stdout, r"(mlp|gan) +step +[\d.]+ ms +probe +[+-]\d+ us") == ["mlp", "gan"]


def _in_git_checkout() -> bool:
    done = subprocess.run(["git", "-C", str(SCRIPT.parent), "rev-parse", "HEAD"], capture_output=True)
    return done.returncode == 0


@pytest.mark.skipif(not _in_git_checkout(), reason="compares with a committed version: needs the git checkout")
def test_against_a_revision_prints_both_versions_per_model():
    done = _run(*TINY, "--against", "HEAD")
    assert done.returncode == 0, done.stderr
    row = r"(mlp|gan) +step +[\d.]+ ms +this +[+-]\d+ us .* HEAD +[+-]\d+ us .* difference"
    assert _models(done.stdout, row) == ["mlp", "gan"]


def test_against_an_unknown_revision_says_so():
    done = _run(*TINY, "--against", "no-such-revision")
    assert done.returncode != 0
    assert "--against" in done.stderr and "no-such-revision" in done.stderr and "Traceback" not in done.stderr


def test_inside_prints_the_time_in_each_of_the_probes_entry_points_per_model():
    done = _run(*TINY, "--inside", "--processes", "1")
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if re.match(r"(mlp|gan) +this +step +[\d.]+ ms +inside", line)]
    assert [row.split()[0] for row in rows] == ["mlp", "gan"]
    for row in rows:
        parts = dict(re.findall(r"(backward|forward_pre|forward|step_pre|step_post) ([\d.]+)", row))
        assert set(parts) == {"backward", "forward_pre", "forward", "step_pre", "step_post"}
        assert float(parts["step_pre"]) > 0 and float(parts["forward_pre"]) > 0


def test_inside_gives_each_kind_of_step_its_share_and_median():
    """A block of 20 steps holds the three kinds: lean steps, watched ones (the exact gradient
    checks; each optimizer's first steps are all watched) and the sampled one."""
    done = _run("--models", "mlp", "--blocks", "1", "--steps", "20", "--settle", "1", "--inside", "--processes", "1")
    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stdout.splitlines() if "by kind of step:" in line)
    kinds = re.findall(r"(lean|watched|sample) (\d+)% of steps, ([\d.]+) us", line)
    assert [kind for kind, _, _ in kinds] == ["lean", "watched", "sample"]
    assert 98 <= sum(int(share) for _, share, _ in kinds) <= 102
    assert all(float(median) > 0 for _, _, median in kinds)


def test_inside_counts_the_hooks_the_probe_puts_on_a_models_layers():
    """The LSTM language model's embedding and LSTM layers are hooked by the probe (a NaN in them
    cannot be traced by their parameters alone): that time is the probe's too."""
    done = _run("--models", "lstm", "--blocks", "1", "--steps", "4", "--settle", "1", "--inside", "--processes", "1")
    assert done.returncode == 0, done.stderr
    row = next(line for line in done.stdout.splitlines() if line.startswith("lstm "))
    parts = dict(re.findall(r"(layers|forward_pre|forward|step_pre) ([\d.]+)", row))
    assert float(parts["layers"]) > 0 and float(parts["forward"]) > 0


@pytest.mark.skipif(not _in_git_checkout(), reason="compares with a committed version: needs the git checkout")
def test_inside_against_a_revision_prints_both_versions_and_their_difference():
    done = _run(*TINY, "--inside", "--processes", "1", "--against", "HEAD")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[:2] for line in lines if re.match(r"(mlp|gan) +\S+ +step .* inside ", line)] == [
        ["mlp", "this"], ["mlp", "HEAD"], ["gan", "this"], ["gan", "HEAD"]]
    assert [line.split()[0] for line in lines if re.search(r"difference [+-][\d.]+ us per step", line)] == ["mlp", "gan"]


def test_blocks_with_fewer_detectors_or_other_options_say_it_is_not_the_default():
    done = _run(*TINY, "--processes", "1", "--detectors", "none", "--option", "localize=false")
    assert done.returncode == 0, done.stderr
    assert "not in the default configuration" in done.stdout.splitlines()[-1]


def test_the_probe_settings_given_reach_the_probe_as_it_takes_them(monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    bench = importlib.import_module("probe_overhead")
    from loopcheck.probe.detectors.nonfinite import NonFiniteDetector

    args = argparse.Namespace(detectors="NonFiniteDetector", option=["localize=false", "check_every=8"])
    assert bench.probe_settings(args) == {"detectors": [NonFiniteDetector], "localize": False, "check_every": 8}
    assert bench.probe_settings(argparse.Namespace(detectors="none", option=[])) == {"detectors": []}
    assert bench.probe_settings(argparse.Namespace(detectors=None, option=[])) == {}


@pytest.mark.parametrize("flags, said", [
    (["--detectors", "NoSuchDetector"], "unknown detector(s) NoSuchDetector"),
    (["--option", "localize=maybe"], "localize must be True or False"),
    (["--option", "no_such_option=1"], "unknown probe option(s): no_such_option"),
    (["--option", "localize"], "give KEY=VALUE"),
    (["--inside", "--detectors", "none"], "block and --alternate measurements only"),
    (["--alternate", "--floor"], "block measurement only"),
])
def test_bad_detectors_or_options_are_refused_before_anything_runs(flags, said):
    done = _run(*TINY, *flags)
    assert done.returncode == 2
    assert said in done.stderr and "Traceback" not in done.stderr


def test_the_floor_probe_does_the_necessary_work_and_leaves_nothing_behind(monkeypatch):
    """It holds the model's inputs and output until the step, reads the losses and the earliest small gradient
    there (a NaN loss trips it), queues exact norms on the watched steps, and unhooks on exit."""
    import torch

    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    FloorProbe = importlib.import_module("floor_probe").FloorProbe
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    backward = torch.autograd.backward
    held = []
    with FloorProbe([model], [opt]) as floor:
        for k in range(3):
            opt.zero_grad()
            x = torch.full((2, 4), float("nan")) if k == 2 else torch.ones(2, 4)
            model(x).sum().backward()
            held.append(len(floor.held))
            opt.step()
        assert held == [2, 2, 2] and not floor.held
        assert floor.tripped == 1
        assert len(floor.queued) == 3 * 4  # each of the first steps: one norm per parameter
    assert torch.autograd.backward is backward
    assert not model._forward_hooks and not model._forward_pre_hooks
    assert not opt._optimizer_step_pre_hooks and not opt._optimizer_step_post_hooks
