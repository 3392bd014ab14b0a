"""Rebuild the real-code benchmark from local git mirrors into a scratch folder.

For each repository of repos.toml, the tree of the pinned commit is read from the mirror and only
the `*.py` files under the listed paths (minus the excluded prefixes), and the project's requirement
files at its root (`pyproject.toml`, `setup.cfg`, `setup.py`, `requirements*.txt`: they declare the
torch range some rules read), are written to
OUT/<owner>+<name>/. Nothing is downloaded here: a missing mirror is reported with the command
that gets it. The scratch folder lives outside the project; its files are never committed.

    python benchmarks/realworld/rebuild.py [OUT] [--mirrors DIR] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from benchset import REPOS_FILE, DEFAULT_MIRRORS, DEFAULT_OUT, Repo, load_repos  # noqa: E402


def git_dir(mirrors: Path, repo: Repo) -> Path | None:
    """The git directory of repo's mirror (bare, or a clone with a .git folder), None if absent."""
    base = mirrors / repo.slug / "repo"
    for candidate in (base / ".git", base):
        if (candidate / "HEAD").is_file() and (candidate / "objects").is_dir():
            return candidate
    return None


def _excluded(path: str, prefix: str) -> bool:
    """A prefix with one segment (`tests/`) names a folder at any depth; a longer one a path."""
    prefix = prefix.rstrip("/")
    if "/" not in prefix:
        return prefix in path.split("/")[:-1]
    return path == prefix or path.startswith(prefix + "/")


# requirement files at the repository root: loopcheck reads the declared torch range from them
_ROOT_REQUIREMENTS = ("pyproject.toml", "setup.cfg", "setup.py", "requirements.txt", "requirements")


def _requirement_file(path: str) -> bool:
    parts = path.split("/")
    if len(parts) == 1:
        return parts[0] in ("pyproject.toml", "setup.cfg", "setup.py") or (parts[0].startswith("requirements") and parts[0].endswith(".txt"))
    return len(parts) == 2 and parts[0] == "requirements" and parts[1].endswith(".txt")


def _included(path: str, repo: Repo) -> bool:
    if _requirement_file(path):
        return True
    if not path.endswith(".py"):
        return False
    if any(_excluded(path, p) for p in repo.exclude):
        return False
    return not repo.paths or any(
        path == p or path.startswith(p.rstrip("/") + "/") for p in repo.paths
    )


def _py_blobs(repo: Repo, gdir: Path) -> list[tuple[str, str]]:
    """(path, blob id) of the selected Python files at the pinned commit."""
    cmd = ["git", "--git-dir", str(gdir), "ls-tree", "-r", "-z", "--full-tree", repo.commit]
    if repo.paths:
        cmd += ["--", *repo.paths, *_ROOT_REQUIREMENTS]
    proc = subprocess.run(cmd, capture_output=True)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.decode(errors="replace").strip())
    blobs = []
    for entry in proc.stdout.decode().split("\0"):
        if not entry:
            continue
        meta, path = entry.split("\t", 1)
        mode, kind, oid = meta.split()
        if kind == "blob" and mode != "120000" and _included(path, repo):
            blobs.append((path, oid))
    return blobs


def rebuild_one(repo: Repo, gdir: Path, dest: Path) -> tuple[int, int]:
    """Write repo's selected files to dest; returns (files, lines).

    Blobs are read one by one (`git cat-file --batch`) rather than through `git archive`, so a
    mirror that lacks some large non-Python file still rebuilds.
    """
    blobs = _py_blobs(repo, gdir)
    request = "".join(f"{oid}\n" for _, oid in blobs).encode()
    proc = subprocess.run(["git", "--git-dir", str(gdir), "cat-file", "--batch"],
                          input=request, capture_output=True)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.decode(errors="replace").strip())
    if dest.exists():
        shutil.rmtree(dest)
    stream = io.BytesIO(proc.stdout)
    files = lines = 0
    for path, oid in blobs:
        header = stream.readline().decode().split()
        if len(header) != 3:
            raise RuntimeError(f"{path}: blob {oid} is missing from the mirror")
        data = stream.read(int(header[2]))
        stream.read(1)  # the newline after each object
        target = dest / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        if path.endswith(".py"):
            files += 1
            lines += data.count(b"\n")
    # A clone has a root marker (`.git`): without one the linter would take the folder above
    # each file's outermost package for the project root, and imports of the repository's
    # top-level modules would not resolve. An empty setup.cfg marks the root the same way.
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "setup.cfg").touch()
    return files, lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?", type=Path, default=DEFAULT_OUT,
                    help=f"scratch folder to write (default {DEFAULT_OUT})")
    ap.add_argument("--mirrors", type=Path,
                    default=Path(os.environ.get("LOOPCHECK_MIRRORS", DEFAULT_MIRRORS)),
                    help="folder holding <owner>+<name>/repo git mirrors "
                         f"(default $LOOPCHECK_MIRRORS or {DEFAULT_MIRRORS})")
    ap.add_argument("--repos", type=Path, default=REPOS_FILE,
                    help="repository list (default: repos.toml next to this script)")
    ap.add_argument("--only", nargs="*", default=None, help="rebuild only these owner/name")
    args = ap.parse_args(argv)

    out: Path = args.out.resolve()
    if (HERE.parents[1] / ".git").exists() and out.is_relative_to(HERE.parents[1]):
        print(f"rebuild: {out} is inside the project; pick a scratch folder outside it", file=sys.stderr)
        return 2
    repos = load_repos(args.repos)
    if args.only:
        unknown = set(args.only) - {r.name for r in repos}
        if unknown:
            print(f"rebuild: not in repos.toml: {', '.join(sorted(unknown))}", file=sys.stderr)
            return 2
        repos = [r for r in repos if r.name in args.only]

    missing = failed = 0
    total_files = total_lines = 0
    for repo in repos:
        gdir = git_dir(args.mirrors, repo)
        if gdir is None:
            missing += 1
            print(f"MISSING {repo.name}: no mirror at {args.mirrors / repo.slug / 'repo'}\n"
                  f"        get it with: git clone --bare https://github.com/{repo.name}.git "
                  f"{args.mirrors / repo.slug / 'repo'}", file=sys.stderr)
            continue
        try:
            files, lines = rebuild_one(repo, gdir, out / repo.slug)
        except RuntimeError as exc:
            failed += 1
            print(f"FAILED  {repo.name} @ {repo.commit[:12]}: {exc}\n"
                  f"        the mirror may predate the pinned commit: fetch it again", file=sys.stderr)
            continue
        total_files += files
        total_lines += lines
        print(f"{repo.name:45s} {repo.commit[:12]}  {files:5d} files {lines:7d} lines")
    print(f"{len(repos) - missing - failed} of {len(repos)} repositories, "
          f"{total_files} files, {total_lines} lines -> {out}")
    return 1 if missing or failed else 0


if __name__ == "__main__":
    sys.exit(main())
