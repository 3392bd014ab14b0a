"""`loopcheck run`: an unchanged script under the probe, its arguments and exit code kept."""

from __future__ import annotations

import json
import runpy
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")

_TRAIN = """
import argparse, os, sys
import torch
from torch import nn
from torch.nn import functional as F

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--fail", default="")
args = parser.parse_args()


def main():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=200)
    x, y = torch.randn(64, 8), torch.randint(0, 2, (64,))
    probe = None
    if os.environ.get("WITH_BLOCK"):
        import loopcheck
        probe = loopcheck.probe(model, opt, scheduler=sched, log=os.environ["WITH_BLOCK"])
        probe.__enter__()
    for epoch in range(args.epochs):
        model.train()
        for i in range(8):
            opt.zero_grad()
            F.cross_entropy(model(x[i * 8:(i + 1) * 8]), y[i * 8:(i + 1) * 8]).backward()
            opt.step()
        sched.step()  # expect: a per-step schedule stepped per epoch
    if probe is not None:
        probe.__exit__(None, None, None)
    if args.fail == "exit":
        sys.exit(3)
    if args.fail == "crash":
        raise ValueError("data file is corrupt")
    if args.fail == "interrupt":
        raise KeyboardInterrupt


if __name__ == "__main__":
    main()
"""


def _run(*args: str) -> int:
    """`loopcheck run ARGS` in this process (the CLI test below runs the real command once)."""
    from loopcheck.probe.run import run

    options = list(args)
    log = Path(options.pop(options.index("--log") + 1))
    options.remove("--log")
    module = options[0] == "-m"
    target, rest = options[module], options[module + 1:]
    return run(target, rest, module=module, log=log, every=5)


def _codes(log: Path) -> list[str]:
    end = [json.loads(line) for line in log.read_text().splitlines()][-1]
    assert end["type"] == "end"
    return sorted(f["code"] for f in end["findings"])


@pytest.fixture
def project(tmp_path: Path, monkeypatch) -> Path:
    (tmp_path / "train.py").write_text(textwrap.dedent(_TRAIN))
    pkg = tmp_path / "trainer"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "train.py").write_text(textwrap.dedent(_TRAIN))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_run_finds_what_the_with_block_finds(project, capsys, monkeypatch):
    assert _run("--log", "run.jsonl", "train.py", "--epochs", "4") == 0
    err = capsys.readouterr().err
    assert "LP301" in err and "loopcheck probe: 32 steps" in err
    monkeypatch.setenv("WITH_BLOCK", "block.jsonl")
    monkeypatch.setattr(sys, "argv", ["train.py", "--epochs", "4"])
    runpy.run_path("train.py", run_name="__main__")
    assert _codes(project / "run.jsonl") == _codes(project / "block.jsonl") == ["LP301"]


@pytest.mark.parametrize("fail, code, said", [
    ("exit", 3, None), ("crash", 1, "ValueError: data file is corrupt"), ("interrupt", 130, "interrupted"),
])
def test_exit_code_kept_and_summary_printed_on_every_ending(project, capsys, fail, code, said):
    argv, path = sys.argv[:], sys.path[:]
    assert _run("--log", "run.jsonl", "train.py", "--epochs", "3", "--fail", fail) == code
    assert (sys.argv, sys.path) == (argv, path)
    err = capsys.readouterr().err
    if said:
        assert said in err
        assert "runpy" not in err and "loopcheck/probe/run.py" not in err
    # the findings are the last thing printed (one per line: stderr is not a terminal here)
    assert err.rstrip().splitlines()[-1].startswith("LP301 lr-cadence")
    assert _codes(project / "run.jsonl") == ["LP301"]


def test_missing_script_or_module_is_a_usage_error(project, capsys):
    assert _run("--log", "x.jsonl", "nope.py") == 2
    assert _run("--log", "x.jsonl", "-m", "no_such_module_here") == 2
    err = capsys.readouterr().err
    assert "nope.py: no such file" in err and "no module named 'no_such_module_here'" in err
    assert "Traceback" not in err


def test_command_line_module_form(project):
    done = subprocess.run(
        [sys.executable, "-m", "loopcheck", "run", "--log", "m.jsonl", "--every", "8", "--check-every", "1",
         "-m", "trainer.train", "--epochs", "3"],
        cwd=project, capture_output=True, text=True, timeout=180,
    )
    assert done.returncode == 0, done.stderr
    assert _codes(project / "m.jsonl") == ["LP301"]
    header = json.loads((project / "m.jsonl").read_text().splitlines()[0])
    assert header["options"]["every"] == 8 and header["options"]["check_every"] == 1
