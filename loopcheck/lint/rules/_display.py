"""How the model's names are shown in messages: as the user wrote them.

The model keeps two objects bound to one name in different functions apart as `name@function`;
a message names the object the way the code does (`optimizer`), its line says which one.

Evidence is cited as `line 40` when it is in the file the finding is reported in, and as
`engine.py:40` when another file supplied it: a message builds its citations with `at(place)`,
and `Rule.finding` settles each one with `cite(message, path)` once it knows where it reports.
"""

from __future__ import annotations

import os
import re
from typing import Any

from loopcheck.lint.citations import CITED as _CITED, MARK as _MARK


def shown(name: str | None, default: str = "") -> str:
    """`optimizer@train` -> `optimizer`; `self.optimizer` stays as it is."""
    if not name:
        return default
    return name.split("@", 1)[0]


_SCOPED = re.compile(r"(?<=[\w\]])@(?:<module>|[A-Za-z_][\w:]*)")


def user_names(message: str) -> str:
    """The names the user wrote: the model keeps two objects bound to one name in two functions
    apart as `scheduler@build`; a message says `scheduler` (its line says where)."""
    return _SCOPED.sub("", message)



def at(place: Any) -> str:
    """`line N` of an event, loop or binding, for a message (see `cite`)."""
    path = getattr(place, "path", None)
    return f"line {place.line}{_MARK}{path}{_MARK}" if path else f"line {place.line}"


def cite(message: str, here: str | None) -> str:
    """The message with each `at(...)` citation written for a finding reported in `here`."""
    if _MARK not in message:
        return message

    def one(match: re.Match) -> str:
        line, path = match.group(1), match.group(2)
        if not here or not path or path == here or os.path.realpath(path) == os.path.realpath(here):
            return f"line {line}"
        return f"{os.path.relpath(os.path.abspath(path), os.path.dirname(os.path.abspath(here)))}:{line}"

    return _CITED.sub(one, message)
