"""`loopcheck lint --runtime-log`: static findings confirmed by a probe run are marked; nothing else changes."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from .conftest import write

NO_ZERO_GRAD = textwrap.dedent(
    """\
    import torch
    from torch import nn
    from torch.nn import functional as F


    def fit(model, loader, epochs):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        for epoch in range(epochs):
            for x, y in loader:
                loss = F.cross_entropy(model(x), y)
                loss.backward()
                optimizer.step()
    """
)


def _log(path: Path, findings: list[dict], end: bool = True) -> Path:
    records = [{"type": "header", "version": 1, "models": [], "optimizers": [], "schedulers": [], "scaler": None}]
    records += [{"type": "finding", **f} for f in findings]
    if end:
        records.append({"type": "end", "step": 40, "skipped": 0, "findings": findings})
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _finding(code: str, name: str, step: int) -> dict:
    return {"code": code, "name": name, "severity": "error", "message": "...", "step": step, "where": None,
            "rank": None, "count": 3}


def test_a_finding_the_run_confirmed_is_marked(lint, project):
    write(project / "train.py", NO_ZERO_GRAD)
    _log(project / "run.jsonl", [_finding("LP403", "grads-not-zeroed", 2)])
    plain = lint("train.py", "--format", "json")
    marked = lint("train.py", "--format", "json", "--runtime-log", "run.jsonl")
    assert plain.exit_code == marked.exit_code == 1
    before, after = json.loads(plain.stdout)["findings"], json.loads(marked.stdout)["findings"]
    assert [f["code"] for f in after] == [f["code"] for f in before] == ["LC101"]
    assert "confirmed" not in before[0]["message"]
    assert after[0]["message"].endswith("[confirmed at run time in run.jsonl: LP403 grads-not-zeroed from step 2]")


def test_a_run_that_crashed_before_its_end_record_still_confirms(lint, project):
    write(project / "train.py", NO_ZERO_GRAD)
    _log(project / "run.jsonl", [_finding("LP403", "grads-not-zeroed", 2)], end=False)
    assert "confirmed at run time" in lint("train.py", "--runtime-log", "run.jsonl").stdout


def test_a_runtime_finding_of_another_bug_confirms_nothing(lint, project):
    write(project / "train.py", NO_ZERO_GRAD)
    _log(project / "run.jsonl", [_finding("LP301", "lr-cadence", 8), _finding("LP105", "nonfinite-loss", 9)])
    assert "confirmed" not in lint("train.py", "--runtime-log", "run.jsonl").stdout


def test_an_unusable_log_is_a_usage_error(lint, project):
    write(project / "train.py", NO_ZERO_GRAD)
    (project / "notes.jsonl").write_text('{"type": "metrics"}\n')
    for name, said in [("missing.jsonl", "no such file"), ("notes.jsonl", "not a loopcheck probe run log")]:
        result = lint("train.py", "--runtime-log", name)
        assert result.exit_code == 2
        assert "--runtime-log" in result.stderr and said in result.stderr and "Traceback" not in result.stderr


def test_runtime_log_needs_no_torch(project, tmp_path_factory):
    import os
    import subprocess
    import sys

    from tests.lint.test_no_torch import BLOCKER, REPO

    write(project / "train.py", NO_ZERO_GRAD)
    _log(project / "run.jsonl", [_finding("LP403", "grads-not-zeroed", 2)])
    blocker = tmp_path_factory.mktemp("blocker")
    (blocker / "sitecustomize.py").write_text(BLOCKER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(blocker), str(REPO)])}
    done = subprocess.run([sys.executable, "-m", "loopcheck", "lint", "--isolated", "--runtime-log", "run.jsonl",
                           "train.py"], cwd=project, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "confirmed at run time" in done.stdout
