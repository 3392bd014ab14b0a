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
from collections import Counter, OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from loopcheck.lint import memo
from loopcheck.lint.summary import ModuleSummary, summarize

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
    directory) holding one of `ROOT_MARKERS`; `start`'s own folder when there is none."""
    here = (start or Path.cwd()).resolve()
    if here.is_file() or not here.exists():
        here = here.parent
    for folder in (here, *here.parents):
        if any((folder / marker).exists() for marker in ROOT_MARKERS):
            return folder
    return here


def _package_root(directory: Path) -> Path:
    """The folder above the outermost package (a chain of folders with __init__.py)."""
    root = directory
    while (root / "__init__.py").is_file() and root.parent != root:
        root = root.parent
    return root


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


class Project:
    """Resolves, summarises and parses the project's own modules, each once per run."""

    def __init__(self, roots: list[Path] | None = None, *, budget: int = _BUDGET) -> None:
        self.roots = [r.resolve() for r in roots or []]
        self.budget = budget
        self.parses: Counter[str] = Counter()  # resolved path -> libcst parses this run
        self._resolved: dict[tuple[str, str, int], Path | None] = {}  # (folder, module, level) -> file
        self._parsed: "OrderedDict[str, tuple[tuple[int, int], ParsedModule | None]]" = OrderedDict()
        self._held = 0  # bytes of source of the modules in `_parsed`
        self._summaries: dict[str, tuple[tuple[int, int] | None, ModuleSummary | None]] = {}
        self._reach: dict[str, tuple[str, ...]] = {}
        self._files: list[Path] | None = None
        self._importers: dict[str, list[str]] = {}  # module -> files importing it directly
        self._words: dict[str, list[str]] | None = None  # word -> project files holding it
        self._findings: dict[tuple[str, tuple[str, ...]], tuple[tuple[int, int] | None, list]] = {}

    @classmethod
    def for_path(cls, path: str | Path) -> "Project":
        """The project a file or folder belongs to."""
        return cls([project_root(Path(path))])

    def covers(self, path: str | Path) -> bool:
        """Whether `path` lies under one of this project's roots."""
        resolved = Path(path).resolve()
        return any(resolved == root or root in resolved.parents for root in self.roots)

    # ---- resolution ---------------------------------------------------------------------------

    def _search_dirs(self, from_path: str) -> list[Path]:
        here = Path(from_path).resolve().parent
        dirs = [here, _package_root(here)]
        for root in self.roots:
            if root not in dirs:
                dirs.append(root)
        return dirs

    def resolve(self, from_path: str, module: str, level: int = 0) -> Path | None:
        """The file of module `module` imported from `from_path` (`level` leading dots).

        Relative to the working directory when `from_path` is relative, so findings in followed
        modules are reported the way the user named the files."""
        if not from_path or from_path.startswith("<"):
            return None
        found = self._resolve(from_path, module, level)
        if found is None or Path(from_path).is_absolute():
            return found
        try:
            return found.relative_to(Path.cwd().resolve())
        except ValueError:
            return found

    def _resolve(self, from_path: str, module: str, level: int) -> Path | None:
        key = (os.path.dirname(os.path.abspath(from_path)), module, level)
        if key not in self._resolved:
            self._resolved[key] = self._find(from_path, module, level)
        return self._resolved[key]

    def _find(self, from_path: str, module: str, level: int) -> Path | None:
        parts = [p for p in module.split(".") if p] if module else []
        if level:
            base = Path(from_path).resolve().parent
            for _ in range(level - 1):
                base = base.parent
            return _module_file(base, parts)
        if not parts or parts[0] in sys.builtin_module_names or parts[0] in _NOT_LOCAL:
            return None
        for directory in self._search_dirs(from_path):
            found = _module_file(directory, parts)
            if found is not None:
                return found
        return None

    # ---- parsed modules ------------------------------------------------------------------------

    def load(self, from_path: str, module: str, level: int = 0) -> ParsedModule | None:
        target = self.resolve(from_path, module, level)
        if target is None or target.resolve() == Path(from_path).resolve():
            return None
        return self.parse(target)

    def parse(self, path: Path) -> ParsedModule | None:
        """The parsed module at `path`, or None when it cannot be read, decoded or parsed."""
        key = os.path.abspath(path)
        stamp = _stamp(path)
        if stamp is None:
            return None
        cached = self._parsed.get(key)
        if cached is not None and cached[0] == stamp:
            self._parsed.move_to_end(key)
            return cached[1]
        parsed: ParsedModule | None = None
        if stamp[0] <= _MAX_BYTES:
            import libcst as cst

            from loopcheck.lint.positions import register_source

            try:
                data = path.read_bytes()
                self.parses[key] += 1
                module = cst.parse_module(data)
                source = data.decode(module.encoding)  # what `module.code` renders, without rendering it
                if source.startswith("\ufeff"):
                    source = source[1:]
                memo.pin(module)
                register_source(module, source)
                parsed = ParsedModule(str(path), source, module)
            except (OSError, cst.ParserSyntaxError, UnicodeDecodeError, RecursionError, ValueError, SyntaxError):
                parsed = None
        self._keep(key, stamp, parsed)
        return parsed

    def parsed_as(self, path: str, source: str) -> "cst.Module | None":
        """The module this project already parsed from `path`, when its text is `source`."""
        cached = self._parsed.get(os.path.abspath(path))
        if cached is None or cached[1] is None or cached[1].source != source or cached[0] != _stamp(Path(path)):
            return None
        return cached[1].module

    def remember(self, path: str, source: str, module: cst.Module) -> None:
        """Register a module the engine has already parsed, so it is not parsed a second time."""
        stamp = _stamp(Path(path))
        if stamp is None:
            return
        memo.pin(module)
        self._keep(os.path.abspath(path), stamp, ParsedModule(path, source, module))

    def _keep(self, key: str, stamp: tuple[int, int], parsed: ParsedModule | None) -> None:
        old = self._parsed.pop(key, None)
        if old is not None:
            self._drop(old[1])
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

    def summary(self, path: Path) -> ModuleSummary | None:
        """The module summary of `path` (None when it cannot be read or parsed)."""
        key = os.path.abspath(path)
        stamp = _stamp(path)
        cached = self._summaries.get(key)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        found: ModuleSummary | None = None
        if stamp is not None and stamp[0] <= _MAX_BYTES:
            try:
                found = summarize(path.read_bytes(), key)
            except OSError:
                found = None
        if cached is not None:
            self._reach.clear()  # the module changed: what it reaches may have too
        self._summaries[key] = (stamp, found)
        return found

    def imports_of(self, path: Path, source: bytes | None = None) -> list[Path]:
        """The project's own modules that `path` imports directly (resolved, never `path`);
        from `source` instead of the file's contents when given."""
        summary = self.summary(path) if source is None else summarize(source, str(path))
        if summary is None:
            return []
        here = path.resolve()
        found: dict[Path, None] = {}
        for module, level in summary.import_targets():
            try:
                resolved = self.resolve(str(here), module, level)
            except (OSError, ValueError):
                resolved = None
            if resolved is not None:
                resolved = resolved.resolve()
                if resolved != here:
                    found[resolved] = None
        return list(found)

    def reach(self, path: Path) -> tuple[str, ...]:
        """Every project module `path` reaches through imports, transitively (resolved paths,
        breadth first, `path` itself excluded)."""
        key = str(path.resolve())
        if key not in self._reach:
            seen: dict[str, None] = {key: None}
            queue = [key]
            while queue:
                current = queue.pop(0)
                for dep in self.imports_of(Path(current)):
                    name = str(dep)
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
        start = os.path.abspath(path)
        seen: dict[str, None] = {start: None}
        queue = [start]
        while queue:
            for importer in self._importers_of(queue.pop(0)):
                if importer not in seen:
                    seen[importer] = None
                    queue.append(importer)
        del seen[start]
        return list(seen)

    def _importers_of(self, target: str) -> list[str]:
        """The project files importing `target` directly. Only files whose text holds the
        module's own name (its folder's, for a package `__init__.py`) as a word can: the others
        are never summarised."""
        if target not in self._importers:
            here = Path(target)
            word = here.parent.name if here.name == "__init__.py" else here.stem
            found = []
            for name in self._holding(word):
                if name != target and any(os.path.abspath(dep) == target for dep in self.imports_of(Path(name))):
                    found.append(name)
            self._importers[target] = found
        return self._importers[target]

    def _holding(self, word: str) -> list[str]:
        """The project files whose text has `word` as a whole word (an index built once)."""
        if self._words is None:
            index: dict[str, list[str]] = {}
            for f in self.files():
                name = os.path.abspath(f)
                try:
                    data = f.read_bytes()
                except OSError:
                    continue
                for token in set(_WORD.findall(data)):
                    index.setdefault(token.decode("ascii", "replace"), []).append(name)
            self._words = index
        return self._words.get(word, [])

    def keep_findings(self, path: str, codes: tuple[str, ...], findings: list) -> None:
        """Remember the findings of one file's analysis for the rest of the run."""
        self._findings[(os.path.abspath(path), codes)] = (_stamp(Path(path)), findings)

    def findings_of(self, path: str, codes: tuple[str, ...]) -> list | None:
        """The findings kept for `path` with these codes enabled, while the file is unchanged."""
        found = self._findings.get((os.path.abspath(path), codes))
        if found is None or found[0] != _stamp(Path(path)):
            return None
        return found[1]

    def reach_mentions(self, path: Path, words: tuple[str, ...]) -> bool:
        """Whether a module `path` reaches mentions one of `words` (lower case, any case in the
        text). True when a reached module cannot be summarised: it may."""
        for dep in self.reach(path):
            summary = self.summary(Path(dep))
            if summary is None or summary.mentions_any(words):
                return True
        return False


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
_NOT_WALKED = frozenset({
    ".git", ".venv", "venv", "env", "build", "dist", "__pycache__", "node_modules", ".tox", ".eggs",
    "site-packages", "dist-packages", "wandb", "mlruns", "outputs", "lightning_logs",
})


def _walked(folder: Path, name: str) -> bool:
    """Whether the project walk enters `folder/name` (never a virtualenv or installed packages)."""
    return not (name in _NOT_WALKED or name.startswith(".") or (folder / name / "pyvenv.cfg").exists())


def _module_file(base: Path, parts: list[str]) -> Path | None:
    if not parts:
        init = base / "__init__.py"
        return init if init.is_file() else None
    target = base.joinpath(*parts)
    candidate = target.with_name(target.name + ".py")
    if candidate.is_file():
        return candidate
    init = target / "__init__.py"
    if init.is_file():
        return init
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
