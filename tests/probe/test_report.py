"""The JSONL run log and `loopcheck report`."""

from __future__ import annotations

import json
import sys

import pytest
import torch
from torch.nn import functional as F
from typer.testing import CliRunner

import loopcheck
from .conftest import Net, Batches
from loopcheck.cli import app


@pytest.fixture(scope="module")
def run_log(tmp_path_factory):
    """A 120-step run with a NaN at step 81 and a loss spike at step 61."""
    path = tmp_path_factory.mktemp("log") / "run.jsonl"
    torch.manual_seed(0)
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.02, momentum=0.9)
    # check_every=1: the spike's gradient norm is measured (the default measures one step in four)
    with loopcheck.probe(net, opt, log=path, on_finding="ignore", summary=False, check_every=1) as probe:
        for i, (x, y) in enumerate(Batches().epoch(120)):
            if i == 80:
                with torch.no_grad():
                    net.head.weight[0, 0] = float("nan")
            opt.zero_grad()
            loss = F.cross_entropy(net(x), y) * (1e4 if i == 60 else 1)
            loss.backward()
            opt.step()
    assert {f.code for f in probe.findings} == {"LP101", "LP103", "LP501", "LP502"}  # the spike wrecks the run
    return path


def records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_log_records(run_log):
    recs = records(run_log)
    head = recs[0]
    assert head["type"] == "header" and head["version"] == 1
    assert head["models"][0]["trainable"] == sum(p.numel() for p in Net().parameters())
    assert head["optimizers"][0]["class"] == "SGD" and head["optimizers"][0]["groups"][0]["momentum"] == 0.9
    assert head["options"]["every"] == 20
    metrics = [r for r in recs if r["type"] == "metrics"]
    assert [m["step"] for m in metrics] == [20, 40, 60, 80, 100, 120]
    assert {"loss", "grad_norm", "lr", "step_time", "data_wait", "memory_mb"} <= metrics[0].keys()
    assert metrics[3]["loss_max"] > 100 * metrics[1]["loss"]
    found = [r for r in recs if r["type"] == "finding"]
    assert sorted((f["code"], f["step"]) for f in found) == [("LP101", 61), ("LP103", 81), ("LP501", 61), ("LP502", 80)]
    end = recs[-1]
    assert end["type"] == "end" and end["step"] == 120
    nan = next(f for f in end["findings"] if f["code"] == "LP103")
    assert nan["where"] == "head" and nan["count"] > 1


def test_report_prints_findings_and_charts(run_log):
    result = CliRunner().invoke(app, ["report", str(run_log)], terminal_width=140)
    assert result.exit_code == 1, result.output  # an error-level finding (LP103)
    out = result.output
    assert "LP103" in out and "nonfinite-forward" in out and "LP501" in out
    assert "run of 120 steps" in out
    assert "gradient norm" in out and "learning rate" in out
    assert any(0x2800 < ord(c) <= 0x28FF for c in out)  # braille plot cells
    assert "▲" in out  # the finding steps marked


def test_report_of_a_clean_run_exits_0(tmp_path):
    path = tmp_path / "clean.jsonl"
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    with loopcheck.probe(net, opt, log=path, summary=False, every=5):
        for x, y in Batches().epoch(20):
            opt.zero_grad()
            F.cross_entropy(net(x), y).backward()
            opt.step()
    result = CliRunner().invoke(app, ["report", str(path)])
    assert result.exit_code == 0 and "no findings" in result.output


@pytest.mark.parametrize("content, message", [
    (None, "no such file"),
    ("", "is empty"),
    ('{"type": "header", "version": 1}\n{"type": "metrics", "step": 3\n', ":2: not valid JSON"),
    ('{"type": "metrics", "step": 1}\n', "does not start with a header"),
    ('{"type": "header", "version": 9}\n', "version 9 is not supported"),
    ('[1, 2]\n', "JSON object with a 'type'"),
    ('{"type": "header", "version": 1}\n{"type": "end", "findings": [{"step": 1}]}\n', "lacks its code"),
])
def test_bad_logs_exit_2_with_a_message(tmp_path, content, message):
    path = tmp_path / "run.jsonl"
    if content is not None:
        path.write_text(content)
    result = CliRunner().invoke(app, ["report", str(path)])
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output


def test_report_of_an_interrupted_run_uses_the_logged_findings(run_log, tmp_path):
    lines = run_log.read_text().splitlines()
    cut = tmp_path / "cut.jsonl"
    cut.write_text("\n".join(line for line in lines if '"type": "end"' not in line) + "\n")
    result = CliRunner().invoke(app, ["report", str(cut)], terminal_width=140)
    assert result.exit_code == 1 and "LP103" in result.output


def test_png_without_matplotlib_says_how_to_install(run_log, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    result = CliRunner().invoke(app, ["report", str(run_log), "--png", str(tmp_path / "p.png")])
    assert result.exit_code == 2
    assert "pip install 'loopcheck[plot]'" in result.output


def test_png_with_matplotlib(run_log, tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "plots.png"
    result = CliRunner().invoke(app, ["report", str(run_log), "--png", str(out)])
    assert result.exit_code == 1 and out.read_bytes()[:4] == b"\x89PNG"


def test_summary_off_a_terminal_is_one_finding_per_line_at_full_width(tmp_path):
    import io

    torch.manual_seed(0)
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.02)
    with loopcheck.probe(net, opt, on_finding="ignore", summary=False) as probe:
        for x, y in Batches().epoch(10):
            F.cross_entropy(net(x), y).backward()  # zero_grad missing
            opt.step()
    stream = io.StringIO()
    from loopcheck.probe.sink import print_summary
    print_summary(probe, stream)
    lines = stream.getvalue().splitlines()
    assert lines[0] == "loopcheck probe: 10 steps"
    (line,) = [line for line in lines if line.startswith("LP403")]
    assert len(line) > 120 and "first step 1" in line and "--" in line
