"""Dependency tables: the files a cache entry depends on, named by a bit mask over one table per run."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from loopcheck.lint.dep_tables import DepTables


class Files:
    """File hashes as a run sees them (counting how often each is asked for)."""

    def __init__(self, **hashes: str | None) -> None:
        self.hashes = dict(hashes)
        self.asked: dict[str, int] = {}

    def __call__(self, path: str) -> str | None:
        self.asked[path] = self.asked.get(path, 0) + 1
        return self.hashes.get(path)


def write(path: Path, doc: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc), encoding="utf-8")


def tables(folder: Path, files: Files, named: set[str] | None = None) -> DepTables:
    return DepTables(folder, files, write, lambda: set() if named is None else named)


def test_entries_of_one_run_share_its_rows_and_read_back_in_the_next(tmp_path: Path) -> None:
    files = Files(a="1", b="2", c="3")
    run = tables(tmp_path, files)
    first = run.ref(["a", "b"])
    second = run.ref(["b", "c"])
    assert first["table"] == second["table"]
    assert not list(tmp_path.glob("*.json"))  # written at the run's end, once
    run.flush()
    assert len(list(tmp_path.glob("*.json"))) == 1
    assert json.loads(run.path(first["table"]).read_text())["paths"] == ["a", "b", "c"]
    later = tables(tmp_path, files)
    assert later.holds(first) and later.holds(second)
    assert later.hashes(second) == {"b": "2", "c": "3"} and later.paths(first) == ["a", "b"]


def test_an_entry_holds_while_every_file_it_names_hashes_as_it_did(tmp_path: Path) -> None:
    run = tables(tmp_path, Files(a="1", b="2", c="3"))
    names_b = run.ref(["a", "b"])
    not_b = run.ref(["a", "c"])
    run.flush()
    files = Files(a="1", b="changed", c="3")
    later = tables(tmp_path, files)
    assert not later.holds(names_b) and later.holds(not_b)
    assert files.asked == {"a": 1, "b": 1, "c": 1}  # each row checked once per run, however many entries name it


def test_a_file_gone_or_a_new_one_where_none_was_is_a_change(tmp_path: Path) -> None:
    run = tables(tmp_path, Files(a="1"))
    ref = run.ref(["a", "missing.py"])
    run.flush()
    assert tables(tmp_path, Files(a="1")).holds(ref)
    assert not tables(tmp_path, Files(a="1", **{"missing.py": "new"})).holds(ref)
    assert not tables(tmp_path, Files()).holds(ref)


def test_an_entry_naming_no_file_holds_without_a_table(tmp_path: Path) -> None:
    run = tables(tmp_path, Files())
    ref = run.ref([])
    run.flush()
    assert not list(tmp_path.glob("*.json"))
    assert tables(tmp_path, Files()).holds(ref) and tables(tmp_path, Files()).paths(ref) == []


def test_a_missing_or_damaged_table_holds_nothing(tmp_path: Path) -> None:
    files = Files(a="1")
    run = tables(tmp_path, files)
    ref = run.ref(["a"])
    run.flush()
    table = tmp_path / f"{ref['table']}.json"
    for damage in ("{not json", '{"paths": ["a"]}', '{"paths": ["a"], "hashes": []}'):
        table.write_text(damage)
        assert not tables(tmp_path, files).holds(ref)
    table.unlink()
    assert not tables(tmp_path, files).holds(ref) and tables(tmp_path, files).hashes(ref) == {}
    assert not tables(tmp_path, files).holds({"table": ref["table"], "rows": "ff"})  # rows beyond the table


def test_tables_no_entry_names_are_removed_once_there_are_many(tmp_path: Path) -> None:
    old = time.time() - 2 * 3600
    for i in range(40):
        write(tmp_path / f"{i:032x}.json", {"paths": [], "hashes": []})
        os.utime(tmp_path / f"{i:032x}.json", (old, old))
    write(tmp_path / f"{99:032x}.json", {"paths": [], "hashes": []})  # unnamed but young: a run beside may use it
    named = {f"{i:032x}" for i in range(5)}
    run = tables(tmp_path, Files(a="1"), named)
    ref = run.ref(["a"])
    run.flush()
    left = {p.stem for p in tmp_path.glob("*.json")}
    assert left == named | {f"{99:032x}", ref["table"]}


def test_a_mask_reads_back_the_rows_it_was_made_of() -> None:
    from loopcheck.lint.bitmasks import mask_of, selected

    rows = list("abcdefghij" * 120)
    chosen = [0, 3, 7, 64, 999, 1199]
    mask = mask_of(chosen, len(rows))
    assert mask == sum(1 << i for i in chosen)
    assert selected(range(len(rows)), mask) == chosen
    assert mask_of([], 0) == 0 and selected(rows, 0) == []


def test_the_tables_still_named_are_looked_for_again_only_once_they_doubled(tmp_path: Path) -> None:
    old = time.time() - 2 * 3600
    names = [f"{i:032x}" for i in range(40)]
    for name in names:
        write(tmp_path / f"{name}.json", {"paths": [], "hashes": []})
        os.utime(tmp_path / f"{name}.json", (old, old))
    asked: list[int] = []

    def named() -> set[str]:
        asked.append(1)
        return set(names)

    run = DepTables(tmp_path, Files(a="1"), write, named)
    run.ref(["a"])
    run.flush()
    assert len(asked) == 1 and len(list(tmp_path.glob("*.json"))) == 41
    DepTables(tmp_path, Files(a="1"), write, named).ref(["a"])
    assert len(asked) == 1  # 42 tables, 41 of them named at the last look: not yet


def test_a_table_name_that_is_not_one_is_never_read(tmp_path: Path) -> None:
    (tmp_path.parent / "outside.json").write_text('{"paths": ["a"], "hashes": ["1"]}')
    assert not tables(tmp_path, Files(a="1")).holds({"table": "../outside", "rows": "1"})
