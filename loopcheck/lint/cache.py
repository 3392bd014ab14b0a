"""The lint cache: a file's results, reused while nothing they depend on has changed.

Entries live in `.loopcheck_cache/` at the project root (the nearest folder up from the working
directory holding a pyproject.toml or .git, else the working directory), one JSON file per
(file, effective configuration). An entry is valid while

- the file's bytes hash the same,
- loopcheck's version, its linter code and the rule pages' metadata (names, severities, fix
  kinds) are unchanged (they name the cache's folder, so an upgrade starts afresh), and
- every local module the file imports (directly or through other local modules) hashes the
  same: the loop model follows calls into them, so editing `model.py` invalidates `train.py`.

Unreadable or malformed entries are treated as missing and overwritten. Writing is best effort:
a read-only tree just runs without a cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from loopcheck.catalog import catalog
from loopcheck.findings import Finding, Severity
from loopcheck.lint.output.report import FileError

DIRNAME = ".loopcheck_cache"
_UNSEEN = object()
SCHEMA = 1
_MAX_DEPS = 20_000  # as many as a project walk finds (project._MAX_FILES)


def project_root(start: Path | None = None) -> Path:
    """Where `.loopcheck_cache/` lives: the project root above the working directory."""
    from loopcheck.lint.project import project_root as root_of

    return root_of(start)


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _salt() -> str:
    """What every entry depends on: the version, the rule metadata and the linter's own code
    (its files' sizes and times, so an edited checkout never reads results of older rules)."""
    from loopcheck import __version__

    meta = [[p.code, p.name, p.severity.value, p.fix] for p in catalog().values()]
    lint_dir = Path(__file__).resolve().parent
    code = []
    for source in sorted(lint_dir.rglob("*.py")):
        try:
            st = source.stat()
        except OSError:
            continue
        code.append([str(source.relative_to(lint_dir)), st.st_size, st.st_mtime_ns])
    return digest(json.dumps([__version__, meta, code]).encode())[:16]


@dataclass
class Entry:
    findings: list[Finding]
    errors: list[FileError]


_LOADS = re.compile(rb"\bload\b")


def _finding_to_json(f: Finding) -> dict[str, Any]:
    return f.lint_dict()


def _finding_from_json(d: dict[str, Any]) -> Finding:
    return Finding(
        code=d["code"],
        name=d["name"],
        severity=Severity(d["severity"]),
        message=d["message"],
        path=d["path"],
        line=d["line"],
        column=d["column"],
        end_line=d["end_line"],
        end_column=d["end_column"],
        fix=d["fix"],
    )


def local_imports(path: Path, source: bytes | None = None) -> list[Path]:
    """The project's own modules that `path` imports, as the project resolves them."""
    from loopcheck.lint.engine import project_for

    return project_for(path).imports_of(path, source)


class Cache:
    """Lookups and stores of lint results for one run."""

    def __init__(self, root: Path) -> None:
        self.dir = root / DIRNAME / f"v{SCHEMA}-{_salt()}"
        self.summaries = self.dir / "summaries"  # module summaries by content (`summary.SummaryStore`)
        self._hashes: dict[Path, str | None] = {}
        self._given: dict[str, str | None] = {}
        self._writable = True
        self.hits = 0
        self.misses = 0

    def file_hash(self, path: Path | str) -> str | None:
        # keyed by the path as given first: an entry lists hundreds of dependencies, and
        # resolving each one again (a system call per path component) cost more than the rest
        # of a warm run
        found = self._given.get(str(path), _UNSEEN)
        if found is not _UNSEEN:
            return found
        real = Path(path).resolve()
        if real not in self._hashes:
            try:
                self._hashes[real] = digest(real.read_bytes())
            except OSError:
                self._hashes[real] = None
        self._given[str(path)] = self._hashes[real]
        return self._hashes[real]

    def _entry_path(self, path: Path, key: str) -> Path:
        name = digest(f"{path.resolve()}\0{key}".encode())[:32]
        return self.dir / name[:2] / f"{name}.json"

    def get(self, path: Path, data: bytes, key: str) -> Entry | None:
        """The stored results of path for this configuration key, if still valid."""
        try:
            raw = json.loads(self._entry_path(path, key).read_text(encoding="utf-8"))
            if raw.get("schema") != SCHEMA or raw.get("sha") != digest(data):
                return self._miss()
            deps = raw["deps"]
            if not isinstance(deps, dict) or any(self.file_hash(p) != h for p, h in deps.items()):
                return self._miss()
            entry = Entry(
                findings=[_finding_from_json(d) for d in raw["findings"]],
                errors=[FileError(e["path"], e["line"], e["message"], e.get("code"), e.get("column")) for e in raw["errors"]],
            )
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return self._miss()
        self.hits += 1
        return entry

    def _miss(self) -> None:
        self.misses += 1
        return None

    def put(self, path: Path, data: bytes, key: str, findings: Iterable[Finding], errors: Iterable[FileError]) -> None:
        if not self._writable:
            return
        deps = self._dependencies(path, data)
        doc = {
            "schema": SCHEMA,
            "path": str(path.resolve()),
            "sha": digest(data),
            "deps": deps,
            "findings": [_finding_to_json(f) for f in findings],
            "errors": [{"path": e.path, "line": e.line, "message": e.message, "code": e.code, "column": e.column}
                       for e in errors],
        }
        target = self._entry_path(path, key)
        try:
            self._prepare(target.parent)
            fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(doc, fh)
            os.replace(tmp, target)
        except OSError:
            self._writable = False

    def _dependencies(self, path: Path, data: bytes) -> dict[str, str | None]:
        """Hashes of the project files the result of `path` depends on: the local modules it
        reaches through imports, and the files importing it (their models report into it),
        with what those reach in turn."""
        from loopcheck.lint.engine import project_for

        project = project_for(path)
        here = str(path.resolve())
        files: dict[str, None] = dict.fromkeys(project.reach(path))
        for dependent in project.dependents(path):
            files[dependent] = None
            files.update(dict.fromkeys(project.reach(Path(dependent))))
        if _LOADS.search(data):  # LC508 reads what the project's modules save (saved_files.py)
            files.update(dict.fromkeys(project.files_mentioning("save")))
        files.pop(here, None)
        return {dep: self.file_hash(Path(dep)) for dep in list(files)[:_MAX_DEPS]}

    def prepare(self, folder: Path) -> None:
        """Make `folder` inside the cache (the cache's marker files and the clearing of other
        versions' results on first use)."""
        self._prepare(folder)

    def _prepare(self, folder: Path) -> None:
        if folder.is_dir():
            return
        top = self.dir.parent
        fresh = not top.exists()
        folder.mkdir(parents=True, exist_ok=True)
        for old in top.glob("v*"):
            if old.is_dir() and old != self.dir:  # results of another loopcheck version
                shutil.rmtree(old, ignore_errors=True)
        if fresh:
            (top / ".gitignore").write_text("# created by loopcheck\n*\n", encoding="utf-8")
            (top / "CACHEDIR.TAG").write_text(
                "Signature: 8a477f597d28d172789f06886806bc55\n# loopcheck lint cache: safe to delete\n",
                encoding="utf-8",
            )
