"""The composite GitHub Action: action.yml runs scripts/action.sh, which installs loopcheck
into its own environment (offline here, from the test environment's wheelhouse) and annotates."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.offline import ROOT, offline_pip, snapshot_of_this_tree, wheelhouse
from tests.projects import ZERO_GRAD_LATE

BUGGY = ZERO_GRAD_LATE


def test_the_action_runs_the_tested_script():
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    assert action["runs"]["using"] == "composite"
    (step,) = action["runs"]["steps"]
    assert step["shell"] == "bash"
    assert step["run"] == 'bash "$GITHUB_ACTION_PATH/scripts/action.sh"'
    assert set(step["env"]) == {f"INPUT_{name.upper()}" for name in action["inputs"]}
    assert (ROOT / "scripts" / "action.sh").is_file()
    # the README's usage names only inputs the action has
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    usage = readme.split("uses: <owner>/loopcheck@<rev>", 1)[1].split("```", 1)[0]
    named = {line.strip().lstrip("# ").split(":", 1)[0] for line in usage.splitlines()[2:] if ":" in line}
    assert named and named <= set(action["inputs"]), named


@pytest.mark.slow
def test_the_action_script_installs_loopcheck_and_annotates(tmp_path: Path):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    action = snapshot_of_this_tree(tmp_path / "action")  # what `uses: owner/loopcheck@ref` checks out
    wheels = wheelhouse(tmp_path / "wheels")
    workspace = tmp_path / "workspace"
    (workspace / "src").mkdir(parents=True)
    (workspace / "src" / "train.py").write_text(BUGGY)
    env = {**os.environ, **offline_pip(wheels), "RUNNER_TEMP": str(tmp_path / "runner"),
           "GITHUB_ACTION_PATH": str(action), "INPUT_ARGS": "src", "INPUT_FORMAT": "github", "INPUT_INSTALL": ""}
    env.pop("VIRTUAL_ENV", None)
    (tmp_path / "runner").mkdir()
    run = subprocess.run(["bash", str(action / "scripts" / "action.sh")], cwd=workspace, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stdout + run.stderr
    assert run.stdout.startswith("::error file=src/train.py,line=9,col=13,"), run.stdout
    assert "title=LC102::" in run.stdout
    assert not list((tmp_path / "runner" / "loopcheck-action-venv").glob("lib/python*/site-packages/torch"))
    (workspace / "src" / "train.py").write_text(BUGGY.replace("            optimizer.zero_grad()\n", ""))
    env["INPUT_ARGS"] = "src --select LC102"  # the environment is reused; options pass through
    again = subprocess.run(["bash", str(action / "scripts" / "action.sh")], cwd=workspace, env=env,
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and again.stdout == "", again.stdout + again.stderr
