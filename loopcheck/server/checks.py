"""The server's one seam into the lint engine: diagnose a buffer, fix a buffer.

Everything the server knows about findings comes through `diagnose` and `fix_all`; they apply a
file's configuration exactly as `loopcheck lint` does (`command.apply_config`, `enabled_for`),
so switching the engine behind them (to a cached project model) changes only this module.

The buffer's own text is checked, not the file on disk. The local modules it imports come from
the engine's project index: as last checked when the module is open in the editor (the engine
keeps the parse of each text it checks under the file's path while the file on disk is
unchanged), else from disk. `closed()` puts the file on disk back in its place when an edited
buffer is closed without saving. Only findings located in the buffer itself are returned.

One project index serves every check: it remembers where each import resolved to (the parsed
modules themselves are cached by the engine and re-read when a file's size or time changes).
`forget_imports()` drops those answers when files may have been created, moved or deleted.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loopcheck.findings import Finding
from loopcheck.lint.command import apply_config, enabled_for
from loopcheck.lint.config import Config
from loopcheck.lint.output import FileError

UNTITLED = "<untitled>"  # the engine's name for a buffer that is not a file: no local imports

_project: Any = None


@dataclass(frozen=True)
class Diagnosis:
    findings: list[Finding]
    errors: list[FileError]


def _name(path: Path | None) -> str:
    return str(path) if path is not None else UNTITLED


def forget_imports() -> None:
    """Resolve local imports afresh from now on (files were created, renamed or deleted)."""
    global _project
    _project = None


def _project_index() -> Any:
    global _project
    if _project is None:
        from loopcheck.lint.project import ProjectIndex

        _project = ProjectIndex()
    return _project


def diagnose(path: Path | None, text: str, config: Config) -> Diagnosis:
    """Findings and errors of one buffer's text, under the configuration of its file."""
    from loopcheck.lint.engine import check_source

    where = path if path is not None else Path(UNTITLED)
    project = _project_index() if path is not None else None
    result = check_source(text, _name(path), enabled=enabled_for(config, where), project=project)
    outcome = apply_config(where, config, result, text.encode("utf-8", "surrogatepass"))
    own = str(where.resolve())
    return Diagnosis([f for f in outcome.findings if f.path == own], outcome.errors)


def closed(path: Path, text: str) -> None:
    """A buffer of `path` was closed with `text`: when that is not what the file on disk holds,
    check the file once, so the modules importing it see the saved text again."""
    from loopcheck.lint.engine import check_source

    try:
        data = path.read_bytes()
    except OSError:
        return
    if data != text.encode("utf-8", "surrogatepass"):
        check_source(data, str(path), enabled=lambda code: False, project=_project_index())


def fix_all(path: Path | None, text: str, config: Config, *, unsafe: bool = False) -> str:
    """The buffer's text with every enabled fix applied, as `loopcheck lint --fix` applies them."""
    from loopcheck.lint.fixes import fix_source

    where = path if path is not None else Path(UNTITLED)
    return fix_source(text, _name(path), unsafe=unsafe, enabled=enabled_for(config, where)).source
