"""Entries of the lint cache kept together: a few files per kind of entry instead of one per file.

A run reads the kept result of every file it lints and writes a new one for each file whose
result had to be assembled again: after an edit to a module most files import, that is most of
the project. One file per entry made such a run create, write and rename hundreds of files, and
every warm run open and read hundreds. Here an entry (a plain JSON document) lives in one of 16
packs, chosen by the first digit of its name (a hex digest), each one JSON file: a run reads a
pack once, the first time it asks for one of its entries, and writes the packs it changed once,
at its end (`flush`), each merged with what is on disk then; the cache flushes under a lock
(`Cache.close`), so a run beside this one keeps its entries (where both wrote the same entry,
the later one stands: either is valid for what it was checked with).

A pack that cannot be read back is empty, and written afresh at the next flush. When a pack is
written, the entries `keep` turns down (those of files since deleted) are left out of it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Iterator

_DIGITS = "0123456789abcdef"
Doc = dict[str, Any]


class Packs:
    """The entries of one kind (results, analyses) in `folder`: `get` and `put` by name, kept in
    memory until `flush`."""

    def __init__(self, folder: Path, write: Callable[[Path, Any], None], keep: Callable[[Doc], bool]) -> None:
        self.folder = folder
        self._write = write
        self._keep = keep
        self._packs: dict[str, dict[str, Doc]] = {}  # pack digit -> its entries, as read or since put
        self._changed: dict[str, dict[str, Doc]] = {}  # pack digit -> the entries put in this run

    def get(self, name: str) -> Doc | None:
        found = self._pack(name[0]).get(name)
        return found if isinstance(found, dict) else None

    def put(self, name: str, doc: Doc) -> None:
        digit = name[0]
        self._pack(digit)[name] = doc
        self._changed.setdefault(digit, {})[name] = doc

    def flush(self) -> None:
        """Write the packs this run changed, each over what is on disk now."""
        changed, self._changed = self._changed, {}
        for digit, entries in changed.items():
            merged = {name: doc for name, doc in {**self._read(digit), **entries}.items() if self._keep(doc)}
            self._packs[digit] = merged
            self._write(self._path(digit), {"entries": merged})

    def docs(self) -> Iterator[Doc]:
        """Every entry of every pack (to find which dependency tables are still named)."""
        for digit in _DIGITS:
            for doc in self._pack(digit).values():
                if isinstance(doc, dict):
                    yield doc

    def _pack(self, digit: str) -> dict[str, Doc]:
        pack = self._packs.get(digit)
        if pack is None:
            pack = self._packs[digit] = self._read(digit)
        return pack

    def _path(self, digit: str) -> Path:
        return self.folder / f"{digit}.json"

    def _read(self, digit: str) -> dict[str, Doc]:
        try:
            raw = json.loads(self._path(digit).read_text(encoding="utf-8"))
            entries = raw["entries"]
        except (OSError, ValueError, KeyError, TypeError):
            return {}
        return entries if isinstance(entries, dict) else {}

