"""Shared by the integration tests: a committed snapshot of this checkout, and a wheelhouse
that lets pip install loopcheck without a package index.

The wheelhouse is packed from the distributions installed in the test environment itself
(loopcheck's run-time dependencies and the hatchling build backend), so `PIP_NO_INDEX=1
PIP_FIND_LINKS=<wheelhouse>` makes every install in a test offline.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import zipfile
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


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


def _closure(names: list[str]) -> list[metadata.Distribution]:
    """The installed distributions these names need at run time (markers evaluated here)."""
    from packaging.requirements import Requirement

    seen: dict[str, metadata.Distribution] = {}
    queue = list(names)
    while queue:
        name = re.sub(r"[-_.]+", "-", queue.pop()).lower()
        if name in seen:
            continue
        dist = seen[name] = metadata.distribution(name)
        for raw in dist.requires or []:
            req = Requirement(raw)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                queue.append(req.name)
    return list(seen.values())


def _repack(dist: metadata.Distribution, dest: Path) -> Path:
    """A wheel of an installed distribution, from the files its RECORD lists."""
    info = next(f for f in dist.files or [] if f.name == "WHEEL" and f.parent.name.endswith(".dist-info"))
    tags = [line.split(":", 1)[1].strip().split("-") for line in info.read_text().splitlines() if line.startswith("Tag:")]
    tag = "-".join(".".join(dict.fromkeys(t[i] for t in tags)) for i in range(3))  # py2-none-any + py3-none-any: py2.py3-none-any
    name = re.sub(r"[-_.]+", "_", dist.metadata["Name"])
    wheel = dest / f"{name}-{dist.version}-{tag}.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for f in dist.files or []:
            src = Path(str(f.locate()))
            if f.parts[0] == ".." or "__pycache__" in f.parts or not src.is_file():
                continue  # console scripts are made again from entry_points.txt
            zf.write(src, f.as_posix())
    return wheel


def wheelhouse(dest: Path) -> Path:
    """Wheels of everything the hook's environment installs: loopcheck's runtime dependencies
    and its build backend (built in an isolated environment that pip fills from here too)."""
    from packaging.requirements import Requirement

    wanted = [Requirement(r).name for r in metadata.distribution("loopcheck").requires or []
              if Requirement(r).marker is None or Requirement(r).marker.evaluate({"extra": ""})]
    dest.mkdir(parents=True, exist_ok=True)
    for dist in _closure(wanted + ["hatchling"]):
        _repack(dist, dest)
    return dest


def offline_pip(wheels: Path) -> dict[str, str]:
    """Environment variables that keep pip away from any index."""
    return {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheels), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
