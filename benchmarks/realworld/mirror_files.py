"""Python files of one commit of a local git mirror, written into a scratch folder.

Mirrors live in `/work/.mirror/<owner>+<name>/repo` (a bare git directory, or a clone with a
`.git` folder). Only `*.py` files are written; nothing here downloads anything, and the scratch
folder lives outside the project (its files are never committed).
"""

from __future__ import annotations

import io
import shutil
import subprocess
from pathlib import Path

DEFAULT_MIRRORS = Path("/work/.mirror")


class MirrorMissing(Exception):
    """No usable mirror for a repository; the message says how to get one."""


def slug(repo: str) -> str:
    """`owner/name` -> `owner+name`, the folder name of the mirror and of its scratch copy."""
    return repo.replace("/", "+")


def git_dir(mirrors: Path, repo: str) -> Path:
    base = mirrors / slug(repo) / "repo"
    for candidate in (base / ".git", base):
        if (candidate / "HEAD").is_file() and (candidate / "objects").is_dir():
            return candidate
    raise MirrorMissing(
        f"no mirror of {repo} under {mirrors} (expected {base}); fetch github:{repo} into "
        f"{mirrors}/{slug(repo)}/repo, or pass --mirrors DIR"
    )


def _git(gdir: Path, *args: str, stdin: bytes | None = None) -> bytes:
    proc = subprocess.run(["git", "--git-dir", str(gdir), *args], input=stdin, capture_output=True)
    if proc.returncode != 0:
        raise MirrorMissing(f"git {' '.join(args[:2])} in {gdir}: "
                            + proc.stderr.decode(errors="replace").strip())
    return proc.stdout


def extract_python(mirrors: Path, repo: str, commit: str, dest: Path) -> int:
    """Write every `*.py` file of `repo` at `commit` under `dest` (emptied first); returns the count.

    Blobs are read with `git cat-file --batch`, so a mirror that lacks some large non-Python
    file still extracts.
    """
    gdir = git_dir(mirrors, repo)
    listing = _git(gdir, "ls-tree", "-r", "-z", "--full-tree", commit)
    blobs = []
    for entry in listing.decode(errors="replace").split("\0"):
        if not entry:
            continue
        meta, path = entry.split("\t", 1)
        mode, kind, oid = meta.split()
        if kind == "blob" and mode != "120000" and path.endswith(".py"):
            blobs.append((path, oid))
    data = io.BytesIO(_git(gdir, "cat-file", "--batch", stdin="".join(f"{o}\n" for _, o in blobs).encode()))
    if dest.exists():
        shutil.rmtree(dest)
    written = 0
    for path, _ in blobs:
        header = data.readline().split()
        if len(header) < 3 or header[1] != b"blob":  # `<oid> missing`: no body follows
            continue
        body = data.read(int(header[2]))
        data.read(1)  # the newline after each object
        target = dest / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(body)
        written += 1
    return written
