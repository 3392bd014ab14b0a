"""Every Python file of one commit of a local git mirror, written into a scratch folder.

The recall yardsticks need whole repositories at arbitrary commits (the commit before a fix, the
pinned commit of a mutated script), so they reuse rebuild.py's reading of mirrors with no path
selection. Nothing here downloads anything; a missing mirror is a `MirrorMissing` whose message
says what to fetch.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchset import DEFAULT_MIRRORS, Repo  # noqa: E402,F401  (DEFAULT_MIRRORS re-exported)
from rebuild import git_dir, rebuild_one  # noqa: E402


class MirrorMissing(Exception):
    """No usable mirror for a repository (or not the commit asked for); the message says why."""


def _repo(name: str, commit: str) -> Repo:
    return Repo(name=name, commit=commit, paths=(), exclude=(), style="")


def slug(name: str) -> str:
    """`owner/name` -> `owner+name`, the folder name of the mirror and of its scratch copy."""
    return _repo(name, "").slug


def extract_python(mirrors: Path, name: str, commit: str, dest: Path) -> int:
    """Write every `*.py` file of `name` at `commit` under `dest` (emptied first); returns the count."""
    repo = _repo(name, commit)
    gdir = git_dir(mirrors, repo)
    if gdir is None:
        raise MirrorMissing(f"no mirror of {name} under {mirrors} (expected "
                            f"{mirrors / repo.slug / 'repo'}); fetch github:{name} there, or pass --mirrors DIR")
    try:
        files, _ = rebuild_one(repo, gdir, dest)
    except RuntimeError as exc:
        raise MirrorMissing(f"{name}@{commit[:12]}: {exc}") from None
    return files
