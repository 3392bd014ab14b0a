"""Which files `loopcheck lint` checks: the paths named, and the Python files found under folders.

Ruff's conventions: a folder is searched for `*.py`, `*.pyi` (and, when asked, `*.ipynb`) files,
skipping

- tool folders (`.git`, `.venv`, `__pycache__`, `.mypy_cache`, `wandb`, `site-packages`, ...,
  see DEFAULT_EXCLUDE) and hidden folders,
- any folder holding a `pyvenv.cfg` (a virtualenv, whatever its name: `env/`, `py311/`) or a
  `conda-meta/` (a conda environment),
- what `.gitignore` / `.ignore` files, `.git/info/exclude` and git's global excludes file
  ignore (unless `respect_gitignore=False`),
- what the caller's `excluded(path, below)` says (the configured `exclude`).

A file named explicitly is always checked, unless `force_exclude=True` (pre-commit names each
staged file): then every rule above applies to it too.

The gitignore matcher is written here (about a hundred lines) rather than taken from a package:
the linter's install stays at libcst, typer and rich, and only the subset git documents for
ignore files is needed.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterable, Sequence

from loopcheck.lint.output.report import FileError  # a named path that cannot be used is reported like a file that cannot be read

PYTHON_SUFFIXES = (".py", ".pyi")
NOTEBOOK_SUFFIX = ".ipynb"

# Folder names never searched (Ruff's defaults, plus the caches and run folders of ML tools).
DEFAULT_EXCLUDE = frozenset({
    ".bzr", ".direnv", ".eggs", ".git", ".git-rewrite", ".hg", ".ipynb_checkpoints", ".mypy_cache",
    ".nox", ".pants.d", ".pyenv", ".pytest_cache", ".pytype", ".ruff_cache", ".svn", ".tox", ".venv",
    ".vscode", "__pypackages__", "_build", "buck-out", "build", "dist", "node_modules", "site-packages",
    "dist-packages", "venv", "__pycache__", ".loopcheck_cache", "wandb", "mlruns", "lightning_logs",
})

Excluded = Callable[[Path, "Path | None"], bool]


def is_environment(folder: Path) -> bool:
    """Whether folder is a Python environment (virtualenv or conda), whatever its name."""
    return _is_environment(str(folder))


@lru_cache(maxsize=4096)
def _is_environment(folder: str) -> bool:
    return os.path.isfile(os.path.join(folder, "pyvenv.cfg")) or os.path.isdir(os.path.join(folder, "conda-meta"))


def in_environment(path: Path) -> bool:
    """Whether path lies inside a Python environment or an installed-packages folder."""
    return _environment_at_or_above(os.path.dirname(os.path.abspath(path)))


@lru_cache(maxsize=4096)
def _environment_at_or_above(folder: str) -> bool:
    """Whether `folder` or a folder above it is an environment or an installed-packages folder
    (asked for every import a project resolves: one answer per folder)."""
    if os.path.basename(folder) in ("site-packages", "dist-packages") or _is_environment(folder):
        return True
    parent = os.path.dirname(folder)
    return parent != folder and _environment_at_or_above(parent)


def skipped_folder(folder: Path) -> bool:
    """Whether a folder is skipped whatever the configuration: tool folders, hidden folders, environments."""
    name = folder.name
    return name in DEFAULT_EXCLUDE or name.startswith(".") or name.endswith(".egg-info") or is_environment(folder)


# --- gitignore ---------------------------------------------------------------------------------


def _segment(glob: str) -> str:
    """A regex for one path segment of a gitignore glob (`*`, `?`, `[...]`, backslash escapes)."""
    out, i, n = [], 0, len(glob)
    while i < n:
        c = glob[i]
        if c == "\\" and i + 1 < n:
            out.append(re.escape(glob[i + 1]))
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = glob.find("]", i + 2)
            if end == -1:
                out.append(re.escape(c))
            else:
                body = glob[i + 1:end]
                if body[0] in "!^":
                    body = "^" + body[1:]
                out.append("[" + body.replace("\\", "\\\\") + "]")
                i = end
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


@dataclass(frozen=True)
class IgnoreRule:
    regex: re.Pattern[str]
    negated: bool
    dir_only: bool


def parse_ignore(text: str) -> list[IgnoreRule]:
    """The rules of one ignore file, in order (git's documented syntax)."""
    rules = []
    for raw in text.splitlines():
        line = raw.rstrip("\r")
        if not line or line.startswith("#"):
            continue
        while line.endswith(" ") and not line.endswith("\\ "):
            line = line[:-1]
        negated = line.startswith("!")
        if negated:
            line = line[1:]
        elif line.startswith("\\!") or line.startswith("\\#"):
            line = line[1:]
        dir_only = line.endswith("/")
        line = line.rstrip("/")
        if not line:
            continue
        anchored = "/" in line
        parts = line.lstrip("/").split("/")
        pieces = [] if anchored else ["(?:[^/]+/)*"]
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            if part == "**":
                pieces.append(".+" if last else "(?:[^/]+/)*")
            else:
                pieces.append(_segment(part) + ("" if last else "/"))
        rules.append(IgnoreRule(re.compile("".join(pieces) + r"\Z", re.S), negated, dir_only))
    return rules


@dataclass
class IgnoreFile:
    base: Path  # the folder the patterns are relative to
    rules: list[IgnoreRule]

    def verdict(self, path: Path, is_dir: bool) -> bool | None:
        """True (ignored), False (re-included by `!`) or None (no rule matches) for path itself."""
        try:
            rel = path.relative_to(self.base).as_posix()
        except ValueError:
            return None
        if rel == ".":
            return None
        found = None
        for rule in self.rules:
            if rule.dir_only and not is_dir:
                continue
            if rule.regex.match(rel):
                found = not rule.negated
        return found


@lru_cache(maxsize=None)
def _read_ignore(path: Path) -> IgnoreFile | None:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    rules = parse_ignore(text)
    return IgnoreFile(path.parent.parent.parent if path.name == "exclude" else path.parent, rules) if rules else None


@lru_cache(maxsize=None)
def _global_excludes() -> IgnoreFile | None:
    """git's core.excludesFile (default $XDG_CONFIG_HOME/git/ignore), matched from each repository root."""
    configured = None
    try:
        done = subprocess.run(["git", "config", "--get", "core.excludesFile"], capture_output=True, text=True, timeout=5)
        configured = done.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        pass
    if configured:
        candidate = Path(os.path.expanduser(configured))
    else:
        xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
        candidate = Path(xdg) / "git" / "ignore"
    if not candidate.is_file():
        return None
    try:
        rules = parse_ignore(candidate.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return None
    return IgnoreFile(Path("/"), rules) if rules else None


def repository_root(folder: Path) -> Path | None:
    for candidate in (folder, *folder.parents):
        if (candidate / ".git").exists():
            return candidate
    return None


def _absolute(path: Path) -> Path:
    return Path(os.path.abspath(path))


class GitIgnore:
    """The ignore files that apply in a tree, read once per folder.

    Files are matched from `stop` down: the repository root holding the named path (where
    `.git/info/exclude` and the global excludes apply too), else the named folder itself.
    """

    def __init__(self) -> None:
        self._chains: dict[tuple[Path, Path], tuple[IgnoreFile, ...]] = {}

    def chain(self, folder: Path, stop: Path) -> tuple[IgnoreFile, ...]:
        """The ignore files that apply to the entries of folder, outermost first (the last
        matching rule of the innermost file wins, as in git)."""
        key = (folder, stop)
        found = self._chains.get(key)
        if found is not None:
            return found
        if folder == stop or stop not in folder.parents:
            outer: list[IgnoreFile] = []
            if (folder / ".git").exists():
                glob = _global_excludes()
                if glob is not None:
                    outer.append(IgnoreFile(folder, glob.rules))
                info = _read_ignore(folder / ".git" / "info" / "exclude")
                if info is not None:
                    outer.append(info)
            chain = tuple(outer)
        else:
            chain = self.chain(folder.parent, stop)
        own = (_read_ignore(folder / ".gitignore"), _read_ignore(folder / ".ignore"))
        found = self._chains[key] = chain + tuple(f for f in own if f is not None)
        return found

    def ignores(self, path: Path, is_dir: bool, stop: Path) -> bool:
        verdict = None
        for ignore_file in self.chain(path.parent, stop):
            v = ignore_file.verdict(path, is_dir)
            if v is not None:
                verdict = v
        return bool(verdict)


def stop_for(path: Path) -> Path:
    """Where ignore files start to apply for a named path: its repository root, else itself."""
    folder = path if path.is_dir() else path.parent
    return repository_root(folder) or folder


# --- discovery ---------------------------------------------------------------------------------


def _pattern_excluded(path: Path, root: Path, patterns: Sequence[str]) -> bool:
    """The `exclude=` patterns of the API, relative to the named folder `root`."""
    if not patterns:
        return False
    try:
        rel = path.relative_to(root).as_posix()
    except ValueError:
        rel = path.as_posix()
    parts = rel.split("/")
    for pattern in patterns:
        pat = pattern.rstrip("/")
        if fnmatchcase(rel, pat) or fnmatchcase(path.name, pat):
            return True
        if any(fnmatchcase(part, pat) for part in parts[:-1]) or fnmatchcase(rel, pat + "/*"):
            return True
    return False


@dataclass
class Discovery:
    """Discovery settings; `files(paths)` walks them."""

    exclude: Sequence[str] = ()
    excluded: Excluded | None = None  # (path, deepest named folder above it or None) -> excluded
    respect_gitignore: bool = True
    force_exclude: bool = False
    notebooks: bool = False
    _gitignore: GitIgnore = field(default_factory=GitIgnore)

    @property
    def suffixes(self) -> tuple[str, ...]:
        return PYTHON_SUFFIXES + ((NOTEBOOK_SUFFIX,) if self.notebooks else ())

    def files(self, paths: Iterable[str | Path]) -> tuple[list[Path], list[FileError]]:
        found: dict[Path, None] = {}
        problems: list[FileError] = []
        for raw in paths:
            path = Path(raw)
            if path.is_file():
                if not self.force_exclude or not self.named_file_excluded(path):
                    found[path] = None
                continue
            if not path.exists():
                problems.append(FileError(str(raw), None, "no such file or directory"))
                continue
            if not path.is_dir():
                problems.append(FileError(str(raw), None, "not a regular file or directory"))
                continue
            if self.force_exclude and self.named_file_excluded(path):
                continue
            below = list(self.walk(path))
            if not below:
                problems.append(FileError(str(raw), None, "no Python files found"))
            for f in below:
                found[f] = None
        return list(found), problems

    def named_file_excluded(self, path: Path) -> bool:
        """For --force-exclude: whether a named file or folder is excluded by any rule. Only
        folders inside the repository (else the working directory) count, so a project that
        happens to live under a folder named `build` is still checked."""
        real = _absolute(path)
        stop = repository_root(real if real.is_dir() else real.parent) or _absolute(Path.cwd())
        inside = [f for f in (real, *real.parents) if stop in f.parents]
        for folder in inside:
            if (folder != real or real.is_dir()) and skipped_folder(folder):
                return True
        if self.excluded is not None and self.excluded(path, None):
            return True
        if self.respect_gitignore:
            return any(self._gitignore.ignores(f, f.is_dir(), stop) for f in inside)
        return False

    def walk(self, top: Path) -> Iterable[Path]:
        """The files to check under a named folder, in a stable (sorted) order."""
        below = top.resolve()
        stop = stop_for(_absolute(top))
        for folder, dirnames, filenames in os.walk(top):
            here = Path(folder)
            real = _absolute(here)
            keep = []
            for d in sorted(dirnames):
                sub = here / d
                if skipped_folder(sub) or self._excluded(sub, top, below, real / d, stop, is_dir=True):
                    continue
                keep.append(d)
            dirnames[:] = keep
            for name in sorted(filenames):
                if not name.endswith(self.suffixes) or name.startswith("."):
                    continue
                candidate = here / name
                if not self._excluded(candidate, top, below, real / name, stop, is_dir=False):
                    yield candidate

    def _excluded(self, path: Path, top: Path, below: Path, real: Path, stop: Path, *, is_dir: bool) -> bool:
        if _pattern_excluded(path, top, self.exclude):
            return True
        if self.excluded is not None and self.excluded(path, None if self.force_exclude else below):
            return True
        return self.respect_gitignore and self._gitignore.ignores(real, is_dir, stop)


def discover(
    paths: Iterable[str | Path],
    exclude: Sequence[str] = (),
    *,
    excluded: Excluded | None = None,
    respect_gitignore: bool = True,
    force_exclude: bool = False,
    notebooks: bool = False,
) -> tuple[list[Path], list[FileError]]:
    """The files to check under `paths` (named files are always included unless
    `force_exclude`), and the problems with the paths themselves."""
    return Discovery(exclude, excluded, respect_gitignore, force_exclude, notebooks).files(paths)
