"""The lint cache: a file's results, reused while nothing they depend on has changed.

Entries live in `.loopcheck_cache/` at the project root (the nearest folder up from the working
directory holding a pyproject.toml or .git, else the working directory), one JSON document per
(file, effective configuration), kept in a few pack files (`packs`: read once per run, written
once at its end). An entry is valid while

- the file's bytes hash the same,
- loopcheck's version, its linter code and the rule pages' metadata (names, severities, fix
  kinds) are unchanged (they name the cache's folder, so an upgrade starts afresh), and
- every other project file the result depends on hashes the same: the files importing it
  (their loop models may report into it) and every project file those analyses and its own
  read or asked about (the modules a model followed calls into, what the project saves...), as
  the engine recorded them. Only hashes are compared: a warm run on an unchanged tree reads
  nothing else. An entry names those files by a bit mask over a table its run shares with the
  other entries it wrote (`dep_tables`), so entries do not grow with the size of the project.

Beside those per-file results, each file's *analysis* (every finding its model makes, wherever
located) is kept in the packs under `analyses/` with what it read (`project.Reads`): whole files by hash, and
questions with their answers (a part of a followed module by digest, whether what a module
reaches mentions some words, a pattern searched in a file). It is valid while the file is
unchanged and every answer is the same, so an edit to a function no other analysis read
re-runs only the analysis of the edited file; the results of the files it reports into are
assembled again from the kept analyses.

Facts derived from many files (what the project saves) are kept as each file's part under
`derived/`, by the file's content (`Project.derived_part`, `DerivedParts`): a new process after
an edit works out the edited file's part again and reads the others (those a run used, in one
file).

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
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

from loopcheck.catalog import catalog
from loopcheck.findings import Finding, Severity
from loopcheck.lint.dep_tables import DepTables
from loopcheck.lint.output.report import FileError
from loopcheck.lint.packs import Packs
from loopcheck.lint.project import ONE_FILE_QUESTIONS
from loopcheck.lint.real_paths import RealPaths

DIRNAME = ".loopcheck_cache"
_UNSEEN = object()
SCHEMA = 4
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
    listed: Callable[[], list[str]] = list  # the other files the results depend on (their hashes checked)

    @property
    def depends_on(self) -> tuple[str, ...]:
        """(Worked out when asked: an entry names hundreds, and most runs ask about none.)"""
        return tuple(self.listed())


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


def _facts(raw: dict[str, Any]) -> list[tuple[str, str, Any, Any]]:
    return [(kind, p, tuple(arg) if isinstance(arg, list) else arg, answer) for kind, p, arg, answer in raw["facts"]]


def local_imports(path: Path, source: bytes | None = None) -> list[Path]:
    """The project's own modules that `path` imports, as the project resolves them."""
    from loopcheck.lint.engine import project_for

    return project_for(path).imports_of(path, source)


class Cache:
    """Lookups and stores of lint results for one run."""

    def __init__(self, root: Path) -> None:
        self.dir = root / DIRNAME / f"v{SCHEMA}-{_salt()}"
        self.summaries = self.dir / "summaries"  # module summaries by content (`summary.SummaryStore`)
        self.derived = DerivedParts(self, self.dir / "derived")  # parts of derived facts by content
        self._hashes: dict[str, str | None] = {}  # by real path
        # `os.path.realpath`, each folder's found once per run (a system call per component of a
        # path otherwise; a run asks about thousands of files in a few folders)
        self._real = RealPaths()
        self._given: dict[str, str | None] = {}
        self._answers: dict[tuple[str, str, Any], Any] = {}
        self._projects: dict[str, Any] = {}
        # kept analyses whose validity rests on asking their questions again: (real path, codes)
        # -> the entry as read, checked up to those questions (`analysis(answer=False)`)
        self._unsure: dict[tuple[str, tuple[str, ...]], dict[str, Any]] = {}
        self._writable = True
        self.results = Packs(self.dir / "results", self._write, _of_a_file)
        self.analyses = Packs(self.dir / "analyses", self._write, _of_a_file)
        self.tables = DepTables(self.dir / "tables", self.file_hash, self._write, self._tables_named)
        self.hits = 0
        self.misses = 0

    def file_hash(self, path: Path | str) -> str | None:
        # keyed by the path as given first: an entry lists hundreds of dependencies, and
        # resolving each one again (a system call per path component) cost more than the rest
        # of a warm run
        found = self._given.get(str(path), _UNSEEN)
        if found is not _UNSEEN:
            return found
        real = self._real(path)
        if real not in self._hashes:
            try:
                with open(real, "rb") as fh:
                    self._hashes[real] = digest(fh.read())
            except IsADirectoryError:
                self._hashes[real] = "folder"  # a folder that was missing where an import looked (`Project._witness`)
            except OSError:
                self._hashes[real] = None
        self._given[str(path)] = self._hashes[real]
        return self._hashes[real]

    def _entry_name(self, path: Path | str, key: str) -> str:
        return digest(f"{self._real(path)}\0{key}".encode())[:32]

    def get(self, path: Path, data: bytes, key: str) -> Entry | None:
        """The stored results of path for this configuration key, if still valid."""
        try:
            raw = self.results.get(self._entry_name(path, key))
            if raw is None or raw.get("schema") != SCHEMA or raw.get("sha") != digest(data):
                return self._miss()
            deps = raw["deps"]
            if not self.tables.holds(deps):
                return self._miss()
            entry = Entry(
                findings=[_finding_from_json(d) for d in raw["findings"]],
                errors=[FileError(e["path"], e["line"], e["message"], e.get("code"), e.get("column")) for e in raw["errors"]],
                listed=lambda: self.tables.paths(deps),
            )
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return self._miss()
        self.hits += 1
        return entry

    def _miss(self) -> None:
        self.misses += 1
        return None

    def put(self, path: Path, data: bytes, key: str, findings: Iterable[Finding], errors: Iterable[FileError],
            depends_on: Iterable[str] | None = None) -> None:
        """Keep a file's results; `depends_on`: the other files they depend on, as the engine
        recorded them (else worked out from the project's imports, more broadly). A result is
        checked by file hashes alone (a warm run on an unchanged tree reads nothing else); when
        one changed, it is assembled again from the kept analyses, which keep the questions
        they asked about those files."""
        if not self._writable:
            return
        if depends_on is not None:
            here = os.path.abspath(path)
            deps: Iterable[str] = (p for p in depends_on if p != here)
        else:
            deps = self._dependencies(path, data)
        doc = {
            "schema": SCHEMA,
            "path": self._real(path),
            "sha": digest(data),
            "deps": self.tables.ref(deps),
            "findings": [_finding_to_json(f) for f in findings],
            "errors": [{"path": e.path, "line": e.line, "message": e.message, "code": e.code, "column": e.column}
                       for e in errors],
        }
        self.results.put(self._entry_name(path, key), doc)

    # ---- analyses ------------------------------------------------------------------------------

    def _analysis_name(self, path: str, codes: tuple[str, ...]) -> str:
        return self._entry_name(path, ",".join(codes))

    def analysis(self, path: str, codes: tuple[str, ...], promised: bool, answer: bool = True) -> Any:
        """The kept analysis of `path` with these codes enabled (an engine `FileResult`), while
        the file and every project file it read hash as they did, and every question it asked
        gets the same answer; None otherwise. `promised`: it must also say what `--fix` would
        fix in the file. `answer` false: None as well when questions would have to be asked
        again (`unsure`)."""
        from loopcheck.lint.engine import FileResult, LintError

        key = (self._real(path), codes)
        checked = self._unsure.pop(key, None)  # read and checked but for its questions
        try:
            raw = checked or self.analyses.get(self._analysis_name(path, codes))
            if checked is None:
                if raw is None or raw.get("schema") != SCHEMA or raw.get("sha") != self.file_hash(path):
                    return None
                if promised and not raw["promised"]:
                    return None
                if not self.tables.holds(raw["deps"]):
                    return None
            deps = raw["deps"]
            if not self._facts_unchanged(raw):
                if not answer:
                    self._unsure[key] = raw
                    return None
                if not self._facts_hold(path, raw):
                    return None
            facts = _facts(raw)
            applied = raw["fixes_applied"]
            return FileResult(
                path,
                findings=[_finding_from_json(d) for d in raw["findings"]],
                errors=[LintError(e["path"], e["line"], e["message"], e.get("code")) for e in raw["errors"]],
                skipped=bool(raw["skipped"]),
                fixes_applied={k: [tuple(x) for x in v] for k, v in applied.items()} if applied is not None else None,
                consulted=self.tables.paths(deps),
                facts=facts,
                sources=self.tables.paths(raw["facts_read"]),
            )
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def keep_analysis(self, result: Any, codes: tuple[str, ...], promised: bool) -> None:
        """Keep an analysis the engine just made (`result.consulted`: the files it read)."""
        if not self._writable or result.consulted is None:
            return
        doc = {
            "schema": SCHEMA,
            "path": self._real(result.path),
            "sha": self.file_hash(result.path),
            "deps": self.tables.ref(result.consulted),
            **self._facts_doc(result),
            "promised": promised,
            "skipped": result.skipped,
            "findings": [_finding_to_json(f.with_(path=f.path or result.path)) for f in result.findings],
            "errors": [e.to_dict() for e in result.errors],
            "fixes_applied": result.fixes_applied,
        }
        self.analyses.put(self._analysis_name(result.path, codes), doc)

    def _facts_doc(self, result: Any) -> dict[str, Any]:
        """An analysis's questions about other files with their answers (`Project.answer`), and
        the hashes of the files they were answered from (while those are unchanged, the
        questions need not be asked again)."""
        return {"facts": [[kind, p, list(arg) if isinstance(arg, tuple) else arg, answer]
                          for kind, p, arg, answer in result.facts or ()],
                "facts_read": self.tables.ref(result.sources or ())}

    def unsure(self, path: str, codes: tuple[str, ...]) -> bool:
        return (self._real(path), codes) in self._unsure

    def learn(self, facts: Iterable[tuple[str, str, Any, Any]]) -> None:
        for kind, p, arg, answer in facts:
            self._answers.setdefault((kind, p, arg), answer)

    def _facts_unchanged(self, raw: dict[str, Any]) -> bool:
        """Whether the files a kept analysis's answers were read from hash as they did."""
        return self.tables.holds(raw["facts_read"])

    def _facts_hold(self, path: str | Path, raw: dict[str, Any]) -> bool:
        """Whether a kept analysis's answers are still right, asked again (an edit to a function
        the analysis never read, or one that changes no module's imports, leaves them). A
        question about one file's text whose file hashes as it did holds without asking."""
        read = self.tables.hashes(raw["facts_read"])
        return all(
            kind in ONE_FILE_QUESTIONS and read.get(p) is not None and self.file_hash(p) == read[p]
            or self._answer(path, kind, p, arg) == answer
            for kind, p, arg, answer in _facts(raw)
        )

    def _answer(self, asker: str | Path, kind: str, path: str, arg: Any) -> Any:
        """A question's answer today, asked once per run (entries share most of their questions)."""
        question = (kind, path, arg)
        if question not in self._answers:
            self._answers[question] = self._project(asker).answer(kind, path, arg)
        return self._answers[question]

    def _project(self, path: str | Path) -> Any:
        """The engine's project of `path` (its root found once per folder and run)."""
        folder = os.path.dirname(os.path.abspath(path))
        if folder not in self._projects:
            from loopcheck.lint.engine import project_for

            self._projects[folder] = project_for(path)
        return self._projects[folder]

    def close(self) -> None:
        """The run is over: write what it kept (the table of what its entries depend on before
        the entries naming it), and keep together what the next run reads of the derived parts."""
        with self._locked():
            self.tables.flush()
            self.results.flush()
            self.analyses.flush()
        self.derived.close()

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """An exclusive lock on this version's folder while a run writes out its packs (each
        merged with what is on disk), so that two runs ending together keep both their entries.
        Without `flock` (Windows) or a writable folder, none: two runs flushing the same pack at
        the same moment may then drop one's new entries, which the next run makes again."""
        handle = None
        if fcntl is not None and self._writable:
            try:
                self._prepare(self.dir)
                handle = open(self.dir / ".lock", "a")
                fcntl.flock(handle, fcntl.LOCK_EX)
            except OSError:
                pass
        try:
            yield
        finally:
            if handle is not None:
                handle.close()  # releases the lock

    def _tables_named(self) -> set[str]:
        """The dependency tables some kept result or analysis names."""
        named: set[str] = set()
        for raw in [*self.results.docs(), *self.analyses.docs()]:
            try:
                named.update(raw[field]["table"] for field in ("deps", "facts_read") if field in raw)
            except (KeyError, TypeError):
                continue
        return named

    def _write(self, target: Path, doc: dict[str, Any]) -> None:
        if not self._writable:
            return
        try:
            self._prepare(target.parent)
            fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(json.dumps(doc))  # one call into the C encoder (`json.dump` encodes in Python)
            os.replace(tmp, target)
        except OSError:
            self._writable = False

    def _dependencies(self, path: Path, data: bytes) -> list[str]:
        """The project files the result of `path` depends on: the local modules it
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
        return list(files)[:_MAX_DEPS]

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


def _of_a_file(doc: dict[str, Any]) -> bool:
    """An entry worth keeping: its file is still there (one deleted or renamed leaves its entry)."""
    path = doc.get("path") if isinstance(doc, dict) else None
    return isinstance(path, str) and os.path.isfile(path)


class DerivedParts:
    """Each file's part of a fact derived from many files (`Project.derived_part`), kept by its
    key (which names the file's content) in one JSON file, written like the cache's entries.

    A run asks for the parts of most of its project's files (every file's resolved imports, to
    find who imports what changed): at its end (`close`) the parts it used are kept together as
    well, and the next run reads them in one file instead of one file each."""

    def __init__(self, cache: Cache, folder: Path) -> None:
        self.cache = cache
        self.folder = folder
        self._together: dict[str, Any] | None = None  # the parts kept together by the last run
        self._used: dict[str, dict[str, Any]] = {}  # the parts this run read or made

    def _path(self, key: str) -> Path:
        name = digest(key.encode())[:32]
        return self.folder / name[:2] / f"{name}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        """The part kept under `key`; None when there is none or it cannot be read back."""
        part = self._kept_together().get(key)
        if not isinstance(part, dict):
            try:
                raw = json.loads(self._path(key).read_text(encoding="utf-8"))
                if raw.get("schema") != SCHEMA or raw.get("key") != key or not isinstance(raw["part"], dict):
                    return None
                part = raw["part"]
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                return None
        self._used[key] = part
        return part

    def put(self, key: str, part: dict[str, Any]) -> None:
        self._used[key] = part
        self.cache._write(self._path(key), {"schema": SCHEMA, "key": key, "part": part})

    def close(self) -> None:
        """Keep the parts this run used together with those kept before (only the used ones,
        once those kept before are mostly of texts no longer seen)."""
        before = self._kept_together()
        if not self._used or self._used.keys() <= before.keys():
            return
        together = {**before, **self._used}
        if len(together) > 2 * len(self._used) + 100:
            together = self._used
        self.cache._write(self.folder / "together.json", {"schema": SCHEMA, "parts": together})
        self._together = together

    def _kept_together(self) -> dict[str, Any]:
        if self._together is None:
            try:
                raw = json.loads((self.folder / "together.json").read_text(encoding="utf-8"))
                parts = raw["parts"] if raw.get("schema") == SCHEMA else {}
                self._together = parts if isinstance(parts, dict) else {}
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                self._together = {}
        return self._together
