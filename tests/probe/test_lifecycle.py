"""start()/stop(), the decorator, and the interpreter-exit guarantee when stop() is never reached."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import torch
from torch.nn import functional as F

import loopcheck
from .conftest import Batches, Net


def _steps(net, opt, n, zero_grad=True):
    for x, y in Batches().epoch(n):
        if zero_grad:
            opt.zero_grad()
        F.cross_entropy(net(x), y).backward()
        opt.step()


def test_start_and_stop_watch_like_the_block():
    torch.manual_seed(0)
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    probe = loopcheck.probe(on_finding="ignore", summary=False).start()
    _steps(net, opt, 12, zero_grad=False)
    assert probe.stop() is probe
    assert probe.step == 12 and [f.code for f in probe.findings] == ["LP403"]
    assert not opt._optimizer_step_pre_hooks and "backward" not in vars(torch.Tensor) or not getattr(
        torch.Tensor.backward, "__loopcheck_wrapped__", False)
    probe.stop()  # a second stop does nothing


def test_decorator_runs_each_call_in_a_new_probe():
    torch.manual_seed(0)
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.05)

    @loopcheck.probe(on_finding="ignore", summary=False)
    def train(steps):
        _steps(net, opt, steps)
        return "done"

    assert train(5) == "done" and train.probe.step == 5
    first = train.probe
    assert train(3) == "done" and train.probe is not first and train.probe.step == 3


def test_bare_decorator():
    torch.manual_seed(0)
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.05)

    @loopcheck.probe
    def train():
        _steps(net, opt, 4)

    train()
    assert train.probe.models == [net] and train.probe.step == 4


_SCRIPT = """
import sys, torch
from torch import nn
from torch.nn import functional as F
import loopcheck

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loopcheck.probe(log=sys.argv[1], every=5).start()
x, y = torch.randn(32, 8), torch.randint(0, 2, (32,))
for step in range(12):
    F.cross_entropy(model(x), y).backward()   # no zero_grad: gradients pile up
    opt.step()
raise RuntimeError("the script dies before stop()")
"""


def test_stop_never_reached_still_writes_the_end_record_and_summary(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(_SCRIPT))
    log = tmp_path / "run.jsonl"
    done = subprocess.run([sys.executable, str(script), str(log)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "RuntimeError: the script dies before stop()" in done.stderr
    assert "LP403" in done.stderr.split("RuntimeError")[-1]  # the summary comes after the traceback
    records = [json.loads(line) for line in log.read_text().splitlines()]
    end = records[-1]
    assert end["type"] == "end" and end["step"] == 12 and [f["code"] for f in end["findings"]] == ["LP403"]
