"""The project index: finds and parses the local modules a linted file imports.

`from .engine import train_one_epoch`, `import model` next to `main.py` and
`from utils.ckpt import save_checkpoint` name modules of the project being linted; the loop
model follows calls into them. A module is parsed at most once per process (keyed by path,
size and mtime), and only when a call actually reaches it. Files that cannot be read or
parsed are simply not followed.
"""

from __future__ import annotations

import os
import sys
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # libcst is imported when a module is parsed
    import libcst as cst


_MAX_BYTES = 2_000_000  # larger local modules are not followed


@dataclass
class ParsedModule:
    path: str
    source: str
    module: cst.Module


_PARSED: "OrderedDict[str, tuple[tuple[int, int], ParsedModule | None]]" = OrderedDict()
_KEEP = 16  # parsed modules kept: those the files of one folder import, not the whole project


def _keep(key: str, entry: tuple[tuple[int, int], ParsedModule | None]) -> None:
    _PARSED[key] = entry
    _PARSED.move_to_end(key)
    while len(_PARSED) > _KEEP:
        _PARSED.popitem(last=False)


def parse_path(path: Path) -> ParsedModule | None:
    """The parsed module at `path`, or None when it cannot be read, decoded or parsed."""
    key = str(path)
    try:
        st = path.stat()
    except OSError:
        return None
    stamp = (st.st_size, st.st_mtime_ns)
    cached = _PARSED.get(key)
    if cached is not None and cached[0] == stamp:
        _PARSED.move_to_end(key)
        return cached[1]
    parsed: ParsedModule | None = None
    if st.st_size <= _MAX_BYTES:
        import libcst as cst

        from loopcheck.lint.positions import register_source

        try:
            data = path.read_bytes()
            module = cst.parse_module(data)
            source = data.decode(module.encoding)  # what `module.code` renders, without rendering it
            if source.startswith("\ufeff"):
                source = source[1:]
            register_source(module, source)
            parsed = ParsedModule(key, source, module)
        except (OSError, cst.ParserSyntaxError, UnicodeDecodeError, RecursionError, ValueError, SyntaxError):
            parsed = None
    _keep(key, (stamp, parsed))
    return parsed


def remember(path: str, source: str, module: cst.Module) -> None:
    """Register a module the engine has already parsed, so it is not parsed a second time."""
    p = Path(path)
    try:
        st = p.stat()
    except OSError:
        return
    _keep(str(p), ((st.st_size, st.st_mtime_ns), ParsedModule(str(p), source, module)))


def _package_root(directory: Path) -> Path:
    """The folder above the outermost package (a chain of folders with __init__.py)."""
    root = directory
    while (root / "__init__.py").is_file() and root.parent != root:
        root = root.parent
    return root


def forget(path: str) -> None:
    """Drop what `remember` registered for path (a version of it that was only tried, never written)."""
    _PARSED.pop(str(Path(path)), None)


class ProjectIndex:
    """Resolves imports of the project's own modules to parsed modules."""

    def __init__(self, roots: list[Path] | None = None) -> None:
        self.roots = [r.resolve() for r in roots or []]
        self._resolved: dict[tuple[str, str, int], Path | None] = {}  # (folder, module, level) -> file

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
        key = (os.path.dirname(from_path), module, level)
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

    def load(self, from_path: str, module: str, level: int = 0) -> ParsedModule | None:
        target = self.resolve(from_path, module, level)
        if target is None or target.resolve() == Path(from_path).resolve():
            return None
        return parse_path(target)


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
