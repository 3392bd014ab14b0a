"""The server's settings (from the editor) and the configuration of each file (from pyproject.toml).

Settings come as `initializationOptions` and with `workspace/didChangeConfiguration`, either flat
or under a `loopcheck` key:

    {"select": ["LC1"], "extendSelect": [], "ignore": ["LC5"], "configuration": "ci/loopcheck.toml",
     "isolated": false, "unsafeFixes": false, "debounce": 250}

`select`, `extendSelect`, `ignore`, `configuration` and `isolated` mean what `--select`,
`--extend-select`, `--ignore`, `--config` and `--isolated` mean on the command line, and the
configuration files are found and applied by the same `Resolver`. The resolver is rebuilt when a
configuration file that a file's folder sees is created, changed or removed, so editing
pyproject.toml takes effect on the next check without restarting the server.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loopcheck.errors import ConfigError
from loopcheck.lint.config import Config, Overrides, Resolver, parse_selectors
from loopcheck.lint.project import file_stamp

CONFIG_FILES = ("loopcheck.toml", "pyproject.toml")
DEFAULT_DEBOUNCE_MS = 250

_KEYS = ("select", "extendSelect", "ignore", "configuration", "isolated", "unsafeFixes", "debounce")


@dataclass(frozen=True)
class Settings:
    select: str | None = None
    extend_select: str | None = None
    ignore: str | None = None
    configuration: Path | None = None
    isolated: bool = False
    unsafe_fixes: bool = False
    debounce_ms: int = DEFAULT_DEBOUNCE_MS

    @classmethod
    def from_client(cls, raw: Any, root: Path) -> "Settings":
        """Validate the editor's settings; ConfigError names the bad key. `configuration` is
        relative to the workspace root."""
        if raw is None:
            return cls()
        if isinstance(raw, dict) and isinstance(raw.get("loopcheck"), dict):
            raw = raw["loopcheck"]
        if not isinstance(raw, dict):
            raise ConfigError(f"server settings: expected an object, got {type(raw).__name__}")
        for key in raw:
            if key not in _KEYS:
                hint = difflib.get_close_matches(key, _KEYS, n=1)
                extra = f"; did you mean {hint[0]!r}?" if hint else f"; known keys: {', '.join(_KEYS)}"
                raise ConfigError(f"server settings: unknown key {key!r}{extra}")
        config = raw.get("configuration")
        if config is not None and not isinstance(config, str):
            raise ConfigError("server settings: configuration: expected a path")
        debounce = raw.get("debounce", DEFAULT_DEBOUNCE_MS)
        if isinstance(debounce, bool) or not isinstance(debounce, int) or debounce < 0:
            raise ConfigError(f"server settings: debounce: expected milliseconds (an integer >= 0), got {debounce!r}")
        return cls(
            select=_codes(raw, "select"),
            extend_select=_codes(raw, "extendSelect"),
            ignore=_codes(raw, "ignore"),
            configuration=(root / config) if config else None,
            isolated=_flag(raw, "isolated"),
            unsafe_fixes=_flag(raw, "unsafeFixes"),
            debounce_ms=debounce,
        )

    def overrides(self) -> Overrides:
        return Overrides.from_cli(self.select, self.extend_select, self.ignore, None)


def _codes(raw: dict, key: str) -> str | None:
    """A list of codes (or a comma-separated string), checked, in the command line's form."""
    value = raw.get(key)
    if value is None:
        return None
    return ",".join(parse_selectors(value, f"server settings: {key}"))


def _flag(raw: dict, key: str) -> bool:
    value = raw.get(key, False)
    if not isinstance(value, bool):
        raise ConfigError(f"server settings: {key}: expected true or false, got {value!r}")
    return value


class Configurations:
    """Each file's effective configuration, as `loopcheck lint` would use for it."""

    def __init__(self, settings: Settings, root: Path) -> None:
        self.settings = settings
        self.root = root
        self._resolver: Resolver | None = None
        self._seen: dict[Path, tuple[int, int] | None] = {}  # config file -> its state when last looked at

    def _watched(self, folder: Path) -> list[Path]:
        if self.settings.configuration is not None:
            return [self.settings.configuration]
        if self.settings.isolated:
            return []
        return [d / name for d in (folder, *folder.parents) for name in CONFIG_FILES]

    def for_path(self, path: Path | None) -> Config:
        """The configuration of a file (of the workspace root for a buffer that is no file).
        Raises ConfigError for a broken configuration file or setting."""
        folder = (path.parent if path is not None else self.root).resolve()
        now = {candidate: file_stamp(candidate) for candidate in self._watched(folder)}
        # a file the resolver may have read (or found absent) before is not as it was then
        if self._resolver is None or any(c in self._seen and self._seen[c] != s for c, s in now.items()):
            self._resolver = Resolver(
                self.settings.overrides(), config_file=self.settings.configuration, isolated=self.settings.isolated
            )
            self._seen.clear()
        self._seen.update(now)
        return self._resolver.for_path(path if path is not None else self.root / "untitled.py")

    def excluded(self, config: Config, path: Path | None) -> bool:
        """Whether the configured `exclude` covers the file: an excluded file gets no
        diagnostics, as with `loopcheck lint --force-exclude` (the pre-commit hook)."""
        return path is not None and config.is_excluded(path)
