"""Dependency tables of the lint cache: the files an entry depends on, named by a bit mask.

An entry of the cache (a file's results, or an analysis) depends on hundreds of project files,
each as it hashed then. Listed in every entry, they made a project's entries grow with the
square of its size (a 500-file project kept 33 MB of results, read by every warm run and written
again after an edit to a module most files reach). Instead, the entries one run writes share one
table of (path, hash) rows, and an entry names its rows by a bit mask over that table.

Reading, each row of a table is checked once per run (its file hashes as the row says), the
first time an entry names it; an entry then holds while every row of its mask does, which is
one big-integer operation. A table is named at random by the run that writes it, and written
at the run's end (`flush`), before the entries naming it; rows are only appended, so a mask
reads the same rows from any later version. Tables no entry names any more are removed by
`Cache` from time to time.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any, Callable, Iterable

from loopcheck.lint.bitmasks import Rows, selected

# A reference to an entry's rows: {"table": name, "rows": the mask, in hexadecimal}
Ref = dict[str, str]
Hash = str | None
_KEPT = 32  # tables kept before those no entry names are looked for
_NAME = re.compile(r"[0-9a-f]{32}")  # a table's name (`uuid4().hex`)


class _Table:
    """The rows of one table, and what this run found out about them."""

    def __init__(self, paths: list[str], hashes: list[Hash]) -> None:
        self.paths, self.hashes = paths, hashes
        self.known = 0  # rows checked in this run
        self.ok = 0  # rows whose file hashes as the row says


class DepTables:
    """The tables a run reads, and the one it writes."""

    def __init__(self, folder: Path, file_hash: Callable[[str], Hash], write: Callable[[Path, Any], None],
                 named: Callable[[], set[str]]) -> None:
        """`named`: the names of the tables some entry names (asked when there are many)."""
        self.folder = folder
        self._file_hash = file_hash
        self._write = write
        self._named = named
        self._read: dict[str, _Table | None] = {}
        self.name: str | None = None  # of this run's own table, once it has rows
        self._rows: Rows[str] = Rows()  # the own table's paths (each hashed once per run)
        self._own = _Table(self._rows.items, [])
        self._written = 0  # rows of the own table on disk

    def path(self, name: str) -> Path:
        return self.folder / f"{name}.json"

    # Writing -----------------------------------------------------------------------------------
    def ref(self, paths: Iterable[str]) -> Ref:
        """The rows of `paths` in this run's table, added with their hashes now where new."""
        own = self._own
        paths = list(paths)
        if not paths:
            return {"table": "", "rows": "0"}
        mask = self._rows.mask(paths)
        own.hashes.extend(self._file_hash(path) for path in own.paths[len(own.hashes):])
        if self.name is None:
            self.name = uuid.uuid4().hex
            self._read[self.name] = own
            self._collect()
        return {"table": self.name, "rows": format(mask, "x")}

    def flush(self) -> None:
        """Write this run's table, where it has rows not written yet (before any entry naming them)."""
        own = self._own
        if self.name is not None and len(own.paths) > self._written:
            self._write(self.path(self.name), {"paths": own.paths, "hashes": own.hashes})
            self._written = len(own.paths)

    # Reading -----------------------------------------------------------------------------------
    def holds(self, ref: Ref) -> bool:
        """Whether every file `ref` names hashes as it did (False when its table is gone)."""
        table, mask = self._named_rows(ref)
        if not mask:
            return True
        if table is None:
            return False
        if table is self._own:  # written in this run: hashed in it
            return mask >> len(table.paths) == 0
        todo = mask & ~table.known
        while todo:
            low = todo & -todo
            i = low.bit_length() - 1
            if i >= len(table.paths):
                return False
            if self._file_hash(table.paths[i]) == table.hashes[i]:
                table.ok |= low
            table.known |= low
            todo ^= low
        return mask & ~table.ok == 0

    def hashes(self, ref: Ref) -> dict[str, Hash]:
        """The files `ref` names, each with its hash then (empty when its table is gone)."""
        table, mask = self._named_rows(ref)
        if table is None or not mask:
            return {}
        return dict(zip(selected(table.paths, mask), selected(table.hashes, mask)))

    def paths(self, ref: Ref) -> list[str]:
        """The files `ref` names (empty when its table is gone)."""
        table, mask = self._named_rows(ref)
        return selected(table.paths, mask) if table is not None and mask else []

    def _named_rows(self, ref: Any) -> tuple[_Table | None, int]:
        """The table `ref` names (None when it cannot be read) and the mask of its rows."""
        if not isinstance(ref, dict):
            raise ValueError("not a reference to a dependency table")
        name, mask = ref["table"], int(ref["rows"], 16)
        if not mask:
            return None, 0
        if name not in self._read:
            self._read[name] = self._load(name) if _NAME.fullmatch(name) else None
        return self._read[name], mask

    def _load(self, name: str) -> _Table | None:
        import json

        try:
            raw = json.loads(self.path(name).read_text(encoding="utf-8"))
            paths, hashes = raw["paths"], raw["hashes"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if not (isinstance(paths, list) and isinstance(hashes, list) and len(paths) == len(hashes)):
            return None
        return _Table(paths, hashes)

    def _collect(self) -> None:
        """Remove the tables no entry names any more, once there are more than `_KEPT` and twice
        as many as the last look left (a table younger than an hour stays: a run beside this one
        may be writing entries naming it)."""
        import time

        count = self.folder / "kept.txt"
        try:
            tables = list(self.folder.glob("*.json"))
            left = int(count.read_text()) if count.exists() else 0
        except (OSError, ValueError):
            return
        if len(tables) <= max(_KEPT, 2 * left):
            return
        named = self._named()
        now = time.time()
        kept = 0
        for table in tables:
            try:
                if table.stem not in named and table.stem != self.name and now - table.stat().st_mtime > 3600:
                    table.unlink()
                else:
                    kept += 1
            except OSError:
                continue
        try:
            count.write_text(str(kept))
        except OSError:
            pass
