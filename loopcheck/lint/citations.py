"""Lines of other files cited in finding messages, kept readable by the engine until the finding
is made.

A message names its evidence by line (`rules/_display.at`: `line 40` in the reported file,
`engine.py:40` in another, settled when the finding is made). A kept analysis depends on the
place of every line of another file its findings cite (`engine._lines_read`), so each citation
carries its file and line: an `at` citation as marks around the file, a label written out
already (`values.Where.label`) as a hidden tag after it (`placed`). `citations` reads both, and
`Rule.finding` takes the tags out.
"""

from __future__ import annotations

import re

MARK = "\x1f"  # `line N<MARK>path<MARK>`: an `at` citation, written out for the reporting file
CITED = re.compile(f"line (\\d+){MARK}([^{MARK}]*){MARK}")
_TAG = "\x1e"  # `label<TAG>path<TAG>N<TAG>`: a label written already, with its place
_PLACED = re.compile(f"{_TAG}([^{_TAG}]*){_TAG}(\\d+){_TAG}")


def placed(label: str, path: str, line: int) -> str:
    """`label` (a place already written out, `model.py:25`) with the place it names attached."""
    return f"{label}{_TAG}{path}{_TAG}{line}{_TAG}"


def citations(message: str) -> list[tuple[str, int]]:
    """(file, line) of each citation in the message that names its file."""
    found: list[tuple[str, int]] = []
    if MARK in message:
        found += [(path, int(line)) for line, path in CITED.findall(message) if path]
    if _TAG in message:
        found += [(path, int(line)) for path, line in _PLACED.findall(message) if path]
    return list(dict.fromkeys(found))


def without_places(message: str) -> str:
    """The message with the places attached by `placed` taken out."""
    return _PLACED.sub("", message) if _TAG in message else message
