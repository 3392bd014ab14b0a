"""Real paths found through each folder's: the same as `os.path.realpath`, links included."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from loopcheck.lint.real_paths import RealPaths


@pytest.fixture()
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "sub" / "train.py").write_text("x = 1\n")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / "linked_folder").symlink_to(tmp_path / "pkg" / "sub")
    (tmp_path / "pkg" / "linked_file.py").symlink_to(tmp_path / "pkg" / "sub" / "train.py")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("name", [
    "{root}/pkg/sub/train.py", "{root}/linked_folder/train.py", "{root}/pkg/linked_file.py",
    "pkg/sub/train.py", "linked_folder/train.py", "pkg/linked_file.py", "./pkg/linked_file.py",
    "pkg/../linked_folder/train.py", "{root}/linked_folder/../sub/train.py", "{root}/pkg//sub/train.py",
    "{root}/pkg/sub/", "{root}/missing/train.py", ".hidden/train.py", "train.py", "/",
])
def test_the_same_as_realpath(tree: Path, name: str) -> None:
    path = name.format(root=tree)
    real = RealPaths()
    assert real(path) == os.path.realpath(path)
    assert real(Path(path)) == os.path.realpath(path)  # asked again, as a Path


def test_a_folder_is_resolved_once(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []
    original = os.path.realpath

    def counting(path, *args, **kwargs):
        asked.append(path)
        return original(path, *args, **kwargs)

    monkeypatch.setattr(os.path, "realpath", counting)
    real = RealPaths()
    for name in ("a.py", "b.py", "c.py"):
        (tree / "pkg" / "sub" / name).write_text("")
        assert real(tree / "linked_folder" / name) == str(tree / "pkg" / "sub" / name)
    assert asked == [str(tree / "linked_folder")]
