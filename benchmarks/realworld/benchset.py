"""The benchmark's repository list (repos.toml) and the default places of its scratch files."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

HERE = Path(__file__).resolve().parent
REPOS_FILE = HERE / "repos.toml"
VERDICTS_FILE = HERE / "verdicts.tsv"
DEFAULT_MIRRORS = Path("/work/.mirror")
DEFAULT_OUT = Path("/tmp/loopcheck-realworld")
FINDINGS_NAME = "findings.json"  # written by run.py into the scratch folder


@dataclass(frozen=True)
class Repo:
    name: str  # owner/name on GitHub
    commit: str
    paths: tuple[str, ...]
    exclude: tuple[str, ...]
    style: str

    @property
    def slug(self) -> str:
        """Folder name of the mirror and of the rebuilt copy: owner+name."""
        return self.name.replace("/", "+")


def _fail(message: str) -> SystemExit:
    print(message, file=sys.stderr)
    return SystemExit(2)


def load_repos(path: Path = REPOS_FILE) -> list[Repo]:
    """The repositories of the list; a missing or malformed file exits with status 2 and says where."""
    if not path.is_file():
        raise _fail(f"{path}: no repository list")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise _fail(f"{path}: not valid TOML ({exc})")
    default_exclude = tuple(data.get("defaults", {}).get("exclude", ()))
    repos = []
    for i, entry in enumerate(data.get("repo", [])):
        if "name" not in entry or "commit" not in entry:
            raise _fail(f"{path}: [[repo]] entry {i + 1} needs a name and a commit")
        repos.append(Repo(
            name=entry["name"],
            commit=entry["commit"],
            paths=tuple(entry.get("paths", ())),
            exclude=tuple(entry.get("exclude", default_exclude)),
            style=entry.get("style", ""),
        ))
    return repos
