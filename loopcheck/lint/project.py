"""The project of one run: its root, its own modules, each parsed at most once.

`from .engine import train_one_epoch`, `import model` next to `main.py` and
`from utils.ckpt import save_checkpoint` name modules of the project being linted; the loop
model and the value tracing follow calls into them. One `Project` serves a whole run (one per
worker process): it resolves those imports, parses a module with libcst only when a call
actually reaches it, and keeps the parsed module (and, through `memo`, everything derived from
it) for the rest of the run, so a module imported by every file is parsed once, not once per
importing file. Cheaper facts about a module that need no libcst tree (its local imports, which
words it mentions) come from a `ModuleSummary` built with the standard `ast` parser.

The root is the nearest folder above the linted path holding `pyproject.toml`, `setup.py`,
`setup.cfg` or `.git`; imports are resolved from the importing file's folder, its package root
and the project root, so a file gets the same findings linted alone or with its whole project.
Files that cannot be read or parsed are simply not followed.
"""

from __future__ import annotations

import os
import re
import sys
from collections import Counter, OrderedDict, deque
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from loopcheck.lint import memo
from loopcheck.lint.discovery import in_environment
from loopcheck.lint.source_text import SourceText
from loopcheck.lint.summary import (
    ModuleSummary, all_parts_digest, calling_parts, content_digest, in_use, module_split, part_holding, summarize,
    summarize_parsed, summary_of,
)

if TYPE_CHECKING:  # libcst is imported when a module is parsed
    import libcst as cst


_MAX_BYTES = 2_000_000  # larger local modules are not followed
_BUDGET = 48_000_000  # bytes of source whose parsed modules a project keeps (about a million lines)
ROOT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")


@dataclass
class ParsedModule:
    path: str
    source: str
    module: cst.Module


def project_root(start: Path | None = None) -> Path:
    """The nearest folder at or above `start` (a file or folder; default: the working
    directory) holding one of `ROOT_MARKERS`; without one, the folder above the outermost
    package holding `start` (its own folder when it is in no package)."""
    here = (start or Path.cwd()).resolve()
    if here.is_file() or not here.exists():
        here = here.parent
    for folder in (here, *here.parents):
        if any((folder / marker).exists() for marker in ROOT_MARKERS):
            return folder
    return _package_root(here)


def _package_root(directory: Path) -> Path:
    """The folder above the outermost package (a chain of folders with __init__.py)."""
    root = directory
    while (root / "__init__.py").is_file() and root.parent != root:
        root = root.parent
    return root


def file_stamp(path: Path | str) -> tuple[int, int] | None:
    """(size, modification time) of a file, None when it cannot be read: a cheap "changed?"."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_size, st.st_mtime_ns


# the questions of `Project.answer` answered from the text of the one file they name alone
ONE_FILE_QUESTIONS = frozenset({"part", "parts", "lines", "search", "count", "keys_read", "defines", "calling_parts"})

_STEADY: list[object] = []  # while a run of the engine lasts: a token of that run


@contextmanager
def steady_files() -> Iterator[None]:
    """Take the files on disk as unchanged while the block runs (one run of the engine): each
    project reads a file's size and time once, in this process and in the worker processes it
    forks. Open buffers (`Project.overlay`) still count at once. A block inside another is part
    of it; a project kept across runs (the server, `--watch`) reads every file afresh in the next."""
    if _STEADY:
        yield
        return
    with in_use(_STEADY, object()):
        yield


def current_run() -> object | None:
    """A token of the engine run in progress (`steady_files`), None outside one."""
    return _STEADY[0] if _STEADY else None


_FILE, _FOLDER = 1, 2


def _listing(folder: str) -> dict[str, int]:
    """The names in `folder`, each `_FILE`, `_FOLDER` or 0 (links followed); empty when it
    cannot be listed."""
    found: dict[str, int] = {}
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                try:
                    found[entry.name] = _FILE if entry.is_file() else _FOLDER if entry.is_dir() else 0
                except OSError:
                    found[entry.name] = 0
    except OSError:
        pass
    return found


class _PerRun:
    """`compute(path)` asked once per run (`steady_files`) for each path as asked, afresh in the
    next run; asked every time outside a run."""

    def __init__(self, compute: Callable[[str], Any]) -> None:
        self.compute = compute
        self.found: dict[str, Any] = {}
        self.run: object = None

    def __call__(self, path: Path | str) -> Any:
        key = os.fspath(path)
        if not _STEADY:
            return self.compute(key)
        if self.run is not _STEADY[0]:
            self.found, self.run = {}, _STEADY[0]
        found = self.found.get(key, _MISSING)
        if found is _MISSING:
            found = self.found[key] = self.compute(key)
        return found


class Project:
    """Resolves, summarises and parses the project's own modules, each once per run."""

    def __init__(self, roots: list[Path] | None = None, *, budget: int = _BUDGET) -> None:
        self.roots = [r.resolve() for r in roots or []]
        self.budget = budget
        self.parses: Counter[str] = Counter()  # resolved path -> libcst parses this run
        # (folder, module, level) -> (its file, where it was looked for first and nothing was: `_witness`)
        self._resolved: dict[tuple[str, str, int], tuple[Path | None, tuple[str, ...]]] = {}
        self._real: dict[str, str] = {}  # folder -> its real path
        self._missing: dict[str, str] = {}  # folder -> the first folder missing on the way to it ('': none)
        self._dirs: dict[str, list[Path]] = {}  # real folder -> where its absolute imports are searched
        self._parsed: "OrderedDict[str, tuple[tuple[int, int], ParsedModule | None]]" = OrderedDict()
        self._held = 0  # bytes of source of the modules in `_parsed`
        self._summaries: dict[str, tuple[tuple[int, int] | None, ModuleSummary | None]] = {}
        self._reach: dict[str, tuple[str, ...]] = {}
        # per summary: its resolved imports, and where they were looked for first and nothing was
        self._imports: dict[int, tuple[ModuleSummary, list[Path], tuple[str, ...]]] = {}
        # the same from the parts kept across runs (`_imports_kept`), by path with the file's stamp
        self._imports_kept_now: dict[str, tuple[tuple[int, int] | None, tuple[None, list[Path], tuple[str, ...]]]] = {}
        self._mentions: dict[tuple[str, ...], dict[str, bool]] = {}  # words -> module -> reaches a mention
        self._edited: set[str] = set()  # buffers changed since reach was last asked about
        # what other modules derive from the whole project (what it saves), each kept with the
        # stamps of the files it was derived from, which its user compares
        self.derived: dict[str, Any] = {}
        self._derived_parts: dict[str, Any] = {}  # key -> one file's part of a derived fact (`derived_part`)
        self._files: list[Path] | None = None
        self._importers: dict[str, list[str]] = {}  # module -> files importing it directly
        self._dependents: dict[str, list[str]] = {}  # module -> files importing it, transitively
        self._forgotten = 0  # how many times what imports what was forgotten (`_forget_reach`)
        self._imported_now = _PerRun(lambda path: [str(d) for d in self.imports_of(path)])  # `_imported`
        self._words: dict[bytes, list[str]] | None = None  # word (ASCII bytes) -> project files holding it
        self._scanned: dict[str, list[str]] = {}  # the same, for the first words asked (`_holding`)
        self._importers_all: dict[str, list[str]] | None = None  # `_all_importers`
        self._overlays: dict[str, tuple[int, str]] = {}  # open buffers: path -> (version, text)
        self._version = 0
        # a file's analysis, kept with what it read (`consulting`): (path, codes) -> (stamps of the
        # files it read, its questions and answers, its findings and errors, stamps of the files the
        # answers came from)
        self._findings: dict[tuple[str, tuple[str, ...]], tuple[dict[str, Any], dict, tuple[list, list], dict]] = {}
        self._consulting: list[Reads] = []  # open analyses: what each has read
        self._parts: dict[str, tuple[Any, Any]] = {}  # path -> (stamp, summary.module_split)
        self._file_stamp = _PerRun(file_stamp)  # size and time of a file on disk
        self._real_path = _PerRun(os.path.realpath)
        self._listings = _PerRun(_listing)  # folder -> its names, each a file, a folder or neither
        # ("search" or "count", path, pattern) -> (stamp, answer): asked by the analysis of each
        # file that follows the module
        self._searches: dict[tuple[str, str, Any], tuple[Any, Any]] = {}

    @classmethod
    def for_path(cls, path: str | Path) -> "Project":
        """The project a file or folder belongs to."""
        return cls([project_root(Path(path))])

    def covers(self, path: str | Path) -> bool:
        """Whether `path` lies under one of this project's roots."""
        resolved = Path(path).resolve()
        return any(resolved == root or root in resolved.parents for root in self.roots)

    # ---- resolution ---------------------------------------------------------------------------

    def _search_dirs(self, folder: str) -> list[Path]:
        dirs = self._dirs.get(folder)
        if dirs is None:
            here = Path(folder)
            dirs = [here, _package_root(here)]
            dirs += [root for root in self.roots if root not in dirs]
            self._dirs[folder] = dirs
        return dirs

    def resolve(self, from_path: str, module: str, level: int = 0) -> Path | None:
        """The file of module `module` imported from `from_path` (`level` leading dots).

        Relative to the working directory when `from_path` is relative, so findings in followed
        modules are reported the way the user named the files."""
        if not from_path or from_path.startswith("<"):
            return None
        found = self._resolve(from_path, module, level)
        if found is None or os.path.isabs(from_path):
            return found
        try:
            return found.relative_to(_cwd())
        except ValueError:
            return found

    def _resolve(self, from_path: str, module: str, level: int) -> Path | None:
        """The absolute, symlink-free path (found once per folder, module and level)."""
        return self._resolution(from_path, module, level)[0]

    def _resolution(self, from_path: str, module: str, level: int) -> tuple[Path | None, tuple[str, ...]]:
        """`_resolve`'s file, and where it was looked for first and nothing was (`_witness`): a
        module created there is what the import resolves to from then on."""
        key = (os.path.dirname(os.path.abspath(from_path)), module, level)
        if key not in self._resolved:
            folder = self._real.get(key[0])
            if folder is None:
                folder = self._real[key[0]] = os.path.realpath(key[0])
            tried: list[str] = []
            found = self._find(folder, module, level, tried)
            # never into an environment or installed packages: a file named inside one is
            # checked alone, instead of walking the whole installed package
            if found is not None and (in_environment(Path(folder)) or in_environment(found)):
                found = None
            self._resolved[key] = (found, tuple(dict.fromkeys(self._witness(t) for t in tried)))
        return self._resolved[key]

    def _witness(self, path: str) -> str:
        """What shows a file created at `path`, where there is none: the file itself where its
        folder exists, else the first folder missing on the way to it (made first; one witness
        for every module of a package that is not there)."""
        folder = os.path.dirname(path)
        missing = self._missing.get(folder)
        if missing is None:
            missing = self._missing[folder] = _first_missing(folder, self._is_dir)
        return missing or path

    def _is_file(self, path: str) -> bool:
        return self._listed_as(path, _FILE, os.path.isfile)

    def _is_dir(self, path: str) -> bool:
        return self._listed_as(path, _FOLDER, os.path.isdir)

    def _listed_as(self, path: str, kind: int, ask: Callable[[str], bool]) -> bool:
        """Whether `path` is of `kind`, read from its folder's listing during a run (one listing
        per folder and run: resolving a project's imports tries a few candidate names in the
        same folders); `ask`ed of the file system outside a run."""
        folder, name = os.path.split(path)
        if not (_STEADY and name):
            return ask(path)
        return self._listings(folder).get(name) == kind

    def _find(self, folder: str, module: str, level: int, tried: list[str]) -> Path | None:
        parts = [p for p in module.split(".") if p] if module else []
        if level:
            base = folder
            for _ in range(level - 1):
                base = os.path.dirname(base)
            return _module_file(base, parts, tried, self._is_file)
        if not parts or parts[0] in sys.builtin_module_names or parts[0] in _NOT_LOCAL:
            return None
        for directory in self._search_dirs(folder):
            found = _module_file(str(directory), parts, tried, self._is_file)
            if found is not None:
                return found
        return None

    # ---- open buffers ------------------------------------------------------------------------

    def overlay(self, path: str | Path, text: str | None) -> None:
        """Read `path` as `text` from now on (an editor's unsaved buffer); None: as on disk
        again. Everything derived from other files that may have read it is dropped."""
        key = os.path.abspath(path)
        if text is None:
            if self._overlays.pop(key, None) is None:
                return
        else:
            if key in self._overlays and self._overlays[key][1] == text:
                return
            self._version += 1
            self._overlays[key] = (self._version, text)
        self._edited.add(key)  # what reaches what is settled again only if its imports or words changed

    def refresh(self) -> None:
        """Files may have been created, moved or deleted: resolve imports and walk the project
        afresh (parsed modules stay, each still checked against its file)."""
        self._resolved.clear()
        self._missing.clear()
        self._dirs.clear()
        self._imports_kept_now.clear()
        self._files = None
        self._words = None
        self._scanned = {}
        self._forget_reach()
        self._findings.clear()

    # ---- what an analysis reads ------------------------------------------------------------------

    @contextmanager
    def consulting(self) -> Iterator["Reads"]:
        """Record what an analysis reads of the project while the block runs (`Reads`: files
        parsed, read or summarised whole; questions about other files with their answers): its
        result depends on exactly those besides its own file. Nested analyses (a dependent
        analysed on the way) record their own."""
        reads = Reads()
        self._consulting.append(reads)
        try:
            yield reads
        finally:
            self._consulting.pop()

    def _unrecorded(self) -> "_Unrecorded":
        """A block whose reads no analysis records (asked on hot paths: a plain object, not a
        generator-based context manager)."""
        return _Unrecorded(self._consulting)

    def _recording(self) -> bool:
        """Whether an analysis records what is read now (not inside `_unrecorded`)."""
        return bool(self._consulting) and self._consulting[-1] is not _DISCARDED

    def _note(self, path: Path | str) -> None:
        if self._consulting:
            self._consulting[-1].files[os.path.abspath(path)] = None

    def _notes(self, paths: Iterable[str]) -> None:
        if self._consulting:
            self._consulting[-1].files.update(dict.fromkeys(os.path.abspath(p) for p in paths))

    def stamp(self, path: Path | str) -> tuple[int, int] | None:
        """What changes when the text this project reads for `path` changes (an open buffer's
        version, else the file's size and time, read once per run: `steady_files`); None when it
        cannot be read."""
        if self._overlays:
            found = self._overlays.get(os.path.abspath(path))
            if found is not None:
                return -1, found[0]
        return self._file_stamp(path)

    def real_path(self, path: Path | str) -> str:
        """`os.path.realpath(path)`, found once per run (`steady_files`) for each path asked."""
        return self._real_path(path)

    def read(self, path: Path | str, *, noted: bool = True) -> bytes:
        """The bytes of `path` as this project sees them (an open buffer's, else the file's).
        `noted`: the analysis reading depends on all of them (else the caller records what it
        depends on)."""
        if noted:
            self._note(path)
        found = self._overlays.get(os.path.abspath(path)) if self._overlays else None
        if found is not None:
            return found[1].encode("utf-8", "surrogatepass")
        with open(path, "rb") as fh:
            return fh.read()

    # ---- parsed modules ------------------------------------------------------------------------

    def load(self, from_path: str, module: str, level: int = 0, *, whole: bool = True) -> ParsedModule | None:
        """The parsed module `module` imported from `from_path`. `whole`: the analysis asking
        depends on all of it; else the caller notes the parts it reads (`part_reader`)."""
        target = self.resolve(from_path, module, level)
        if self._consulting and from_path and not from_path.startswith("<"):
            self._notes(self._resolution(from_path, module, level)[1])  # a module created there is followed instead
        if target is None or self.real_path(target) == self.real_path(from_path):
            return None
        return self.parse(target, whole=whole)

    def parse(self, path: Path, *, whole: bool = True) -> ParsedModule | None:
        """The parsed module at `path`, or None when it cannot be read, decoded or parsed."""
        key = os.path.abspath(path)
        if whole:
            self._note(key)
        stamp = self.stamp(path)
        if stamp is None:
            self._note(key)  # gone: the analysis depends on its absence
            return None
        cached = self._parsed.get(key)
        if cached is not None and cached[0] == stamp:
            self._parsed.move_to_end(key)
            if cached[1] is None:
                self._note(key)  # cannot be parsed: the analysis depends on that too
            return cached[1]
        parsed: ParsedModule | None = None
        if stamp[0] <= _MAX_BYTES:
            import libcst as cst

            from loopcheck.lint.positions import register_source
            from loopcheck.lint.tree_from_ast import read_module

            try:
                with self._unrecorded():
                    data = self.read(path)
                self.parses[key] += 1
                module = read_module(data)
                source = data.decode(module.encoding)  # what `module.code` renders, without rendering it
                if source.startswith("\ufeff"):
                    source = source[1:]
                memo.pin(module)
                register_source(module, source)
                parsed = ParsedModule(str(path), source, module)
            except (OSError, cst.ParserSyntaxError, UnicodeDecodeError, RecursionError, ValueError, SyntaxError):
                parsed = None
        self._keep(key, stamp, parsed)
        if parsed is None:
            self._note(key)
        else:
            self._summarized(key, stamp, parsed)
        return parsed

    def parsed_as(self, path: str, source: str) -> "cst.Module | None":
        """The module this project already parsed from `path`, when its text is `source`."""
        cached = self._parsed.get(os.path.abspath(path))
        if cached is None or cached[1] is None or cached[1].source != source or cached[0] != self.stamp(path):
            return None
        return cached[1].module

    def remember(self, path: str, source: str, module: cst.Module) -> None:
        """Register a module the engine has already parsed, so it is not parsed a second time."""
        stamp = self.stamp(path)
        if stamp is None:
            return
        memo.pin(module)
        key = os.path.abspath(path)
        parsed = ParsedModule(path, source, module)
        self._keep(key, stamp, parsed)
        self._summarized(key, stamp, parsed)

    def _keep(self, key: str, stamp: tuple[int, int], parsed: ParsedModule | None) -> None:
        old = self._parsed.pop(key, None)
        if old is not None and old[1] is not None:
            self._held -= len(old[1].source)
            if parsed is None or old[1].module is not parsed.module:
                memo.release(old[1].module)
        self._parsed[key] = (stamp, parsed)
        self._held += len(parsed.source) if parsed is not None else 0
        while self._held > self.budget and len(self._parsed) > 1:
            _, (_, evicted) = self._parsed.popitem(last=False)
            self._drop(evicted)

    def _drop(self, parsed: ParsedModule | None) -> None:
        if parsed is not None:
            self._held -= len(parsed.source)
            memo.release(parsed.module)

    def close(self) -> None:
        """Let every parsed module go (their facts with them)."""
        for _, parsed in self._parsed.values():
            self._drop(parsed)
        self._parsed.clear()

    # ---- summaries ----------------------------------------------------------------------------

    def _noted(self, path: Path | str, table: dict[str, Any]) -> tuple[str, tuple[int, int] | None, Any]:
        """`path`'s key (noted as read by the analysis asking), its stamp, and its entry in `table`
        ((stamp, value) pairs by key) when that was made at this stamp, else None."""
        key = os.path.abspath(path)
        self._note(key)
        stamp = self.stamp(key)
        entry = table.get(key)
        return key, stamp, entry if entry is not None and entry[0] == stamp else None

    def summary(self, path: Path | str) -> ModuleSummary | None:
        """The module summary of `path` (None when it cannot be read or parsed)."""
        key, stamp, cached = self._noted(path, self._summaries)
        if cached is not None:
            return cached[1]
        found: ModuleSummary | None = None
        if stamp is not None and stamp[0] <= _MAX_BYTES:
            try:
                found = summary_of(self.read(path), key)
            except OSError:
                found = None
        self._keep_summary(key, stamp, found)
        return found

    def _keep_summary(self, key: str, stamp: tuple[int, int] | None, found: ModuleSummary | None) -> None:
        cached = self._summaries.get(key)
        if cached is not None and self._reach_changed(cached[1], found):
            self._forget_reach()
        self._summaries[key] = (stamp, found)

    def _summarized(self, key: str, stamp: tuple[int, int], parsed: ParsedModule) -> None:
        """The summary of a module just parsed, read from its tree (unless already known)."""
        cached = self._summaries.get(key)
        if cached is None or cached[0] != stamp:
            self._keep_summary(key, stamp, summarize_parsed(parsed.module, parsed.source, key))

    def _forget_reach(self) -> None:
        """A module's imports changed: what reaches what, and who imports whom, is worked out again."""
        self._reach.clear()
        self._mentions.clear()
        self._importers.clear()
        self._dependents.clear()
        self._imported_now.found.clear()
        self._importers_all = None
        self._forgotten += 1

    def _reach_changed(self, old: ModuleSummary | None, new: ModuleSummary | None) -> bool:
        """Whether a module's new text may change what modules reach, or which words they reach:
        its imports, or whether it mentions the words asked about so far (an edit inside a
        function body changes neither)."""
        if old is None or new is None or old.imports != new.imports:
            return True
        return any(old.mentions_any(words) != new.mentions_any(words) for words in self._mentions)

    def _settle_edits(self) -> None:
        """Summaries of the buffers edited since the last question about reach (each compared
        with its previous summary)."""
        while self._edited:
            self.summary(Path(self._edited.pop()))

    def imports_of(self, path: Path | str, source: bytes | None = None) -> list[Path]:
        """The project's own modules that `path` imports directly (resolved, never `path`);
        from `source` instead of the file's contents when given."""
        return self._imports_resolved(path, source)[1]

    def _absent_imports(self, path: Path | str) -> tuple[str, ...]:
        """Where `path`'s imports were looked for before the files they resolved to, and found
        nothing: a module created there changes what it imports."""
        return self._imports_resolved(path)[2]

    def _imports_resolved(
        self, path: Path | str, source: bytes | None = None,
    ) -> tuple[ModuleSummary | None, list[Path], tuple[str, ...]]:
        if source is None and _PARTS and not self._overlays:
            return self._imports_kept(path)
        summary = self.summary(path) if source is None else summarize(source, str(path))
        if summary is None:
            return None, [], ()
        found = self._imports.get(id(summary))
        if found is None or found[0] is not summary:
            found = self._imports[id(summary)] = (summary, *self._imports_in(path, summary))
        return found

    def _imports_kept(self, path: Path | str) -> tuple[None, list[Path], tuple[str, ...]]:
        """`_imports_resolved` from the parts a store keeps across runs (`parts_kept_in`): a
        file's resolved imports, by its content and where its absolute imports are searched, good
        while each file they resolved to is there and nothing is where they were looked for
        before (a warm run asking who imports a module loads no summary and resolves nothing)."""
        key, stamp, known = self._noted(path, self._imports_kept_now)
        if known is not None:
            return known[1]
        try:
            data = self.read(key, noted=False)
        except OSError:
            return None, [], ()
        here = self.real_path(key)
        searched = [str(d) for d in self._search_dirs(os.path.dirname(here))]
        name = "imports:" + "\0".join([content_digest(data), here, *searched])  # (kind first, as in the other parts' keys)

        def make() -> dict[str, Any]:
            summary = self.summary(key)
            found, absent = self._imports_in(key, summary) if summary is not None else ([], ())
            return {"found": [str(f) for f in found], "absent": list(absent)}

        def read(part: dict[str, Any]) -> tuple[None, list[Path], tuple[str, ...]]:
            found, absent = part["found"], part["absent"]
            if not all(self._is_file(f) for f in found) or any(self._is_file(w) or self._is_dir(w) for w in absent):
                raise ValueError("the files its imports resolve to changed")  # made again
            return None, [Path(f) for f in found], tuple(absent)

        resolved = self.derived_part(name, make, read)
        before = self._imports_kept_now.get(key)
        if before is not None and before[1][1] != resolved[1]:  # changed in this process
            self._forget_reach()
        self._imports_kept_now[key] = (stamp, resolved)
        return resolved

    def _imported(self, path: str) -> list[str]:
        """`imports_of(path)` as strings, for the walks over the import graph (which record
        nothing for the analysis asking): asked once per file while a run lasts, until a
        module's imports change (`_forget_reach`)."""
        if self._overlays:
            return self._imported_now.compute(path)
        return self._imported_now(path)

    def _imports_in(self, path: Path | str, summary: ModuleSummary) -> tuple[list[Path], tuple[str, ...]]:
        here = str(path)
        real = self.real_path(here)
        found: dict[Path, None] = {}
        absent: dict[str, None] = {}
        for module, level in summary.import_targets():
            try:
                resolved, tried = self._resolution(here, module, level)  # absolute and symlink-free
            except (OSError, ValueError):
                resolved, tried = None, ()
            absent.update(dict.fromkeys(tried))
            if resolved is not None and str(resolved) != real:
                found[resolved] = None
        return list(found), tuple(absent)

    def reach(self, path: Path | str) -> tuple[str, ...]:
        """Every project module `path` reaches through imports, transitively (resolved paths,
        breadth first, `path` itself excluded)."""
        self._settle_edits()
        found = self._reach.get(path) if type(path) is str else None  # type: ignore[call-overload]
        if found is not None:  # already a real path asked about (the hot case)
            return found
        key = self.real_path(path)
        if key not in self._reach:
            seen: dict[str, None] = {key: None}
            queue = [key]
            while queue:
                current = queue.pop(0)
                for name in self._imported(current):
                    if name not in seen:
                        seen[name] = None
                        queue.append(name)
            del seen[key]
            self._reach[key] = tuple(seen)
        return self._reach[key]

    def files(self) -> list[Path]:
        """Every Python file of the project (under its roots; virtualenvs, site-packages, build
        output and hidden folders left out; at most `_MAX_FILES`)."""
        if self._files is None:
            found: list[Path] = []
            for root in self.roots:
                for folder, dirnames, filenames in os.walk(root):
                    dirnames[:] = sorted(d for d in dirnames if _walked(Path(folder), d))
                    found.extend(Path(folder, n) for n in sorted(filenames) if n.endswith(".py"))
                    if len(found) > _MAX_FILES:
                        break
            self._files = found[:_MAX_FILES]
        return self._files

    def dependents(self, path: Path) -> list[str]:
        """Every project file that imports `path`, directly or through other project modules
        (absolute paths, nearest first, `path` itself excluded)."""
        start = self.real_path(path)
        found = self._dependents.get(start)
        if found is None:
            forgotten = self._forgotten  # a module's imports may change on the way
            found = [f for f in self._importers_reached([start]) if f != start]
            if forgotten == self._forgotten:
                self._dependents[start] = found
        return list(found)

    def dependents_of(self, paths: Iterable[Path | str]) -> list[str]:
        """Every project file that imports one of `paths`, directly or through other project
        modules (absolute paths; `paths` themselves only where one imports another): one walk
        from all of them, each importer met once."""
        return self._importers_reached([self.real_path(p) for p in paths])

    def _importers_reached(self, starts: list[str]) -> list[str]:
        """The files importing one of `starts` (real paths), directly or through others, nearest
        first: a start only where some file met imports it."""
        seen: dict[str, None] = dict.fromkeys(starts)
        found: dict[str, None] = {}
        queue = deque(seen)
        while queue:
            for importer in self._importers_of(queue.popleft()):
                found[importer] = None
                if importer not in seen:
                    seen[importer] = None
                    queue.append(importer)
        return list(found)

    def _importers_of(self, target: str) -> list[str]:
        """The project files importing `target` directly. Where every file's imports are kept
        across runs, read from all of them; otherwise only files whose text holds the module's
        own name (its folder's, for a package `__init__.py`) as a word can import it, and the
        others are never summarised."""
        if target not in self._importers:
            if _PARTS and not self._overlays:  # every file's imports are kept: read them all at once
                self._importers[target] = self._all_importers().get(target, [])
                return self._importers[target]
            here = Path(target)
            word = here.parent.name if here.name == "__init__.py" else here.stem
            found = []
            for name in self._holding(word):
                if name != target and target in self._imported(name):
                    found.append(name)
            self._importers[target] = found
        return self._importers[target]

    def _all_importers(self) -> dict[str, list[str]]:
        """Each module's importers among the project files, from every file's imports."""
        found = self._importers_all
        if found is None:
            forgotten = self._forgotten  # a module's imports may change on the way
            found = {}
            for f in self.files():
                name = str(f)  # under the resolved roots: already real
                for target in self._imported(name):
                    if target != name:
                        found.setdefault(target, []).append(name)
            if forgotten == self._forgotten:
                self._importers_all = found
        return found

    def files_mentioning(self, word: str, *, every_part: bool = True) -> list[str]:
        """The project files (real paths) whose text has `word` as a whole word. The analysis
        asking depends on which files those are and on every part of each (it reads their code,
        not the comments between their functions); with `every_part` false only on which files
        those are, when it asks its own questions of each (`keys_read`, `defines`)."""
        found = list(self._holding(word))
        if self._recording():  # every part of each file: not worked out for reads nobody keeps
            root = str(self.roots[0]) if self.roots else ""
            self._consulting[-1].facts[("mentioning", root, word)] = list(found)  # a list: kept as JSON
            for name in found:
                if every_part:
                    self._note_all_parts(name)
                else:  # an edit to one of them asks again whether it still holds the word
                    self._consulting[-1].sources[os.path.abspath(name)] = None
        return found

    def keys_read(self, path: str, function: str) -> list[set[str]]:
        """The keys read from what each call to `function` returns in the project file `path`
        (`saved_files.caller_keys`), recorded as a question about that file alone: an edit
        elsewhere in it leaves the analysis asking standing."""
        return [set(keys) for keys in self._ask("keys_read", os.path.abspath(path), function)]

    def calling_parts(self, path: str, form: str, name: str) -> list[str] | None:
        """The parts of the project file `path` holding a call of `name` (`summary.calling_parts`),
        recorded as a question about that file alone; None when it cannot be read or parsed."""
        return self._ask("calling_parts", os.path.abspath(path), (form, name))

    def defines(self, path: str, name: str) -> bool:
        """Whether the project file `path` defines a class or function called `name` (recorded as
        `keys_read` is)."""
        return bool(self._ask("defines", os.path.abspath(path), name))

    def _note_all_parts(self, path: str) -> None:
        """The analysis being recorded read every part of `path` (`summary.module_parts`): an
        edit that moves none of them, like a comment appended, leaves it standing."""
        key = os.path.abspath(path)
        with self._unrecorded():
            parts = self._parts_of(key)
        _read_all_parts(self._consulting[-1], key, parts)

    def _holding(self, word: str) -> list[str]:
        """The project files whose text has `word` as a whole word: looked for in each file for
        the first few words a run asks about, from an index of every word once it asks more."""
        if self._words is None and len(self._scanned) < _SCANNED_WORDS:
            if word not in self._scanned:
                self._scanned[word] = self._scan(word)
            return self._scanned[word]
        if self._words is None:
            index: dict[bytes, list[str]] = {}
            for f in self.files():
                name = str(f)  # under the resolved roots: already real
                try:
                    data = f.read_bytes()
                except OSError:
                    continue
                for token in set(_WORD.findall(data)):  # kept as bytes: decoding each token cost more than the rest
                    index.setdefault(token, []).append(name)
            self._words = index
        return self._words.get(word.encode("utf-8", "replace"), [])  # (an ASCII token or none)

    def _scan(self, word: str) -> list[str]:
        """`_holding(word)` read from the files: `word` where `_WORD` would find it as a token
        (after the start of the text, a character no word has, or digits after one)."""
        token = word.encode("utf-8", "replace")
        if not _WORD.fullmatch(token):
            return []
        pattern = re.compile(rb"(?:\A|[^A-Za-z0-9_])[0-9]*" + re.escape(token) + rb"(?![A-Za-z0-9_])")
        found = []
        for f in self.files():
            try:
                data = f.read_bytes()
            except OSError:
                continue
            if token in data and pattern.search(data):
                found.append(str(f))
        return found

    def keep_findings(self, path: str, codes: tuple[str, ...], findings: tuple[list, list],
                      reads: "Reads | None" = None) -> None:
        """Remember the findings (and errors) of one file's analysis for the rest of the run,
        with the stamps of the file and of the project files the analysis read."""
        key = os.path.abspath(path)
        reads = reads or Reads()
        stamps = {p: self.stamp(p) for p in (key, *reads.files)}
        sources = {p: self.stamp(p) for p in reads.sources}
        self._findings[(key, codes)] = (stamps, dict(reads.facts), findings, sources)

    def findings_of(self, path: str, codes: tuple[str, ...]) -> tuple[list, list] | None:
        """The findings and errors kept for `path` with these codes enabled, while neither the
        file nor anything its analysis read has changed (an edited buffer included)."""
        found = self._findings.get((os.path.abspath(path), codes))
        if found is None or not self.still(found[0], found[1], found[3]):
            return None
        if self._consulting:  # an analysis reusing this one read what it read
            self._notes(found[0])
            self._consulting[-1].facts.update(found[1])
            self._consulting[-1].sources.update(found[3])
        return found[2]

    def still(self, stamps: dict[str, Any], facts: dict[tuple[str, str, Any], Any], sources: dict[str, Any]) -> bool:
        """Whether files have these stamps and questions about them get these answers (asked
        again only when a file they were answered from has changed)."""
        if any(self.stamp(p) != stamp for p, stamp in stamps.items()):
            return False
        if all(self.stamp(p) == stamp for p, stamp in sources.items()):
            return True
        return all(self.answer(*question) == answer for question, answer in facts.items())

    # ---- questions an analysis asks about other files -------------------------------------------

    def answer(self, kind: str, path: str, arg: Any) -> Any:
        """The answer today to one question an analysis asked (`Reads.facts`): "reach" (does a
        module `path` reaches mention one of the words `arg`?), "part" (the digest of part `arg`
        of module `path`, `summary.module_parts`), "parts" (one digest of all its parts), "lines"
        (the lines each stretch of part `arg` of module `path` starts on, `summary.module_split`),
        "mentioning" (the project files holding the word `arg`; `path` is the root), "search"
        and "count" (does the regular expression `arg` = (pattern, flags) match the text of
        `path`, how often; None when the text cannot be read), "derived" (the digest of the
        project-wide fact `arg`, `DERIVED`; `path` is the project's root), "calling_parts" (the
        parts of `path` holding a call of `arg` = (form, name)), "keys_read" and "defines" (what
        `saved_files` asks of one file: `keys_read`, `defines`)."""
        with self._unrecorded():
            if kind == "reach":
                return self.reach_mentions(Path(path), tuple(arg))
            if kind == "part":
                parts = self._parts_of(path)
                return parts.get(arg) if parts is not None else "*"
            if kind == "parts":
                parts = self._parts_of(path)
                return all_parts_digest(parts) if parts is not None else "*"
            if kind == "lines":
                stretches = (self._spans_of(path) or {}).get(arg)
                return [first for first, _ in stretches] if stretches is not None else None
            if kind == "mentioning":
                return list(self._holding(arg))
            if kind in ("keys_read", "defines"):
                from loopcheck.lint import saved_files

                return saved_files.answer(self, kind, path, arg)
            if kind == "derived":
                return _derive(arg, self)[1]
            stamp = self.stamp(path)
            kept = self._searches.get((kind, path, arg))
            if kept is not None and kept[0] == stamp:
                return kept[1]
            text = self.text(Path(path))
            found = None
            if text is not None and kind == "calling_parts":
                found = calling_parts(text, *arg)
            elif text is not None:
                pattern = re.compile(arg[0], arg[1])
                found = bool(pattern.search(text)) if kind == "search" else len(pattern.findall(text))
            if len(self._searches) > _MAX_FILES:
                self._searches.clear()
            self._searches[(kind, path, arg)] = (stamp, found)
            return found

    def derived_value(self, name: str) -> Any:
        """A fact derived from many files of the project (`DERIVED`), recorded for the analysis
        asking as the digest of the value: it depends on what was derived, not on every file
        read to derive it."""
        with self._unrecorded():
            value, found, inputs = _derive(name, self)
        if self._consulting:
            self._consulting[-1].facts[("derived", str(self.roots[0]) if self.roots else "", name)] = found
            self._consulting[-1].sources.update(dict.fromkeys(os.path.abspath(p) for p in inputs))
        return value

    def derived_part(self, key: str, make: Callable[[], dict[str, Any]], read: Callable[[dict[str, Any]], Any]) -> Any:
        """One file's part of a fact derived from many (`DERIVED`): `make` works it out as plain
        JSON data that depends on nothing but what `key` names (the file's content digest, and
        whatever else went into it), `read` turns that into the value given back. Made once per
        process, and once per key while a store keeps the parts across runs (the lint cache,
        `parts_kept_in`): a new process after an edit makes only the edited file's part again.
        A kept part `read` cannot take is made again."""
        if key in self._derived_parts:
            return self._derived_parts[key]
        store = _PARTS[0] if _PARTS else None
        kept = store.get(key) if store is not None else None
        try:
            value = read(kept) if kept is not None else _MISSING
        except (KeyError, IndexError, TypeError, ValueError, AttributeError):
            value = _MISSING
        if value is _MISSING:
            part = make()
            value = read(part)
            if store is not None:
                store.put(key, part)
        if len(self._derived_parts) > _MAX_FILES:
            self._derived_parts.clear()
        self._derived_parts[key] = value
        return value

    def _ask(self, kind: str, path: str, arg: Any) -> Any:
        """Answer, and record the question for the analysis asking."""
        found = self.answer(kind, path, arg)
        if self._consulting:
            self._consulting[-1].facts[(kind, path, arg)] = found
            self._consulting[-1].sources[path] = None
        return found

    def note_lines(self, reads: "Reads", path: str, line: int) -> None:
        """`reads`' analysis reports or cites line `line` of module `path`: it depends on the
        text of the part holding it and on where that part sits (all of the text when the line
        is in no part)."""
        key = os.path.abspath(path)
        with self._unrecorded():
            spans = self._spans_of(key)
        name = part_holding(spans, line) if spans is not None else None
        if name is None:
            reads.files[key] = None
            return
        reads.facts[("part", key, name)] = self.answer("part", key, name)
        reads.facts[("lines", key, name)] = self.answer("lines", key, name)
        reads.sources[key] = None

    def part_reader(self, parsed: ParsedModule) -> Callable[[str], None]:
        """What a followed module's unit calls with each part of it the analysis reads (a
        top-level function or class by name, a method as `Class.method`, every method of a class
        as `Class.*`, `summary.MODULE_PART`, or "*" for all of it).
        Absent parts count too: defining one later changes what the analysis would find."""
        key = os.path.abspath(parsed.path)
        with self._unrecorded():
            parts = self._parts_of(key) or {"*": ""}  # one split per file and version, shared with `answer`
        whole = "*" in parts  # the text could not be split into parts: all of it counts
        consulting = self._consulting
        noted: dict[str, None] = {}  # names noted for `last[0]` (the model asks for each many times)
        last: list[Reads | None] = [None]

        def note(name: str) -> None:
            if not consulting:
                return
            reads = consulting[-1]
            if reads is not last[0] or reads is _DISCARDED:
                last[0] = reads
                noted.clear()
            elif name in noted:
                return
            noted[name] = None
            if whole or name == "*":  # (a search of all call sites)
                _read_all_parts(reads, key, parts)
                return
            reads.sources[key] = None
            if name.endswith(".*"):  # every method of a class (`Class.*`), and its own lines
                prefix = name[:-1]
                reads.facts.update({("part", key, n): d for n, d in parts.items() if n.startswith(prefix)})
                reads.facts[("part", key, name[:-2])] = parts.get(name[:-2])
            else:
                reads.facts[("part", key, name)] = parts.get(name)

        return note

    def searched(self, path: str, pattern: "re.Pattern[str]", count: bool = False) -> Any:
        """Whether `pattern` matches the text of `path` (with `count`: how often), recorded for the
        analysis asking; None when the text cannot be read."""
        return self._ask("count" if count else "search", os.path.abspath(path), (pattern.pattern, pattern.flags))

    def _parts_of(self, path: str) -> dict[str, str] | None:
        """`summary.module_parts` of `path` (None: unreadable, or not Python)."""
        split = self._split_of(path)
        return split[0] if split is not None else None

    def _spans_of(self, path: str) -> dict[str, list[tuple[int, int]]] | None:
        """Where each part of `path` lies (`summary.module_split`; None: unreadable, or not Python)."""
        split = self._split_of(path)
        return split[1] if split is not None else None

    def _split_of(self, path: str) -> Any:
        """`summary.module_split` of `path`, once per file and version."""
        stamp = self.stamp(path)
        found = self._parts.get(path)
        if found is None or found[0] != stamp:
            text = self.text(Path(path))
            found = self._parts[path] = (stamp, module_split(text) if text is not None else None)
        return found[1]

    def text(self, path: Path) -> str | None:
        """The text of `path` as this project reads it (the parsed module's, else decoded from its
        bytes as the parser would), None when it cannot be read."""
        cached = self._parsed.get(os.path.abspath(path))
        if cached is not None and cached[1] is not None and cached[0] == self.stamp(path):
            return cached[1].source
        with self._unrecorded():
            try:
                return SourceText.decode(self.read(path)).text
            except (OSError, ValueError):
                return None

    def reach_mentions(self, path: Path, words: tuple[str, ...]) -> bool:
        """Whether a module `path` reaches mentions one of `words` (lower case, any case in the
        text). True when a reached module cannot be summarised: it may. (A module in an import
        cycle reaches itself.) Settled for every module met on the way, once per run: each
        strongly connected part of the import graph is walked once, not once per importer."""
        key = self.real_path(path)
        reads = self._consulting[-1] if self._consulting else None
        # the files the answer rests on, for an analysis that records them and has not yet: a
        # question asked again, or asked while checking a kept analysis, needs none of them
        sourced = self._recording() and key not in self._consulting[-1].sources
        with self._unrecorded():  # the answer is what the asking analysis depends on
            self._settle_edits()
            known = self._mentions.setdefault(words, {})
            if key not in known:
                self._settle(key, words, known)
            reached = self.reach(key) if sourced else ()
            # a module created where an import found nothing may be reached from then on
            absent = [p for module in (key, *reached) for p in self._absent_imports(module)] if sourced else []
        if reads is not None:
            reads.facts[("reach", key, words)] = known[key]
            if sourced:
                reads.sources[key] = None
                reads.sources.update(dict.fromkeys(reached))
                reads.sources.update(dict.fromkeys(absent))
        return known[key]

    def _settle(self, start: str, words: tuple[str, ...], known: dict[str, bool]) -> None:
        """Tarjan's algorithm over the import graph from `start`, without recursion."""
        index: dict[str, int] = {}
        low: dict[str, int] = {}
        on_stack: set[str] = set()
        stack: list[str] = []
        reaches: dict[str, bool] = {}  # what the successors (outside the node's own part) give

        def successors(node: str) -> list[str]:
            return self._imported(node)

        def mentions(node: str) -> bool:
            summary = self.summary(node)
            return summary is None or summary.mentions_any(words)

        work: list[tuple[str, list[str], int]] = [(start, successors(start), 0)]
        index[start] = low[start] = 0
        stack.append(start)
        on_stack.add(start)
        reaches[start] = False
        while work:
            node, succ, i = work[-1]
            if i < len(succ):
                work[-1] = (node, succ, i + 1)
                nxt = succ[i]
                if nxt in known:
                    reaches[node] = reaches[node] or known[nxt] or mentions(nxt)
                elif nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    reaches[nxt] = False
                    work.append((nxt, successors(nxt), 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:  # the root of a strongly connected part
                part: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    part.append(member)
                    if member == node:
                        break
                cyclic = len(part) > 1
                answer = any(reaches[m] for m in part) or (cyclic and any(mentions(m) for m in part))
                for member in part:
                    known[member] = answer
                if work:
                    parent = work[-1][0]
                    reaches[parent] = reaches[parent] or answer or mentions(node)


# Facts derived from many files of a project: name -> "module:function" returning (value, digest,
# the files it was derived from).
# Named by string: the deriving modules build on this one.
DERIVED = {"saved_files": "loopcheck.lint.saved_files:project_saves"}


_MISSING = object()
_PARTS: list[Any] = []  # where the parts of derived facts outlive a process (`parts_kept_in`), if anywhere


def parts_kept_in(store: Any) -> Any:
    """Keep the parts of derived facts (`Project.derived_part`) in `store` meanwhile (`get(key)`:
    the part kept, or None; `put(key, part)`), in this process and in the worker processes it
    forks; None: in memory only."""
    return in_use(_PARTS, store)


def _derive(name: str, project: "Project") -> tuple[Any, str, list[str]]:
    import importlib

    module, _, function = DERIVED[name].partition(":")
    return getattr(importlib.import_module(module), function)(project)


def _read_all_parts(reads: "Reads", key: str, parts: dict[str, str] | None) -> None:
    """Record that an analysis read every part of module `key`: one digest of them all, so a
    comment between them changes nothing; the whole text where it could not be split."""
    if parts is None or "*" in parts:
        reads.files[key] = None
    else:
        reads.facts[("parts", key, None)] = all_parts_digest(parts)
        reads.sources[key] = None


class _Unrecorded:
    def __init__(self, stack: list["Reads"]) -> None:
        self.stack = stack

    def __enter__(self) -> None:
        self.stack.append(_DISCARDED)

    def __exit__(self, *exc: object) -> None:
        self.stack.pop()
        _DISCARDED.files.clear()
        _DISCARDED.facts.clear()
        _DISCARDED.sources.clear()


@dataclass
class Reads:
    """What one analysis read of its project: whole files (absolute paths), and questions it
    asked about others with their answers (`Project.answer`): whether what a module reaches
    mentions some words, a part of a module, a pattern searched in a text. A result stays valid
    while the files are unchanged and the questions get the same answers: an edit to a function
    the analysis never read, or one that changes no module's imports, leaves it standing."""

    files: dict[str, None] = field(default_factory=dict)
    facts: dict[tuple[str, str, Any], Any] = field(default_factory=dict)  # (kind, path, arg) -> answer
    # the files the answers were read from: while these are unchanged, so are the answers
    sources: dict[str, None] = field(default_factory=dict)


# The name the engine and older callers used for the project.
ProjectIndex = Project

_LOOSE = Project(budget=4_000_000)  # modules read back outside any project (positions of a followed file)


def parse_path(path: Path, project: "Project | None" = None) -> ParsedModule | None:
    """The parsed module at `path`, through `project` when there is one (so it is the tree the
    loop model saw), else through a small shared fallback."""
    owner = project if hasattr(project, "parse") else _LOOSE
    return owner.parse(path)


_MAX_FILES = 20_000
_WORD = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")
_SCANNED_WORDS = 8  # words looked for file by file before every word of every file is indexed
_NOT_WALKED = frozenset({
    ".git", ".venv", "venv", "env", "build", "dist", "__pycache__", "node_modules", ".tox", ".eggs",
    "site-packages", "dist-packages", "wandb", "mlruns", "outputs", "lightning_logs",
})


def _walked(folder: Path, name: str) -> bool:
    """Whether the project walk enters `folder/name` (never a virtualenv or installed packages)."""
    return not (name in _NOT_WALKED or name.startswith(".") or (folder / name / "pyvenv.cfg").exists())


_CWD: list[tuple[str, Path]] = []


def _cwd() -> Path:
    """The working directory, resolved once per directory (paths are reported relative to it)."""
    here = os.getcwd()
    if not _CWD or _CWD[0][0] != here:
        _CWD[:] = [(here, Path(here).resolve())]
    return _CWD[0][1]


def _first_missing(folder: str, is_dir: Callable[[str], bool]) -> str:
    """The outermost folder on the way to `folder` that is not there ('' when `folder` is)."""
    missing = ""
    while not is_dir(folder) and os.path.dirname(folder) != folder:
        missing, folder = folder, os.path.dirname(folder)
    return missing


def _module_file(base: str, parts: list[str], tried: list[str], is_file: Callable[[str], bool]) -> Path | None:
    """The file of module `parts` under the folder `base` (a normalised path); the candidates
    found absent go to `tried`."""
    if parts:
        target = os.path.join(base, *parts)
        candidates: tuple[str, ...] = (target + ".py", os.path.join(target, "__init__.py"))
    else:
        candidates = (os.path.join(base, "__init__.py"),)
    for candidate in candidates:
        if is_file(candidate):
            return Path(candidate)
        tried.append(candidate)
    return None



# Well-known third-party roots that are never the project's own modules.
_NOT_LOCAL = frozenset(
    {
        "torch", "torchvision", "torchaudio", "numpy", "transformers", "accelerate", "timm",
        "lightning", "pytorch_lightning", "bitsandbytes", "datasets", "tqdm", "wandb", "os", "sys",
        "math", "random", "time", "json", "argparse", "logging", "pathlib", "typing", "copy",
        "collections", "functools", "itertools", "dataclasses", "shutil", "re", "glob", "yaml",
        "sklearn", "scipy", "pandas", "PIL", "cv2", "matplotlib", "tensorboard", "deepspeed",
        "apex", "einops", "omegaconf", "hydra", "fairscale", "peft", "diffusers", "contextlib",
        "warnings", "subprocess", "pickle", "abc", "enum", "socket", "datetime", "tempfile",
    }
)


_DISCARDED = Reads()  # where unrecorded reads go (never read back)
