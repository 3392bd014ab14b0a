"""The pre-commit hook, end to end: `pre-commit try-repo` on a commit of this working tree.

Builds the hook's environment from the index (network), so it is marked `network`. try-repo
keeps its environments in a temporary store it deletes on exit, so the environment check runs
the same hook once more through a `.pre-commit-config.yaml`, whose store is PRE_COMMIT_HOME.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("pre_commit")

ROOT = Path(__file__).resolve().parents[2]

BUGGY = textwrap.dedent(
    """\
    import torch


    def train(model, loader, optimizer, epochs):
        for epoch in range(epochs):
            for inputs, targets in loader:
                loss = torch.nn.functional.cross_entropy(model(inputs), targets)
                loss.backward()
                optimizer.zero_grad()
                optimizer.step()
    """
)
CLEAN = BUGGY.replace(
    "            optimizer.zero_grad()\n            optimizer.step()\n",
    "            optimizer.step()\n            optimizer.zero_grad()\n",
)
assert CLEAN != BUGGY


def git(*args: str, cwd: Path) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    done = subprocess.run(["git", "-c", "commit.gpgsign=false", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, check=True)
    return done.stdout


def snapshot_of_this_tree(dest: Path) -> Path:
    """A git repository whose one commit is this checkout's tracked and untracked-not-ignored files."""
    listing = git("ls-files", "-co", "--exclude-standard", "-z", cwd=ROOT)
    for rel in filter(None, listing.split("\0")):
        src = ROOT / rel
        if src.is_file():
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)
    git("init", "-q", cwd=dest)
    git("add", "-A", cwd=dest)
    git("commit", "-q", "-m", "snapshot", cwd=dest)
    return dest


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
    git("add", "-A", cwd=work)
    home = base / "pre-commit-home"
    env = {**os.environ, "PRE_COMMIT_HOME": str(home), "PRE_COMMIT_COLOR": "never"}
    env.pop("VIRTUAL_ENV", None)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pre_commit", *args], cwd=work, env=env, capture_output=True, text=True, timeout=300
        )

    def try_repo(*files: str) -> subprocess.CompletedProcess[str]:
        return run("try-repo", str(repo), "loopcheck", "--files", *files)

    def configured(*files: str) -> subprocess.CompletedProcess[str]:
        rev = git("rev-parse", "HEAD", cwd=repo).strip()
        (work / ".pre-commit-config.yaml").write_text(
            f"repos:\n  - repo: {repo}\n    rev: {rev}\n    hooks:\n      - id: loopcheck\n"
        )
        return run("run", "--files", *files)

    return try_repo, configured, home


def test_the_manifest_is_valid_and_runs_one_lint_process_per_commit():
    from pre_commit.clientlib import load_manifest

    (hook,) = load_manifest(str(ROOT / ".pre-commit-hooks.yaml"))
    assert hook["id"] == "loopcheck" and hook["entry"] == "loopcheck lint"
    assert hook["language"] == "python" and hook["types"] == ["python"]
    assert hook["pass_filenames"] is True and hook["require_serial"] is True
    assert hook["args"] == ["--force-exclude"]


@pytest.mark.network
@pytest.mark.slow
def test_a_buggy_script_fails_the_hook(hook_run):
    try_repo, _, _ = hook_run
    result = try_repo("buggy.py")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "buggy.py:9:13: LC102" in result.stdout


@pytest.mark.network
@pytest.mark.slow
def test_a_clean_script_passes_the_hook(hook_run):
    try_repo, _, _ = hook_run
    result = try_repo("clean.py")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Passed" in result.stdout


@pytest.mark.network
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
