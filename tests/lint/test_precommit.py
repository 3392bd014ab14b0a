"""The pre-commit hook, end to end: `pre-commit try-repo` on a commit of this working tree.

No package index is used: pre-commit builds the hook's environment with pip restricted to a
wheelhouse (PIP_NO_INDEX, PIP_FIND_LINKS) that the test packs from the distributions installed
in its own environment (loopcheck's dependencies and the hatchling build backend). try-repo
keeps its environments in a temporary store it deletes on exit, so the environment check runs
the same hook once more through a `.pre-commit-config.yaml` whose `repo` is the snapshot's path
and `rev` its commit, with PRE_COMMIT_HOME as the store.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.offline import ROOT, git, offline_pip, snapshot_of_this_tree, wheelhouse
from tests.projects import ZERO_GRAD_LATE

pytest.importorskip("pre_commit")

BUGGY = ZERO_GRAD_LATE
CLEAN = BUGGY.replace(
    "            optimizer.zero_grad()\n            optimizer.step()\n",
    "            optimizer.step()\n            optimizer.zero_grad()\n",
)
assert CLEAN != BUGGY


def readme_config(*, repo: str, rev: str) -> str:
    """The README's `.pre-commit-config.yaml` snippet, its placeholders filled in."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("### pre-commit", 1)[1]
    block = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    assert "<repository>" in block and "<rev>" in block, block
    return block.replace("<repository>", repo).replace("<rev>", rev)


@pytest.fixture(scope="module")
def hook_run(tmp_path_factory):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    base = tmp_path_factory.mktemp("precommit")
    repo = snapshot_of_this_tree(base / "loopcheck")
    work = base / "project"
    work.mkdir()
    git("init", "-q", cwd=work)
    (work / "buggy.py").write_text(BUGGY)
    (work / "clean.py").write_text(CLEAN)
    (work / "main.py").write_text("from buggy import train\n\n\ndef run(model, loader, optimizer):\n    train(model, loader, optimizer, 3)\n")
    git("add", "-A", cwd=work)
    home = base / "pre-commit-home"
    wheels = wheelhouse(base / "wheels")
    env = {**os.environ, "PRE_COMMIT_HOME": str(home), "PRE_COMMIT_COLOR": "never",
           **offline_pip(wheels)}
    env.pop("VIRTUAL_ENV", None)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pre_commit", *args], cwd=work, env=env, capture_output=True, text=True, timeout=300
        )

    def try_repo(*files: str) -> subprocess.CompletedProcess[str]:
        return run("try-repo", str(repo), "loopcheck", "--files", *files)

    def configured(*files: str) -> subprocess.CompletedProcess[str]:
        rev = git("rev-parse", "HEAD", cwd=repo).strip()
        (work / ".pre-commit-config.yaml").write_text(readme_config(repo=str(repo), rev=rev))
        return run("run", "--files", *files)

    return try_repo, configured, home


def test_the_manifest_is_valid_and_runs_one_lint_process_per_commit():
    from pre_commit.clientlib import load_manifest

    (hook,) = load_manifest(str(ROOT / ".pre-commit-hooks.yaml"))
    assert hook["id"] == "loopcheck" and hook["entry"] == "loopcheck lint"
    assert hook["language"] == "python" and hook["types"] == ["python"]
    assert hook["pass_filenames"] is True and hook["require_serial"] is True
    assert hook["args"] == ["--force-exclude"]


@pytest.mark.slow
def test_a_buggy_script_fails_the_hook(hook_run):
    try_repo, _, _ = hook_run
    result = try_repo("buggy.py")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "buggy.py:9:13: LC102" in result.stdout


@pytest.mark.slow
def test_a_clean_script_passes_the_hook(hook_run):
    _, configured, _ = hook_run  # the configured run keeps its environment: the next test reuses it
    result = configured("clean.py")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Passed" in result.stdout


@pytest.mark.slow
def test_a_staged_file_does_not_fail_on_a_module_it_imports(hook_run):
    _, configured, _ = hook_run
    result = configured("main.py")  # buggy.py is imported, not staged: its finding is not main.py's
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_the_hook_environment_has_no_torch(hook_run):
    _, configured, home = hook_run
    result = configured("clean.py")
    assert result.returncode == 0, result.stdout + result.stderr
    envs = list(home.glob("repo*/py_env-*"))
    assert envs, f"no hook environment under {home}"
    for env_dir in envs:
        assert not list(env_dir.glob("lib/python*/site-packages/torch")), env_dir
        python = env_dir / "bin" / "python"
        probe = subprocess.run([str(python), "-c", "import loopcheck.lint.command; import torch"],
                               capture_output=True, text=True, timeout=60)
        assert probe.returncode != 0 and "No module named 'torch'" in probe.stderr, probe.stderr
