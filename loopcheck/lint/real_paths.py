"""Real paths (links resolved) of many files in a few folders, each folder's worked out once.

`os.path.realpath` makes a system call for each component of a path, and `os.path.abspath` one
more for the working directory. A run asks about thousands of files that sit in a few dozen
folders: a folder's real path joined with the file's name is the file's, unless the file itself
is a link (one `lstat` tells).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


_POSIX = os.sep == "/" and os.altsep is None


class RealPaths:
    """`os.path.realpath` for the paths of one run (links and the working directory are taken
    as they were when first asked about)."""

    def __init__(self) -> None:
        self._found: dict[str, str] = {}  # path as given -> its real path
        self._folders: dict[str, str] = {}  # absolute folder -> its real path
        self._cwd: str | None = None

    def __call__(self, path: Path | str) -> str:
        name = os.fspath(path)
        found = self._found.get(name)
        if found is None:
            found = self._found[name] = self._resolve(name)
        return found

    def _resolve(self, name: str) -> str:
        if not _POSIX:
            return os.path.realpath(name)  # drive letters, two separators: the library's own way
        if name[:1] == "/":
            full = name
        else:
            if self._cwd is None:
                self._cwd = os.getcwd()
            full = f"{self._cwd}/{name}"
        folder, _, base = full.rpartition("/")
        if base in ("", ".", "..") or "/." in full or "//" in full:
            return os.path.realpath(full)  # `.`, `..` (resolved after the links before them) or a hidden folder
        real = self._folders.get(folder)
        if real is None:
            real = self._folders[folder] = os.path.realpath(folder or "/")
        found = f"{real}/{base}" if real != "/" else f"/{base}"
        try:
            linked = stat.S_ISLNK(os.lstat(found).st_mode)
        except (OSError, ValueError):
            linked = False
        return os.path.realpath(found) if linked else found
