"""The server's one seam into the lint engine: diagnose a buffer, fix a buffer.

Everything the server knows about findings comes through `diagnose` and `fix_all`; they apply a
file's configuration exactly as `loopcheck lint` does (`command.apply_config`, `enabled_for`).

Each buffer is checked through the run-long `Project` of its file's project root, the one the
engine keeps per root: every module is parsed once and kept while its file (or open buffer) is
unchanged, so an edit re-parses only the edited buffer, and of it only the statements the edit
touched (`reparse`: the others are shared with the buffer's previous parse). An open buffer
whose text differs from the file on disk is an *overlay* of the project: the other files see the
unsaved text, and `closed()` puts the file on disk back in its place. The files importing a
buffer are analysed too (findings their models make in it are shown in it), as `loopcheck lint`
does. Only findings located in the buffer itself are returned.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from loopcheck.findings import Finding
from loopcheck.lint.command import apply_config, enabled_for
from loopcheck.lint.config import Config
from loopcheck.lint.output import FileError
from loopcheck.lint.syntax import parse_module
from loopcheck.server.reparse import Parsed, reparse

UNTITLED = "<untitled>"  # the engine's name for a buffer that is not a file: no local imports


@dataclass(frozen=True)
class Diagnosis:
    findings: list[Finding]
    errors: list[FileError]


_LAST: dict[Path, Parsed] = {}  # each buffer's last checked text and its module


def _name(path: Path | None) -> str:
    return str(path) if path is not None else UNTITLED


def forget_imports() -> None:
    """Files were created, renamed or deleted: every project resolves its imports afresh."""
    from loopcheck.lint.engine import known_projects

    for project in known_projects():
        project.refresh()


def _disk_text(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def diagnose(path: Path | None, text: str, config: Config) -> Diagnosis:
    """Findings and errors of one buffer's text, under the configuration of its file."""
    from loopcheck.lint.engine import check_source, project_for

    where = path if path is not None else Path(UNTITLED)
    data = text.encode("utf-8", "surrogatepass")
    project = project_for(path) if path is not None else None
    parsed = None
    if project is not None:
        project.overlay(path, None if _disk_text(path) == data else text)
        previous = _LAST.get(path)
        parsed = reparse(previous, text) if previous is not None else _parsed(text)
    result = check_source(text, _name(path), enabled=enabled_for(config, where), project=project,
                          on_disk=project is not None, parsed=parsed.module if parsed is not None else None)
    if project is not None:
        _remember(path, text, parsed, project)
    outcome = apply_config(where, config, result, data)
    own = str(where.resolve())
    return Diagnosis([f for f in outcome.findings if f.path == own], outcome.errors)


def _parsed(text: str) -> Parsed | None:
    """libcst's parse of a buffer's first text, which later edits splice into (the lint's own
    read builds trees from `ast`, which do not render as their text); None where libcst cannot
    parse it (the engine reports why)."""
    try:
        return Parsed(text, parse_module(text))
    except Exception:  # noqa: BLE001 - any failure: the engine reads the text and reports it
        return None


def _remember(path: Path, text: str, parsed: Parsed | None, project: object) -> None:
    """Keep the module of the buffer's text (ours, or the one the engine parsed), which the next
    edit's parse starts from."""
    if parsed is None:
        module = project.parsed_as(str(path), text)  # type: ignore[attr-defined]
        parsed = Parsed(text, module) if module is not None else None
    if parsed is None:
        _LAST.pop(path, None)
    else:
        _LAST[path] = parsed


def closed(path: Path) -> None:
    """A buffer of `path` was closed: the file on disk counts again for every other file."""
    from loopcheck.lint.engine import project_for

    _LAST.pop(path, None)
    project_for(path).overlay(path, None)


def fix_all(path: Path | None, text: str, config: Config, *, unsafe: bool = False) -> str:
    """The buffer's text with every enabled fix applied, as `loopcheck lint --fix` applies them."""
    from loopcheck.lint.fixing import fix_source

    where = path if path is not None else Path(UNTITLED)
    return fix_source(text, _name(path), unsafe=unsafe, enabled=enabled_for(config, where)).source
