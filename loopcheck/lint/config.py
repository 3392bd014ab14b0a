"""Lint configuration: `[tool.loopcheck]` in pyproject.toml or a `loopcheck.toml`, plus CLI overrides.

A file's configuration is found by walking up from its folder: the first folder holding a
`loopcheck.toml` (top-level keys) or a `pyproject.toml` with a `[tool.loopcheck]` table wins
(`loopcheck.toml` first when a folder has both). Paths in `exclude` and `per-file-ignores` are
relative to that folder. CLI flags are applied on top of the file.

Rule selection works on the lint codes of the catalogue. A selector is a code (`LC102`), a prefix
(`LC2`) or `ALL`. Within one layer (the file, then the command line) the most specific selector
decides (`select = ["LC102"]` with `ignore = ["LC1"]` keeps LC102); a layer with `select`
replaces the selection before it, `extend-select` and `ignore` adjust it. The meta codes (LC0xx)
are only matched by selectors that name them (`LC0`, `LC001`), never by `ALL` or `LC`.
"""

from __future__ import annotations

import difflib
import fnmatch
import hashlib
import json
import sys
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any, Iterable

from loopcheck.catalog import catalog
from loopcheck.errors import ConfigError
from loopcheck.findings import Severity
from loopcheck.lint.real_paths import RealPaths

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

KEYS = ("select", "extend-select", "ignore", "per-file-ignores", "exclude", "extend-exclude", "severity", "fail-on")
DEFAULT_FAIL_ON = Severity.WARNING
META_PREFIX = "LC0"


def lint_codes() -> list[str]:
    """Every code a lint selector may name (the catalogue's LC pages)."""
    return [code for code in catalog() if code.startswith("LC")]


def matches(selector: str, code: str) -> bool:
    """Whether `selector` (a code, a prefix or ALL) selects `code`."""
    if code.startswith(META_PREFIX) and not selector.startswith(META_PREFIX):
        return False
    return selector == "ALL" or code.startswith(selector)


def _specificity(selector: str) -> int:
    return 0 if selector == "ALL" else len(selector)


def _best(selectors: Iterable[str], code: str) -> int:
    """Length of the most specific selector matching code, -1 when none does."""
    return max((_specificity(s) for s in selectors if matches(s, code)), default=-1)


def parse_selectors(value: Any, where: str) -> tuple[str, ...]:
    """Normalise a list (or comma-separated string) of selectors; unknown ones raise ConfigError."""
    if isinstance(value, str):
        items = [v.strip() for v in value.split(",")]
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        items = [v.strip() for v in value]
    else:
        raise ConfigError(f"{where}: expected a list of rule codes, got {_describe(value)}")
    known = lint_codes()
    out: list[str] = []
    for item in items:
        if not item:
            continue
        sel = item.upper()
        if sel != "ALL" and not any(code.startswith(sel) for code in known):
            hint = difflib.get_close_matches(sel, known, n=1, cutoff=0.8)
            extra = f" (did you mean {hint[0]}?)" if hint else " (`loopcheck rules` lists the codes)"
            raise ConfigError(f"{where}: unknown rule code {item!r}{extra}")
        out.append(sel)
    return tuple(out)


def parse_severity(value: Any, where: str) -> Severity:
    if isinstance(value, str):
        try:
            return Severity(value.strip().lower())
        except ValueError:
            pass
    raise ConfigError(f"{where}: expected one of error, warning, info, got {_describe(value)}")


def _describe(value: Any) -> str:
    if isinstance(value, str):
        return repr(value)
    return f"{type(value).__name__} {value!r}"


@dataclass(frozen=True)
class Selection:
    """One layer of rule selection (the config file, or the command line)."""

    select: tuple[str, ...] | None = None
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()

    def apply(self, enabled: set[str], universe: list[str]) -> set[str]:
        out: set[str] = set()
        for code in universe:
            on = code in enabled if self.select is None else _best(self.select, code) >= 0
            chosen = max(_best(self.select or (), code), _best(self.extend_select, code))
            ignored = _best(self.ignore, code)
            if chosen >= 0 and chosen > ignored:
                on = True
            elif ignored >= 0 and ignored >= chosen:
                on = False
            if on:
                out.add(code)
        return out

    def ignores(self, code: str) -> bool:
        return _best(self.ignore, code) >= 0


@dataclass(frozen=True)
class Overrides:
    """What the command line sets on top of every configuration file."""

    select: tuple[str, ...] | None = None
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    fail_on: Severity | None = None

    @classmethod
    def from_cli(
        cls, select: str | None, extend_select: str | None, ignore: str | None, fail_on: str | None
    ) -> "Overrides":
        return cls(
            select=parse_selectors(select, "--select") if select is not None else None,
            extend_select=parse_selectors(extend_select, "--extend-select") if extend_select else (),
            ignore=parse_selectors(ignore, "--ignore") if ignore else (),
            fail_on=parse_severity(fail_on, "--fail-on") if fail_on is not None else None,
        )

    def selection(self) -> Selection | None:
        if self.select is None and not self.extend_select and not self.ignore:
            return None
        return Selection(self.select, self.extend_select, self.ignore)


@dataclass(frozen=True)
class Config:
    """The effective configuration of one file."""

    path: Path | None = None  # the file it was read from (None: built-in defaults)
    root: Path = field(default_factory=Path.cwd)  # folder that exclude / per-file-ignores are relative to
    layers: tuple[Selection, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()
    exclude: tuple[str, ...] = ()
    severity: tuple[tuple[str, Severity], ...] = ()
    fail_on: Severity = DEFAULT_FAIL_ON

    @cached_property
    def enabled_codes(self) -> frozenset[str]:
        universe = lint_codes()
        enabled = {c for c in universe if matches("ALL", c)}
        for layer in self.layers:
            enabled = layer.apply(enabled, universe)
        return frozenset(enabled)

    def with_overrides(self, overrides: Overrides) -> "Config":
        layer = overrides.selection()
        return replace(
            self,
            layers=self.layers + ((layer,) if layer else ()),
            fail_on=overrides.fail_on or self.fail_on,
        )

    def file_ignores(self, path: Path) -> tuple[str, ...]:
        """The per-file-ignores selectors that apply to path."""
        out: list[str] = []
        for pattern, codes in self.per_file_ignores:
            if path_matches(path, self.root, pattern):
                out.extend(codes)
        return tuple(out)

    def is_enabled(self, code: str, path: Path | None = None) -> bool:
        if code not in self.enabled_codes:
            return False
        return path is None or _best(self.file_ignores(path), code) < 0

    def is_ignored(self, code: str, path: Path | None = None) -> bool:
        """Whether code is named by an ignore (any layer, or per-file-ignores) for path."""
        if any(layer.ignores(code) for layer in self.layers):
            return True
        return path is not None and _best(self.file_ignores(path), code) >= 0

    def severity_of(self, code: str, default: Severity) -> Severity:
        """The severity of code after the `severity` table (the most specific entry wins)."""
        best, chosen = -1, default
        for selector, sev in self.severity:
            if matches(selector, code) and _specificity(selector) > best:
                best, chosen = _specificity(selector), sev
        return chosen

    def is_excluded(self, path: Path, below: Path | None = None) -> bool:
        """Whether path is excluded; with `below` (a folder named on the command line), only
        the part of the path under that folder is matched, so naming an excluded folder
        explicitly still checks it."""
        return any(path_matches(path, self.root, pattern, below=below) for pattern in self.exclude)

    def fingerprint(self) -> str:
        """A stable digest of everything that changes which findings a file gets."""
        data = {
            "enabled": sorted(self.enabled_codes),
            "layers": [[l.select, l.extend_select, l.ignore] for l in self.layers],
            "per_file_ignores": [[str(self.root), p, list(c)] for p, c in self.per_file_ignores],
            "severity": [[s, v.value] for s, v in self.severity],
        }
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:24]


def path_matches(path: Path, root: Path, pattern: str, *, below: Path | None = None) -> bool:
    """Gitignore-like matching of path against a pattern relative to root.

    A pattern without '/' matches any one component (`fixtures`, `*_pb2.py`); a pattern with '/'
    matches the path relative to root or one of its leading folders (`tests/data`, `src/*/gen`).
    With `below`, components down to that folder are not matched.
    """
    pattern = pattern.strip().removeprefix("./").rstrip("/")
    if not pattern:
        return False
    root = root.resolve()
    try:
        rel = path.resolve().relative_to(root)
    except ValueError:
        rel = path.resolve()
    parts = rel.parts
    start = 0
    if below is not None:
        try:
            start = len(below.resolve().relative_to(root).parts)
        except ValueError:
            start = 0
        if rel.is_absolute():
            start = len(below.resolve().parts)
    if "/" not in pattern:
        return any(fnmatch.fnmatchcase(part, pattern) for part in parts[start:])
    candidates = [pattern]
    if pattern.startswith("**/"):
        candidates.append(pattern[3:])
    for i in range(start + 1, len(parts) + 1):
        prefix = "/".join(parts[:i])
        if any(fnmatch.fnmatchcase(prefix, c) for c in candidates):
            return True
    return False


def read_file(path: Path) -> tuple[dict[str, Any] | None, str]:
    """(the loopcheck table of a config file or None when it has none, the name used in messages)."""
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if path.name == "pyproject.toml":
        table = data.get("tool", {}).get("loopcheck") if isinstance(data.get("tool"), dict) else None
        if table is not None and not isinstance(table, dict):
            raise ConfigError(f"{path}: [tool.loopcheck] must be a table")
        return table, f"{path}: [tool.loopcheck]"
    return data, str(path)


def parse_table(table: dict[str, Any], path: Path, label: str) -> Config:
    """Validate a loopcheck table and turn it into a Config rooted at path's folder."""
    for key in table:
        if key not in KEYS:
            hint = difflib.get_close_matches(key, KEYS, n=1)
            extra = f"; did you mean {hint[0]!r}?" if hint else f"; known keys: {', '.join(KEYS)}"
            raise ConfigError(f"{label}: unknown key {key!r}{extra}")

    def where(key: str) -> str:
        return f"{label}: {key}"

    def sel(key: str) -> tuple[str, ...] | None:
        if key not in table:
            return None
        value = table[key]
        if not isinstance(value, list):
            raise ConfigError(f"{where(key)}: expected a list of rule codes, got {_describe(value)}")
        return parse_selectors(value, where(key))

    per_file: list[tuple[str, tuple[str, ...]]] = []
    raw_pfi = table.get("per-file-ignores", {})
    if not isinstance(raw_pfi, dict):
        raise ConfigError(f"{where('per-file-ignores')}: expected a table of glob = [codes], got {_describe(raw_pfi)}")
    for glob, codes in raw_pfi.items():
        if not isinstance(codes, list):
            raise ConfigError(f"{where('per-file-ignores')}.{glob!r}: expected a list of rule codes, got {_describe(codes)}")
        per_file.append((glob, parse_selectors(codes, f"{where('per-file-ignores')}.{glob!r}")))

    exclude: list[str] = []
    for key in ("exclude", "extend-exclude"):
        patterns = table.get(key, [])
        if not isinstance(patterns, list) or not all(isinstance(e, str) for e in patterns):
            raise ConfigError(f"{where(key)}: expected a list of glob patterns, got {_describe(patterns)}")
        exclude.extend(patterns)

    severity: list[tuple[str, Severity]] = []
    raw_sev = table.get("severity", {})
    if not isinstance(raw_sev, dict):
        raise ConfigError(f"{where('severity')}: expected a table of code = \"error|warning|info\", got {_describe(raw_sev)}")
    for code, value in raw_sev.items():
        selectors = parse_selectors([code], where("severity"))
        if len(selectors) != 1:
            raise ConfigError(f"{where('severity')}: {code!r} is not a rule code")
        selector = selectors[0]
        severity.append((selector, parse_severity(value, f"{where('severity')}.{code}")))

    fail_on = parse_severity(table["fail-on"], where("fail-on")) if "fail-on" in table else DEFAULT_FAIL_ON
    select, extend, ignore = sel("select"), sel("extend-select"), sel("ignore")
    layer = Selection(select, extend or (), ignore or ())
    return Config(
        path=path,
        root=path.parent.resolve(),
        layers=(layer,) if layer != Selection() else (),
        per_file_ignores=tuple(per_file),
        exclude=tuple(exclude),
        severity=tuple(severity),
        fail_on=fail_on,
    )


def load(path: Path) -> Config:
    """Read one configuration file given explicitly (`--config`)."""
    if not path.is_file():
        raise ConfigError(f"{path}: no such configuration file")
    table, label = read_file(path)
    if table is None:
        return Config(path=path, root=path.parent.resolve())
    return parse_table(table, path, label)


class Resolver:
    """Finds and caches each folder's configuration; applies the CLI overrides."""

    def __init__(self, overrides: Overrides = Overrides(), *, config_file: Path | None = None, isolated: bool = False) -> None:
        self.overrides = overrides
        self.default = Config(root=Path.cwd().resolve()).with_overrides(overrides)
        self._fixed: Config | None = None
        if isolated:
            self._fixed = self.default
        elif config_file is not None:
            self._fixed = load(config_file).with_overrides(overrides)
        self._by_dir: dict[Path, Config] = {}
        self._by_path: dict[Path, Config] = {}  # `for_path`, by the path as asked
        self._real = RealPaths()  # each folder resolved once

    def for_path(self, path: Path) -> Config:
        """The effective configuration of a file (or of a folder, for discovery)."""
        if self._fixed is not None:
            return self._fixed
        found = self._by_path.get(path)
        if found is None:  # (asked several times for each file of a run: resolving costs a call per folder)
            folder = path if path.is_dir() else path.parent
            found = self._by_path[path] = self._for_dir(Path(self._real(folder)))
        return found

    def _for_dir(self, folder: Path) -> Config:
        cached = self._by_dir.get(folder)
        if cached is not None:
            return cached
        found = self._read_dir(folder)
        if found is not None:
            config = found.with_overrides(self.overrides)
        elif folder.parent != folder:
            config = self._for_dir(folder.parent)
        else:
            config = self.default
        self._by_dir[folder] = config
        return config

    @staticmethod
    def _read_dir(folder: Path) -> Config | None:
        for name in ("loopcheck.toml", "pyproject.toml"):
            candidate = folder / name
            if candidate.is_file():
                table, label = read_file(candidate)
                if table is not None:
                    return parse_table(table, candidate, label)
        return None

    def configs(self) -> list[Config]:
        """Every configuration met so far (for the union of enabled codes)."""
        if self._fixed is not None:
            return [self._fixed]
        return list({id(c): c for c in self._by_dir.values()}.values()) or [self.default]
