"""Discovery: gitignore rules, environments and tool folders skipped, force-exclude on named files."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from loopcheck.lint import discovery
from loopcheck.lint.discovery import IgnoreFile, discover, parse_ignore


def write(root: Path, rel: str, text: str = "import torch\n") -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def found(root: Path, *names: str | Path, **kwargs) -> list[str]:
    files, _ = discover(list(names) or [root], **kwargs)
    return sorted(Path(f).resolve().relative_to(root.resolve()).as_posix() for f in files)


@pytest.fixture(autouse=True)
def no_global_excludes(tmp_path_factory, monkeypatch):
    """Each test sees a HOME of its own: no user's global git excludes leak in."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    discovery._global_excludes.cache_clear()
    discovery._read_ignore.cache_clear()
    yield home
    discovery._global_excludes.cache_clear()


@pytest.mark.parametrize(
    ("pattern", "path", "is_dir", "ignored"),
    [
        ("*.log", "a.log", False, True),
        ("*.log", "deep/er/a.log", False, True),
        ("/top.py", "top.py", False, True),
        ("/top.py", "sub/top.py", False, False),
        ("build/", "build", True, True),
        ("build/", "build", False, False),  # a file named build is not the folder
        ("docs/*.py", "docs/conf.py", False, True),
        ("docs/*.py", "docs/api/conf.py", False, False),  # `*` stops at `/`
        ("**/gen", "a/b/gen", True, True),
        ("out/**", "out/x/y.py", False, True),
        ("a/**/b.py", "a/b.py", False, True),
        ("a/**/b.py", "a/x/y/b.py", False, True),
        ("exp?.py", "exp1.py", False, True),
        ("exp[0-9].py", "expA.py", False, False),
        ("\\#notes.py", "#notes.py", False, True),
        ("# a comment", "# a comment", False, False),
    ],
)
def test_gitignore_patterns(tmp_path: Path, pattern: str, path: str, is_dir: bool, ignored: bool) -> None:
    rules = IgnoreFile(tmp_path, parse_ignore(pattern + "\n"))
    assert bool(rules.verdict(tmp_path / path, is_dir)) is ignored


def test_the_last_matching_rule_wins_and_negation_reincludes(tmp_path: Path) -> None:
    rules = IgnoreFile(tmp_path, parse_ignore("*.py\n!keep.py\n"))
    assert rules.verdict(tmp_path / "drop.py", False) is True
    assert rules.verdict(tmp_path / "keep.py", False) is False


def test_gitignored_files_and_folders_are_skipped_in_a_repository(tmp_path: Path) -> None:
    (tmp_path / ".git" / "info").mkdir(parents=True)
    write(tmp_path, ".gitignore", "outputs/\n*_scratch.py\n")
    write(tmp_path, "src/.gitignore", "generated.py\n!keep_scratch.py\n")
    write(tmp_path, ".ignore", "notes/\n")
    write(tmp_path, ".git/info/exclude", "local.py\n")
    for rel in ["train.py", "outputs/run1/train.py", "try_scratch.py", "src/model.py", "src/generated.py",
                "src/keep_scratch.py", "notes/idea.py", "local.py"]:
        write(tmp_path, rel)
    assert found(tmp_path) == ["src/keep_scratch.py", "src/model.py", "train.py"]
    assert found(tmp_path, respect_gitignore=False) == [
        "local.py", "notes/idea.py", "outputs/run1/train.py", "src/generated.py", "src/keep_scratch.py",
        "src/model.py", "train.py", "try_scratch.py",
    ]
    # a folder named below the repository root still sees the root's rules
    assert found(tmp_path, tmp_path / "src") == ["src/keep_scratch.py", "src/model.py"]


def test_global_git_excludes_apply(tmp_path: Path, no_global_excludes: Path) -> None:
    if subprocess.run(["git", "--version"], capture_output=True).returncode != 0:
        pytest.skip("git is not installed")
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    write(no_global_excludes, ".config/git/ignore", "*.local.py\n")
    write(repo, "train.py")
    write(repo, "mine.local.py")
    assert found(repo) == ["train.py"]


def test_environments_tool_folders_and_run_folders_are_never_searched(tmp_path: Path) -> None:
    write(tmp_path, "env/pyvenv.cfg", "home = /usr/bin\n")  # a virtualenv, whatever its name
    write(tmp_path, "env/lib/python3.11/site-packages/torch/optim/sgd.py")
    write(tmp_path, "conda/conda-meta/history", "")
    write(tmp_path, "conda/lib/x.py")
    for rel in ["train.py", "wandb/run-1/files/code/train.py", ".mypy_cache/x.py", "lib/site-packages/y.py",
                "pkg.egg-info/z.py", "mlruns/0/a.py", ".ipynb_checkpoints/nb-checkpoint.py"]:
        write(tmp_path, rel)
    assert found(tmp_path) == ["train.py"]


def test_named_files_are_checked_unless_force_exclude(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    write(tmp_path, ".gitignore", "scratch/\n")
    write(tmp_path, "env/pyvenv.cfg", "")
    named = [write(tmp_path, "scratch/a.py"), write(tmp_path, "env/lib/b.py"), write(tmp_path, "train.py")]
    assert found(tmp_path, *named) == ["env/lib/b.py", "scratch/a.py", "train.py"]
    assert found(tmp_path, *named, force_exclude=True) == ["train.py"]
    # with force-exclude, the configured exclude applies to named files too
    assert found(tmp_path, *named, force_exclude=True, excluded=lambda p, below: p.name == "train.py") == []


def test_a_project_inside_a_folder_named_like_a_tool_folder_is_still_checked(tmp_path: Path, monkeypatch) -> None:
    project = tmp_path / "build" / "myproject"
    (project / ".git").mkdir(parents=True)
    script = write(project, "train.py")
    monkeypatch.chdir(project)
    assert found(project, script, force_exclude=True) == ["train.py"]
    assert found(project) == ["train.py"]


def test_notebooks_are_found_when_asked(tmp_path: Path) -> None:
    write(tmp_path, "train.py")
    write(tmp_path, "explore.ipynb", "{}")
    assert found(tmp_path) == ["train.py"]
    assert found(tmp_path, notebooks=True) == ["explore.ipynb", "train.py"]


def test_without_a_repository_the_named_folder_ignore_files_apply(tmp_path: Path) -> None:
    write(tmp_path, ".gitignore", "old/\n")
    write(tmp_path, "old/a.py")
    write(tmp_path, "new/b.py")
    assert found(tmp_path) == ["new/b.py"]


def test_imports_are_never_followed_into_environments(tmp_path: Path) -> None:
    from loopcheck.lint.project import Project

    write(tmp_path, "proj/model.py")
    train = write(tmp_path, "proj/train.py", "from model import Net\n")
    write(tmp_path, "proj/.venv/pyvenv.cfg", "")
    site = tmp_path / "proj/.venv/lib/python3.11/site-packages/big"
    write(site, "__init__.py")
    write(site, "core.py")
    inside = write(site, "api.py", "from .core import thing\n")
    index = Project()
    assert index.resolve(str(train), "model") == tmp_path / "proj/model.py"
    assert index.resolve(str(inside), "core", level=1) is None  # a file named inside an installed package is checked alone
    write(tmp_path, "proj/env/pyvenv.cfg", "")
    write(tmp_path, "proj/env/helpers.py")
    assert index.resolve(str(train), "env.helpers") is None
